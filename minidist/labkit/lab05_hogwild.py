"""Lab 5, Task 5: Hogwild against one process, a plausibility check.

The student's ``hogwild_vs_sequential`` takes a GloVe model and records and
returns two models; none of them is data, so when the lab is graded a probe
(``trained_models``) rebuilds the model and the records from their arrays in
the student's kernel, where the Hogwild workers start, and returns every
model's arrays; the reference (``glove.train``) and the verdict stay in the
grader.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from minidist import glove
from minidist.data.cooccur import zipf_cooccurrence
from minidist.labkit.checks import expect, expect_close
from minidist.labkit.remote import on_student


def random_counts(vocab_size: int, nnz: int, seed: int) -> glove.Records:
    """Records of distinct (i, j) pairs, Zipf-like word frequencies, counts around x_max."""
    return glove.Records.from_counts(*zipf_cooccurrence(vocab_size, nnz, seed))


def trained_models(hogwild_vs_sequential: Callable[..., Any], model: dict[str, np.ndarray],
                   records: dict[str, np.ndarray], *args: Any) -> tuple[dict, dict, dict]:
    """Probe: ``hogwild_vs_sequential`` on the model and records rebuilt from their arrays;
    the arrays of the given model after the call and of the two models it returned."""
    given = glove.GloVe(**model)
    sequential, hogwild = hogwild_vs_sequential(given, glove.Records(**records), *args)
    return given.arrays(), *({name: getattr(m, name) for name in model}
                             for m in (sequential, hogwild))


def check_hogwild(hogwild_vs_sequential: Callable[..., Any], workers: int, vocab_size: int,
                  dim: int, nnz: int, epochs: int, batch_size: int, seed: int = 0) -> None:
    """``hogwild_vs_sequential(model, records, workers, epochs, batch_size, seed)`` returns
    ``(sequential, hogwild)``, two models trained from copies of ``model``. The sequential one
    must be ``glove.train``'s exactly. Hogwild's loss depends on how the OS schedules the
    workers (a worker paused between reading rows and writing them back overwrites the
    other's updates): whatever the scheduling, short of losing half the updates, it keeps
    more than half of the sequential run's decrease."""
    __tracebackhide__ = True
    what = (f"hogwild_vs_sequential, {workers} worker(s), V = {vocab_size}, d = {dim}, "
            f"{epochs} epoch(s) of batches of {batch_size}")
    records = random_counts(vocab_size, nnz, seed)
    model = glove.GloVe.create(vocab_size, dim, seed)
    start = model.copy()
    reference = model.copy()
    glove.train(reference, records, epochs, batch_size, seed=seed)
    given, *trained = on_student(trained_models, hogwild_vs_sequential, model.arrays(),
                                 records.arrays(), workers, epochs, batch_size, seed)
    sequential, hogwild = (glove.GloVe(**arrays) for arrays in trained)
    for name, a in start.arrays().items():
        expect(np.array_equal(given[name], a), f"{what}: the model you were given "
               f"changed ({name}); train copies of it (model.copy())")
    for name, a in reference.arrays().items():
        expect_close(f"{what}: the sequential run's {name} (glove.train on a copy, "
                     "same epochs, batch size and seed)", getattr(sequential, name), a,
                     rtol=1e-12, atol=1e-14)
        expect(np.asarray(getattr(hogwild, name)).shape == a.shape,
               f"{what}: the Hogwild model's {name} has the wrong shape")
    expect(not np.array_equal(hogwild.word, start.word), f"{what}: the Hogwild model is the "
           "untrained one")
    before, after = glove.loss(start, records), glove.loss(reference, records)
    loss = glove.loss(hogwild, records)
    if workers == 1:  # one worker trains its one shard in glove.train's order
        expect_close(f"{what}: the Hogwild model with one worker (it must equal the "
                     "sequential one)", hogwild.word, reference.word, rtol=1e-12, atol=1e-14)
    else:
        expect(not np.array_equal(hogwild.word, reference.word), f"{what}: the Hogwild model "
               "equals the sequential one bit for bit; train it with train_hogwild")
    expect(np.isfinite(loss) and abs(loss - after) < (before - after) / 2,
           f"{what}: Hogwild's loss J is {loss:.6g}, the sequential run's {after:.6g} (from "
           f"{before:.6g}); at equal updates Hogwild keeps more than half of the decrease")
