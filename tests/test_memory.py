"""Memory stays flat over training: backward frees the graph it walked.

A leak here would grow every step: a graph kept alive by a stray reference
holds every intermediate activation of the step that built it. We count the
Tensor objects alive, and the bytes the arrays hold, after 20 and after 200
training steps: numpy's (tracemalloc sees its allocations) or, on a GPU,
those cupy's memory pool has handed out (tracemalloc sees only the host).
"""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np

import minidist as md
from minidist import backend
from minidist.nn.functional import cross_entropy
from minidist.optim import Adam


def live_tensors() -> int:
    gc.collect()
    return sum(issubclass(type(obj), md.Tensor) for obj in gc.get_objects())


def array_bytes() -> int:
    """The bytes the current device's arrays hold (tracemalloc must be on)."""
    if backend.get_device() == "cuda":
        import cupy
        return cupy.get_default_memory_pool().used_bytes()
    return tracemalloc.get_traced_memory()[0]


def make_training(keep_losses: list | None = None):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 20)).astype(np.float32)
    y = rng.integers(0, 5, size=32)
    model = md.nn.MLP([20, 64, 64, 5], rng=0)
    opt = Adam(model.parameters(), lr=1e-3)

    def train(steps: int) -> None:
        for _ in range(steps):
            opt.zero_grad()
            loss = cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if keep_losses is not None:
                keep_losses.append(loss)

    return train


def test_live_tensors_and_bytes_stay_flat():
    tracemalloc.start()  # before the first step: the final gradients are in both counts
    try:
        train = make_training()
        train(20)
        after_20, bytes_20 = live_tensors(), array_bytes()
        train(180)
        after_200, bytes_200 = live_tensors(), array_bytes()
    finally:
        tracemalloc.stop()
    assert after_200 == after_20
    # one step's activations and gradients are ~40 KB; 180 leaked steps would be MBs
    assert abs(bytes_200 - bytes_20) < 10_000


def test_keeping_the_loss_keeps_only_the_loss():
    kept: list = []
    train = make_training(kept)
    train(20)
    after_20 = live_tensors()
    train(180)
    # each kept loss is one tensor; its graph was freed by backward
    assert live_tensors() - after_20 == 180
    assert all(loss._ctx is None for loss in kept)
