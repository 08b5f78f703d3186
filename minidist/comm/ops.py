"""Reduction operators and dtypes: what a collective supports, listed once.

An allreduce moves bytes *and* combines them. The combining step is always
the same small thing: ``acc = op(acc, incoming)``, element by element, in
place, so that no algorithm allocates a new array per step. Four operators
are enough for the course: ``"sum"`` (gradients), ``"max"``, ``"min"`` and
``"prod"``; four dtypes: float32, float64, int32 and int64.

This module is the one registry of both: :data:`OPS` and :data:`DTYPES`,
with the small integer codes the agreement check sends for them
(``collectives/agreement.py``; code 0 means "not supported", so that a rank
with a bad argument still takes part in the check and every rank raises).

The local step itself (:func:`apply_op`) accepts more: every integer and
real float dtype with all four operators, and complex ones with ``"sum"``
and ``"prod"``. A boolean "sum" is a logical or in numpy, an object array
would call Python per element, and complex numbers have no order, so
``max``/``min`` of them means nothing: :func:`check_reducible` refuses
those with an error that names the dtype and the operator.

Cost: one pass over the ``N`` elements, ``gamma · N · itemsize`` seconds
in the α-β-γ model (γ = seconds per byte reduced).
"""

from __future__ import annotations

import numpy as np

OPS = ("sum", "max", "min", "prod")
REDUCTION_OPS = OPS  # the name ``comm.REDUCTION_OPS`` exports
DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64))

UFUNCS = dict(zip(OPS, (np.add, np.maximum, np.minimum, np.multiply), strict=True))

# The agreement check's codes: 1, 2, ... in the order above; 0 for anything else.
OP_CODES = {op: k + 1 for k, op in enumerate(OPS)}
DTYPE_CODES = {dtype: k + 1 for k, dtype in enumerate(DTYPES)}

# Signed and unsigned integers and real floats reduce with every operator;
# complex numbers only with the ones that need no order.
_ORDERED_KINDS = ("i", "u", "f")
_UNORDERED_OK = {"c": ("sum", "prod")}


def check_reducible(arr: np.ndarray, op: str) -> None:
    """Raise a clear error unless ``op`` can reduce arrays of ``arr``'s dtype.

    Supported: every integer and real float dtype with all four operators
    (the collectives take :data:`DTYPES`), and complex dtypes with ``"sum"``
    and ``"prod"``.
    """
    if op not in UFUNCS:
        raise ValueError(f"unknown reduction op {op!r}; choose one of {OPS}")
    dtype = arr.dtype if hasattr(arr, "dtype") else np.asarray(arr).dtype  # (a device's too)
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
    reduce_into(op, acc, incoming)


def reduce_into(op: str, acc: np.ndarray, incoming: np.ndarray,
                incoming_first: bool = False) -> None:
    """:func:`apply_op` for the inner loop of a collective: no dtype check.

    A collective checks its op and dtype once, before any data moves
    (``agreement.py``); then every step of its schedule only needs the
    ufunc. Checking again at each step would cost more than adding a short
    vector, so here only the shapes are compared, which is nearly free.
    ``incoming_first=True``: ``acc = op(incoming, acc)``, for the ops whose
    result depends on the operand order (``max(+0.0, -0.0)``, NaN payloads).
    """
    if acc.shape != incoming.shape or acc.dtype != incoming.dtype:
        raise ValueError(
            f"{op}: cannot combine {incoming.dtype}{list(incoming.shape)} "
            f"into {acc.dtype}{list(acc.shape)}"
        )
    ufunc = UFUNCS.get(op)
    if ufunc is None:
        check_reducible(acc, op)  # raises: unknown op
    if incoming_first:
        ufunc(incoming, acc, out=acc)
    elif acc.size == 1:  # numpy adds one element written over its first operand as if the
        acc[...] = ufunc(acc, incoming)  # operands were swapped: the other NaN's payload
    else:
        ufunc(acc, incoming, out=acc)
