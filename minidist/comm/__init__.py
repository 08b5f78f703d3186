"""Communication: transports, launching ranks, and (below) the collectives.

    from minidist import comm
    c = comm.world()                               # MPI world under mpiexec, else size 1
    comm.launch(fn, world_size=4, backend="local")  # fn(c, *args) on every rank
    comm.LocalCluster(4, network=comm.NetworkModel(alpha=1e-6, beta=1e-9, gamma=0))
"""

from minidist.comm.communicator import Communicator, Request
from minidist.comm.errors import CommError, RankError, RankFailure
from minidist.comm.launch import launch
from minidist.comm.local_cluster import LocalCluster, run_local
from minidist.comm.local_transport import LocalCommunicator, Straggler
from minidist.comm.network import NetworkModel, load_network_model, save_network_model
from minidist.comm.ops import REDUCTION_OPS, apply_op, check_reducible
from minidist.comm.stats import CommStats, LocalStats
from minidist.comm.world import world

__all__ = [
    "Communicator", "Request", "world", "launch", "LocalCluster", "LocalCommunicator",
    "run_local", "Straggler", "NetworkModel", "load_network_model", "save_network_model",
    "CommStats", "LocalStats", "CommError", "RankError", "RankFailure",
    "REDUCTION_OPS", "apply_op", "check_reducible",
]

# --- collectives and allreduce algorithms (their engineer adds imports and names here) ---
from minidist.comm import cost  # noqa: E402
from minidist.comm.allreduce import ALGORITHMS, allreduce  # noqa: E402
from minidist.comm.collectives import (  # noqa: E402
    allgather,
    alltoall,
    barrier,
    broadcast,
    chunk_bounds,
    gather,
    reduce,
    reduce_scatter,
    scatter,
)

__all__ += [
    "cost", "ALGORITHMS", "allreduce", "allgather", "alltoall", "barrier", "broadcast",
    "chunk_bounds", "gather", "reduce", "reduce_scatter", "scatter",
]
