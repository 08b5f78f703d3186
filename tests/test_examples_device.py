"""The parallel examples take ``--device``: on the strict stand-in (everywhere) and on the
GPU (where one is) they give the CPU's result; ``--device cuda`` with no GPU is a usage
error naming the problem. Device-agnostic: ``MINIDIST_DEVICE=strict pytest`` runs it too
(DEVICE_FILES). The MLP example's own device tests are in test_mlp_example.py."""

from __future__ import annotations

import numpy as np
import pytest

import minidist as md
from minidist import backend
from minidist.examples import moe, parallel_3d, pipeline, tensor_parallel, zero

DEVICES = ["strict"] + (["cuda"] if backend.gpu_available() else [])
# The strict device computes with numpy: equal to the bit. A GPU rounds its reductions and
# matrix products in its own order: float32 (zero, moe, pipeline) to 1e-4 relative after an
# epoch, float64 (the transformer's examples) to 1e-9.
RTOL32 = {"strict": 0.0, "cuda": 1e-4}
RTOL64 = {"strict": 0.0, "cuda": 1e-9}


@pytest.fixture(autouse=True)
def restore_device():
    previous = backend.get_device()
    yield
    backend.set_device(previous)


def on_both(fn):
    """``fn()`` on the CPU, then on each device: {device: result}."""
    results = {}
    for device in ("cpu", *DEVICES):
        backend.set_device(device)
        results[device] = fn()
    return results


def zero_weights(c):
    result = zero.train(c, stage=2, epochs=1, hidden=16, progress=False)
    return result["losses"], result["model"].state_dict()


def moe_losses(c):
    return moe.train(c, epochs=1, progress=False)["losses"]


@pytest.mark.timeout(60)
def test_zero_on_two_ranks_of_a_device_equals_the_cpu():
    runs = on_both(lambda: md.launch(zero_weights, 2, backend="local", timeout=50))
    for device in DEVICES:
        for (losses, state), (cpu_losses, cpu_state) in zip(runs[device], runs["cpu"],
                                                            strict=True):
            np.testing.assert_allclose(losses, cpu_losses, rtol=RTOL32[device])
            for name, value in cpu_state.items():
                np.testing.assert_allclose(state[name], value, rtol=RTOL32[device],
                                           atol=RTOL32[device] * 1e-2, err_msg=name)


@pytest.mark.timeout(60)
def test_moe_on_two_ranks_of_a_device_equals_the_cpu():
    runs = on_both(lambda: md.launch(moe_losses, 2, backend="local", timeout=50))
    for device in DEVICES:
        np.testing.assert_allclose(runs[device], runs["cpu"], rtol=RTOL32[device])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("device", DEVICES)
def test_pipeline_on_a_device_equals_the_cpu(device, capsys):
    argv = ["--epochs", "1", "--ranks", "2", "--hidden", "32", "--micro-batches", "4"]
    cpu = pipeline.main([*argv, "--device", "cpu"])
    result = pipeline.main([*argv, "--device", device])
    assert f"s of training on {device})" in capsys.readouterr().out
    np.testing.assert_allclose(result["losses"], cpu["losses"], rtol=RTOL32[device])
    assert result["accuracy"] == pytest.approx(cpu["accuracy"], abs=RTOL32[device] * 10)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("example, argv", [
    (tensor_parallel, ["--steps", "3", "--ranks", "2"]),
    (parallel_3d, ["--steps", "2", "--ranks", "4", "--dp", "2", "--pp", "2"]),
], ids=["tensor_parallel", "parallel_3d"])
def test_transformer_examples_on_a_device_equal_the_cpu(example, argv, device, capsys):
    cpu = example.main([*argv, "--device", "cpu"])
    result = example.main([*argv, "--device", device])
    assert f"(float64 on {device})" in capsys.readouterr().out
    np.testing.assert_allclose(result["losses"], cpu["losses"], rtol=RTOL64[device])


@pytest.mark.skipif(backend.gpu_available(), reason="a GPU is here: --device cuda runs")
@pytest.mark.parametrize("example", [zero, moe, pipeline, tensor_parallel, parallel_3d],
                         ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_cuda_without_a_gpu_is_a_clear_usage_error(example, capsys):
    with pytest.raises(SystemExit) as exited:
        example.main(["--device", "cuda"])
    assert exited.value.code == 2
    assert "--device cuda: device 'cuda' was requested but" in capsys.readouterr().err
