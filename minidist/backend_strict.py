"""Device ``"strict"``: a guard for CI that has no GPU. Not a device, and no
substitute for running on one.

``md.set_device("strict")`` (or ``MINIDIST_DEVICE=strict``) makes minidist
compute with numpy on the CPU, but through arrays that refuse what cupy
refuses, so that the suite catches, on any machine, the bugs that would only
show on a GPU:

- implicit conversion to numpy: ``np.asarray(x)``, ``np.array(x)``, the buffer
  protocol (``memoryview``, mpi4py's buffer methods) raise ``TypeError``, as
  cupy's ``__array__`` does; a host copy is explicit: ``x.get()``,
  ``xp.asnumpy(x)`` or ``backend.to_numpy(x)``;
- numpy arrays mixed into device computations: ``x + numpy_array``,
  ``xp.concatenate([x, numpy_array])``, ``xp.cumsum(a_list)`` raise ``TypeError``
  (python and numpy scalars mix freely, as with cupy); ``x[i] = numpy_array``
  or a list raises ``ValueError``; ``xp.asarray(numpy_array)`` is the explicit
  copy to the device (a copy: the device array never shares host memory);
- attributes cupy arrays lack: ``x.flags`` has only ``c_contiguous``,
  ``f_contiguous`` and ``owndata`` (no ``writeable``); ``x.ctypes``,
  ``x.__array_interface__``, ``x.setflags`` are absent, and so is ``x.data``
  (cupy's is a device pointer, not host memory);
- reductions return 0-d arrays, not numpy scalars, ``isinstance(x,
  np.ndarray)`` is False, and a view's ``base`` is the very array that owns
  the memory, as for cupy; one element, ``x[i]``, is a 0-d view, not a
  number: kept as a value, it changes when ``x[i]`` is written (``gradcheck``
  once kept one as the value to restore; on a GPU every finite difference
  came out half its size).

What it cannot catch: anything about real GPU memory, streams, kernels,
speed, float32 numerics on the GPU, or cupy functions that numpy has and
cupy lacks (it computes with numpy underneath). Only a run with
``MINIDIST_DEVICE=cuda`` on a GPU proves the GPU path.

The array itself is in ``backend_strict_array.py``; here, its module ``strict``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minidist.backend_strict_array import StrictArray, _call, _mixed, _unwrap, _wrap

# module functions that create device arrays from host data (cupy copies it to the device)
_CREATION = {
    "array", "asarray", "ascontiguousarray", "asfortranarray", "zeros", "ones", "empty",
    "full", "arange", "linspace", "eye", "identity", "tri", "frombuffer", "fromiter",
    "zeros_like", "ones_like", "empty_like", "full_like",
}


class _Ufunc:
    """``xp.add`` and friends: callable, with ``.at``, ``.reduce``, ``.outer`` ... as in cupy."""

    def __init__(self, ufunc: Any):
        self._ufunc = ufunc

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _call(self._ufunc, f"xp.{self._ufunc.__name__}", args, kwargs)

    def at(self, a: StrictArray, indices: Any, b: Any = None) -> None:
        if not isinstance(a, StrictArray):
            raise _mixed(f"xp.{self._ufunc.__name__}.at", a)
        rest = () if b is None else (_unwrap(b, f"xp.{self._ufunc.__name__}.at"),)
        self._ufunc.at(a._a, _unwrap(indices, "indexing", host_ok=True), *rest)

    def __getattr__(self, method: str) -> Any:
        where = f"xp.{self._ufunc.__name__}.{method}"
        return lambda *args, **kwargs: _call(getattr(self._ufunc, method), where, args, kwargs)


def _creation(func: Any) -> Any:
    def create(*args: Any, **kwargs: Any) -> StrictArray:
        result = np.asarray(func(*_unwrap(args, func.__name__, host_ok=True),
                                 **_unwrap(kwargs, func.__name__, host_ok=True)))
        if args and isinstance(args[0], np.ndarray) and np.may_share_memory(result, args[0]):
            result = result.copy()  # host data is copied to the device, never shared
        return _wrap(result)
    return create


class _Module:
    """The array module of device "strict": numpy's names, cupy's manners."""

    ndarray = StrictArray

    def __getattr__(self, name: str) -> Any:
        value = getattr(np, name)
        if isinstance(value, np.ufunc):
            value = _Ufunc(value)
        elif name in _CREATION:
            value = _creation(value)
        elif name == "einsum":  # the subscripts come first, then the arrays (as in cupy)
            value = lambda subscripts, *arrays, **kwargs: _call(  # noqa: E731
                lambda *a, **k: np.einsum(subscripts, *a, **k), "xp.einsum", arrays, kwargs)
        elif callable(value) and not isinstance(value, type) and name[0] != "_" and \
                name not in ("dtype", "finfo", "iinfo", "result_type", "promote_types",
                             "can_cast", "broadcast_shapes", "errstate", "shape", "ndim"):
            value = (lambda f: lambda *a, **k: _call(f, f"xp.{name}", a, k))(value)
        setattr(self, name, value)  # looked up once
        return value

    @staticmethod
    def asnumpy(array: Any) -> np.ndarray:
        """cupy.asnumpy: an explicit host copy."""
        return array.get() if isinstance(array, StrictArray) else np.asarray(array)


strict = _Module()
