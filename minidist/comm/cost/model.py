"""The cost model: what each allreduce should cost, before running it.

Three numbers price everything (``cost/network.py``): a message of n bytes takes
``m(n) = alpha + beta·n`` seconds, reducing n bytes ``r(n) = gamma·n``. On
a real machine β and γ depend on n (a fitted curve, see ``cost/network.py``):
the formulas below keep their shape, each message priced at its own size.
With P ranks, an N-byte vector, chunks (shards) of at most ``c = ceil(N/P)``
bytes and the heap tree of depth ``D = floor(log2 P)``:

=================== ======================================= ===========================
algorithm           time                                    bytes sent per rank
=================== ======================================= ===========================
naive               (P-1)(2 m(N) + r(N))                    (P-1)N at rank 0, N others
ps                  (P-1)(2 m(c) + r(c))                    about 2(P-1)/P N
ring                (P-1)(2 m(c) + r(c))                    about 2(P-1)/P N
tree                D (4 m(N) + 2 r(N)) on a full tree      N per edge and direction
double_tree         two trees of N/2, one after the other   up to 2N
recursive_doubling  L (m(N) + r(N)) [+ 2 m(N) + r(N)]       N per round, L = log2 P'
=================== ======================================= ===========================

The counts are exact, and so is ``rounds``: the same time on a network
where a message costs 1 and nothing else costs anything (the transport's
definition). The times are what the in-process transport's virtual clock
reaches on the latest rank, exactly: by the closed forms above, and for the
trees (any P, not only full trees) by stepping the schedule through the
tree with the transport's rules (``cost/heap_tree.py``). ``"mpi"`` is what
the in-process transport runs for it (recursive doubling); ``cost/mpich.py``
models MPICH's real choice for benchmarks.

Two entry points: :func:`schedule_cost`, the algorithm's function called
directly (as Lab 3's checks call an answer: every message is sent, even at
P = 1 or N = 0), and :func:`predict`, ``comm.allreduce``, which sends
nothing at P = 1 or N = 0 and may add the agreement check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from minidist.comm.collectives.agreement import PACKET_BYTES, rides_with_check
from minidist.comm.cost.heap_tree import _children, _widest_tree_level, doubling_clocks, tree_clocks
from minidist.comm.cost.network import NetworkModel
from minidist.util import chunk_bounds
from minidist.util.answers import lab_answer
from minidist.util.values import whole


@dataclass
class Cost:
    """Predicted cost of one allreduce: per-rank lists, and the collective's time/rounds."""

    algorithm: str
    world_size: int
    nbytes: int
    time: float = 0.0  # seconds, the latest rank
    rounds: int = 0  # longest chain of dependent messages
    fan_in: int = 0  # most messages one rank receives in one step
    messages_sent: list[int] = field(default_factory=list)
    messages_recv: list[int] = field(default_factory=list)
    bytes_sent: list[int] = field(default_factory=list)
    bytes_recv: list[int] = field(default_factory=list)

    @property
    def max_bytes_sent(self) -> int:
        """Bytes sent by the busiest rank."""
        return max(self.bytes_sent, default=0)


UNIT = NetworkModel(alpha=1.0, beta=0.0, gamma=0.0)  # rounds: every message costs 1


def _timed(time: Callable[[NetworkModel], float], net: NetworkModel) -> tuple[float, int]:
    """(time under ``net``, rounds = time when a message costs 1 and nothing else costs)."""
    return time(net), round(time(UNIT))


def _empty(algorithm: str, p: int, nbytes: int) -> Cost:
    zeros = [0] * p
    return Cost(algorithm, p, nbytes, 0.0, 0, 0, zeros[:], zeros[:], zeros[:], zeros[:])


def _parts(nbytes: int, itemsize: int, p: int) -> list[int]:
    """Bytes of each of the P chunks (shards) of ``chunk_bounds``."""
    return [(hi - lo) * itemsize for lo, hi in chunk_bounds(nbytes // itemsize, p)]


@lab_answer("lab03_cost")
def naive_cost(p: int, nbytes: int, itemsize: int, net: NetworkModel) -> Cost:
    """Rank 0 receives P-1 vectors one after the other, then sends P-1 back."""
    cost = _empty("naive", p, nbytes)
    cost.time, cost.rounds = _timed(lambda m: (p - 1) * (2 * m.message_time(nbytes)
                                                         + m.reduce_time(nbytes)), net)
    cost.fan_in = p - 1
    cost.messages_sent = cost.messages_recv = [p - 1] + [1] * (p - 1)
    cost.bytes_sent = cost.bytes_recv = [(p - 1) * nbytes] + [nbytes] * (p - 1)
    return cost


@lab_answer("lab03_cost")
def ps_cost(p: int, nbytes: int, itemsize: int, net: NetworkModel) -> Cost:
    """Shard k (``n_k`` bytes) on rank k: it sends ``N - n_k`` then ``(P-1) n_k``."""
    cost = _empty("ps", p, nbytes)
    shard = _parts(nbytes, itemsize, p)
    cost.time, cost.rounds = _timed(lambda m: (p - 1) * (2 * m.message_time(shard[0])
                                                         + m.reduce_time(shard[0])), net)
    cost.fan_in = p - 1
    cost.messages_sent = cost.messages_recv = [2 * (p - 1)] * p
    cost.bytes_sent = cost.bytes_recv = [nbytes + (p - 2) * n for n in shard]
    return cost


@lab_answer("lab03_cost")
def ring_cost(p: int, nbytes: int, itemsize: int, net: NetworkModel) -> Cost:
    """2(P-1) steps, each as long as the longest chunk's (chunk 0, whose chain is the
    critical path); rank r sends every chunk but r+1 (reduce-scatter) and every chunk
    but r+2 (allgather)."""
    cost = _empty("ring", p, nbytes)
    chunk = _parts(nbytes, itemsize, p)
    cost.time, cost.rounds = _timed(lambda m: (p - 1) * (2 * m.message_time(chunk[0])
                                                         + m.reduce_time(chunk[0])), net)
    cost.fan_in = 1
    cost.messages_sent = cost.messages_recv = [2 * (p - 1)] * p
    cost.bytes_sent = [2 * nbytes - chunk[(r + 1) % p] - chunk[(r + 2) % p] for r in range(p)]
    cost.bytes_recv = [cost.bytes_sent[(r - 1) % p] for r in range(p)]  # the left's sends
    return cost


def recursive_doubling_cost(p: int, nbytes: int, itemsize: int, net: NetworkModel,
                            reduced: int | None = None) -> Cost:
    """Fold ``e = P - P'`` ranks in, L = log2 P' exchanges of N, unfold.

    ``reduced``: bytes combined per round, if not N (the check's packets).
    """
    cost = _empty("recursive_doubling", p, nbytes)
    reduced = nbytes if reduced is None else reduced
    pof2 = 1 << (p.bit_length() - 1)
    steps, extra = pof2.bit_length() - 1, p - pof2

    def time(m: NetworkModel) -> float:
        step = m.message_time(nbytes) + m.reduce_time(reduced)
        fold = 2 * m.message_time(nbytes) + m.reduce_time(reduced) if extra else 0.0
        return steps * step + fold

    cost.time, cost.rounds = _timed(time, net)
    cost.fan_in = 1
    messages = [1 if r < 2 * extra and r % 2 == 0 else
                steps + 1 if r < 2 * extra else steps for r in range(p)]
    cost.messages_sent = cost.messages_recv = messages
    cost.bytes_sent = cost.bytes_recv = [k * nbytes for k in messages]
    return cost


def _trees_cost(name: str, p: int, halves: list[int], net: NetworkModel) -> Cost:
    """Tree allreduces one after the other on parts of ``halves[k]`` bytes, the k-th
    along the heap tree (k even) or its mirror image (k odd)."""
    cost = _empty(name, p, sum(halves))
    for k, part in enumerate(halves):
        for q in range(p):
            edges = len(_children(q, p)) + (q > 0)  # one message each way per edge
            rank = p - 1 - q if k % 2 else q
            cost.messages_sent[rank] += edges
            cost.messages_recv[rank] += edges
            cost.bytes_sent[rank] += edges * part
            cost.bytes_recv[rank] += edges * part
    cost.time, cost.rounds = _timed(lambda m: _trees_time(p, halves, m, [0.0] * p), net)
    cost.fan_in = min(2, p - 1)
    return cost


def _trees_time(p: int, halves: list[int], net: NetworkModel, start: list[float]) -> float:
    """The latest rank's clock after the trees of ``_trees_cost``, from clocks ``start``."""
    clocks = start
    for k, part in enumerate(halves):
        clocks = tree_clocks(p, part, net, clocks, mirrored=k % 2 == 1)
    return max(clocks)


TREE_PARTS = {"tree": lambda nbytes, itemsize: [nbytes],  # the bytes of each tree, in turn
              "double_tree": lambda nbytes, itemsize: _parts(nbytes, itemsize, 2)}


def tree_cost(p: int, nbytes: int, itemsize: int, net: NetworkModel) -> Cost:
    """The heap tree: up (children 2r+1, 2r+2 in turn), then down."""
    return _trees_cost("tree", p, TREE_PARTS["tree"](nbytes, itemsize), net)


def double_tree_cost(p: int, nbytes: int, itemsize: int, net: NetworkModel) -> Cost:
    """The heap tree on the first half, then its mirror image on the second."""
    return _trees_cost("double_tree", p, TREE_PARTS["double_tree"](nbytes, itemsize), net)


def mpi_cost(p: int, nbytes: int, itemsize: int, net: NetworkModel) -> Cost:
    """What ``"mpi"`` runs on the in-process transport: recursive doubling
    (see ``collectives/allreduce.py``)."""
    return replace(recursive_doubling_cost(p, nbytes, itemsize, net), algorithm="mpi")


MODELS = {"naive": naive_cost, "ps": ps_cost, "ring": ring_cost, "tree": tree_cost,
          "double_tree": double_tree_cost, "recursive_doubling": recursive_doubling_cost,
          "mpi": mpi_cost}


def _power_of_two_below(p: int) -> int:
    return 1 << (p.bit_length() - 1)


# How many ranks of one host copy or reduce at once in an algorithm's widest step, for
# the shared memory bus (NetworkModel.sharing): every rank in the ring, the parameter
# server's pushes and recursive doubling's exchanges; the root alone in naive.
STREAMS: dict[str, Callable[[int], int]] = {
    "naive": lambda p: 1, "ps": lambda p: p, "ring": lambda p: p,
    "tree": _widest_tree_level, "double_tree": _widest_tree_level,
    "recursive_doubling": _power_of_two_below, "mpi": _power_of_two_below}


def check_cost(p: int, nbytes: int, net: NetworkModel, algorithm: str = "ring") -> Cost:
    """The agreement check of ``allreduce(check=True)`` (see ``agreement.py``).

    A recursive-doubling allreduce of one packet, ``PACKET_BYTES`` (the max of
    its header is not charged as reduction); when the data rides in the
    packet (``agreement.rides_with_check``: a short allreduce by one of the
    latency algorithms), this is the whole cost.
    """
    if p == 1:
        return _empty("check", p, PACKET_BYTES)
    small = rides_with_check(algorithm, p, nbytes)
    return replace(recursive_doubling_cost(p, PACKET_BYTES, 1, net, nbytes if small else 0),
                   algorithm=f"check + {algorithm}" if small else "check")


def _network(algorithm: str, world_size: int, nbytes: int, itemsize: int,
             network: NetworkModel | None) -> NetworkModel:
    if algorithm not in MODELS:
        raise ValueError(f"no cost model for {algorithm!r}; use one of {list(MODELS)}")
    whole("world_size", world_size, least=1)
    whole("nbytes", nbytes)
    whole("itemsize", itemsize, least=1)
    if nbytes % itemsize:
        raise ValueError(f"{nbytes} bytes is not a whole number of {itemsize}-byte items")
    return NetworkModel() if network is None else network


@lab_answer("lab03_cost")
def schedule_cost(algorithm: str, world_size: int, nbytes: int, itemsize: int = 8,
                  network: NetworkModel | None = None) -> Cost:
    """The :class:`Cost` of the algorithm's function called directly on ``nbytes`` bytes
    (every message priced at its own size, as outside ``comm.allreduce``)."""
    network = _network(algorithm, world_size, nbytes, itemsize, network)
    return MODELS[algorithm](world_size, nbytes, itemsize, network)


@lab_answer("lab03_cost")
def predict(algorithm: str, world_size: int, nbytes: int, itemsize: int = 8,
            network: NetworkModel | None = None, check: bool = False) -> Cost:
    """The predicted :class:`Cost` of ``allreduce(..., algorithm)`` on ``nbytes`` bytes.

    ``itemsize`` fixes how the vector is cut (chunks are whole elements);
    ``network`` defaults to ``NetworkModel()``, as ``LocalCluster``'s does (pass
    ``load_network_model()`` for this machine's fit).
    A ``network`` with a ``host_curve`` prices the ranks as sharing one host's
    memory bus (``NetworkModel.sharing``, ``STREAMS``): a prediction of an MPI
    run on one host, which the in-process clock does not follow.
    ``check=True`` adds the agreement check that ``allreduce`` runs by
    default (:func:`check_cost`): its time is then the sum of the two parts,
    but for the trees, whose ranks start as each leaves the check
    (``heap_tree.doubling_clocks``); exact at any P.
    """
    network = _network(algorithm, world_size, nbytes, itemsize, network)
    if world_size == 1 or nbytes == 0:
        cost = _empty(algorithm, world_size, nbytes)
    else:
        # every message of the collective priced at the vector's size (NetworkModel.at), and
        # slower where its ranks share a host's memory bus (only with a host_curve)
        shared = network.shared(STREAMS[algorithm](world_size), nbytes)
        cost = MODELS[algorithm](world_size, nbytes, itemsize, shared)
    if not check or world_size == 1:
        return cost
    header = check_cost(world_size, nbytes, network, algorithm)
    if header.algorithm != "check":
        return header
    for key in ("messages_sent", "messages_recv", "bytes_sent", "bytes_recv"):
        setattr(cost, key, [a + b for a, b in zip(getattr(cost, key), getattr(header, key),
                                                  strict=True)])
    if algorithm in TREE_PARTS:  # a tree's leaves start before the ranks folded into the check
        halves = TREE_PARTS[algorithm](nbytes, itemsize)
        cost.time, cost.rounds = _trees_time(world_size, halves, shared, doubling_clocks(
            world_size, PACKET_BYTES, 0, network)), round(_trees_time(
                world_size, halves, UNIT, doubling_clocks(world_size, PACKET_BYTES, 0, UNIT)))
    else:
        cost.time, cost.rounds = cost.time + header.time, cost.rounds + header.rounds
    cost.fan_in = max(cost.fan_in, header.fan_in)
    return cost
