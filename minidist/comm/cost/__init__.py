"""The cost model: what a collective should cost, before running it.

- ``network``: the α-β-γ model of one message, and where its fitted figures are kept;
- ``model``: each allreduce algorithm's bytes, messages, rounds and time (``predict``,
  ``schedule_cost``); ``heap_tree``: the trees' schedule stepped through, for any P;
- ``mpich``: MPICH's own Allreduce, priced the same way (the benchmarks' baseline).
"""

from minidist.comm.cost.model import (
    MODELS,
    UNIT,
    Cost,
    check_cost,
    double_tree_cost,
    mpi_cost,
    naive_cost,
    predict,
    ps_cost,
    recursive_doubling_cost,
    ring_cost,
    schedule_cost,
    tree_cost,
)
from minidist.comm.cost.network import NetworkModel, load_network_model, save_network_model

__all__ = [
    "MODELS", "UNIT", "Cost", "check_cost", "double_tree_cost", "mpi_cost", "naive_cost",
    "predict", "ps_cost", "recursive_doubling_cost", "ring_cost", "schedule_cost", "tree_cost",
    "NetworkModel", "load_network_model", "save_network_model",
]
