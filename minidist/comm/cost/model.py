"""The cost model: what each allreduce should cost, before running it.

Three numbers price everything (``cost/network.py``): a message of n bytes takes
``m(n) = alpha + beta·n`` seconds, reducing n bytes ``r(n) = gamma·n``. On
a real machine β and γ depend on n (a fitted curve, see ``cost/network.py``):
the formulas below keep their shape, each message priced at its own size.
With P ranks and an N-byte vector cut into chunks of ``c = ceil(N/P)`` bytes:

=================== ======================================= ===========================
algorithm           time                                    bytes sent per rank
=================== ======================================= ===========================
naive               (P-1)(2 m(N) + r(N))                    (P-1)N at rank 0, N others
ps                  (P-1)(2 m(c) + r(c))                    about 2(P-1)/P N
ring (S segments)   (P-1) S (2 m(c/S) + r(c/S))             about 2(P-1)/P N
recursive_doubling  L (m(N) + r(N)) [+ 2 m(N) + r(N)]       N per round, L = log2 P'
tree (S segments)   ~ (2D + 4S) m(N/S) + 2 S r(N/S)         up to 3N
double_tree         stepped through both trees              up to 2N
=================== ======================================= ===========================

The counts are exact, and so is ``rounds``: the same time on a network
where a message costs 1 and nothing else costs anything (the transport's
definition). The times are what the in-process transport's virtual clock
reaches on the latest rank: exactly for the closed forms above (with the
longest chunk, an upper bound within 1% when a segmented ring's pieces are
uneven), and for the trees by stepping every segment through the tree with
the transport's rules (a recurrence: a pipeline has no short formula).
``"mpi"`` is what the in-process transport runs for it (recursive
doubling); ``cost/mpich.py`` models MPICH's real choice for benchmarks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from minidist.comm.collectives.agreement import PACKET_BYTES, rides_with_check
from minidist.comm.collectives.ring import SEGMENT_BYTES as RING_SEGMENT_BYTES
from minidist.comm.collectives.ring import chunk_bounds, pieces
from minidist.comm.collectives.tree import SEGMENT_BYTES as TREE_SEGMENT_BYTES
from minidist.comm.collectives.tree import Tree, inorder_tree, mirrored_tree
from minidist.comm.cost.network import NetworkModel
from minidist.comm.cost.pipeline import pipeline_time


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


def naive_cost(p: int, nbytes: int, itemsize: int, net: NetworkModel) -> Cost:
    """Rank 0 receives P-1 vectors one after the other, then sends P-1 back."""
    cost = _empty("naive", p, nbytes)
    cost.time, cost.rounds = _timed(lambda m: (p - 1) * (2 * m.message_time(nbytes)
                                                         + m.reduce_time(nbytes)), net)
    cost.fan_in = p - 1
    cost.messages_sent = cost.messages_recv = [p - 1] + [1] * (p - 1)
    cost.bytes_sent = cost.bytes_recv = [(p - 1) * nbytes] + [nbytes] * (p - 1)
    return cost


def ps_cost(p: int, nbytes: int, itemsize: int, net: NetworkModel) -> Cost:
    """Shard k (``n_k`` bytes) on rank k: it sends ``N - n_k`` then ``(P-1) n_k``."""
    cost = _empty("ps", p, nbytes)
    shard = [(hi - lo) * itemsize for lo, hi in chunk_bounds(nbytes // itemsize, p)]
    cost.time, cost.rounds = _timed(lambda m: (p - 1) * (2 * m.message_time(shard[0])
                                                         + m.reduce_time(shard[0])), net)
    cost.fan_in = p - 1
    cost.messages_sent = cost.messages_recv = [2 * (p - 1)] * p
    cost.bytes_sent = cost.bytes_recv = [nbytes + (p - 2) * n for n in shard]
    return cost


def ring_cost(p: int, nbytes: int, itemsize: int, net: NetworkModel,
              segment_bytes: int = RING_SEGMENT_BYTES) -> Cost:
    """2(P-1) steps of S pieces; rank r sends every chunk but ``r`` and ``r+1`` twice."""
    cost = _empty("ring", p, nbytes)
    chunk = [(hi - lo) * itemsize for lo, hi in chunk_bounds(nbytes // itemsize, p)]
    segment = max(1, segment_bytes // itemsize)
    count = max(1, -(-(chunk[0] // itemsize) // segment))
    piece = -(-chunk[0] // itemsize // count) * itemsize  # the longest piece
    cost.time, cost.rounds = _timed(lambda m: (p - 1) * count * (2 * m.message_time(piece)
                                                                 + m.reduce_time(piece)), net)
    cost.fan_in = 1
    cost.messages_sent = cost.messages_recv = [2 * (p - 1) * count] * p
    cost.bytes_sent = [2 * nbytes - chunk[r] - chunk[(r + 1) % p] for r in range(p)]
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


def _trees_cost(name: str, p: int, nbytes: int, itemsize: int, net: NetworkModel,
                trees: list[Tree], segment_bytes: int) -> Cost:
    """Step every segment through its tree, up then down, with the transport's clock rules."""
    cost = _empty(name, p, nbytes)
    segment = max(1, segment_bytes // itemsize)
    parts = pieces(0, nbytes // itemsize, len(trees))
    count = [max(1, -(-(hi - lo) // segment)) for lo, hi in parts]
    work = [pieces(lo, hi, n) for (lo, hi), n in zip(parts, count, strict=True)]
    schedule = [[(trees[t], (work[t][k][1] - work[t][k][0]) * itemsize)
                 for t in range(len(trees)) if k < count[t]] for k in range(max(count))]
    for tree, n in (task for segment in schedule for task in segment):
        for rank in range(p):
            for child in tree.children[rank]:
                for sender, receiver in ((child, rank), (rank, child)):  # up, then down
                    cost.messages_sent[sender] += 1
                    cost.messages_recv[receiver] += 1
                    cost.bytes_sent[sender] += n
                    cost.bytes_recv[receiver] += n
    cost.time, cost.rounds = _timed(lambda m: pipeline_time(p, schedule, m), net)
    cost.fan_in = max(len(kids) for tree in trees for kids in tree.children)
    return cost


def tree_cost(p: int, nbytes: int, itemsize: int, net: NetworkModel,
              segment_bytes: int = TREE_SEGMENT_BYTES) -> Cost:
    """One in-order binary tree, depth D: about ``2D + 3S`` message times for S segments;
    at P = 2 one exchange (``tree_allreduce``)."""
    if p == 2:
        cost = recursive_doubling_cost(p, nbytes, itemsize, net)
        cost.algorithm = "tree"
        return cost
    return _trees_cost("tree", p, nbytes, itemsize, net, [inorder_tree(p)], segment_bytes)


def double_tree_cost(p: int, nbytes: int, itemsize: int, net: NetworkModel,
                     segment_bytes: int = TREE_SEGMENT_BYTES) -> Cost:
    """Two complementary trees on half the vector each."""
    first = inorder_tree(p)
    return _trees_cost("double_tree", p, nbytes, itemsize, net, [first, mirrored_tree(first)],
                       segment_bytes)


def mpi_cost(p: int, nbytes: int, itemsize: int, net: NetworkModel) -> Cost:
    """What ``"mpi"`` runs on the in-process transport: recursive doubling
    (see ``collectives/allreduce.py``)."""
    cost = recursive_doubling_cost(p, nbytes, itemsize, net)
    cost.algorithm = "mpi"
    return cost


MODELS = {"naive": naive_cost, "ps": ps_cost, "ring": ring_cost, "tree": tree_cost,
          "double_tree": double_tree_cost, "recursive_doubling": recursive_doubling_cost,
          "mpi": mpi_cost}


def check_cost(p: int, nbytes: int, net: NetworkModel, algorithm: str = "ring") -> Cost:
    """The agreement check of ``allreduce(check=True)`` (see ``agreement.py``).

    A recursive-doubling allreduce of one packet, ``PACKET_BYTES`` (the max of
    its header is not charged as reduction); when the data rides in the
    packet (``consistency.rides_with_check``: a short recursive-doubling
    allreduce, or a short tree one on two ranks), this is the whole cost.
    """
    if p == 1:
        return _empty("check", p, PACKET_BYTES)
    small = rides_with_check(algorithm, p, nbytes)
    cost = recursive_doubling_cost(p, PACKET_BYTES, 1, net, nbytes if small else 0)
    cost.algorithm = f"check + {algorithm}" if small else "check"
    return cost


def predict(algorithm: str, world_size: int, nbytes: int, itemsize: int = 8,
            network: NetworkModel | None = None, check: bool = False) -> Cost:
    """The predicted :class:`Cost` of ``allreduce(..., algorithm)`` on ``nbytes`` bytes.

    ``itemsize`` fixes how the vector is cut (chunks are whole elements);
    ``network`` defaults to ``NetworkModel()``, as ``LocalCluster``'s does (pass
    ``load_network_model()`` for this machine's fit).
    ``check=True`` adds the agreement check that ``allreduce`` runs by
    default (:func:`check_cost`); its time is then the sum of the two
    parts (exact when P is a power of two: all ranks leave the check at once).
    """
    if algorithm not in MODELS:
        raise ValueError(f"no cost model for {algorithm!r}; use one of {list(MODELS)}")
    if nbytes % itemsize:
        raise ValueError(f"{nbytes} bytes is not a whole number of {itemsize}-byte items")
    if network is None:
        network = NetworkModel()
    if world_size == 1 or nbytes == 0:
        cost = _empty(algorithm, world_size, nbytes)
    else:
        # every message of the collective priced at the vector's size (NetworkModel.at)
        cost = MODELS[algorithm](world_size, nbytes, itemsize, network.at(nbytes))
    if not check or world_size == 1:
        return cost
    header = check_cost(world_size, nbytes, network, algorithm)
    if header.algorithm != "check":
        return header
    for key in ("messages_sent", "messages_recv", "bytes_sent", "bytes_recv"):
        setattr(cost, key, [a + b for a, b in zip(getattr(cost, key), getattr(header, key),
                                                  strict=True)])
    cost.time, cost.rounds = cost.time + header.time, cost.rounds + header.rounds
    cost.fan_in = max(cost.fan_in, header.fan_in)
    return cost
