"""The figures of Lectures 5-7 (parameter servers, GloVe, model parallelism), each drawn
by running minidist while the slides build; see ``figures.py`` for the conventions."""

from __future__ import annotations

import html

import numpy as np

import minidist as md
from minidist import comm
from minidist.viz.figure import pyplot, save
from minidist.viz.staleness import race_curves, staleness_histogram

# ---- Lecture 5 ----

def staleness(path) -> None:
    """How stale the asynchronous server's gradients are, for 4 and 8 learners."""
    from minidist.parallel.ps.simulator import simulate

    fig, ax = pyplot().subplots(figsize=(7, 3.4))
    staleness_histogram(ax, [simulate("asgd", learners, epochs=2.0) for learners in (4, 8)],
                        label=lambda trial: f"λ = {trial.learners} learners, "
                                            f"{sum(trial.staleness.values())} gradients")
    save(fig, path, dpi=110)


def ssp_race(path) -> None:
    """BSP, SSP(3) and ASP with one worker twice as slow: test loss on the modelled clock."""
    from minidist.parallel.ps.simulator import straggler_race

    race = straggler_race(workers=4, steps=30)
    fig, ax = pyplot().subplots(figsize=(7, 3.4))
    race_curves(ax, race)
    save(fig, path, dpi=110)


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
    """log(1 + N(i, j)) for the 24 most frequent words (the fillers) and some relation words."""
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
    save(fig, path, dpi=110)


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

    stages, micro = 4, 8
    traces = comm.LocalCluster(stages).run(lambda c: modelled_trace(c, schedule, micro))
    formula = (f"(K−1)/K = {(stages - 1) / stages:.0%}" if schedule == "naive"  # one at a time
               else f"(K−1)/(M+K−1) = {bubble_formula(stages, micro):.0%}")
    fig = plot_gantt(traces, None, title=f"{schedule}, K = {stages} stages, M = {micro} "
                     f"micro-batches (modelled clock; idle {formula})")
    save(fig, path, dpi=110)


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
    save(fig, path, dpi=110)


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


