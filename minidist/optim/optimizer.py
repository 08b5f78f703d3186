"""The optimiser loop shared by SGD, Adam and AdaGrad.

Training repeats four lines:

    opt.zero_grad()                          # forget last step's gradients
    loss = loss_fn(model(x), y)
    loss.backward()                          # fill p.grad for every parameter
    opt.step()                               # move every p against its gradient

An ``Optimizer`` holds the parameters in *groups* (each a dict with its own
hyper-parameters, e.g. a smaller ``lr`` for embeddings) and, per parameter,
a small *state* (momentum, Adam's moments...). ``step()`` visits every
parameter that has a gradient and calls the subclass's ``update``, which
changes ``p.data`` in place, so the model and every other reference to the
array see the new values. Parameters whose ``grad`` is None (frozen, or
unused this step) are skipped. Updates keep the parameter's dtype:
hyper-parameters are Python floats, which never upcast a float32 array.

SGD's and Adam's updates are Lab 1's answers (Tasks 9 and 10) written for one
parameter; they run on ``blocks`` of it, the one thing beneath them that makes
them fast (see ``blocks``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

from minidist import backend
from minidist.autograd import Tensor
from minidist.util.values import finite


class Optimizer:
    """Base class: parameter groups, per-parameter state, ``zero_grad``, ``step``."""

    lr_per_column = False  # whether ``lr`` may be an array (AdaGrad's: one rate per column)

    def __init__(self, params: Iterable[Tensor] | Iterable[dict], defaults: dict[str, Any]):
        self.defaults = dict(defaults)
        if isinstance(params, Tensor):  # list(p) would give its rows, which get no gradients
            raise TypeError("optimizer params must be an iterable of Tensors (or of parameter "
                            "groups), not a Tensor: pass [p]")
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.param_groups: list[dict[str, Any]] = []
        for group in groups:
            self.add_param_group(group)
        self.state: dict[int, dict[str, Any]] = {}  # id(param) -> that parameter's state

    def add_param_group(self, group: dict[str, Any]) -> None:
        """Add parameters with their own hyper-parameters (defaults fill the rest); a
        group's ``params`` may be one Tensor (as in PyTorch)."""
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        group = {**self.defaults, **group, "params": params}
        known = {id(p) for g in self.param_groups for p in g["params"]}
        for p in group["params"]:
            if not isinstance(p, Tensor) or not p.requires_grad:
                raise TypeError("optimizer parameters must be Tensors with requires_grad=True")
            if id(p) in known:
                raise ValueError("a parameter appears in more than one group")
            known.add(id(p))
        self.check_hyper(group, f"param_groups[{len(self.param_groups)}]: ")  # of its params
        self.param_groups.append(group)

    def parameters(self) -> list[Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    def zero_grad(self) -> None:
        """Set every parameter's ``grad`` to None (freeing it; the next backward refills)."""
        for p in self.parameters():
            p.grad = None

    def check_hyper(self, group: dict[str, Any], where: str, stepping: bool = False) -> None:
        """Refuse a hyper-parameter of ``group`` (``where``, e.g. "param_groups[0]: ", starts
        the message) that would train on, quietly, to NaN weights: a NaN or infinite rate,
        or one below 0. Subclasses add their own hyper-parameters. ``stepping``: checked
        again at a step, where an array on a device is not copied to the host to be
        checked (it was when its group was added)."""
        if "lr" in group and not (self.lr_per_column and np.ndim(group["lr"])):
            finite(f"{where}lr", group["lr"])

    def step(self) -> None:
        """One update of every parameter that has a gradient. Every group is checked first,
        each step: its values may have been set by hand (``param_groups[0]["lr"] = x``)
        since it was added."""
        for index, group in enumerate(self.param_groups):
            self.check_hyper(group, f"param_groups[{index}]: ", stepping=True)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if getattr(p.grad, "shape", None) != p.data.shape:
                    raise ValueError(f"a parameter of shape {p.data.shape} has a gradient of "
                                     f"shape {getattr(p.grad, 'shape', type(p.grad).__name__)}")
                self.update(p, p.grad, self.state.setdefault(id(p), {}), group)

    def update(self, param: Tensor, grad: Any, state: dict[str, Any],
               group: dict[str, Any]) -> None:
        """Change ``param.data`` in place; ``state`` persists between steps."""
        raise NotImplementedError

    # ---- checkpoints: state keyed by each parameter's position, arrays as numpy -----------

    def state_dict(self) -> dict[str, Any]:
        """``{"state": {index: {name: value}}, "param_groups": [...]}``, host copies."""
        index = {id(p): i for i, p in enumerate(self.parameters())}
        state = {index[key]: {name: _to_host(value) for name, value in entry.items()}
                 for key, entry in self.state.items() if key in index}
        groups = [{**{k: v for k, v in g.items() if k != "params"},
                   "params": [index[id(p)] for p in g["params"]]} for g in self.param_groups]
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore hyper-parameters and state saved by ``state_dict`` (same parameter order).
        A state of another kind of optimiser, or of parameters of other shapes, is refused
        before anything changes."""
        params = self.parameters()
        groups = state_dict["param_groups"]
        if [len(g["params"]) for g in groups] != [len(g["params"]) for g in self.param_groups]:
            raise ValueError("state_dict's parameter groups do not match this optimizer's")
        for group, saved in zip(self.param_groups, groups, strict=True):
            if set(saved) != set(group):
                raise ValueError(f"state_dict is another optimizer's: its settings are "
                                 f"{sorted(set(saved) - {'params'})}, {type(self).__name__}'s "
                                 f"{sorted(set(group) - {'params'})}")
        for i, entry in state_dict["state"].items():
            shape = params[int(i)].data.shape
            for name, value in entry.items():
                if getattr(value, "ndim", 0) and value.shape != shape:
                    raise ValueError(f"state_dict's {name} of parameter {i} has shape "
                                     f"{value.shape}, the parameter {shape}")
        for group, saved in zip(self.param_groups, groups, strict=True):
            group.update({k: v for k, v in saved.items() if k != "params"})
        self.state = {id(params[int(i)]): {name: _to_device(value, params[int(i)].data.dtype)
                                           for name, value in entry.items()}
                      for i, entry in state_dict["state"].items()}


def _to_host(value: Any) -> Any:
    return backend.to_numpy(value).copy() if hasattr(value, "shape") else value


def _to_device(value: Any, dtype: np.dtype) -> Any:
    """A saved state array on the device, floating point in its parameter's ``dtype`` (as
    the model's values are loaded: a float32 checkpoint resumed in float64 trains on in
    float64); counters keep theirs."""
    if not hasattr(value, "shape"):
        return value
    floating = np.dtype(value.dtype).kind == "f" and np.dtype(dtype).kind == "f"
    return backend.xp().array(value, dtype=dtype if floating else None)


# ---- beneath the updates: cache blocking ------------------------------------------------------

BLOCK = 1 << 16  # weights per block: a block, its state and its temporaries fit the caches


@dataclass
class Block:
    """Part of one parameter, seen as Lab 1's answers see a whole one: ``p.data``, ``p.grad``."""

    data: Any
    grad: Any


def blocks(param: Tensor, grad: Any, *state: Any) -> Iterator[tuple[Any, ...]]:
    """Yield ``(p, *state)`` for consecutive blocks of ``param``: rows of its first axis,
    about ``BLOCK`` weights each, as views, so updates in place reach the parameter and
    its state arrays (each the parameter's shape).

    Why: an update written as the lab writes it, ``p.data -= lr * m_hat / (np.sqrt(s_hat)
    + eps)``, makes a new temporary array per operation. For a whole 1024 x 1024 weight
    each temporary is a fresh 4 MiB that the allocator maps from the system and the
    kernel zero-fills page by page on first touch, and each of the update's passes
    streams the whole weight through the caches. On a block the temporaries are small,
    the allocator hands the same memory back block after block, and the passes find
    their data in cache. What blocks cannot remove is the cost of the text itself, one
    pass per operation; going further takes a fused element-wise kernel (one pass per
    block), not a second copy of the update. On a GPU (cupy) one kernel per pass over
    the whole parameter is already fast: a parameter is one block there.
    """
    data = param.data
    arrays = [a[None] for a in (data, grad, *state)] if data.ndim == 0 else [data, grad, *state]
    rows = len(arrays[0])
    if isinstance(data, np.ndarray):
        rows = BLOCK // max(1, prod(arrays[0].shape[1:]))
    rows = max(1, rows)
    for start in range(0, len(arrays[0]), rows):
        data, grad, *rest = (a[start:start + rows] for a in arrays)
        yield (Block(data, grad), *rest)
