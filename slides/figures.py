"""The decks' figures, each drawn by running minidist while the slides build.

A figure is a function ``draw(path)`` that writes a PNG to ``path`` (or
returns an HTML fragment, for a table). Every one runs the library itself, on
in-process ranks and their modelled clock where time matters, so a figure
shows what the lab's code does and reads the same on every machine. Sizes
are small: each figure takes seconds. ``FIGURES`` names them; a deck asks for
one with ``![caption](fig:NAME)``.
"""

from __future__ import annotations

import contextlib
import html
import re
import threading

import numpy as np

import minidist as md
from minidist import comm
from minidist.viz.figure import pyplot

SIZES = [2 ** k for k in range(3, 27, 1)]  # 8 B .. 64 MiB, for the cost model's curves


def _save(fig, path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)


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
    _save(fig, path)


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
    _save(fig, path)


def _allreduce(algorithm: str, n: int):
    return lambda c: comm.allreduce(np.ones(n), c, algorithm=algorithm, check=False)


def ring_trace(path) -> None:
    message_diagram(traced_messages(_allreduce("ring", 400), 4), 4, path,
                    "ring allreduce, P = 4, N = 400 float64")


def tree_trace(path) -> None:
    message_diagram(traced_messages(_allreduce("tree", 400), 7), 7, path,
                    "tree allreduce, P = 7, N = 400 float64")


def broadcast_trace(path) -> None:
    message_diagram(traced_messages(lambda c: comm.broadcast(np.ones(100), c, root=0), 8), 8,
                    path, "broadcast from rank 0, P = 8, 100 float64")


# ---- Lecture 2 ----

def collectives(path) -> None:
    """Bytes each rank sends in each basic collective (P = 4, 4096 float64 each)."""
    calls = {"broadcast": lambda x, c: comm.broadcast(x, c, root=0),
             "reduce": lambda x, c: comm.reduce(x, c, root=0),
             "allgather": lambda x, c: comm.allgather(x[:1024], c),
             "reduce_scatter": lambda x, c: comm.reduce_scatter(x, c),
             "alltoall": lambda x, c: comm.alltoall(x.reshape(c.size, -1), c),
             "allreduce (ring)": lambda x, c: comm.allreduce(x, c, algorithm="ring")}
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
    ax.set_title("bytes sent per rank, counted by the in-process transport (32 KiB input)",
                 loc="left", fontsize=10)
    ax.legend(fontsize="small", ncol=4)
    _save(fig, path)


# ---- Lecture 3: the α-β model ----

ALGORITHMS = ("naive", "ps", "ring", "tree", "double_tree", "recursive_doubling")


def alpha_beta(path) -> None:
    """Modelled allreduce time against size at P = 8, and which algorithm wins where."""
    fig, ax = pyplot().subplots(figsize=(8, 3.8))
    times = {a: [comm.cost.predict(a, 8, n, 8).time for n in SIZES] for a in ALGORITHMS}
    for name, ys in times.items():
        ax.loglog(SIZES, ys, label=name)
    best = [min(ALGORITHMS, key=lambda a, i=i: times[a][i]) for i in range(len(SIZES))]
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
    _save(fig, path)


def busbw(path) -> None:
    """Bus bandwidth (nccl-tests' convention) from the modelled times, P = 8."""
    fig, ax = pyplot().subplots(figsize=(8, 3.6))
    for name in ALGORITHMS:
        bw = [n / comm.cost.predict(name, 8, n, 8).time * 2 * 7 / 8 / 1e9 for n in SIZES]
        ax.semilogx(SIZES, bw, label=name)
    ax.set_xlabel("bytes per rank")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title("busbw = bytes / time · 2(P−1)/P, modelled, P = 8", loc="left", fontsize=10)
    ax.legend(fontsize="small", ncol=2)
    ax.grid(True, alpha=0.3)
    _save(fig, path)


# ---- Lecture 4 ----

def ddp_timeline(path) -> None:
    """Three DDP steps on two in-process ranks, rank 1 sleeping 20 ms: compute, comm, wait."""
    from minidist.bench.ddp import straggler_trial
    from minidist.viz import plot_timeline

    runs = md.launch(straggler_trial, world_size=2, backend="local",
                     args=([64, 256, 256, 256, 10], 32, 3, 0.02, 1))
    plot_timeline([r["trace"] for r in runs], path,
                  title="DataParallel, 2 ranks, rank 1 20 ms slow (wall clock)")


# ---- Lecture 5 ----

def staleness(path) -> None:
    """How stale the asynchronous server's gradients are, for 4 and 8 learners."""
    from minidist.parallel.ps.simulator import simulate

    fig, ax = pyplot().subplots(figsize=(7, 3.4))
    for learners in (4, 8):
        trial = simulate("asgd", learners, epochs=2.0)
        taus, total = sorted(trial.staleness), sum(trial.staleness.values())
        ax.step(taus, [trial.staleness[t] / total for t in taus], where="mid",
                label=f"λ = {learners} learners, {total} gradients")
    ax.set_xlabel("staleness τ (1 + updates the gradient missed)")
    ax.set_ylabel("share of gradients")
    ax.legend()
    ax.grid(True, alpha=0.3)
    _save(fig, path)


def ssp_race(path) -> None:
    """BSP, SSP(3) and ASP with one worker twice as slow: test loss on the modelled clock."""
    from minidist.parallel.ps.simulator import straggler_race

    race = straggler_race(workers=4, steps=30)
    fig, ax = pyplot().subplots(figsize=(7, 3.4))
    for rule, run in race.runs.items():
        label = f"ssp({race.staleness})" if rule == "ssp" else rule
        ax.plot([1e3 * t for t, *_ in run.curve], [loss for _, _, loss, _ in run.curve],
                label=label)
    ax.set_yscale("log")
    ax.set_xlabel("modelled ms")
    ax.set_ylabel("test loss (worker 0's reads)")
    ax.legend()
    ax.grid(True, alpha=0.3)
    _save(fig, path)


# ---- Lecture 6 ----

_glove_cache: dict = {}


def _glove():
    """Counts and vectors of a small synthetic corpus (0.3 M tokens), made once."""
    if not _glove_cache:
        import tempfile

        from minidist import glove
        from minidist.data.cooccur import count_cooccurrences
        from minidist.data.synthetic_language import generate_corpus
        from minidist.data.vocab import build_vocab

        with tempfile.TemporaryDirectory() as folder:
            source = generate_corpus(seed=0, num_tokens=300_000).save(folder).corpus
            counts = count_cooccurrences(source, build_vocab(source, min_count=5), window=10)
        model = glove.GloVe.create(len(counts.words), 30, 0)
        order = np.random.default_rng(0).permutation(counts.nnz)
        glove.train_records(model, glove.to_records(counts.row[order], counts.col[order],
                                                    counts.val[order]), 15, x_max=10.0)
        _glove_cache.update(counts=counts, vectors=model.vectors())
    return _glove_cache["counts"], _glove_cache["vectors"]


def cooccurrence(path) -> None:
    """log N(i, j) for the 40 most frequent words (the fillers) and some relation words."""
    counts, _ = _glove()
    words = [str(w) for w in counts.words]
    picks = [w for w in ("paris", "france", "rome", "italy", "king", "queen", "man", "woman")
             if w in words]
    ids = list(range(24)) + [words.index(w) for w in picks]
    dense = counts.to_dense()[np.ix_(ids, ids)]
    fig, ax = pyplot().subplots(figsize=(6.4, 5.6))
    image = ax.imshow(np.log1p(dense), cmap="viridis")
    ax.set_xticks(range(len(ids)), [words[i] for i in ids], rotation=90, fontsize=7)
    ax.set_yticks(range(len(ids)), [words[i] for i in ids], fontsize=7)
    fig.colorbar(image, ax=ax, label="log(1 + N(i, j)), 1/d weighted, window 10")
    _save(fig, path)


def neighbours(path) -> str:
    """An HTML table: each query word's nearest neighbours by cosine."""
    from minidist import glove

    counts, vectors = _glove()
    words = [str(w) for w in counts.words]
    rows = []
    for query in (q for q in ("paris", "king", "cats", "walked", "bigger") if q in words):
        near = glove.nearest_neighbours(vectors, words, query, k=5)
        rows.append(f"<tr><th>{html.escape(query)}</th><td>"
                    + ", ".join(f"{html.escape(w)} <small>{s:.2f}</small>" for w, s in near)
                    + "</td></tr>")
    return ("<table class='data'><tr><th>word</th><th>nearest by cosine (v + ṽ, d = 30, "
            f"{len(words)} words)</th></tr>{''.join(rows)}</table>")


# ---- Lecture 7 ----

def _gantt(schedule: str, path) -> None:
    from minidist.bench.pipeline import modelled_trace
    from minidist.parallel.pipeline.schedules import bubble_formula
    from minidist.viz import plot_gantt

    traces = comm.LocalCluster(4).run(lambda c: modelled_trace(c, schedule, 8))
    plot_gantt(traces, path, title=f"{schedule}, K = 4 stages, M = 8 micro-batches "
               f"(modelled clock; (K−1)/(M+K−1) = {bubble_formula(4, 8):.0%})")


def gantt_gpipe(path) -> None:
    _gantt("gpipe", path)


def gantt_1f1b(path) -> None:
    _gantt("1f1b", path)


def gantt_naive(path) -> None:
    _gantt("naive", path)


def tp_split(path) -> None:
    """Megatron's MLP over 2 ranks: each rank's shards, and the messages of each pass."""
    from minidist.parallel.tensor_parallel import ParallelMLP

    d, hidden, rng = 8, 16, np.random.default_rng(0)
    w1, b1 = rng.normal(size=(hidden, d)), rng.normal(size=hidden)
    w2, b2 = rng.normal(size=(d, hidden)), rng.normal(size=d)
    x = rng.normal(size=(4, d))

    def body(c):
        mlp = ParallelMLP(w1, b1, w2, b2, c)
        y = mlp(md.Tensor(x, requires_grad=True))
        forward = c.stats.messages_sent
        y.sum().backward()
        return mlp.w1.data.shape, mlp.w2.data.shape, forward, c.stats.messages_sent - forward

    cluster = comm.LocalCluster(2)
    shapes = cluster.run(body)
    fig, axes = pyplot().subplots(1, 2, figsize=(9, 3.2))
    for rank, (ax, (s1, s2, fwd, bwd)) in enumerate(zip(axes, shapes, strict=True)):
        lo = rank * hidden // 2
        ax.add_patch(pyplot().Rectangle((0, 0), hidden, d, fill=False, ls=":"))
        ax.add_patch(pyplot().Rectangle((lo, 0), s1[0], d, color="#4c72b0", alpha=0.8))
        ax.add_patch(pyplot().Rectangle((0, d + 2), hidden, d, fill=False, ls=":"))
        ax.add_patch(pyplot().Rectangle((lo, d + 2), s2[1], d, color="#55a868", alpha=0.8))
        ax.text(lo + s1[0] / 2, d / 2, f"A = W1ᵀ\ncolumns\n{s1[1]}×{s1[0]}", ha="center",
                va="center", color="white", fontsize=8)
        ax.text(lo + s2[1] / 2, d + 2 + d / 2, f"B = W2ᵀ\nrows\n{s2[1]}×{s2[0]}",
                ha="center", va="center", color="white", fontsize=8)
        ax.text(hidden / 2, 2 * d + 2.4, "hidden units →", ha="center", va="top", fontsize=8)
        ax.set_xlim(-0.5, hidden + 0.5)
        ax.set_ylim(2 * d + 4, -0.5)
        ax.axis("off")
        ax.set_title(f"rank {rank}: {fwd} message(s) forward, {bwd} backward", fontsize=9)
    fig.suptitle(f"ParallelMLP, d = {d}, hidden = {hidden}, 2 ranks: one allreduce each way",
                 fontsize=10)
    _save(fig, path)


def zero_table(path) -> str:
    """An HTML table: bytes of model states each rank holds, DDP against ZeRO 1 and 2."""
    from minidist.bench.zero import table

    rows = table([64, 256, 10], [1, 2, 4], "adam", "float32")
    cells = {}
    for row in rows:
        cells.setdefault(row["ranks"], {})[row["strategy"]] = sum(row["held"].values())
    names = list(dict.fromkeys(row["strategy"] for row in rows))
    head = "".join(f"<th>{html.escape(n)} held</th>" for n in names)
    body = "".join(f"<tr><th>{p}</th>" + "".join(
        f"<td>{v[n]:,} B ({v[n] / v[names[0]]:.2f}×)</td>" for n in names) + "</tr>"
        for p, v in cells.items())
    return (f"<table class='data'><tr><th>P</th>{head}</tr>{body}</table>"
            "<p class='caption'>MLP 64-256-10, Adam, float32, the busiest rank, counted "
            "from its arrays by <code>minidist.bench.zero.table</code></p>")


FIGURES = {f.__name__: f for f in (
    optimisers, broadcast_trace, collectives, ring_trace, tree_trace, alpha_beta, busbw,
    ddp_timeline, staleness, ssp_race, cooccurrence, neighbours, gantt_naive, gantt_gpipe,
    gantt_1f1b, tp_split, zero_table)}
