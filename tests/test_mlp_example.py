"""The MLP example trains the course's model to its promised accuracy on the digits; on a
device (the strict stand-in everywhere, the GPU where one is) the single-process and
data-parallel examples give the CPU's result. Device-agnostic (DEVICE_FILES)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi_example import run_under_mpiexec

import minidist as md
from minidist import backend
from minidist.examples import mlp as example
from minidist.examples import mlp_ddp

DEVICES = ["strict"] + (["cuda"] if backend.gpu_available() else [])
# float64: the strict device computes with numpy, equal to the bit; a GPU's reductions and
# matrix products add in their own order, so its losses may differ in the last bits: 1e-9.
RTOL = {"strict": 0.0, "cuda": 1e-9}
QUICK = dict(epochs=2, hidden=32, progress=False, dtype=np.float64)
MPIEXEC = Path(sys.executable).parent / "mpiexec"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


@pytest.fixture(autouse=True)
def restore_device():
    previous = backend.get_device()
    yield
    backend.set_device(previous)


def weights(model) -> dict[str, np.ndarray]:
    return {name: backend.to_numpy(p.data) for name, p in model.named_parameters()}


@pytest.mark.timeout(60)
def test_default_run_reaches_97_percent_and_is_repeatable():
    first = example.train(seed=0, progress=False)
    assert first["accuracy"] >= 0.97
    assert len(first["losses"]) == 20
    assert first["losses"][-1] < first["losses"][0] / 10
    again = example.train(epochs=3, seed=0, progress=False)
    np.testing.assert_array_equal(again["losses"], first["losses"][:3])


@pytest.mark.timeout(60)
def test_sgd_learns_too():
    result = example.train(epochs=5, optimizer="sgd", lr=0.05, hidden=64, progress=False)
    assert result["accuracy"] >= 0.9
    assert result["losses"] == sorted(result["losses"], reverse=True)


@pytest.mark.timeout(60)
def test_command_line_prints_losses_and_accuracy():
    run = subprocess.run(
        [sys.executable, "-m", "minidist.examples.mlp", "--epochs", "2", "--batch-size", "64",
         "--optimizer", "adam", "--lr", "0.01", "--hidden", "32", "--seed", "1"],
        capture_output=True, text=True, timeout=50, env=ENV)
    assert run.returncode == 0, run.stderr
    output = run.stdout + run.stderr
    assert "epoch   1  train loss" in output and "epoch   2  train loss" in output
    assert "test accuracy" in output


def test_unknown_optimizer_is_an_error():
    with pytest.raises(ValueError, match="optimizer"):
        example.make_optimizer("rmsprop", [], 0.1)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("device", DEVICES)
def test_training_on_a_device_equals_the_cpu(device):
    backend.set_device("cpu")
    expected = example.train(**QUICK)
    backend.set_device(device)
    result = example.train(**QUICK)
    assert all(backend.on_device(p.data) for p in result["model"].parameters())
    np.testing.assert_allclose(result["losses"], expected["losses"], rtol=RTOL[device])
    assert result["accuracy"] == expected["accuracy"]
    for name, value in weights(expected["model"]).items():
        np.testing.assert_allclose(weights(result["model"])[name], value, rtol=RTOL[device],
                                   atol=RTOL[device] * 1e-3, err_msg=name)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("device", DEVICES)
def test_data_parallel_on_a_device_equals_the_cpu(device):
    def fn(c):
        result = mlp_ddp.train(c, **QUICK)
        return result["losses"], result["accuracy"], weights(result["model"])

    backend.set_device("cpu")
    expected = md.launch(fn, 2, backend="local", timeout=50)[0]
    backend.set_device(device)  # the in-process ranks share the process's device
    for losses, acc, state in md.launch(fn, 2, backend="local", timeout=50):
        np.testing.assert_allclose(losses, expected[0], rtol=RTOL[device])
        assert acc == expected[1]
        for name, value in expected[2].items():
            np.testing.assert_allclose(state[name], value, rtol=RTOL[device],
                                       atol=RTOL[device] * 1e-3, err_msg=name)


@pytest.mark.timeout(60)
def test_command_line_takes_the_device():
    run = subprocess.run(
        [sys.executable, "-m", "minidist.examples.mlp", "--epochs", "1", "--hidden", "16",
         "--device", "strict"], capture_output=True, text=True, timeout=50, env=ENV)
    assert run.returncode == 0, run.stderr
    assert "after 1 epochs on strict" in run.stdout


@pytest.mark.timeout(60)
@pytest.mark.skipif(backend.gpu_available(), reason="a GPU is here: --device cuda runs")
@pytest.mark.parametrize("module", ["minidist.examples.mlp", "minidist.examples.mlp_ddp"])
def test_cuda_without_a_gpu_is_a_clear_usage_error(module):
    run = subprocess.run([sys.executable, "-m", module, "--device", "cuda"],
                         capture_output=True, text=True, timeout=50, env=ENV)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "--device cuda: device 'cuda' was requested but" in run.stderr


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no {MPIEXEC}")
def test_two_mpi_ranks_on_a_device_train_as_on_the_cpu():
    """On a GPU the two ranks share it, each process its own context."""
    args = ["--epochs", "2", "--hidden", "32"]
    outputs = {device: run_under_mpiexec(2, "minidist.examples.mlp_ddp",
                                         [*args, "--device", device], timeout=100)
               for device in ("cpu", *DEVICES)}
    for device, run in outputs.items():
        assert run.returncode == 0, run.stderr
        assert f"on 2 ranks ({device})" in run.stdout
    accuracy = [run.stdout.split("test accuracy ")[1].split()[0] for run in outputs.values()]
    assert accuracy[0] == accuracy[1]
