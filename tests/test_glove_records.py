"""glove.c's record loop (``minidist.glove.per_record``): against the reference binary's
own numbers on a real corpus, against a plain transliteration and the mini-batch trainer
(one AdaGrad rule), compiled against uncompiled; its guard and clipping; lock-free
threads; the streamed record file and its memory; numba's cache across processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_glove import reference_epoch

from minidist import glove
from minidist.data.cooccur import zipf_cooccurrence as random_cooccurrence

FIXTURE = Path(__file__).parent / "fixtures" / "glove" / "glove_c_gpl3.npz"


@pytest.fixture(scope="module")
def small():
    row, col, val = random_cooccurrence(300, 6000, seed=8)
    return row, col, val


def test_equals_the_reference_binary_on_a_real_corpus():
    """glove.c (stanfordnlp/GloVe, 2025) from the same start on the same 5,583 records, in
    the same order, 5 epochs: its printed costs (6 decimals), its saved tables and sums.
    How the fixture was made: tests/fixtures/glove/README.md."""
    c = np.load(FIXTURE)
    model = glove.GloVe(c["word"].copy(), c["context"].copy(), np.ones_like(c["word"]),
                        np.ones_like(c["context"]))
    run = glove.train_records(model, c["records"], epochs=len(c["costs"]),
                              x_max=float(c["x_max"]))
    np.testing.assert_allclose(run.costs, c["costs"], rtol=0, atol=5e-7)
    for name, array in model.arrays().items():
        np.testing.assert_allclose(array, c[f"final_{name}"], rtol=1e-12, atol=1e-14)
    assert run.skipped == 0


def test_compiled_is_the_python_loop_bit_for_bit(small):
    records = glove.to_records(*small)
    model = glove.GloVe.create(300, 7, seed=1)
    python = model.copy()
    run = glove.train_records(model, records, epochs=2)
    slow = glove.train_records(python, records, epochs=2, compiled=False)
    assert run.costs == slow.costs
    for name, array in model.arrays().items():
        np.testing.assert_array_equal(array, python.arrays()[name])


def test_one_adagrad_rule_the_loop_the_transliteration_and_batches_of_one(small):
    """The record loop, a plain transliteration of glove.c and the mini-batch trainer with
    batches of one record take the same steps (numpy's log and power may differ from the
    C library's in the last bit)."""
    records = glove.Records.from_counts(*small)
    start = glove.GloVe.create(300, 6, seed=2)
    start.context *= 400  # gradients beyond 100: the clipping is exercised
    looped, plain, batched = start.copy(), start.copy(), start.copy()
    cost = glove.train_records(looped, glove.to_records(*small), epochs=1).costs[0]
    assert reference_epoch(plain, records) == pytest.approx(cost, rel=1e-12)
    assert glove.train_epoch(batched, records, None, batch_size=1) == pytest.approx(cost,
                                                                                   rel=1e-12)
    clipped = np.abs(start.context[:, :-1]).max() * np.abs(records.log_x).max() > 100
    assert clipped
    for name, array in looped.arrays().items():
        np.testing.assert_allclose(array, plain.arrays()[name], rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(array, batched.arrays()[name], rtol=1e-11, atol=1e-12)


def test_the_guard_skips_records_whose_diff_is_not_a_number(small):
    records = glove.to_records(*small)
    model = glove.GloVe.create(300, 5, seed=3)
    model.word[7, 2] = np.inf  # every record of word 7 has diff = +-inf or NaN
    run = glove.train_records(model, records, epochs=1)
    assert run.skipped == np.count_nonzero(records["word1"] == 8)  # ids from 1
    assert np.isfinite(run.costs[0])
    assert np.isfinite(model.context).all() and np.isfinite(model.word_gradsq).all()


def test_bad_input_is_named(small, tmp_path):
    model = glove.GloVe.create(300, 4)
    records = glove.to_records(*small)
    with pytest.raises(ValueError, match="need threads >= 1"):
        glove.train_records(model, records, threads=0)
    with pytest.raises(TypeError, match="RecordFile or an array of glove.RECORD"):
        glove.train_records(model, glove.Records.from_counts(*small))
    with pytest.raises(ValueError, match="name a word outside 1..300"):
        glove.train_records(glove.GloVe.create(300, 4), glove.to_records([0, 300], [1, 2],
                                                                          [2.0, 3.0]))
    (tmp_path / "odd.bin").write_bytes(b"x" * 20)
    with pytest.raises(ValueError, match="not a whole number of 16-byte"):
        glove.RecordFile(tmp_path / "odd.bin")


def test_streamed_file_trains_as_the_array_does_whatever_the_chunk(small, tmp_path):
    row, col, val = small
    file = glove.write_records(tmp_path / "records.bin", row, col, val, seed=4)
    assert len(file) == len(val) and (tmp_path / "records.bin").stat().st_size == 16 * len(val)
    in_memory = file.read()
    pairs = zip(in_memory["word1"] - 1, in_memory["word2"] - 1, strict=True)
    assert sorted(pairs) == sorted(zip(row, col, strict=True))
    start = glove.GloVe.create(300, 5, seed=5)
    runs = []
    for records, chunk in ((in_memory, 1 << 16), (file, 1 << 16), (file, 97)):
        model = start.copy()
        runs.append((glove.train_records(model, records, epochs=2, chunk=chunk), model))
    for run, model in runs[1:]:  # costs are summed chunk by chunk: the last bits may move
        np.testing.assert_allclose(run.costs, runs[0][0].costs, rtol=1e-13)
        for name, array in model.arrays().items():
            np.testing.assert_array_equal(array, runs[0][1].arrays()[name])


@pytest.mark.timeout(120)
def test_lock_free_threads_reach_the_one_thread_loss(small, tmp_path):
    """Two threads on the two halves of the file, the same tables, no locks: not
    reproducible, but at equal updates close to one thread's loss."""
    file = glove.write_records(tmp_path / "records.bin", *small, seed=6)
    records = glove.Records.from_counts(*small)
    start = glove.GloVe.create(300, 8, seed=6)
    one, two = start.copy(), start.copy()
    glove.train_records(one, file, epochs=4, threads=1)
    run = glove.train_records(two, file, epochs=4, threads=2)
    assert all(b < a for a, b in zip(run.costs, run.costs[1:], strict=False)), run.costs
    before, after = glove.loss(start, records), glove.loss(one, records)
    assert abs(glove.loss(two, records) - after) < 0.1 * (before - after)
    assert len(run.seconds) == 4


PEAK = """
import json, sys
from minidist import glove
from minidist.bench.glove import peak_mb
model = glove.GloVe.create({vocab}, 50)
glove.train_records(model, glove.to_records([0], [1], [2.0]))  # compiled or loaded: not counted
before = peak_mb()
file = glove.RecordFile(sys.argv[1])
glove.train_records(model, file, threads=2)
print(json.dumps({{"grew": (peak_mb() - before) * 2**20, "records": len(file) * 16}}))
"""


@pytest.mark.timeout(200)
def test_training_streams_the_file_a_chunk_at_a_time(tmp_path):
    """Peak memory while 2 threads train on 2 M records (32 MB): the growth of the process's
    peak resident memory over what it had before training (the compiled loop loaded from
    the cache the first run filled) is a few chunks, far under the bound of twice the
    records' size, let alone one copy of them."""
    vocab, nnz = 5000, 2_000_000
    rng = np.random.default_rng(0)
    path = tmp_path / "records.bin"
    glove.write_records(path, rng.integers(0, vocab, nnz), rng.integers(0, vocab, nnz),
                        rng.gamma(0.5, 40.0, nnz) + 0.25, seed=None)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    for _ in range(2):  # the first run may compile, whose peak would hide training's
        done = subprocess.run([sys.executable, "-c", PEAK.format(vocab=vocab), str(path)],
                              capture_output=True, text=True, timeout=180, env=env)
        assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["grew"] < figures["records"] / 2, figures


CACHED = """
from minidist import glove
from minidist.glove.per_record import sgd_records_compiled as loop
glove.train_records(glove.GloVe.create(5, 3), glove.to_records([0, 1], [1, 2], [2.0, 5.0]))
stats = loop.dispatcher.stats
print(sum(stats.cache_hits.values()), sum(stats.cache_misses.values()))
"""


@pytest.mark.timeout(200)
def test_a_second_process_loads_the_compiled_loop_from_the_cache(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    counts = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", CACHED], capture_output=True, text=True,
                              timeout=180, env=env)
        assert done.returncode == 0, done.stderr
        counts.append(done.stdout.split())
    assert list(tmp_path.rglob("*.nbi")), "nothing was cached"
    assert counts[0] == ["0", "1"] and counts[1] == ["1", "0"], counts  # compiled, then loaded
