"""Mixture of experts and expert parallelism (Lecture 7): E expert MLPs over P ranks, each
token sent to its experts' ranks with an all-to-all of variable counts.

A mixture-of-experts layer holds E small MLPs (the experts) and a gate, a
Linear layer that scores each token against each expert; each token is
processed by its top-k experts only, so the layer has E times the
parameters of one MLP for about k times its compute. With expert
parallelism the E experts are spread over the P ranks, E/P each (expert e
lives on rank ``e // (E/P)``); the gate is replicated, and each rank brings
its own tokens (its share of the batch).

    moe = MoE(d_model=16, d_hidden=32, n_experts=8, top_k=2, comm=c)   # 8/P experts here
    y = x + moe(x)          # x: this rank's (n, d_model) tokens; a dropped token passes through
    print(format_load(load_table(moe)))   # tokens per expert since moe.reset_load(), all ranks

Forward, on every rank, for its n tokens:

1. route (:func:`route`): probabilities ``p = softmax(gate(x))``; each token's
   top-k experts, highest first; gate weights ``p`` of the chosen experts
   (top-1: the probability itself, as the Switch Transformer; top-2:
   renormalised over the two, as GShard);
2. capacity: each expert takes at most ``C = ceil(capacity_factor · k · n / E)``
   of this rank's token slots, every token's first choice before any second
   choice, in token order; the slots over capacity are *dropped*: they add
   nothing to the output (a token whose slots are all dropped gets 0, and
   passes through the residual ``x + moe(x)`` unchanged). A skewed gate sends
   most tokens to few experts: those drop tokens while others idle, the load
   imbalance the lecture warns about (:func:`load_table`). Training left alone
   drifts there (the favoured experts learn, so they are favoured more); the
   Switch Transformer's balancing loss, ``moe.balance_loss = E · Σ_e f_e · P_e``
   (f_e: the share of slots routed to e, P_e: e's mean probability; 1 when
   even, E when one expert takes all), added to the loss with a small weight
   (0.01 in the paper), pushes back;
3. dispatch (:func:`dispatch`): the kept slots' tokens, sorted by expert and so
   by the rank that holds it, go there with ``comm.alltoallv``, after an
   ``alltoall`` of the counts telling each rank how many rows each of its experts gets;
4. experts: each local expert runs on all the rows it received, from every rank;
5. return and combine: the outputs go back with the reverse ``alltoallv`` and
   each token's output is ``Σ_k w_k · expert_k(x)`` over its kept slots.

Backward runs through the same all-to-alls reversed: the backward of an
all-to-all (:class:`AllToAll`) is the all-to-all that sends each gradient row
back where its row came from. So an expert's gradient sums its tokens from
every rank, while the gate's covers this rank's tokens only:
:func:`average_gradients` makes both the gradient of the mean loss over all
ranks. Every rank must run forward and backward through the layer together.

Cost per layer and step, on one rank (R: the bytes of a row, ``d_model`` numbers;
``out``: its kept slots sent to other ranks; ``in``: the slots it receives from
other ranks): the counts ``8(P-1)·E/P`` bytes, then four alltoallv (dispatch and
return, forward and backward), each ``8(P-1)`` bytes of counts and ``out·R`` or
``in·R`` of rows: ``8(P-1)(E/P + 4) + 2R(out + in)`` bytes in ``9(P-1)`` rounds,
plus the agreement check of each of the five collectives (``comm.cost.check_cost``).
With tokens spread evenly and nothing dropped, ``out = in = k·n(P-1)/P``. The
dispatch's backward runs only when ``x`` needs a gradient (not for a layer fed
with data): then one alltoallv less.
"""

from __future__ import annotations

import math

import numpy as np

from minidist.autograd import Function, Tensor, concatenate
from minidist.backend import to_numpy, xp_of
from minidist.comm import Communicator, LocalCluster, allreduce, alltoall, alltoallv
from minidist.nn import MLP, Linear, Module, ModuleList, init
from minidist.nn.functional import as_tensor
from minidist.parallel import grid
from minidist.util.answers import lab_answer
from minidist.util.values import positive, whole


class AllToAll(Function):
    """``comm.alltoallv`` as an autograd op: rows out by ``counts``, rows in from every rank.

    Backward is the reverse all-to-all: the gradient of the rows received from
    rank i goes back to rank i (the counts received become the counts sent),
    landing in the order its rows left. The rows travel through host memory
    (this op is where a GPU's tensors are copied for the communicator).
    """

    @staticmethod
    def forward(ctx, rows, counts, c: Communicator):
        # communication: every rank's rows for each rank, as counted
        received, ctx.recv_counts = alltoallv(to_numpy(rows), counts, c)
        ctx.c = c
        return xp_of(rows).asarray(received)

    @staticmethod
    def backward(ctx, grad):
        # communication: the gradient of each received row, back to where the row came from
        sent_back, _ = alltoallv(to_numpy(grad), ctx.recv_counts, ctx.c)
        return xp_of(grad).asarray(sent_back), None, None


def route(probs, top_k: int, capacity: int):
    """Each token's top-k experts and which of its slots fit (step 2 of the module docstring).

    ``probs`` (n, E) are the gate's probabilities. Returns ``choice`` (n, k), the
    chosen experts, best first (ties: the lower expert), and ``kept`` (k, n):
    slot (j, t), token t's j-th choice, is kept when fewer than ``capacity``
    slots before it in priority order (all first choices in token order, then
    the second ones) chose the same expert.
    """
    xp = xp_of(probs)
    n, n_experts = probs.shape
    choice = xp.argsort(-probs, axis=1, kind="stable")[:, :top_k]
    slots = xp.eye(n_experts, dtype=np.int64)[choice.T.reshape(-1)]  # one-hot, priority order
    earlier = (xp.cumsum(slots, axis=0) * slots).sum(axis=1) - 1  # same-expert slots before
    return choice, (earlier < capacity).reshape(top_k, n)


@lab_answer("lab08_moe_dispatch")
def dispatch(rows: Tensor, expert_counts, c: Communicator) -> tuple[Tensor, np.ndarray]:
    """Send ``rows``, sorted by expert (``expert_counts[e]`` rows for expert e, E in all:
    host integers), to the ranks holding their experts (E/P consecutive experts per rank).

    Returns the rows received, sorted by expert (every rank's rows for my
    first expert, rank 0's first, then for my second...), and ``table``
    (P, E/P): ``table[i, e]`` rows came from rank i for my e-th expert.
    Cost: an alltoall of E/P integers per pair of ranks, then an alltoallv of
    the rows (those for my own experts are only copied).
    """
    counts = np.asarray(expert_counts, np.int64).reshape(c.size, -1)  # (rank, its expert)
    # communication: how many rows I send to each expert of each rank
    table = alltoall(counts, c)
    # communication: the rows themselves; rank i's arrive sorted by my experts
    received = AllToAll.apply(rows, counts.sum(axis=1), c)
    return received[xp_of(received.data).asarray(by_expert(table))], table


@lab_answer("lab08_moe_dispatch")
def send_back(outputs: Tensor, table: np.ndarray, c: Communicator) -> Tensor:
    """:func:`dispatch` reversed: the rows of ``outputs`` (sorted by expert, as dispatch
    returned them) back to the ranks they came from, each rank's in the order it sent."""
    unsort = np.argsort(by_expert(table))  # the inverse permutation
    # communication: each row home
    return AllToAll.apply(outputs[xp_of(outputs.data).asarray(unsort)], table.sum(axis=1), c)


def by_expert(table: np.ndarray) -> np.ndarray:
    """The order that sorts the rows received (rank by rank, each rank's by expert) by
    expert, rank by rank within an expert: a stable sort of the rows' experts."""
    p, local = table.shape
    expert_of_row = np.repeat(np.tile(np.arange(local), p), table.reshape(-1))
    return np.argsort(expert_of_row, kind="stable")


class MoE(Module):
    """A mixture-of-experts layer: a gate and ``n_experts`` MLPs (``d_model → d_hidden →
    d_model``), the experts spread over the ranks of ``comm`` (None: one process holds
    them all). See the module docstring for the forward pass and its cost.

    Parameters are drawn in one order on every rank (the gate, then experts
    0..E-1) from ``rng``, each rank keeping its own experts, so any P holds the
    same model. ``capacity_factor=None`` drops nothing.
    """

    def __init__(self, d_model: int, d_hidden: int, n_experts: int, top_k: int = 1,
                 capacity_factor: float | None = 1.25, comm: Communicator | None = None,
                 dtype=np.float32, rng: np.random.Generator | int | None = None) -> None:
        super().__init__()
        c = comm if comm is not None else LocalCluster(1).communicators()[0]
        n_experts = whole("n_experts", n_experts, least=1)
        if n_experts % c.size:
            raise ValueError(f"MoE: {n_experts} experts cannot be spread evenly over {c.size} "
                             "ranks: n_experts must be a multiple of the number of ranks")
        top_k = whole("top_k", top_k, least=1)
        if top_k > n_experts:
            raise ValueError(f"MoE: top_k must be between 1 and n_experts = {n_experts}, "
                             f"got {top_k}")
        if capacity_factor is not None:  # None: no limit
            capacity_factor = positive("MoE: capacity_factor", capacity_factor)
        rng = init.resolve_rng(rng)
        self.comm, self.n_experts, self.top_k = c, n_experts, top_k
        self.capacity_factor, self.d_model = capacity_factor, d_model
        self.local = n_experts // c.size
        self.first_expert = c.rank * self.local  # my experts: first_expert + 0 .. local - 1
        self.gate = Linear(d_model, n_experts, bias=False, dtype=dtype, rng=rng)
        experts = [MLP([d_model, d_hidden, d_model], dtype=dtype, rng=rng)
                   for _ in range(n_experts)]  # all drawn, so that every P draws alike
        self.experts = ModuleList(experts[self.first_expert:self.first_expert + self.local])
        self.capacity = 0  # of each expert, in the last forward
        self.balance_loss: Tensor | None = None  # of the last forward (module docstring, 2.)
        self.reset_load()

    def reset_load(self) -> None:
        """Count tokens afresh: ``load`` rows are the token slots routed to each expert,
        those it processed and its capacity, summed over this rank's forwards since;
        ``dropped_tokens`` the tokens none of whose slots was kept (:func:`load_table`)."""
        self.load = np.zeros((3, self.n_experts), np.int64)
        self.dropped_tokens = 0

    def forward(self, x) -> Tensor:
        x = as_tensor(x)
        if x.ndim != 2 or x.shape[1] != self.d_model:
            raise ValueError(f"MoE: tokens must be (n, d_model) = (n, {self.d_model}), got "
                             f"shape {x.shape}")
        n, k, xp = x.shape[0], self.top_k, xp_of(x.data)
        # 1. route
        probs = self.gate(x).log_softmax(axis=-1).exp()
        self.capacity = (k * n if self.capacity_factor is None
                         else math.ceil(self.capacity_factor * k * n / self.n_experts))
        choice, kept = route(probs.data, k, self.capacity)
        weights = probs[xp.arange(n)[:, None], choice]  # (n, k), with their gradient
        if k > 1:
            weights = weights / weights.sum(axis=1, keepdims=True)
        # 2. capacity: the kept slots (numbered j·n + t), sorted by expert
        expert_of_slot = choice.T.reshape(-1)
        slots = xp.flatnonzero(kept.reshape(-1))
        slots = slots[xp.argsort(expert_of_slot[slots], kind="stable")]
        routed = xp.bincount(expert_of_slot, minlength=self.n_experts)
        processed = to_numpy(xp.bincount(expert_of_slot[slots], minlength=self.n_experts))
        self.load += np.stack([to_numpy(routed), processed, np.full(self.n_experts,
                                                                    self.capacity)])
        self.dropped_tokens += int((~kept.any(axis=0)).sum())
        share = (routed / max(k * n, 1)).astype(x.dtype)  # f_e, a count: no gradient
        mean_probs = probs.sum(axis=0) / max(n, 1)  # P_e (0, not NaN, with no tokens)
        self.balance_loss = (mean_probs * share).sum() * self.n_experts
        # 3. dispatch
        rows, table = dispatch(x[slots % n], processed, self.comm)
        # 4. experts, each on its rows from every rank
        outputs, start = [], 0
        for expert, count in zip(self.experts, table.sum(axis=0).tolist(), strict=True):
            outputs.append(expert(rows[start:start + count]))
            start += count
        # 5. return, and combine: slot j·n + t gets its row back, or the zero row if it was
        # dropped; then the weighted sum over j
        done = send_back(concatenate(outputs), table, self.comm)
        where = xp.full(k * n, len(slots))
        where[slots] = xp.arange(len(slots))
        zero = Tensor(xp.zeros((1, x.shape[1]), x.dtype))
        per_slot = concatenate([done, zero])[where].reshape(k, n, x.shape[1])
        return (per_slot * weights.T.reshape(k, n, 1)).sum(axis=0)

    def extra_repr(self) -> str:
        return (f"experts {self.first_expert}..{self.first_expert + self.local - 1} of "
                f"{self.n_experts}, top_k={self.top_k}, "
                f"capacity_factor={self.capacity_factor}")


def load_table(moe: MoE) -> dict[str, np.ndarray]:
    """Tokens per expert in the forwards through ``moe`` since ``moe.reset_load()``, summed
    over the ranks (all ranks call it): arrays over the E experts of the token slots
    ``routed`` to it, ``processed`` (kept) and ``dropped`` (over capacity), its
    ``capacity``; and ``dropped_tokens``, the tokens none of whose slots was kept.
    Cost: one allreduce of 3E + 1 integers."""
    # communication: every rank's counts, summed
    total = allreduce(np.append(moe.load.reshape(-1), moe.dropped_tokens), moe.comm)
    routed, processed, capacity = total[:-1].reshape(3, moe.n_experts)
    return dict(routed=routed, processed=processed, dropped=routed - processed,
                capacity=capacity, dropped_tokens=total[-1])


def format_load(table: dict[str, np.ndarray]) -> str:
    """``load_table``'s counts as a text table, with the imbalance: the busiest expert's
    routed tokens over the mean (1.0: perfectly even)."""
    lines = [f"{'expert':>6} {'routed':>7} {'processed':>9} {'dropped':>7} {'capacity':>8}"]
    for e, row in enumerate(zip(*(table[k] for k in ("routed", "processed", "dropped",
                                                       "capacity")), strict=True)):
        lines.append(f"{e:>6} {row[0]:>7} {row[1]:>9} {row[2]:>7} {row[3]:>8}")
    routed, dropped = table["routed"], table["dropped"]
    imbalance = routed.max() / routed.mean() if routed.sum() else 1.0
    lines.append(f"{'all':>6} {routed.sum():>7} {table['processed'].sum():>9} "
                 f"{dropped.sum():>7}   imbalance (max/mean routed) {imbalance:.2f}; "
                 f"tokens with every slot dropped: {table['dropped_tokens']}")
    return "\n".join(lines)


def expert_parameters(model: Module) -> list:
    """The parameters of the experts of every MoE layer in ``model`` (held by one rank)."""
    return [p for m in model.modules() if isinstance(m, MoE) for p in m.experts.parameters()]


def average_gradients(model: Module, c: Communicator) -> None:
    """Make every ``.grad`` the gradient of the mean of the ranks' losses, after backward.

    An expert's gradient already sums every rank's tokens (backward brought
    them back through the all-to-all): divide by P. Every other parameter is
    replicated and saw only this rank's tokens: average it over the ranks with
    one allreduce of them all, packed (a missing gradient counts as zeros).
    """
    experts = {id(p) for p in expert_parameters(model)}
    for p in model.parameters():
        if id(p) in experts and p.grad is not None:
            p.grad /= c.size
    # communication: the replicated parameters' gradients, averaged in one allreduce
    grid.average_gradients([p for p in model.parameters() if id(p) not in experts], c)
