"""Reduction operators: the arithmetic a collective does when two messages meet.

An allreduce moves bytes *and* combines them. The combining step is always
the same small thing: ``acc = op(acc, incoming)``, element by element, in
place, so that no algorithm allocates a new array per step. Four operators
are enough for the course: ``"sum"`` (gradients), ``"max"``, ``"min"`` and
``"prod"``.

Not every dtype makes sense with every operator: a boolean "sum" is a
logical or in numpy, an object array would call Python per element, and
complex numbers have no order, so ``max``/``min`` of them means nothing.
:func:`check_reducible` refuses those with an error that names the dtype
and the operator, before any byte moves.

Cost: one pass over the ``N`` elements, ``gamma · N · itemsize`` seconds
in the α-β-γ model (γ = seconds per byte reduced).
"""

from __future__ import annotations

import numpy as np

REDUCTION_OPS = ("sum", "max", "min", "prod")

_NUMPY_UFUNC = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}

# Signed and unsigned integers and real floats reduce with every operator;
# complex numbers only with the ones that need no order.
_ORDERED_KINDS = ("i", "u", "f")
_UNORDERED_OK = {"c": ("sum", "prod")}


def check_reducible(arr: np.ndarray, op: str) -> None:
    """Raise a clear error unless ``op`` can reduce arrays of ``arr``'s dtype.

    Supported: every integer and real float dtype (float32, float64, int32 and
    int64 are the ones the course uses) with all four operators, and complex
    dtypes with ``"sum"`` and ``"prod"``.
    """
    if op not in _NUMPY_UFUNC:
        raise ValueError(f"unknown reduction op {op!r}; choose one of {REDUCTION_OPS}")
    dtype = np.asarray(arr).dtype
    if dtype.kind in _ORDERED_KINDS:
        return
    if op in _UNORDERED_OK.get(dtype.kind, ()):
        return
    if dtype.kind == "c":
        reason = "complex numbers have no order"
    elif dtype.kind == "b":
        reason = "use an integer dtype (numpy treats bool arithmetic as logic)"
    else:
        reason = "only integer, float and (for sum/prod) complex arrays reduce"
    raise TypeError(f"cannot reduce dtype {dtype} with op {op!r}: {reason}")


def apply_op(op: str, acc: np.ndarray, incoming: np.ndarray) -> None:
    """``acc = op(acc, incoming)`` element by element, written into ``acc``.

    Both arrays must have the same shape and dtype (what two ranks of one
    collective hold). Cost: N element operations, no allocation.
    """
    check_reducible(acc, op)
    if acc.shape != incoming.shape or acc.dtype != incoming.dtype:
        raise ValueError(
            f"{op}: cannot combine {incoming.dtype}{list(incoming.shape)} "
            f"into {acc.dtype}{list(acc.shape)}"
        )
    _NUMPY_UFUNC[op](acc, incoming, out=acc)
