"""What building a ParameterServer sends before any key moves: the ranks' agreement on
the job (``parameter_server._same_job_everywhere``), counted per rank, for traffic tests
that compare a run's counters with the per-step costs the docstrings give."""

from __future__ import annotations

from minidist.comm import LocalCluster
from minidist.comm.transport.stats import LocalStats
from minidist.parallel.ps import KeyLayout, ParameterServer


def construction_traffic(ranks: int) -> list[LocalStats]:
    """Each rank's counters after building a parameter server of ``ranks`` ranks, alone."""
    cluster = LocalCluster(ranks)
    cluster.run(lambda c: ParameterServer(c, KeyLayout({"w": (4, 2)})))
    return cluster.stats
