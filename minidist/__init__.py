"""minidist: distributed machine learning systems, built from scratch.

    import minidist as md
    x = md.Tensor(array, requires_grad=True)
    md.nn.MLP([64, 128, 10]); md.optim.Adam(...); md.comm.allreduce(...); md.launch(...)

The autograd core is imported at once; the other layers load on first use,
so ``import minidist`` stays quick and never starts MPI.
"""

from importlib import import_module
from typing import Any

from minidist.autograd import (
    Function,
    Tensor,
    checkpoint,
    concatenate,
    gradcheck,
    no_grad,
    stack,
)
from minidist.backend import get_device, set_device

__version__ = "0.1.0"

_SUBPACKAGES = {
    "autograd", "backend", "nn", "optim", "data", "models", "comm", "parallel", "glove",
}


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return import_module(f"minidist.{name}")
    if name == "launch":
        return import_module("minidist.comm.transport.launch").launch
    raise AttributeError(f"module 'minidist' has no attribute {name!r}")


__all__ = [
    "Tensor", "Function", "no_grad", "gradcheck", "checkpoint", "concatenate", "stack",
    "set_device", "get_device", "launch", *sorted(_SUBPACKAGES),
]
