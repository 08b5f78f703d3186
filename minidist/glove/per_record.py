"""glove.c's training loop, as Lecture 6 states it: record by record, AdaGrad, lock-free threads.

The reference (stanfordnlp/GloVe, ``glove.c``'s ``glove_thread``; followed
here as it stands since January 2020, unchanged through 2025) trains on the
records of its shuffled file in the file's order, every epoch the same. For
each record (i, j, X_ij), with f from ``model.weighting``:

    1. diff = w_i . w~_j + b_i + b~_j - log X_ij,   fdiff = f(X_ij) diff;
       a record whose diff or fdiff is NaN or inf is skipped (no cost, no update);
    2. cost += fdiff diff / 2;
    3. AdaGrad on the two vectors, every component from the values before
       this record: the gradient fdiff w~_jb of w_ib (and fdiff w_ib of
       w~_jb), clipped to +-100, times eta, over sqrt(G); G += its square.
       A vector moves only if all its steps are numbers (they always are
       while G >= 1; glove.c checks anyway);
    4. AdaGrad on the two biases, with the gradient fdiff itself, no eta and
       no clipping: b -= fdiff / sqrt(G) (0 if that is not a number), G += fdiff^2.

Steps 3 and 4 are ``minidist.optim.glove_c_update``, the AdaGrad rule every
GloVe trainer uses (``adagrad_columns`` gives its rates and clips per column).

**Hogwild.** With ``threads=T`` the records are cut into T blocks
(``chunk_bounds``) and T threads run the loop on their blocks at once,
reading and writing the same tables without locks: two threads may update
one word's row together and lose a step, which sparse updates make rare
(Niu et al., 2011). glove.c does the same with pthreads; Python threads can,
because the compiled loop releases the interpreter lock (``compiled``).

Cost per epoch: O(nnz d) arithmetic and 4 random row reads and writes per
record, nnz / T records per thread; memory: the model and one chunk of
records per thread (``recordfile``). A model on a GPU runs the same loop as a
CUDA kernel, every warp a Hogwild worker (``cuda_records``); numba's loop is
the CPU's (``compiled``), and the strict CI guard's arrays are refused.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from minidist import backend
from minidist.glove import cuda_records
from minidist.glove.compiled import jit
from minidist.glove.model import (
    ALPHA,
    ETA,
    GRAD_CLIP,
    X_MAX,
    GloVe,
    require_host,
    weighting_options,
)
from minidist.glove.recordfile import CHUNK, RECORD, RecordFile, record_chunks
from minidist.optim.adagrad import glove_c_update
from minidist.util import chunk_bounds
from minidist.util.values import positive


def sgd_records(word: np.ndarray, context: np.ndarray, word_gradsq: np.ndarray,
                context_gradsq: np.ndarray, records: np.ndarray, eta: float, x_max: float,
                alpha: float, clip: float) -> tuple[float, int, int]:
    """glove.c's loop over ``records`` (a ``RECORD`` array), updating the tables in place.

    Returns (the cost, records skipped by the guard, records whose ids are not words)."""
    vocab, dim = word.shape[0], word.shape[1] - 1
    steps_w, steps_c = np.empty(dim), np.empty(dim)
    cost, skipped, bad = 0.0, 0, 0
    for k in range(len(records)):
        record = records[k]
        i, j, x = record["word1"] - 1, record["word2"] - 1, record["val"]  # ids from 1
        if i < 0 or j < 0 or i >= vocab or j >= vocab:
            bad += 1
            continue
        # 1. the residual, and f(X_ij) times it
        diff = 0.0
        for b in range(dim):
            diff += word[i, b] * context[j, b]
        diff += word[i, dim] + context[j, dim] - math.log(x)
        fdiff = diff if x > x_max else (x / x_max) ** alpha * diff
        if not (math.isfinite(diff) and math.isfinite(fdiff)):
            skipped += 1
            continue
        cost += 0.5 * fdiff * diff                                            # 2.
        # 3. the vectors: every step from the values before this record, then applied
        total_w, total_c = 0.0, 0.0
        for b in range(dim):
            steps_w[b], word_gradsq[i, b] = glove_c_update(
                fdiff * context[j, b], word_gradsq[i, b], eta, clip)
            steps_c[b], context_gradsq[j, b] = glove_c_update(
                fdiff * word[i, b], context_gradsq[j, b], eta, clip)
            total_w += steps_w[b]
            total_c += steps_c[b]
        if math.isfinite(total_w) and math.isfinite(total_c):
            for b in range(dim):
                word[i, b] -= steps_w[b]
                context[j, b] -= steps_c[b]
        # 4. the biases: the gradient fdiff itself, rate 1, no clipping
        step, word_gradsq[i, dim] = glove_c_update(fdiff, word_gradsq[i, dim], 1.0)
        word[i, dim] -= step if math.isfinite(step) else 0.0
        step, context_gradsq[j, dim] = glove_c_update(fdiff, context_gradsq[j, dim], 1.0)
        context[j, dim] -= step if math.isfinite(step) else 0.0
    return cost, skipped, bad


sgd_records_compiled = jit(sgd_records, glove_c_update)


@dataclass
class RecordRun:
    """Per epoch, glove.c's cost (J / 2 per record) and seconds; records the guard skipped."""

    costs: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    skipped: int = 0


def train_block(model: GloVe, records: RecordFile | np.ndarray, lo: int, hi: int,
                options: tuple[float, float, float, float], chunk: int,
                loop: Callable[..., tuple[float, int, int]]) -> tuple[float, int]:
    """Records lo:hi, a chunk at a time, through ``loop``; returns (cost, skipped)."""
    cost, skipped = 0.0, 0
    for start, part in zip(range(lo, hi, chunk), record_chunks(records, lo, hi, chunk),
                           strict=True):
        part_cost, part_skipped, bad = loop(model.word, model.context, model.word_gradsq,
                                            model.context_gradsq, part, *options)
        if bad:
            raise ValueError(f"records {start}..{start + len(part) - 1}: {bad} of them name a "
                             f"word outside 1..{len(model.word)} (glove.c ids count from 1)")
        cost, skipped = cost + part_cost, skipped + part_skipped
    return cost, skipped


def train_records(model: GloVe, records: RecordFile | np.ndarray, epochs: int = 1,
                  threads: int | None = None, eta: float = ETA, x_max: float = X_MAX,
                  alpha: float = ALPHA, clip: float = GRAD_CLIP, chunk: int = CHUNK,
                  compiled: bool = True,
                  on_epoch: Callable[[int, float], None] | None = None) -> RecordRun:
    """Train ``model`` in place with glove.c's loop, ``threads`` lock-free workers.

    ``records``: a ``RecordFile`` (streamed, a chunk per thread in memory) or a
    ``RECORD`` array, in the order training takes them. ``compiled=False``
    runs the same loop in the interpreter (slow; for tests). ``on_epoch(epoch,
    cost)`` is called after each epoch. The workers are CPU threads (default 1);
    a model on a GPU trains there, the records copied over once, its workers the
    warps of a CUDA kernel (default ``cuda_records.default_warps``). ``eta`` and
    ``x_max`` must be finite numbers > 0, ``alpha`` one >= 0.
    """
    gpu = backend.on_gpu(model.word)
    if not gpu:
        require_host("train_records (glove.c's compiled loop)", model)
    if (threads is not None and threads < 1) or epochs < 0 or chunk < 1:
        raise ValueError(f"train_records: need threads >= 1, epochs >= 0 and chunk >= 1, got "
                         f"{threads}, {epochs} and {chunk}")
    if not isinstance(records, RecordFile) and getattr(records, "dtype", None) != RECORD:
        raise TypeError("train_records: records must be a RecordFile or an array of "
                        "glove.RECORD (glove.to_records(row, col, val) makes one)")
    for name, array in model.arrays().items():
        if array.dtype != np.float64 or not array.flags.c_contiguous:
            raise TypeError(f"train_records: model.{name} must be C-contiguous float64")
    loop = sgd_records_compiled if compiled else sgd_records
    options = (positive("eta", eta), *weighting_options(x_max, alpha), clip)
    if gpu:  # the records to the GPU once; the warps from how often words repeat in them
        on_host = records.read() if isinstance(records, RecordFile) else records
        on_gpu = cuda_records.upload(on_host, len(model.word), backend.xp_of(model.word))
        threads = threads or cuda_records.default_warps(on_host, len(model.word))
    else:
        threads = threads or 1
        blocks = chunk_bounds(len(records), threads)
    run = RecordRun()
    for epoch in range(epochs):
        started = time.perf_counter()
        if gpu:
            cost, skipped = cuda_records.epoch(tuple(model.arrays().values()), on_gpu,
                                               len(records), options, threads)
            results = [(float(cost), int(skipped))]  # the epoch's one copy to the host
        else:
            results = run_threads(lambda k: train_block(model, records, *blocks[k], options,
                                                        chunk, loop), threads)
        run.seconds.append(time.perf_counter() - started)
        run.costs.append(sum(cost for cost, _ in results) / max(len(records), 1))
        run.skipped += sum(skipped for _, skipped in results)
        if on_epoch is not None:
            on_epoch(epoch, run.costs[-1])
    return run


def run_threads(work: Callable[[int], tuple[float, int]],
                threads: int) -> list[tuple[float, int]]:
    """``work(k)`` for k = 0..threads-1, each on its own thread (the caller's when one);
    re-raises the first failure once all have ended."""
    if threads == 1:
        return [work(0)]
    results: list = [None] * threads

    def run(k: int) -> None:
        try:
            results[k] = work(k)
        except BaseException as failure:  # noqa: B036 -- handed to the caller below
            results[k] = failure

    pool = [threading.Thread(target=run, args=(k,), name=f"glove-{k}") for k in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results
