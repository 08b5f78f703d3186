"""Hot spots: a recommendation model on a parameter server, and hot keys replicated.

Recommendation models (DLRM and its elders) are mostly embedding tables: a
row per user, a row per item, and little compute. Popularity follows a
power law: a few items (and users) appear in a large share of the
interactions. On a parameter server whose servers hold key *ranges*, the
rows of the popular ids sit together (ids are handed out in order of
arrival, and early ids are the popular ones), so one server answers most
of the traffic: a **hot spot**, the slowest link of every clock.

The workload: matrix factorisation, r(u, i) ≈ p_u · q_i, on seeded
ratings whose user and item ids follow Zipf's law (``ratings``). A worker's
batch touches few rows: it pulls and pushes only those (sparse keys).

Two remedies, which combine:

- **Cut the ranges by load** (``balance``): count the requests per key on a
  sample of the stream and cut the key space so that each server expects
  the same number (``KeyLayout.split(load=...)``): the popular ids' servers
  hold fewer keys. Still one owner per key, so the hottest single key stays
  on one server.
- **Replicate the hot rows on every worker** (FAE, Adnan et al. 2021;
  HugeCTR's hot embeddings): the ``hot`` most frequent keys
  (``choose_hot_keys``, counted on the same sample) leave the servers: each
  worker keeps a copy, sums the clock's gradients of those rows with the
  other workers (an allreduce among workers), and applies the same SGD
  step.

Under BSP and SGD both are the same arithmetic as the plain servers'
(every worker's gradient, computed from the same weights, subtracted once):
the same trained model up to the order of additions.

Cost per clock: a worker's batch of B ratings touches u users and i items;
without replication it moves about 2·(u + i)·d·b bytes (pull and push),
all from the servers owning those rows; with replication the hot rows'
share leaves the servers and the allreduce moves 2·(W-1)/W·h·d·b per worker.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from minidist.comm.collectives.allreduce import allreduce
from minidist.comm.transport.communicator import Communicator
from minidist.parallel.ps.keys import KeyLayout
from minidist.parallel.ps.parameter_server import ParameterServer, gather_reports
from minidist.parallel.ps.rules import ServerOptimizer
from minidist.util.answers import lab_answer


@dataclass(frozen=True)
class Ratings:
    """Seeded ratings: ``users[j]`` rated ``items[j]`` with ``values[j]``."""

    users: np.ndarray
    items: np.ndarray
    values: np.ndarray
    num_users: int
    num_items: int


def zipf_ids(count: int, n: int, exponent: float, rng: np.random.Generator) -> np.ndarray:
    """``count`` ids in 0..n-1, id k drawn with probability ∝ 1/(k+1)^exponent."""
    weights = 1.0 / np.arange(1, n + 1) ** exponent
    return rng.choice(n, size=count, p=weights / weights.sum())


def ratings(num_users: int = 2000, num_items: int = 1000, count: int = 50_000, dim: int = 8,
            exponent: float = 1.1, noise: float = 0.1, seed: int = 0) -> Ratings:
    """Ratings from true factors of ``dim`` dimensions, ids by Zipf's law, plus noise."""
    rng = np.random.default_rng(seed)
    p = rng.normal(0, dim ** -0.25, (num_users, dim))
    q = rng.normal(0, dim ** -0.25, (num_items, dim))
    users = zipf_ids(count, num_users, exponent, rng)
    items = zipf_ids(count, num_items, exponent, rng)
    values = np.einsum("jd,jd->j", p[users], q[items]) + noise * rng.normal(size=count)
    return Ratings(users, items, values, num_users, num_items)


def mf_layout(data: Ratings, dim: int) -> KeyLayout:
    return KeyLayout({"user": (data.num_users, dim), "item": (data.num_items, dim)})


def batch_keys(data: Ratings, layout: KeyLayout, rows: np.ndarray) -> np.ndarray:
    """The distinct keys (user rows, then item rows) a batch of ratings touches, sorted."""
    return np.union1d(layout.keys("user", np.unique(data.users[rows])),
                      layout.keys("item", np.unique(data.items[rows])))


def mf_gradient(data: Ratings, layout: KeyLayout, rows: np.ndarray, keys: np.ndarray,
                values: np.ndarray, dim: int, l2: float = 1e-3) -> tuple[np.ndarray, float]:
    """(gradient of the rows of ``keys``, the batch's mean loss) for the ratings ``rows``;
    ``values``: the rows of ``keys``. Loss per rating: ½(p·q - r)² + ½·l2·(|p|² + |q|²)."""
    table = values.reshape(-1, dim)
    u = np.searchsorted(keys, layout.keys("user", data.users[rows]))
    i = np.searchsorted(keys, layout.keys("item", data.items[rows]))
    error = np.einsum("jd,jd->j", table[u], table[i]) - data.values[rows]
    grad = np.zeros_like(table)
    np.add.at(grad, u, error[:, None] * table[i] + l2 * table[u])
    np.add.at(grad, i, error[:, None] * table[u] + l2 * table[i])
    loss = 0.5 * np.mean(error ** 2)
    return grad.reshape(-1) / len(rows), float(loss)


@lab_answer("lab06_hot_keys")
def choose_hot_keys(accessed: np.ndarray, hot: int) -> np.ndarray:
    """The ``hot`` keys accessed most often in ``accessed`` (a sample of the stream of
    keys requested), sorted; ties go to the smaller key."""
    keys, counts = np.unique(accessed, return_counts=True)
    most = np.lexsort((keys, -counts))[:hot]
    return np.sort(keys[most])


def sample_access(data: Ratings, layout: KeyLayout, clocks: int, workers: int,
                  batch: int, seed: int) -> np.ndarray:
    """The keys the first ``clocks`` clocks' batches request (what a server would count)."""
    return np.concatenate([batch_keys(data, layout, batch_rows(data, seed, w, t, batch))
                           for t in range(clocks) for w in range(workers)])


def batch_rows(data: Ratings, seed: int, worker: int, clock: int, batch: int) -> np.ndarray:
    return np.random.default_rng((seed, worker, clock)).integers(0, len(data.values), batch)


@dataclass
class MFResult:
    """One rank's part of a run: a server's report, or a worker's losses and hot rows."""

    report: object = None
    losses: list[float] | None = None
    hot_keys: np.ndarray | None = None
    hot_rows: np.ndarray | None = None
    seconds: float = 0.0  # a worker's time in its training loop (modelled in-process)


def train_mf(c: Communicator, data: Ratings, dim: int = 8, steps: int = 50, batch: int = 256,
             lr: float = 0.5, hot: int = 0, balance: bool = False, servers: int = 1,
             seed: int = 0, sample_clocks: int = 20, consistency: str = "bsp") -> MFResult:
    """Matrix factorisation through a parameter server (SGD; BSP unless told otherwise),
    with the ``hot`` most requested keys replicated on the workers (0: none), and with
    ``balance`` the key ranges cut by the requests counted on the sample, not by values."""
    layout = mf_layout(data, dim)
    initial = np.random.default_rng(seed + 1).normal(0, 0.1, layout.num_values)
    workers = c.size - servers
    # every rank counts the same sample (same seed), so all agree without talking
    sample = sample_access(data, layout, sample_clocks, workers, batch, seed)
    hot_keys = choose_hot_keys(sample, hot) if hot else np.zeros(0, np.int64)
    load = None
    if balance:  # requests per key, plus a little so that unseen keys still count
        load = np.bincount(sample, minlength=layout.num_keys) + 0.1
        load[hot_keys] = 0.0  # replicated keys leave the servers
    # arrival order: the workers also talk among themselves (the allreduce), which the
    # deterministic order cannot wait through (parameter_server.py)
    ps = ParameterServer(c, layout, servers=servers, consistency=consistency,
                         optimizer=ServerOptimizer("sgd", lr=lr), deterministic=False,
                         key_load=load)
    group = c.split(1 if ps.is_server else 0)  # the workers, for the hot rows' allreduce
    if ps.is_server:
        return MFResult(report=ps.serve(initial))
    worker, w = ps.worker(), c.rank - servers
    replica = initial[layout.value_index(hot_keys)].reshape(-1, dim) if hot else None
    losses, started = [], time.perf_counter()
    for t in range(steps):
        rows = batch_rows(data, seed, w, t, batch)
        keys = batch_keys(data, layout, rows)
        table = read_rows(worker, keys, hot_keys, replica, dim)
        grad, loss = mf_gradient(data, layout, rows, keys, table.reshape(-1), dim)
        losses.append(loss)
        write_rows(worker, group, keys, hot_keys, replica, grad.reshape(-1, dim), lr)
        worker.tick()
    worker.stop()
    seconds = getattr(c.stats, "clock", time.perf_counter() - started)
    return MFResult(losses=losses, hot_keys=hot_keys, hot_rows=replica, seconds=seconds)


@lab_answer("lab06_hot_keys")
def read_rows(worker, keys: np.ndarray, hot_keys: np.ndarray, replica: np.ndarray | None,
              dim: int) -> np.ndarray:
    """The rows of ``keys``: cold ones pulled from the servers, hot ones from the replica."""
    hot = np.isin(keys, hot_keys)
    table = np.empty((keys.size, dim))
    # communication: only the cold rows travel from the servers
    table[~hot] = worker.pull(keys[~hot]).reshape(-1, dim)
    if hot.any():
        table[hot] = replica[np.searchsorted(hot_keys, keys[hot])]
    return table


@lab_answer("lab06_hot_keys")
def write_rows(worker, group: Communicator, keys: np.ndarray, hot_keys: np.ndarray,
               replica: np.ndarray | None, grad: np.ndarray, lr: float) -> None:
    """Cold rows' gradient pushed to the servers; hot rows' summed over the workers and
    applied to every replica alike."""
    hot = np.isin(keys, hot_keys)
    # communication: only the cold rows' gradient travels to the servers
    worker.push(keys[~hot], grad[~hot])
    if replica is not None:
        summed = np.zeros_like(replica)
        summed[np.searchsorted(hot_keys, keys[hot])] = grad[hot]
        # communication: the hot rows' gradients, summed over the workers (a ring allreduce)
        allreduce(summed, group, op="sum", out=summed)
        replica -= lr * summed


def assemble(results: list[MFResult], layout: KeyLayout) -> np.ndarray:
    """The trained model (every key's row) from a local run's results: the servers' shards,
    with the hot rows taken from worker replicas."""
    values = gather_reports([r.report for r in results if r.report is not None], layout)
    replicated = next(r for r in results if r.losses is not None)
    if replicated.hot_keys.size:
        values[layout.value_index(replicated.hot_keys)] = replicated.hot_rows.reshape(-1)
    return values


def rmse(data: Ratings, layout: KeyLayout, values: np.ndarray, dim: int) -> float:
    """Root mean squared error of the model ``values`` on every rating."""
    users = values[layout.table_slice("user")].reshape(-1, dim)
    items = values[layout.table_slice("item")].reshape(-1, dim)
    error = np.einsum("jd,jd->j", users[data.users], items[data.items]) - data.values
    return float(np.sqrt(np.mean(error ** 2)))
