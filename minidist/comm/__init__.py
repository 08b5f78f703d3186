"""Communication: transports, collectives, and their cost model.

    from minidist import comm
    c = comm.world()                               # MPI world under mpiexec, else size 1
    comm.launch(fn, world_size=4, backend="local")  # fn(c, *args) on every rank
    comm.allreduce(x, c, op="sum", algorithm="ring")
    comm.LocalCluster(4, network=comm.NetworkModel(alpha=1e-6, beta=1e-9, gamma=0))

Layout: ``transport/`` (the Communicator, MPI and in-process transports,
launching), ``collectives/`` (the agreement check, the collectives, the
allreduce algorithms), ``cost/`` (the network model, each algorithm's cost,
MPICH's), and beside them ``ops`` (reductions), ``tags`` (every message tag)
and ``errors``.
"""

import importlib
import sys

# the cost model first: it imports the algorithms it prices, which import the transports
from minidist.comm import cost

# isort: split
from minidist.comm import collectives, transport
from minidist.comm.collectives import *  # noqa: F403 (each collective, by its name)
from minidist.comm.cost.network import NetworkModel, load_network_model, save_network_model
from minidist.comm.errors import CommError, PeerFailed, RankError, RankFailure, RankKilled
from minidist.comm.ops import REDUCTION_OPS, apply_op, check_reducible
from minidist.comm.transport import *  # noqa: F403 (Communicator, LocalCluster, launch, world...)
from minidist.util.parts import chunk_bounds

__all__ = [
    *transport.__all__, *collectives.__all__, "cost", "chunk_bounds",
    "NetworkModel", "load_network_model", "save_network_model",
    "CommError", "PeerFailed", "RankError", "RankFailure", "RankKilled", "REDUCTION_OPS",
    "apply_op", "check_reducible",
]

# Module paths of the flat layout before ``transport/``, ``collectives/`` and ``cost/``:
# scripts that import them keep working.
_MOVED = {
    "communicator": "transport.communicator",
    "local_transport": "transport.local", "local_fabric": "transport.fabric",
    "local_cluster": "transport.cluster", "world": "transport.world",
    "launch": "transport.launch", "trace": "transport.trace", "stats": "transport.stats",
    "allreduce": "collectives.allreduce", "consistency": "collectives.agreement",
    "allreduce_central": "collectives.central", "allreduce_ring": "collectives.ring",
    "allreduce_tree": "collectives.tree", "allreduce_doubling": "collectives.doubling",
    "network": "cost.network", "cost_mpich": "cost.mpich",
}
for _old, _new in _MOVED.items():
    sys.modules.setdefault(f"{__name__}.{_old}", importlib.import_module(f"{__name__}.{_new}"))
