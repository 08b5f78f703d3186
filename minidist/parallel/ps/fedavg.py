"""Federated averaging (FedAvg, McMahan et al. 2017) through the parameter server.

K **clients** each hold a shard of the training data that never leaves
them; n_k samples on client k, n in all. A server holds the global model
w. Each round t:

    S_t = a seeded choice of m = max(1, round(C·K)) clients (all of them when C = 1)
    every k in S_t:  w_k = E epochs of mini-batch SGD (batch B, rate η) on its shard, from w_t
    w_{t+1} = Σ_{k ∈ S_t} (n_k / n_S) · w_k,        n_S = Σ_{k ∈ S_t} n_k

Many local steps between averages (E·n_k/B of them) is what saves
communication against sending a gradient every step; the price is that the
clients' models drift apart when their data differ (**non-IID** shards: a
client that only sees 3s and 8s pulls the model towards 3s and 8s).

**The average through the parameter server, unchanged.** The clients are
the workers; the servers run plain SGD with lr = 1, n-softsync with n = 1
(a server waits for c = K pushes and applies their mean) and BSP. Client
k ∈ S_t pushes, as its "gradient",

    Δ_k = (n_k·K / n_S) · (w_t − w_k)

and every client outside S_t pushes a zero row of one key per server (a
*null push*: it counts towards c and changes nothing). Once all K pushes
are in, each server applies

    w ← w_t − 1·(1/K) Σ_k Δ_k = w_t − Σ_{k ∈ S_t} (n_k/n_S)(w_t − w_k) = Σ_{k ∈ S_t} (n_k/n_S) w_k

as FedAvg asks. Why each piece is needed:

- softsync makes a round one update, applied when the K-th push is in: a
  client whose pull of round t reaches a server after another client's push
  of round t still reads w_t (the sum waits for all K pushes, its own among
  them), however the messages were timed;
- BSP makes round t+1 read w_{t+1}: a pull at clock t+1 is served once
  every client has ticked to t+1, and each ticks only after its push of
  round t was acknowledged, so all K pushes are in and their mean is
  applied before any read of round t+1;
- the null push keeps c = K pushes per round when C < 1, for the cost of a
  header and one row instead of a model.

Per round, each client (numbered phases below):

1. **select**: S_t from (seed, t), the same on every rank, no message;
2. **pull** w_t, if selected (client 0 also pulls when not, to score w_t);
3. **train** locally: E epochs over its shard in a seeded order;
4. **push** Δ_k (or the null push);
5. **tick**: round t is over for this client.

Cost per round of a selected client, for a model of v float64 values in k
keys on S servers, with h = ``HEADER_BYTES`` per request header: it sends
3·h·S + 16·k + 8·v bytes (a pull, a push and a tick to every server; the
keys twice, the model once) and receives 16·S + 8·v (the model, and two
8 B answers per server): about two copies of the model, whatever E. A
client outside S_t sends (2·h + 8)·S + 8·r bytes (a null push of one key
per server, r the length of those rows, and a tick) and receives 8·S.
Client 0's scoring pull when it is not selected adds h·S + 8·k sent and
8·S + 8·v received; each client's STOP at the end, h·S. Compute: E·n_k
sample gradients on client k, none on the servers beyond the average.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minidist.backend import require_cpu
from minidist.comm.transport.communicator import Communicator
from minidist.data import Dataset
from minidist.models.mlp import accuracy, build_mlp, classification_loss
from minidist.nn import MLP
from minidist.optim import SGD
from minidist.parallel.ps.keys import KeyLayout
from minidist.parallel.ps.messages import HEADER_BYTES
from minidist.parallel.ps.parameter_server import ParameterServer
from minidist.parallel.ps.rules import ServerOptimizer
from minidist.parallel.ps.server import ServerReport
from minidist.parallel.ps.training import digits, load_values, mlp_layout
from minidist.util import chunk_bounds
from minidist.util.values import whole

SPLITS = ("iid", "noniid", "dirichlet")


# --- who holds what: the clients' shards, as index arrays into the training set -----------
def split_iid(labels: np.ndarray, clients: int, seed: int = 0) -> list[np.ndarray]:
    """A seeded shuffle cut into ``clients`` near-equal parts: every client sees every class."""
    _check_clients(clients, len(labels))
    order = np.random.default_rng(seed).permutation(len(labels))
    return [np.sort(order[a:b]) for a, b in chunk_bounds(len(labels), clients)]


def split_noniid(labels: np.ndarray, clients: int, shards_per_client: int = 2,
                 seed: int = 0) -> list[np.ndarray]:
    """The paper's pathological split: samples sorted by label, cut into
    ``clients·shards_per_client`` equal shards, each client given ``shards_per_client``
    of them at random: most clients see only one or two classes."""
    if shards_per_client < 1:
        raise ValueError(f"shards_per_client must be >= 1, got {shards_per_client}")
    _check_clients(clients, len(labels) // shards_per_client)
    shards = clients * shards_per_client
    by_label = np.argsort(labels, kind="stable")
    cuts = chunk_bounds(len(labels), shards)
    owned = np.random.default_rng(seed).permutation(shards).reshape(clients, shards_per_client)
    return [np.sort(np.concatenate([by_label[slice(*cuts[s])] for s in mine])) for mine in owned]


def split_dirichlet(labels: np.ndarray, clients: int, alpha: float = 0.5,
                    seed: int = 0) -> list[np.ndarray]:
    """Each class's samples shared among the clients in proportions drawn from
    Dirichlet(α,...,α): small α gives each class to a few clients, large α is near IID.
    Drawn again (same generator) until every client holds at least one sample."""
    _check_clients(clients, len(labels))
    if not alpha > 0:
        raise ValueError(f"the Dirichlet split needs alpha > 0, got {alpha}")
    rng = np.random.default_rng(seed)
    for _ in range(100):
        parts: list[list[np.ndarray]] = [[] for _ in range(clients)]
        for label in np.unique(labels):
            mine = rng.permutation(np.flatnonzero(labels == label))
            cuts = (np.cumsum(rng.dirichlet(np.full(clients, alpha)))[:-1] * len(mine))
            for k, piece in enumerate(np.split(mine, cuts.astype(np.int64))):
                parts[k].append(piece)
        shards = [np.sort(np.concatenate(p)) for p in parts]
        if min(len(s) for s in shards) > 0:
            return shards
    raise ValueError(f"Dirichlet(alpha={alpha}) left some of {clients} clients empty in 100 "
                     f"draws: use a larger alpha or fewer clients")


def split_clients(name: str, labels: np.ndarray, clients: int, seed: int = 0,
                  alpha: float = 0.5) -> list[np.ndarray]:
    """``split_iid``, ``split_noniid`` or ``split_dirichlet`` by name (one of SPLITS)."""
    if name == "iid":
        return split_iid(labels, clients, seed)
    if name == "noniid":
        return split_noniid(labels, clients, seed=seed)
    if name == "dirichlet":
        return split_dirichlet(labels, clients, alpha, seed)
    raise ValueError(f"split must be one of {SPLITS}, got {name!r}")


def select_clients(clients: int, fraction: float, round_: int, seed: int = 0) -> np.ndarray:
    """The clients of round ``round_``: m = max(1, round(C·K)) of them, drawn from
    (seed, round) alone, ascending (every rank draws the same)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"the fraction C of clients per round must be in (0, 1], got {fraction}")
    if fraction == 1:
        return np.arange(clients)
    m = max(1, round(fraction * clients))
    return np.sort(np.random.default_rng((seed, round_)).choice(clients, m, replace=False))


def _check_clients(clients: int, most: int) -> None:
    if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
        raise ValueError(f"FedAvg needs at least one client, got {clients!r}")
    if clients > most:
        raise ValueError(f"{clients} clients but only {most} samples (or shards) to share")


# --- one client's work ---------------------------------------------------------------
def local_sgd(model: MLP, x: np.ndarray, y: np.ndarray, epochs: int, batch_size: int | None,
              lr: float, rng: np.random.Generator) -> None:
    """``epochs`` passes of plain mini-batch SGD over (x, y), each in an order drawn from
    ``rng`` (the last batch of a pass may be short; ``batch_size`` None: the whole shard):
    epochs·len(y) sample gradients."""
    size = len(y) if batch_size is None else batch_size
    opt = SGD(model.parameters(), lr=lr)
    for _ in range(epochs):
        order = rng.permutation(len(y))
        for start in range(0, len(y), size):
            rows = order[start:start + size]
            opt.zero_grad()
            classification_loss(model, x[rows], y[rows]).backward()
            opt.step()


@dataclass
class FedRun:
    """What a run learns. ``accuracy`` and ``loss`` (of the global model on the test set,
    after 0, 1, ..., R rounds) are filled on client 0 only; ``samples`` (sample gradients
    computed by all clients, cumulative, same length) and ``selected`` (the clients of
    each round) everywhere; ``report`` (the final shard) on servers."""

    accuracy: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)
    selected: list[list[int]] = field(default_factory=list)
    report: ServerReport | None = None


def float64_mlp(hidden: int, seed: int) -> MLP:
    """The course's MLP for the digits, 64 -> hidden -> 10, in float64."""
    return build_mlp((64, hidden, 10), seed=seed, dtype=np.float64)


def fedavg(c: Communicator, rounds: int = 20, local_epochs: int = 1,
           batch_size: int | None = 10, lr: float = 0.1, fraction: float = 1.0,
           split: str | Sequence[np.ndarray] = "iid", alpha: float = 0.5, hidden: int = 64,
           servers: int = 1, seed: int = 0, on_round: Callable[[int], Any] | None = None
           ) -> FedRun:
    """FedAvg of the digits MLP on the ranks of ``c``: ranks 0..servers-1 serve, the
    other K = c.size - servers are clients. ``split`` is a name (SPLITS; seeded by
    ``seed``, ``alpha`` for Dirichlet) or one index array into the training set per
    client. ``on_round(t)`` is called on client 0 after each round."""
    require_cpu("fedavg")
    whole("rounds", rounds, least=1)
    whole("local epochs E", local_epochs, least=1)
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch size B must be >= 1 (or None: the whole shard), "
                         f"got {batch_size}")
    clients = c.size - servers
    if clients < 1:
        raise ValueError(f"FedAvg needs at least one client: {c.size} ranks and {servers} "
                         f"servers leave {clients}; start at least {servers + 1} ranks")
    train_set, test_set = digits(np.float64)
    shards = split_clients(split, train_set.y, clients, seed, alpha) if isinstance(split, str) \
        else _checked_shards(split, clients, len(train_set))
    sizes = np.array([len(s) for s in shards])
    run = FedRun(selected=[select_clients(clients, fraction, t, seed).tolist()
                           for t in range(rounds)])
    run.samples = np.cumsum([0] + [local_epochs * int(sizes[s].sum()) for s in run.selected]
                            ).tolist()
    model = float64_mlp(hidden, seed)
    layout = mlp_layout(model)
    ps = ParameterServer(c, layout, servers=servers, optimizer=ServerOptimizer("sgd", lr=1.0),
                         consistency="bsp", softsync=1)
    if ps.is_server:
        run.report = ps.serve(_flat(model, layout))
        return run
    k = c.rank - servers
    x, y = train_set.x[shards[k]], train_set.y[shards[k]]
    worker, keys = ps.worker(), layout.all_keys()
    null_keys = np.array([first for first, _ in ps.ranges])  # one row on every server
    for t, chosen in enumerate(run.selected):
        # 1. select: S_t, drawn by every rank alike (nothing sent)
        if k in chosen or k == 0:
            # 2. pull w_t: served once every client has finished round t-1 (BSP)
            # communication: the whole model, from every server
            w_t = worker.pull(keys)
            load_values(model, layout, w_t)
            if k == 0:
                _score(run, model, test_set)
        if k in chosen:
            # 3. train: E epochs of mini-batch SGD on this client's shard
            local_sgd(model, x, y, local_epochs, batch_size, lr,
                      np.random.default_rng((seed, t, k)))
            # 4. push Δ_k = (n_k·K/n_S)(w_t - w_k); the servers average K pushes
            # communication: a model-sized change to every server, acknowledged
            weight = sizes[k] * clients / sizes[chosen].sum()
            worker.push(keys, weight * (w_t - _flat(model, layout)))
        else:
            # 4. the null push: counts towards the K, adds nothing
            # communication: one zero row to every server, acknowledged
            worker.push(null_keys, np.zeros(layout.value_count(null_keys)))
        # 5. tick: this client is done with round t
        # communication: a header to every server
        worker.tick()
        if k == 0 and on_round is not None:
            on_round(t)
    if k == 0:  # the model after the last round
        # communication: the whole model, once every client has finished
        load_values(model, layout, worker.pull(keys))
        _score(run, model, test_set)
    # communication: STOP to every server
    worker.stop()
    return run


def round_bytes(layout: KeyLayout, servers: int, selected: bool = True) -> tuple[int, int]:
    """(bytes sent, bytes received) by a client in one round, selected or not (the cost
    above; client 0's scoring pull and the STOP at the end aside)."""
    h, S, k, v = HEADER_BYTES, servers, layout.num_keys, layout.num_values
    if selected:
        return 3 * h * S + 16 * k + 8 * v, 16 * S + 8 * v
    rows = sum(int(layout.widths[first]) for first, _ in layout.split(servers))
    return (2 * h + 8) * S + 8 * rows, 8 * S


def _checked_shards(shards: Sequence[np.ndarray], clients: int, n: int) -> list[np.ndarray]:
    if len(shards) != clients:
        raise ValueError(f"{len(shards)} shards given for {clients} clients")
    out = [np.asarray(s, np.int64) for s in shards]
    for k, s in enumerate(out):
        if s.ndim != 1 or s.size == 0 or s.min() < 0 or s.max() >= n:
            raise ValueError(f"client {k}'s shard must be a non-empty vector of indices in "
                             f"0..{n - 1}, got shape {s.shape}")
    return out


def _flat(model: MLP, layout: KeyLayout) -> np.ndarray:
    return layout.flatten({name: p.data for name, p in model.named_parameters()})


def _score(run: FedRun, model: MLP, test_set: Dataset) -> None:
    run.loss.append(float(classification_loss(model, test_set.x, test_set.y).data))
    run.accuracy.append(accuracy(model, test_set.x, test_set.y))
