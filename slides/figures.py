"""The decks' figures, each drawn by running minidist while the slides build.

A figure is a function ``draw(path)`` that writes a PNG to ``path`` (or
returns an HTML fragment, for a table). Every one runs the library itself, on
in-process ranks and their modelled clock where time matters, so a figure
shows what the lab's code does and reads the same on every machine. Sizes
are small: each figure takes seconds. ``FIGURES`` names them; a deck asks for
one with ``![caption](fig:NAME)``. Lectures 1-4 are drawn here, 5-7 in
``figures_training.py``.
"""

from __future__ import annotations

import contextlib
import re
import threading

import numpy as np
from figures_training import (  # the figures of Lectures 5-7
    cooccurrence,
    gantt_1f1b,
    gantt_gpipe,
    gantt_naive,
    neighbours,
    ssp_race,
    staleness,
    tp_split,
    zero_table,
)

import minidist as md
from minidist import comm
from minidist.viz.figure import pyplot, save

SIZES = [2 ** k for k in range(3, 27, 1)]  # 8 B .. 64 MiB, for the cost model's curves


# ---- Lecture 1 ----

def optimisers(path) -> None:
    """Training loss of the digits MLP under SGD, SGD with momentum and Adam."""
    train, _ = md.data.load_digits()
    fig, ax = pyplot().subplots(figsize=(7, 3.6))
    for name, make in (("SGD, lr 0.1", lambda p: md.optim.SGD(p, lr=0.1)),
                       ("SGD + momentum 0.9", lambda p: md.optim.SGD(p, lr=0.1, momentum=0.9)),
                       ("Adam, lr 3e-3", lambda p: md.optim.Adam(p, lr=3e-3))):
        model = md.nn.MLP([64, 128, 10], rng=0)
        opt, losses = make(model.parameters()), []
        for xb, yb in md.data.DataLoader(train, batch_size=32, seed=0):
            loss = md.nn.functional.cross_entropy(model(md.Tensor(xb)), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.item()))
        ax.plot(np.convolve(losses, np.ones(5) / 5, mode="valid"), label=name)
    ax.set_xlabel("step (one epoch of the digits, batches of 32)")
    ax.set_ylabel("training loss (mean of 5)")
    ax.set_yscale("log")
    ax.legend()
    ax.grid(True, alpha=0.3)
    save(fig, path, dpi=110)


# ---- message diagrams from the in-process transport's trace ----

class _TraceCatcher:
    """Takes the place of stderr while a traced run prints ``rank a -> b | tag t | n bytes``,
    noting each message with the sender's clock on a network where a message costs 1."""

    LINE = re.compile(r"rank (\d+) -> (\d+) \| tag (\d+) \| (\d+) bytes")

    def __init__(self, cluster) -> None:
        self.cluster, self.messages, self.lock = cluster, [], threading.Lock()

    def write(self, text: str) -> None:
        for src, dst, _tag, nbytes in self.LINE.findall(text):
            step = self.cluster.stats[int(src)].rounds  # read in the sender's own thread
            with self.lock:
                self.messages.append((step, int(src), int(dst), int(nbytes)))

    def flush(self) -> None:
        pass


def traced_messages(fn, ranks: int) -> list[tuple[int, int, int, int]]:
    """``(step, source, dest, bytes)`` of every message ``fn(c)`` sends on ``ranks`` ranks."""
    cluster = comm.LocalCluster(ranks, network=comm.cost.UNIT, trace=True)
    catcher = _TraceCatcher(cluster)
    with contextlib.redirect_stderr(catcher):
        cluster.run(fn)
    return sorted(catcher.messages)


def message_diagram(messages, ranks: int, path, title: str) -> None:
    """Ranks as rows, rounds as columns, one arrow per message (sent in its round)."""
    fig, ax = pyplot().subplots(figsize=(8, 0.6 + 0.55 * ranks))
    last = max(step for step, *_ in messages) + 1
    for rank in range(ranks):
        ax.plot([0, last], [rank, rank], color="#cccccc", lw=1, zorder=0)
    for step, src, dst, _ in messages:
        ax.annotate("", xy=(step + 0.92, dst), xytext=(step + 0.08, src),
                    arrowprops=dict(arrowstyle="->", color="#4c72b0", lw=1.2))
    ax.set_yticks(range(ranks), [f"rank {r}" for r in range(ranks)])
    ax.set_ylim(ranks - 0.5, -0.5)
    ax.set_xticks(np.arange(last) + 0.5, [str(s + 1) for s in range(last)])
    ax.set_xlabel("round (a message costs one round)")
    sizes = sorted({m[3] for m in messages})
    ax.set_title(f"{title}: {len(messages)} messages of "
                 f"{', '.join(map(str, sizes))} bytes", loc="left", fontsize=10)
    save(fig, path, dpi=110)


def _allreduce(algorithm: str, n: int):
    return lambda c: comm.allreduce(np.ones(n), c, algorithm=algorithm, check=False)


def ring_trace(path) -> None:
    message_diagram(traced_messages(_allreduce("ring", 400), 4), 4, path,
                    "ring allreduce, P = 4, N = 400 float64")


def tree_trace(path) -> None:
    message_diagram(traced_messages(_allreduce("tree", 400), 7), 7, path,
                    "tree allreduce, P = 7, N = 400 float64")


def broadcast_trace(path) -> None:
    message_diagram(traced_messages(lambda c: comm.broadcast(np.ones(100), c, root=0,
                                                             check=False), 8), 8,
                    path, "binomial broadcast from rank 0, P = 8, 100 float64")


# ---- Lecture 2 ----

def collectives(path) -> None:
    """Bytes each rank sends in each basic collective (P = 4, 4096 float64 each; allgather
    1024 each, so that everyone ends with 4096), the algorithms alone: ``check=False``
    leaves out the agreement check's small packets."""
    calls = {"broadcast": lambda x, c: comm.broadcast(x, c, root=0, check=False),
             "reduce": lambda x, c: comm.reduce(x, c, root=0, check=False),
             "allgather": lambda x, c: comm.allgather(x[:1024], c, check=False),
             "reduce_scatter": lambda x, c: comm.reduce_scatter(x, c, check=False),
             "alltoall": lambda x, c: comm.alltoall(x.reshape(c.size, -1), c, check=False),
             "allreduce (ring)": lambda x, c: comm.allreduce(x, c, algorithm="ring",
                                                             check=False)}
    ranks, sent = 4, {}
    for name, call in calls.items():
        cluster = comm.LocalCluster(ranks)
        cluster.run(lambda c, call=call: call(np.ones(4096), c))
        sent[name] = [s.bytes_sent / 1024 for s in cluster.stats]
    fig, ax = pyplot().subplots(figsize=(9, 3.4))
    width = 0.8 / ranks
    for rank in range(ranks):
        ax.bar(np.arange(len(sent)) + rank * width, [v[rank] for v in sent.values()], width,
               label=f"rank {rank}")
    ax.set_xticks(np.arange(len(sent)) + 0.4 - width / 2, list(sent), fontsize=9)
    ax.set_ylabel("KiB sent")
    ax.set_title("bytes sent per rank, counted by the in-process transport: 32 KiB per rank"
                 " (allgather: 8 KiB in, 32 KiB out), check=False", loc="left", fontsize=10)
    ax.legend(fontsize="small", ncol=4)
    save(fig, path, dpi=110)


# ---- Lecture 3: the α-β model ----

ALGORITHMS = ("naive", "ps", "ring", "tree", "double_tree", "recursive_doubling")


def alpha_beta(path) -> None:
    """Modelled allreduce time against size at P = 8, and which algorithm wins where."""
    fig, ax = pyplot().subplots(figsize=(8, 3.8))
    times = {a: [comm.cost.predict(a, 8, n, 8).time for n in SIZES] for a in ALGORITHMS}
    for name, ys in times.items():
        same = name == "ps" and ys == times["ring"]  # the same bytes and rounds as the ring
        ax.loglog(SIZES, ys, label="ps (= ring)" if same else name, ls="--" if same else "-",
                  zorder=3 if same else 2)
    # the fastest at each size; a tie goes to the ring, the algorithm the note names
    prefer = sorted(ALGORITHMS, key=lambda a: a != "ring")
    best = [min(prefer, key=lambda a, i=i: times[a][i]) for i in range(len(SIZES))]
    for i in range(1, len(SIZES)):
        if best[i] != best[i - 1]:
            ax.axvline(SIZES[i], color="grey", ls=":")
            ax.text(SIZES[i], ax.get_ylim()[1], f" {best[i]} from {SIZES[i]:,} B",
                    rotation=90, va="top", fontsize=8)
    net = comm.cost.NetworkModel()
    ax.set_xlabel("bytes per rank")
    ax.set_ylabel("modelled seconds")
    ax.set_title(f"P = 8, α = {net.alpha * 1e6:.1f} µs (minidist.comm.cost.predict)",
                 loc="left", fontsize=10)
    ax.legend(fontsize="small", ncol=2)
    ax.grid(True, alpha=0.3)
    save(fig, path, dpi=110)


def busbw(path) -> None:
    """Bus bandwidth (nccl-tests' convention) from the modelled times, P = 8."""
    fig, ax = pyplot().subplots(figsize=(8, 3.6))
    curves = {name: [n / comm.cost.predict(name, 8, n, 8).time * 2 * 7 / 8 / 1e9
                     for n in SIZES] for name in ALGORITHMS}
    for name, bw in curves.items():
        same = name == "ps" and bw == curves["ring"]  # drawn dashed over the ring's curve
        ax.semilogx(SIZES, bw, label="ps (= ring)" if same else name, ls="--" if same else "-",
                    zorder=3 if same else 2)
    ax.set_xlabel("bytes per rank")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title("busbw = bytes / time · 2(P−1)/P, modelled, P = 8", loc="left", fontsize=10)
    ax.legend(fontsize="small", ncol=2)
    ax.grid(True, alpha=0.3)
    save(fig, path, dpi=110)


# ---- Lecture 4 ----

def ddp_timeline(path) -> None:
    """Three DDP steps on two MPI processes, rank 1 sleeping 20 ms: compute, comm, wait.
    (In-process ranks take turns on one thread: there nothing overlaps, so the figure
    needs real processes; without mpiexec it shows the in-process run and says so.)"""
    from minidist.bench.ddp import straggler_trial
    from minidist.util.mpiexec import mpiexec_path
    from minidist.viz import plot_timeline

    try:
        mpiexec_path()
        backend, where = "mpi", "2 MPI processes"
    except FileNotFoundError:
        backend, where = "local", "2 in-process ranks, no overlap"
    runs = md.launch(straggler_trial, world_size=2, backend=backend, timeout=120,
                     args=([64, 256, 256, 256, 10], 32, 3, 0.02, 1))
    plot_timeline([r["trace"] for r in runs], path,
                  title=f"DataParallel, {where}, rank 1 20 ms slow (wall clock)")


FIGURES = {f.__name__: f for f in (
    optimisers, broadcast_trace, collectives, ring_trace, tree_trace, alpha_beta, busbw,
    ddp_timeline, staleness, ssp_race, cooccurrence, neighbours, gantt_naive, gantt_gpipe,
    gantt_1f1b, tp_split, zero_table)}
