"""Where initial weights come from, and how to make them reproducible.

Training starts from random weights; their scale matters. With fan-in
initialisation a layer with ``n`` inputs draws weights from
uniform(-1/sqrt(n), 1/sqrt(n)) (PyTorch's default for ``Linear``), so each
output starts with a variance that does not grow with the layer's width.

Every layer takes an ``rng`` argument:

- ``None`` (default): draw from this module's global generator, which
  ``manual_seed(seed)`` resets — seed once, build the model, get the same
  weights every run;
- an ``int``: a fresh ``numpy.random.default_rng(int)`` for this layer only;
- a ``numpy.random.Generator``: used as is (shared by the caller's layers).

Numbers are drawn on the host with numpy and then moved to the backend, so a
seed gives the same weights on CPU and GPU.
"""

from __future__ import annotations

import math

import numpy as np

from minidist import backend

_global_rng = np.random.default_rng(0)


def manual_seed(seed: int) -> None:
    """Reset the global generator used by layers built with ``rng=None``."""
    global _global_rng
    _global_rng = np.random.default_rng(seed)


def resolve_rng(rng: np.random.Generator | int | None) -> np.random.Generator:
    """Turn a layer's ``rng`` argument into a generator (see module docstring)."""
    if rng is None:
        return _global_rng
    if isinstance(rng, np.random.Generator):
        return rng
    return np.random.default_rng(rng)


def uniform_fan_in(shape: tuple[int, ...], fan_in: int, rng: np.random.Generator,
                   dtype=np.float32):
    """Backend array of ``shape`` drawn from uniform(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    values = rng.uniform(-bound, bound, size=shape).astype(dtype)
    return backend.xp().asarray(values)


def normal(shape: tuple[int, ...], rng: np.random.Generator, std: float = 1.0,
           dtype=np.float32):
    """Backend array of ``shape`` drawn from a normal distribution N(0, std^2)."""
    values = rng.normal(0.0, std, size=shape).astype(dtype)
    return backend.xp().asarray(values)
