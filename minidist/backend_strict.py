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
# module functions that create device arrays from host data (cupy copies it to the device)
_CREATION = {
    "array", "asarray", "ascontiguousarray", "asfortranarray", "zeros", "ones", "empty",
    "full", "arange", "linspace", "eye", "identity", "tri", "frombuffer", "fromiter",
    "zeros_like", "ones_like", "empty_like", "full_like",
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
