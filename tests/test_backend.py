"""The array-module choice: numpy by default, cupy only when asked for and present."""

import numpy as np
import pytest

import minidist as md
from minidist import backend

gpu = pytest.mark.skipif(not backend.gpu_available(), reason="needs a CUDA GPU with cupy")


def test_cpu_is_the_default():
    assert backend.get_device() == "cpu"
    assert backend.xp() is np
    assert isinstance(md.Tensor([1.0, 2.0]).data, np.ndarray)


def test_unknown_device_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        md.set_device("tpu")


@pytest.mark.skipif(backend.gpu_available(), reason="this machine has a GPU")
def test_asking_for_a_missing_gpu_is_a_clear_error():
    with pytest.raises(RuntimeError, match="device 'cuda' was requested"):
        md.set_device("cuda")
    assert backend.get_device() == "cpu"


@pytest.mark.gpu
@gpu
def test_training_step_on_the_gpu_matches_the_cpu():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((8, 5)), rng.standard_normal((5, 3))
    cpu_w = md.Tensor(w, requires_grad=True)
    (md.Tensor(x) @ cpu_w).tanh().log_softmax().sum().backward()
    md.set_device("cuda")
    try:
        gpu_w = md.Tensor(w, requires_grad=True)
        (md.Tensor(x) @ gpu_w).tanh().log_softmax().sum().backward()
        assert type(gpu_w.data).__module__.startswith("cupy")
        np.testing.assert_allclose(backend.to_numpy(gpu_w.grad), cpu_w.grad, rtol=1e-10)
    finally:
        md.set_device("cpu")
