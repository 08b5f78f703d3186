"""The strict device's array: numpy data that refuses what cupy refuses.

:class:`StrictArray` and what it rests on: the attributes and methods it
lets through, the unwrapping of its data on the way into numpy and the
wrapping of numpy's results on the way out (where a mix with a numpy array
is refused), the owner of each piece of memory (``base``), cupy's ``Flags``,
and its operators. What it refuses, and why, is ``backend_strict.py``'s
docstring; that module builds the array module (``xp``) on this one.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

_IMPLICIT = ("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to "
             "construct a NumPy array explicitly (strict device: cupy refuses this).")
# the attributes and methods of cupy arrays that numpy arrays have too
_PLAIN = {"shape", "dtype", "ndim", "size", "nbytes", "itemsize", "strides", "T", "real", "imag"}
_METHODS = {
    "all", "any", "argmax", "argmin", "argpartition", "argsort", "astype", "choose", "clip",
    "compress", "conj", "conjugate", "copy", "cumprod", "cumsum", "diagonal", "dot", "fill",
    "flatten", "item", "max", "mean", "min", "nonzero", "partition", "prod", "put", "ravel",
    "repeat", "reshape", "round", "searchsorted", "sort", "squeeze", "std", "sum", "swapaxes",
    "take", "tobytes", "tolist", "trace", "transpose", "var", "view",
}


def _mixed(where: str, obj: Any) -> TypeError:
    return TypeError(f"{where}: a {type(obj).__module__}.{type(obj).__name__} mixed with "
                     "strict-device arrays (cupy refuses this: move it to the device with "
                     "backend.xp().asarray, or copy the device array to the host explicitly)")


def _unwrap(obj: Any, where: str, host_ok: bool = False) -> Any:
    """The numpy data under strict arrays (in lists, tuples and dicts too); a numpy array
    found here is a mix, refused unless ``host_ok`` (creation functions, indices)."""
    if isinstance(obj, StrictArray):
        return obj._a
    if isinstance(obj, np.ndarray):
        if host_ok:
            return obj
        raise _mixed(where, obj)
    if isinstance(obj, list | tuple):
        return type(obj)(_unwrap(o, where, host_ok) for o in obj)
    if isinstance(obj, dict):
        return {k: _unwrap(v, where, host_ok) for k, v in obj.items()}
    return obj


# the strict array that owns each piece of memory, so that ``view.base`` is that very object,
# as in cupy (code that checks ``x.base is y`` or keeps ``id(x.base)`` must see the same answer)
_OWNERS: weakref.WeakValueDictionary[int, StrictArray] = weakref.WeakValueDictionary()


def _owner(data: np.ndarray) -> StrictArray:
    owner = _OWNERS.get(id(data))
    if owner is None or owner._a is not data:
        owner = _OWNERS[id(data)] = StrictArray(data)
    return owner


def _wrap(obj: Any) -> Any:
    """Numpy results as strict arrays; a numpy scalar becomes a 0-d array, as in cupy."""
    if isinstance(obj, np.ndarray):
        return _owner(obj) if obj.base is None else StrictArray(obj)
    if isinstance(obj, np.generic):
        return StrictArray(np.asarray(obj))
    if isinstance(obj, list | tuple):
        return type(obj)(_wrap(o) for o in obj)
    return obj


def _is_array_input(obj: Any) -> bool:
    if isinstance(obj, StrictArray | int | float | complex | bool | np.generic):
        return True
    return isinstance(obj, list | tuple) and len(obj) > 0 and all(
        isinstance(o, StrictArray) for o in obj)


def _call(func: Any, where: str, args: tuple, kwargs: dict) -> Any:
    """``func`` on the numpy data under ``args``, refusing what cupy refuses; the
    result wrapped (the ``out=`` array itself when the result is written there)."""
    if args and not _is_array_input(args[0]):
        for obj in args[0] if isinstance(args[0], list | tuple) else (args[0],):
            if isinstance(obj, np.ndarray):
                raise _mixed(where, obj)
        raise TypeError(f"{where}: cupy takes device arrays, not {type(args[0]).__name__} "
                        "(make it an array with backend.xp().asarray first)")
    result = func(*_unwrap(args, where), **_unwrap(kwargs, where))
    outs = kwargs.get("out")
    outs = outs if isinstance(outs, tuple) else (outs,)  # numpy's protocol passes a tuple
    results = result if isinstance(result, tuple) else (result,)
    wrapped = tuple(o if isinstance(o, StrictArray) and r is o._a else _wrap(r)
                    for o, r in zip(outs + (None,) * len(results), results, strict=False))
    return wrapped if isinstance(result, tuple) else wrapped[0]


class Flags:
    """cupy's ``Flags``: three read-only facts, no ``writeable``."""

    __slots__ = ("c_contiguous", "f_contiguous", "owndata")

    def __init__(self, flags: Any):
        self.c_contiguous, self.f_contiguous, self.owndata = flags.c_contiguous, \
            flags.f_contiguous, flags.owndata

    def __getitem__(self, name: str) -> bool:
        return getattr(self, {"C_CONTIGUOUS": "c_contiguous", "F_CONTIGUOUS": "f_contiguous",
                              "OWNDATA": "owndata"}[name])


class StrictArray:
    """A "device" array: numpy data that will not become a numpy array implicitly."""

    __slots__ = ("_a", "__weakref__")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, data: np.ndarray):
        self._a = data

    # ---- what cupy refuses ---------------------------------------------------------------------
    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError(_IMPLICIT)

    def __getattr__(self, name: str) -> Any:
        if name in _PLAIN:
            return _wrap(getattr(self._a, name))  # shapes and dtypes pass, arrays are wrapped
        if name in _METHODS:
            method, where = getattr(self._a, name), f"ndarray.{name}"
            return lambda *args, **kwargs: _wrap(method(*_unwrap(args, where),
                                                        **_unwrap(kwargs, where)))
        raise AttributeError(f"strict device: cupy arrays have no attribute {name!r}")

    @property
    def base(self) -> StrictArray | None:
        """The array that owns this view's memory (None for an owner), as in cupy."""
        root = self._a.base
        while isinstance(root, np.ndarray) and root.base is not None:
            root = root.base
        return _owner(root) if isinstance(root, np.ndarray) else None

    @property
    def flags(self) -> Flags:
        return Flags(self._a.flags)

    # ---- explicit copies to the host -----------------------------------------------------------
    def get(self, out: np.ndarray | None = None) -> np.ndarray:
        """A numpy copy (cupy's device-to-host copy), into ``out`` if given."""
        if out is None:
            return self._a.copy()
        out[...] = self._a
        return out

    def __repr__(self) -> str:
        return repr(self._a)

    def __str__(self) -> str:
        return str(self._a)

    def __format__(self, spec: str) -> str:
        return format(self._a.item() if self._a.ndim == 0 else self._a, spec)

    def __reduce__(self) -> Any:
        return _wrap, (self._a.copy(),)

    # ---- numpy's protocols: numpy functions on device arrays dispatch here, as for cupy --------
    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        return _call(getattr(ufunc, method), f"numpy.{ufunc.__name__}", inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
        return _call(func, f"numpy.{func.__name__}", args, kwargs)

    # ---- python's protocols --------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._a)

    def __iter__(self) -> Any:
        return (_wrap(row) for row in self._a)

    def __bool__(self) -> bool:
        return bool(self._a)

    def __float__(self) -> float:
        return float(self._a)

    def __int__(self) -> int:
        return int(self._a)

    def __copy__(self, memo: dict | None = None) -> StrictArray:
        return _wrap(self._a.copy())

    __deepcopy__ = __copy__

    def __getitem__(self, index: Any) -> Any:
        index = _unwrap(index, "indexing", host_ok=True)  # cupy moves indices
        item = self._a[index]
        if isinstance(item, np.generic):  # cupy gives a 0-d view, which sees later writes
            item = self._a[(*(index if isinstance(index, tuple) else (index,)), ...)]
        return _wrap(item)

    def __setitem__(self, index: Any, value: Any) -> None:
        # cupy assigns device arrays and scalars; a host array or a list is refused (gh-2079)
        if isinstance(value, np.ndarray | list | tuple) and np.ndim(value) != 0:
            raise ValueError(f"strict device: cupy refuses to assign a host "
                             f"{type(value).__name__} to a device array (non-scalar "
                             "numpy.ndarray cannot be used for fill); move it with "
                             "backend.xp().asarray first")
        self._a[_unwrap(index, "indexing", host_ok=True)] = _unwrap(value, "assignment", True)


def _operator(ufunc: Any, reflected: bool = False, inplace: bool = False) -> Any:
    def method(self: StrictArray, other: Any) -> Any:
        if other is None or getattr(other, "__array_ufunc__", 0) is None:  # e.g. a Tensor
            return NotImplemented  # let it answer
        where = f"operator {ufunc.__name__}"
        if inplace:
            return _call(ufunc, where, (self, other), {"out": self})
        return _call(ufunc, where, (other, self) if reflected else (self, other), {})
    return method


for _name, _ufunc in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                      ("truediv", np.true_divide), ("floordiv", np.floor_divide),
                      ("mod", np.remainder), ("pow", np.power), ("matmul", np.matmul),
                      ("and", np.bitwise_and), ("or", np.bitwise_or), ("xor", np.bitwise_xor)]:
    setattr(StrictArray, f"__{_name}__", _operator(_ufunc))
    setattr(StrictArray, f"__r{_name}__", _operator(_ufunc, reflected=True))
    setattr(StrictArray, f"__i{_name}__", _operator(_ufunc, inplace=True))
for _name, _ufunc in [("eq", np.equal), ("ne", np.not_equal), ("lt", np.less),
                      ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal)]:
    setattr(StrictArray, f"__{_name}__", _operator(_ufunc))
for _name, _ufunc in [("neg", np.negative), ("pos", np.positive), ("abs", np.absolute),
                      ("invert", np.invert)]:
    setattr(StrictArray, f"__{_name}__",
            (lambda u: lambda self: _call(u, f"operator {u.__name__}", (self,), {}))(_ufunc))
