"""The one place that decides which array module minidist computes with.

numpy by default; cupy (the same API on an NVIDIA GPU) when the user asks for
the GPU with ``md.set_device("cuda")`` or ``MINIDIST_DEVICE=cuda`` and one is
present. Every other module asks this one for ``xp()`` (the module) or
``xp_of(array)`` (the module an array belongs to); nothing else imports cupy.
Host copies are explicit: ``to_numpy(array)`` where the code prints, plots,
saves or communicates, never ``np.asarray`` of tensor data.

A third choice, ``"strict"``, is a guard for CI and not a device: numpy on the
CPU behind arrays that refuse what cupy refuses (implicit conversion to numpy,
numpy arrays mixed into device computations, attributes cupy arrays lack), so
that a machine with no GPU catches those bugs (``backend_strict.py``). It is
no substitute for running on a GPU.
"""

from __future__ import annotations

import os
from types import ModuleType

import numpy as np

from minidist import backend_strict

_DEVICES = ("cpu", "cuda", "strict")
_device: str | None = None  # resolved lazily so that importing minidist never touches a GPU


def _load_cupy() -> ModuleType:
    """Import cupy and check that a GPU is really there; a clear error otherwise."""
    try:
        import cupy
    except ImportError as exc:
        raise RuntimeError(
            "device 'cuda' was requested but cupy is not installed: "
            "pip install 'minidist[gpu]' (needs an NVIDIA GPU and driver)"
        ) from exc
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # cupy raises its own CUDARuntimeError when no driver is loaded
        raise RuntimeError(f"device 'cuda' was requested but no GPU is usable: {exc}") from exc
    if count == 0:
        raise RuntimeError("device 'cuda' was requested but no GPU is present")
    return cupy


def set_device(name: str) -> None:
    """Choose where new tensors live: ``"cpu"`` (numpy) or ``"cuda"`` (cupy).

    ``"strict"`` is the CI guard described above: numpy arrays with cupy's refusals.
    """
    global _device
    if name not in _DEVICES:
        raise ValueError(f"unknown device {name!r}: expected one of {_DEVICES}")
    if name == "cuda":
        _load_cupy()
    _device = name


def get_device() -> str:
    """The current device; read from ``MINIDIST_DEVICE`` the first time (default ``"cpu"``)."""
    if _device is None:
        set_device(os.environ.get("MINIDIST_DEVICE", "cpu").strip().lower() or "cpu")
    return _device  # type: ignore[return-value]


def xp() -> ModuleType:
    """The array module of the current device: numpy or cupy (or the strict guard's)."""
    device = get_device()
    if device == "strict":
        return backend_strict.strict  # type: ignore[return-value]
    return _load_cupy() if device == "cuda" else np


def xp_of(array: object) -> ModuleType:
    """The array module an array belongs to (numpy for numpy arrays and scalars)."""
    if isinstance(array, np.ndarray | np.generic | int | float | bool):
        return np
    if isinstance(array, backend_strict.StrictArray):
        return backend_strict.strict  # type: ignore[return-value]
    return _load_cupy()


def on_device(array: object) -> bool:
    """True for a device array (cupy's, or the strict guard's): one that reaches the
    host only through an explicit copy (``to_numpy``)."""
    kind = type(array)
    if kind is np.ndarray:  # the common case, asked on every collective's call: one test
        return False
    return issubclass(kind, backend_strict.StrictArray) or kind.__module__.startswith("cupy")


def on_gpu(array: object) -> bool:
    """True for a cupy array: one in a GPU's memory (the strict guard's arrays are not)."""
    return type(array).__module__.startswith("cupy")


def to_numpy(array: object, out: np.ndarray | None = None) -> np.ndarray:
    """A host (numpy) copy or view of any array, for printing, plotting, saving and sending.

    ``out``: a host buffer (e.g. ``host_empty``'s) that a device array is copied into."""
    if isinstance(array, np.ndarray):
        return array
    if hasattr(array, "get"):  # a cupy (or strict) array: the one device-to-host copy
        return array.get() if out is None else array.get(out=out)
    return np.asarray(array)


def require_cpu(what: str) -> None:
    """Refuse, in words, to build ``what`` (a trainer whose ranks exchange host arrays: the
    parameter server, FedAvg) on a device chosen for new tensors; the same on every rank."""
    if get_device() != "cpu":
        raise ValueError(f"{what} runs on the CPU (its servers and workers exchange host "
                         f"arrays), and the device for new tensors is {get_device()!r}: run "
                         f"it with MINIDIST_DEVICE=cpu, or md.set_device('cpu') first")


def host_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A host buffer to stage device data through: pinned (page-locked) memory from
    cupy's pool when computing on a GPU, so copies to and from it run at the bus's
    full speed; plain numpy memory otherwise."""
    if get_device() == "cuda":
        import cupyx
        return cupyx.empty_pinned(shape, dtype)
    return np.empty(shape, dtype)


def gpu_available() -> bool:
    """True when cupy imports and sees at least one GPU (used to skip GPU tests)."""
    try:
        _load_cupy()
    except RuntimeError:
        return False
    return True
