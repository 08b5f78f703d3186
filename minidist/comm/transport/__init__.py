"""Transports: how one rank's array reaches another, and how ranks are started.

- ``communicator``: the interface every transport offers and every algorithm uses;
- ``mpi``: real processes, through mpi4py's buffer methods;
- ``local``, ``fabric``, ``cluster``, ``scheduler``: ranks as cooperative tasks in one
  process (greenlets taking turns), with counted traffic, a modelled clock, stragglers
  and failures;
- ``stats``, ``trace``: what a rank sent and received; ``MINIDIST_TRACE=1``;
- ``world``: the communicator of this job; ``launch``: run a function on P ranks.
"""

from minidist.comm.transport.cluster import LocalCluster, run_local
from minidist.comm.transport.communicator import Communicator, Request
from minidist.comm.transport.launch import launch
from minidist.comm.transport.local import LocalCommunicator, Straggler
from minidist.comm.transport.stats import CommStats, LocalStats
from minidist.comm.transport.world import world

__all__ = [
    "Communicator", "Request", "LocalCluster", "run_local", "LocalCommunicator", "Straggler",
    "CommStats", "LocalStats", "launch", "world",
]
