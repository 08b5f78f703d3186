"""GloVe's mini-batch trainer on a device, against the CPU on the same data: on the strict
device (the CI guard: numpy behind cupy's refusals) everywhere, and on the GPU where one is.
The CPU-only trainers refuse a model on a device; the example and the benchmark take
``--device``. Device-agnostic: ``MINIDIST_DEVICE=strict pytest`` runs it too (DEVICE_FILES)."""

from __future__ import annotations

import numpy as np
import pytest

from minidist import backend, backend_strict, glove
from minidist.bench import glove as bench_glove
from minidist.data.cooccur import zipf_cooccurrence
from minidist.examples import glove as example

DEVICES = ["strict"] + (["cuda"] if backend.gpu_available() else [])
# float64 everywhere. The strict device computes with numpy: equal to the bit. A GPU adds a
# word's repeated rows as differences of one running sum (cupy's add.reduceat) and in its own
# order, so its tables may differ in the last bits, growing a little each step: 1e-9 relative.
RTOL = {"strict": 0.0, "cuda": 1e-9}
VOCAB, DIM = 40, 6


@pytest.fixture(autouse=True)
def restore_device():
    previous = backend.get_device()
    yield
    backend.set_device(previous)


@pytest.fixture(scope="module")
def counts():
    return zipf_cooccurrence(VOCAB, 600, seed=1)


def train_on(device: str, counts, epochs: int = 3, batch_size: int = 64):
    """Records and model made on ``device``, trained there: (model, records, costs)."""
    backend.set_device(device)
    records = glove.Records.from_counts(*counts)
    model = glove.GloVe.create(VOCAB, DIM, seed=0)
    costs = glove.train(model, records, epochs, batch_size, seed=2)
    costs.append(glove.train_epoch(model, records, np.random.default_rng(1), batch_size=32))
    return model, records, costs


def assert_same_model(model: glove.GloVe, expected: glove.GloVe, rtol: float) -> None:
    for name, array in model.arrays().items():
        np.testing.assert_allclose(backend.to_numpy(array), backend.to_numpy(
            expected.arrays()[name]), rtol=rtol, atol=rtol * 1e-3, err_msg=name)


@pytest.mark.parametrize("device", DEVICES)
def test_training_on_a_device_equals_the_cpu(device, counts):
    expected, cpu_records, expected_costs = train_on("cpu", counts)
    model, records, costs = train_on(device, counts)
    # the tables, their AdaGrad sums and the records stayed on the device
    for part in (model, records):
        assert all(backend.on_device(a) for a in part.arrays().values())
    assert all(isinstance(c, float) for c in costs)  # read back once an epoch
    np.testing.assert_allclose(costs, expected_costs, rtol=RTOL[device])
    assert_same_model(model, expected, RTOL[device])
    assert glove.loss(model, records) == pytest.approx(glove.loss(expected, cpu_records),
                                                       rel=RTOL[device])


def test_only_each_epochs_shuffle_crosses_to_the_device(counts, monkeypatch):
    backend.set_device("strict")
    model, records = glove.GloVe.create(VOCAB, DIM), glove.Records.from_counts(*counts)
    glove.train(model, records, 1, 64)  # AdaGrad's per-column rates: made once per device
    moved, asarray = [], backend_strict.strict.asarray

    def counted(data, *args, **kwargs):
        moved.append(type(data).__name__)
        return asarray(data, *args, **kwargs)

    monkeypatch.setattr(backend_strict.strict, "asarray", counted)
    glove.train(model, records, 3, 64, seed=5)
    assert moved == ["ndarray"] * 3  # an epoch's order; its batches are slices, already there


@pytest.mark.parametrize("device", DEVICES)
def test_host_records_move_once_to_the_models_device(device, counts):
    backend.set_device("cpu")
    host = glove.Records.from_counts(*counts)
    backend.set_device(device)
    xp = backend.xp()
    records = host.to(xp)
    assert records.to(xp).row is records.row  # already there: no copy
    assert all(backend.on_device(a) for a in records.arrays().values())
    for name, array in records.to(np).arrays().items():  # and back, a host copy
        np.testing.assert_array_equal(array, host.arrays()[name])
    model, other = glove.GloVe.create(VOCAB, DIM, seed=0), glove.GloVe.create(VOCAB, DIM, seed=0)
    glove.train(model, host, 2, 64, seed=3)      # host records, a device model: moved by fit
    glove.train(other, records, 2, 64, seed=3)
    assert_same_model(model, other, 0.0)


@pytest.mark.parametrize("device", DEVICES)
def test_cpu_only_trainers_refuse_a_model_on_a_device(device, counts):
    backend.set_device(device)
    model, records = glove.GloVe.create(VOCAB, DIM), glove.Records.from_counts(*counts)
    if device == "strict":  # a GPU runs the record loop as a kernel (test_glove_gpu.py)
        with pytest.raises(ValueError, match="train_records .* runs on the CPU only"):
            glove.train_records(model, glove.to_records([0], [1], [2.0]))
    with pytest.raises(ValueError, match="train_hogwild runs on the CPU only"):
        glove.train_hogwild(model, records)
    with pytest.raises(ValueError, match="sharded GloVe trainer runs on the CPU only"):
        glove.Sharded(comm=None).start(model)
    with pytest.raises(ValueError, match="sparse-DDP GloVe trainer runs on the CPU only"):
        glove.SparseDDP(comm=None).start(model)
    host = model.to(np)  # the documented host path: a copy, trained, moved back
    glove.train_records(host, glove.to_records([0], [1], [2.0]))
    assert backend.on_device(host.to(backend.xp()).word)


def test_example_trains_on_the_strict_device(tmp_path):
    rng = np.random.default_rng(0)
    words = [f"w{k}" for k in range(30)]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(rng.choice(words, 50)) for _ in range(60)))
    result = example.main(["--corpus", str(corpus), "--min-count", "1", "--window", "3",
                           "--dim", "4", "--epochs", "2", "--device", "strict",
                           "--no-progress"])
    assert all(backend.on_device(a) for a in result["model"].arrays().values())
    assert len(result["costs"]) == 2 and np.all(np.isfinite(result["costs"]))


def test_example_refuses_cpu_only_strategies_on_a_device(capsys):
    with pytest.raises(SystemExit):
        example.main(["--device", "strict", "--strategy", "hogwild"])
    assert "--strategy hogwild runs on the CPU only" in capsys.readouterr().err


@pytest.mark.skipif(backend.gpu_available(), reason="a GPU is here: --device cuda works")
@pytest.mark.parametrize("main", [example.main, bench_glove.main], ids=["example", "bench"])
def test_device_cuda_without_a_gpu_is_a_clear_error(main, capsys):
    with pytest.raises(SystemExit):
        main(["--device", "cuda"])
    assert "--device cuda: device 'cuda' was requested but" in capsys.readouterr().err
