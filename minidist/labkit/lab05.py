"""Checks for Lab 5 (GloVe and Hogwild): each task against an answer the check computes itself.

GloVe stores, as glove.c does, one row ``[w_i, b_i]`` per word (the bias in
the last column) in a word table and a context table, both ``(V, d + 1)``.
The checks:

1. ``weighting``: against f(x) = (x / x_max)^alpha below x_max, 1 from there,
   keeping x's shape.
2. ``loss_and_gradients``: the cost against glove.c's J / 2 written here in
   numpy, the gradients against central finite differences of it, on
   batches where words repeat (a repeated word gets the *sum* of its
   records' gradients) and where some words are absent (their rows get 0).
3. ``adagrad_step``: several steps on random rows, table and squared sums
   against the library's update (the current glove.c's: the vector's
   gradient clipped at 100 and scaled by eta, the bias's taken as it is),
   computed before the check, both changed in place and only in the given
   rows; an answer that follows a known wrong rule (the old glove.c's bias,
   no clipping, the textbook order) is told which.
4. ``sharded_dots``: P in-process ranks, each holding some columns of both
   tables; values against numpy, traffic against one ``comm.allreduce`` of
   the B partial dot products (any of the library's algorithms): sending
   the vectors' columns moves d / P times more and fails.
5. ``hogwild_vs_sequential``: a plausibility check. The sequential model
   must be exactly ``glove.train``'s; the Hogwild model, trained by lock-free
   processes and so not reproducible, must reach about the same loss.

While a task is checked, the library's own answer is blocked. When the lab
is graded, the answers run in the student's kernel and the checks here:
a batch and a model, which are not data, cross as their arrays and are
rebuilt there by a probe (``loss_on_records``, ``lab05_hogwild.py``); the
ranks of Task 4 and their traffic are the grader's (``relay.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from minidist import glove
from minidist.comm import ALGORITHMS, allreduce
from minidist.labkit.blocking import blocked
from minidist.labkit.checks import CheckFailed, expect, expect_close, numerical_gradient
from minidist.labkit.lab05_hogwild import check_hogwild  # noqa: F401 (the notebook's import)
from minidist.labkit.ranks import run_ranks
from minidist.labkit.remote import on_student
from minidist.optim.adagrad import adagrad_rows
from minidist.util import chunk_bounds

# What is blocked while each task is checked: the library's answers to it, marked
# @lab_answer where they are written (minidist.util.answers).
LIBRARY_WEIGHTING = ("lab05_weighting",)
LIBRARY_LOSS = ("lab05_loss_gradients",)
LIBRARY_ADAGRAD = ("lab05_adagrad",)  # md.optim.AdaGrad's update calls the same rule
LIBRARY_SHARDED = ("lab05_sharded_dots",)


def random_tables(vocab_size: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A word and a context table ``(V, d + 1)`` of standard normal numbers / sqrt(d)."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((2, vocab_size, dim + 1)) / np.sqrt(max(dim, 1))


def random_batch(vocab_size: int, batch_size: int, seed: int) -> glove.Records:
    """A shuffled batch of records whose word and context ids repeat (V < B)."""
    rng = np.random.default_rng(seed)
    count = rng.gamma(0.5, 40.0, batch_size) + 0.25
    return glove.Records.from_counts(rng.integers(0, vocab_size, batch_size),
                                     rng.integers(0, vocab_size, batch_size), count)


def half_loss(word: np.ndarray, context: np.ndarray, batch: glove.Records) -> float:
    """glove.c's cost J / 2 = 1/2 sum f(X_ij) (w_i . w~_j + b_i + b~_j - log X_ij)^2."""
    w, c = word[batch.row], context[batch.col]
    diff = (w[:, :-1] * c[:, :-1]).sum(axis=1) + w[:, -1] + c[:, -1] - batch.log_x
    return 0.5 * float(np.sum(batch.weight * diff * diff))


# --- Task 1: the weighting function ---------------------------------------------------------
def check_weighting(weighting: Callable[..., Any], x: Any, x_max: float | None = None,
                    alpha: float | None = None,
                    block: tuple[str, ...] = LIBRARY_WEIGHTING) -> None:
    """``weighting(x)`` (defaults 100 and 0.75) or ``weighting(x, x_max=, alpha=)``, for an
    array ``x`` of any shape: an array of that shape, element by element."""
    __tracebackhide__ = True
    options = {k: v for k, v in (("x_max", x_max), ("alpha", alpha)) if v is not None}
    top, power = options.get("x_max", 100.0), options.get("alpha", 0.75)
    x = np.asarray(x, dtype=np.float64)
    expected = np.where(x < top, (x / top) ** power, 1.0)
    what = "weighting(x" + "".join(f", {k}={v:g}" for k, v in options.items()) + ")"
    with blocked(*block):
        got = weighting(x.copy(), **options)
    expect(np.shape(got) == x.shape, f"{what}: x has shape {x.shape}, your answer "
           f"{np.shape(got)}; f applies element by element, so it keeps x's shape")
    expect_close(f"{what} for x = {np.round(x, 3).tolist()}", got, expected, rtol=1e-12,
                 atol=0)


# --- Task 2: the loss and its gradients -----------------------------------------------------
def gradient_hint(grad: Any, exact: np.ndarray, ids: np.ndarray) -> str:
    """Which rule a wrong gradient breaks, when the check can tell: '' otherwise."""
    grad = np.asarray(grad, dtype=np.float64)
    if np.allclose(grad, 2 * exact, rtol=1e-5, atol=1e-7):
        return ("this is the gradient of J; the cost is J / 2 (glove.c's), whose gradient "
                "is half of it")
    counts = np.bincount(ids, minlength=len(exact))
    untouched = np.flatnonzero((counts == 0) & (grad != 0).any(axis=1))
    if len(untouched):
        return (f"no record of the batch has id {untouched[0]}, yet its row's gradient is not "
                "zero: rows the batch does not touch get zero")
    wrong = np.flatnonzero(~np.isclose(grad, exact, rtol=1e-5, atol=1e-7).all(axis=1))
    if len(wrong) and (counts[wrong] > 1).all():
        return ("only rows of words that occur in several records are wrong: such a row "
                "gets the sum of their gradients (np.add.at; grad[ids] += ... keeps one)")
    return ""


def check_loss_gradients(loss_and_gradients: Callable[..., Any], vocab_size: int, dim: int,
                         batch_size: int, seed: int = 0,
                         block: tuple[str, ...] = LIBRARY_LOSS) -> None:
    """``loss_and_gradients(word, context, batch)`` returns ``(cost, word_grad, context_grad)``:
    J / 2 on the batch and its gradients, tables' shapes, compared with finite differences.

    Cost: 4 V (d + 1) evaluations of the cost, two per number of the two tables."""
    __tracebackhide__ = True
    what = f"loss_and_gradients, V = {vocab_size}, d = {dim}, a batch of {batch_size} records"
    word, context = random_tables(vocab_size, dim, seed)
    batch = random_batch(vocab_size, batch_size, seed + 1)
    tables = [word.copy(), context.copy()]
    expected = [numerical_gradient(lambda w, c: half_loss(w, c, batch), tables, k)
                for k in (0, 1)]
    with blocked(*block):
        cost, *grads = on_student(loss_on_records, loss_and_gradients, word, context,
                                  batch.arrays())
    for name, table, original in (("word", word, tables[0]), ("context", context, tables[1])):
        expect(np.array_equal(table, original), f"{what}: your function changed the {name} "
               "table; it should only read it (the AdaGrad step updates it)")
    expect_close(f"{what}: the cost J / 2", float(cost), half_loss(word, context, batch),
                 rtol=1e-9, atol=1e-12)
    for name, ids, grad, exact in (("word", batch.row, grads[0], expected[0]),
                                   ("context", batch.col, grads[1], expected[1])):
        try:
            expect_close(f"{what}: the {name} table's gradient", grad, exact, rtol=1e-5,
                         atol=1e-7)
        except CheckFailed as failure:
            hint = gradient_hint(grad, exact, ids) if np.shape(grad) == exact.shape else ""
            raise CheckFailed(f"{failure} -- {hint}" if hint else str(failure)) from None


def loss_on_records(loss_and_gradients: Callable[..., Any], word: np.ndarray,
                    context: np.ndarray, records: dict[str, np.ndarray]) -> Any:
    """Probe: ``loss_and_gradients`` on a batch rebuilt from its arrays (``glove.Records``
    is not data; ``remote.on_student``)."""
    return loss_and_gradients(word, context, glove.Records(**records))


# --- Task 3: glove.c's AdaGrad step ---------------------------------------------------------
def glove_c_rows(table: np.ndarray, gradsq: np.ndarray, rows: np.ndarray, grad: np.ndarray,
                 eta: float, bias_rate: float | None = 1.0, clip: float | None = 100.0,
                 after: bool = True) -> None:
    """glove.c's AdaGrad, s = eta clip(g) for the vector and g for the bias, theta -= s /
    sqrt(G), G += s^2; the keywords make the known wrong variants (``WRONG_ADAGRAD``)."""
    scaled = grad.copy()
    vector = scaled[:, :-1] if clip is None else np.clip(scaled[:, :-1], -clip, clip)
    scaled[:, :-1] = eta * vector
    scaled[:, -1] *= eta if bias_rate is None else bias_rate
    if not after:
        gradsq[rows] += scaled * scaled
    table[rows] -= scaled / np.sqrt(gradsq[rows])
    if after:
        gradsq[rows] += scaled * scaled


WRONG_ADAGRAD = {  # a known wrong rule, and what the student reads when an answer follows it
    "scaled the bias": (dict(bias_rate=None), "you scaled the bias's gradient by eta, the "
                        "rule of glove.c before 2019; the current glove.c steps the bias with "
                        "g itself: b -= g / sqrt(G), then G += g^2"),
    "did not clip": (dict(clip=None), "vector components of g beyond +-100 are clipped to "
                     "+-100 before the step (np.clip), the bias's never"),
    "added before": (dict(after=False), "you added s^2 to G before the step; glove.c divides "
                     "by the old G"),
}


def check_adagrad(adagrad_step: Callable[..., Any], vocab_size: int, dim: int, steps: int,
                  eta: float = glove.ETA, seed: int = 0,
                  block: tuple[str, ...] = LIBRARY_ADAGRAD) -> None:
    """``steps`` calls ``adagrad_step(table, gradsq, rows, grad, eta)`` on distinct random
    rows [vector, bias], some gradients beyond 100; after each, table and sums must be the
    current glove.c's (``glove.adagrad_columns``), changed in place and only in ``rows``.
    One more row, never in ``rows``, has G = 0: computing on every row writes NaN there."""
    __tracebackhide__ = True
    what = f"adagrad_step, V = {vocab_size + 1}, d = {dim}, eta = {eta:g}"
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((vocab_size + 1, dim + 1))
    gradsq = np.ones_like(table)  # glove.c starts every sum at 1
    gradsq[-1] = 0.0              # the row no step may touch
    expected, expected_sq = table.copy(), gradsq.copy()
    rates, clips = glove.adagrad_columns(dim, eta)
    for step in range(1, steps + 1):
        rows = rng.choice(vocab_size, rng.integers(1, vocab_size), replace=False)  # unsorted
        grad = 3.0 * rng.standard_normal((len(rows), dim + 1))
        grad[::2, 0] *= 80.0  # beyond +-100 now and then: clipped
        grad[:, -1] *= 50.0   # the bias's: never clipped
        adagrad_rows(expected, expected_sq, rows, grad, rates, clip=clips)  # the library's
        before, before_sq = table.copy(), gradsq.copy()
        with blocked(*block), np.errstate(divide="ignore", invalid="ignore"):
            adagrad_step(table, gradsq, rows.copy(), grad.copy(), eta)
        where = f"{what}: step {step} (rows {rows[:4].tolist()}...)"
        expect(not np.array_equal(table, before), f"{where} left the table unchanged; update "
               "the arrays you are given in place (table[rows] -= ...)")
        expect(not np.array_equal(gradsq, before_sq), f"{where} left gradsq unchanged; G "
               "grows in place too (gradsq[rows] += ...)")
        others = np.setdiff1d(np.arange(len(table)), rows)
        expect(np.array_equal(table[others], before[others])
               and np.array_equal(gradsq[others], before_sq[others]),
               f"{where} changed rows not in rows: a step reads and writes only table[rows] "
               f"and gradsq[rows], O(rows d) whatever V is (row {vocab_size} has G = 0 "
               "here, so computing on every row writes NaN into it)")
        try:
            expect_close(f"{where}, the table", table, expected, rtol=1e-10, atol=1e-12)
            expect_close(f"{where}, the sums of squares G (+= s^2, after the step)", gradsq,
                         expected_sq, rtol=1e-10, atol=1e-12)
        except CheckFailed as failure:
            for options, hint in WRONG_ADAGRAD.values():
                wrong, wrong_sq = before.copy(), before_sq.copy()
                glove_c_rows(wrong, wrong_sq, rows, grad, eta, **options)
                if (np.allclose(table, wrong, rtol=1e-10, atol=1e-12)
                        and np.allclose(gradsq, wrong_sq, rtol=1e-10, atol=1e-12)):
                    raise CheckFailed(f"{failure} -- {hint}") from None
            raise


# --- Task 4: the dimensions split over ranks ------------------------------------------------
def allreduce_traffic(world_size: int, length: int) -> dict[str, list[tuple[int, int]]]:
    """Each rank's (messages, bytes) sent by one ``comm.allreduce`` of ``length`` float64,
    for each of the library's algorithms, with and without the agreement check."""
    options = {}
    for algorithm in (a for a in ALGORITHMS if a != "mpi"):
        for check in (True, False):
            def body(c: Any, algorithm: str = algorithm, check: bool = check) -> None:
                allreduce(np.zeros(length), c, algorithm=algorithm, check=check)

            stats = run_ranks(body, world_size, "reference allreduce", ())[1]
            options[f"{algorithm}{'' if check else ', check=False'}"] = [
                (s.messages_sent, s.bytes_sent) for s in stats]
    return options


def check_sharded_dots(sharded_dots: Callable[..., Any], world_size: int, vocab_size: int,
                       dim: int, batch_size: int, seed: int = 0,
                       block: tuple[str, ...] = LIBRARY_SHARDED) -> None:
    """Rank r holds columns lo_r:hi_r (``chunk_bounds``) of two (V, d) tables; every rank
    must return all B dot products, having sent what one allreduce of B numbers sends."""
    __tracebackhide__ = True
    what = f"sharded_dots, P = {world_size}, d = {dim}, B = {batch_size}"
    rng = np.random.default_rng(seed)
    word, context = rng.standard_normal((2, vocab_size, dim))
    row, col = rng.integers(0, vocab_size, (2, batch_size))
    bounds = chunk_bounds(dim, world_size)

    def body(c: Any) -> np.ndarray:
        lo, hi = bounds[c.rank]
        mine = sharded_dots(c, word[:, lo:hi].copy(), context[:, lo:hi].copy(), row.copy(),
                            col.copy())
        return np.asarray(mine)

    results, stats = run_ranks(body, world_size, what, block)
    expected = np.einsum("bk,bk->b", word[row], context[col])
    for rank, got in enumerate(results):
        expect_close(f"{what}: rank {rank}'s dot products", got, expected, rtol=1e-10,
                     atol=1e-12)
    got = [(s.messages_sent, s.bytes_sent) for s in stats]
    options = allreduce_traffic(world_size, batch_size)
    ring = options["ring"]
    columns = max(hi - lo for lo, hi in bounds)
    expect(got in options.values(), f"{what}: the ranks sent {[b for _, b in got]} bytes in "
           f"{[m for m, _ in got]} messages; one comm.allreduce of the B = {batch_size} partial "
           f"dot products sends {[b for _, b in ring]} bytes in {[m for m, _ in ring]} "
           f"messages (ring). Only the B numbers travel, never the rows of {columns} "
           "columns")
