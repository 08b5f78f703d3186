"""Check a backward pass against finite differences.

For each input x that requires a gradient and each element x_k,
    dL/dx_k ≈ (L(x + ε e_k) - L(x - ε e_k)) / 2ε        (central differences)
in float64, where L is the function's output contracted with a fixed random
weight (so non-scalar outputs are checked along a random direction).
Cost: two forward passes per input element — use small inputs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from minidist.autograd.tensor import Tensor
from minidist.backend import to_numpy


def gradcheck(fn: Callable[..., Tensor], *inputs: Tensor, eps: float = 1e-6,
              atol: float = 1e-5, rtol: float = 1e-4, seed: int = 0) -> bool:
    """True when ``fn``'s backward matches central differences; AssertionError naming
    the input and element otherwise. Floating-point inputs are copied to float64 first;
    the others (integer ids, masks) are passed as they are."""
    inputs64 = [
        # C order: the nudges below go through a flat view of each input
        Tensor(x.numpy().astype(np.float64, order="C"), requires_grad=x.requires_grad)
        if isinstance(x, Tensor) and x.dtype.kind == "f" else x
        for x in inputs
    ]
    out = fn(*inputs64)
    weight = np.random.default_rng(seed).standard_normal(out.shape)
    weight_on_device = Tensor(weight)  # the same weight, where out lives

    def objective() -> float:
        return float(np.sum(to_numpy(fn(*inputs64).data) * weight))

    (out * weight_on_device).sum().backward()
    for number, x in enumerate(inputs64):
        if not isinstance(x, Tensor) or not x.requires_grad:
            continue
        analytic = np.zeros(x.shape) if x.grad is None else to_numpy(x.grad)
        flat = x.data.reshape(-1)  # a view: nudging it nudges x
        for k in range(flat.size):
            original = flat[k].copy()  # on a GPU flat[k] is a view, not a number
            flat[k] = original + eps
            above = objective()
            flat[k] = original - eps
            below = objective()
            flat[k] = original
            numeric = (above - below) / (2 * eps)
            got = analytic.reshape(-1)[k]
            if not abs(got - numeric) <= atol + rtol * abs(numeric):
                where = np.unravel_index(k, x.shape) if x.shape else ()
                raise AssertionError(
                    f"gradcheck: input {number} at index {tuple(int(i) for i in where)}: "
                    f"backward gives {got:.6g}, finite differences {numeric:.6g}"
                )
    return True
