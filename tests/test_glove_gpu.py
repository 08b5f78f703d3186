"""glove.c's record loop as a CUDA kernel (``glove/cuda_records.py``), against the CPU's loop
on the same records from the same start. GPU only: skipped without one."""

from __future__ import annotations

import numpy as np
import pytest

from minidist import backend, glove
from minidist.data.cooccur import zipf_cooccurrence
from minidist.glove import cuda_records

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not backend.gpu_available(), reason="needs a CUDA GPU with cupy")]
VOCAB = 60
OPTIONS = (glove.ETA, 10.0, glove.ALPHA, glove.GRAD_CLIP)  # eta, x_max, alpha, clip


def records(draws: int = 900, vocab: int = VOCAB) -> np.ndarray:
    return glove.to_records(*zipf_cooccurrence(vocab, draws, seed=2))


def start(dim: int, vocab: int = VOCAB) -> glove.GloVe:
    """glove.c's start, on the host (whatever the current device)."""
    return glove.GloVe.create(vocab, dim, seed=0).to(np)


@pytest.mark.parametrize("dim", [5, 40, 100])  # a lane holds 0-1, 1-2 and 3-4 components
def test_one_warp_takes_the_records_in_order_as_the_cpu_loop_does(dim):
    import cupy

    cpu, data = start(dim), records()
    gpu = cpu.to(cupy)
    on_gpu = cuda_records.upload(data, VOCAB, cupy)
    for _ in range(3):
        cpu_cost, cpu_skipped, _ = glove.sgd_records(*cpu.arrays().values(), data, *OPTIONS)
        cost, skipped = cuda_records.epoch(tuple(gpu.arrays().values()), on_gpu, len(data),
                                           OPTIONS, warps=1)
        # the same sums in another order, and the GPU's own log and pow: last bits only
        np.testing.assert_allclose(float(cost), cpu_cost, rtol=1e-10)
        assert int(skipped) == cpu_skipped
    for name, array in gpu.arrays().items():
        np.testing.assert_allclose(backend.to_numpy(array), cpu.arrays()[name], rtol=1e-9,
                                   err_msg=name)


def test_warps_racing_as_hogwild_workers_train_as_the_cpu_loop_does(tmp_path):
    import cupy

    from minidist.bench.glove import prepare

    corpus = prepare(None, tmp_path, min_count=5, window=10)  # the benchmark's, shuffled once
    data = glove.RecordFile(tmp_path / "records.bin").read()
    cpu = start(50, corpus["words"])
    gpu = cpu.to(cupy)
    expected = glove.train_records(cpu, data, epochs=3, x_max=10.0).costs
    got = glove.train_records(gpu, data, epochs=3, x_max=10.0).costs  # default_warps: 88
    print("costs per epoch, CPU loop", expected, "GPU warps", got)
    # racing warps read stale rows and lose steps, most in the first epochs, when the
    # steps are large: the cost falls every epoch and ends within a few percent
    assert np.all(np.diff(got) < 0)
    assert abs(got[-1] / expected[-1] - 1) < 0.05


def test_bad_input_on_the_gpu_is_a_clear_error():
    import cupy

    model = start(8).to(cupy)
    with pytest.raises(ValueError, match=r"name a word outside 1\.\.60 in word2"):
        glove.train_records(model, glove.to_records([0], [VOCAB], [2.0]))
    with pytest.raises(ValueError, match="need threads >= 1"):
        glove.train_records(model, records(), threads=0)
    wide = start(cuda_records.MAX_DIM + 1).to(cupy)
    with pytest.raises(ValueError, match="d <= 1024"):
        glove.train_records(wide, records())
