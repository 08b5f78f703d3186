"""Lab 8: each rank's part of a check, as probes run phase by phase.

A Lab 8 answer is a Function, a Module or an optimiser that works on
tensors and keeps its communicator (``ctx.c``, ``self.comm``): none of it is
data. So each rank of a check drives the student's code through these
probes, one per phase (a forward, a backward, a step). When the lab is
graded they run in the student's kernel on a communicator the grader lends
again to every phase (under the same number, so the communicator a
Function or an optimiser kept still reaches the rank), the objects stay in
the kernel between phases (a ``Bench`` each rank keeps there), and each
phase's traffic is counted by the grader between its requests
(``lab08.Phases``). The references and the verdict stay in the grader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FunctionType, ModuleType
from typing import Any

import numpy as np

from minidist.autograd import Function, Tensor
from minidist.backend import to_numpy
from minidist.comm import Communicator
from minidist.nn import MLP
from minidist.nn.functional import cross_entropy
from minidist.optim import Optimizer
from minidist.parallel import moe
from minidist.parallel.tensor_parallel import ParallelMLP
from minidist.parallel.zero import ShardedOptimizer, owned_bytes


class Bench:
    """What one rank's part of a check keeps between its phases (tensors, a layer)."""


def class_of(cls: Any, base: str) -> tuple[bool, bool, str]:
    """Probe: whether ``cls`` is a class, whether it is built on ``base`` ("Function",
    "ParallelMLP", "ShardedOptimizer"), and how it shows."""
    bases = {"Function": Function, "ParallelMLP": ParallelMLP,
             "ShardedOptimizer": ShardedOptimizer}
    is_class = isinstance(cls, type)
    return is_class, is_class and issubclass(cls, bases[base]), repr(cls)


# --- Task 1: f and g -------------------------------------------------------------------------
def f_forward(copy_to_ranks: type, c: Any, x: np.ndarray) -> Bench:
    """Probe: f on a copy of x."""
    bench = Bench()
    bench.x = Tensor(x.copy(), requires_grad=True)
    bench.y = copy_to_ranks.apply(bench.x, c)
    return bench


def g_forward(sum_over_ranks: type, bench: Bench, c: Any, partial: np.ndarray) -> None:
    """Probe: g on a copy of this rank's partial output."""
    bench.partial = Tensor(partial.copy(), requires_grad=True)
    bench.z = sum_over_ranks.apply(bench.partial, c)


def backward_of(bench: Bench, c: Any, name: str, upstream: np.ndarray) -> None:
    """Probe: backward from ``bench.<name>`` with dL/d<name> = ``upstream`` (``c`` is lent
    again: the backward uses the communicator its forward kept)."""
    (getattr(bench, name) * Tensor(upstream)).sum().backward()


def f_and_g_results(bench: Bench) -> dict[str, Any]:
    """Probe: f's output and x's gradient, g's output and the partial's gradient."""
    return dict(y=to_numpy(bench.y.data), x_grad=bench.x.grad, z=to_numpy(bench.z.data),
                partial_grad=bench.partial.grad)


# --- Task 2: the split MLP -------------------------------------------------------------------
def mlp_on_rank(mlp_class: type, c: Any, w: dict[str, np.ndarray],
                activation: str) -> tuple[Bench, dict[str, np.ndarray], list[str]]:
    """Probe: ``mlp_class(w1, b1, w2, b2, c, activation)``; copies of what it keeps, and the
    names of its parameters whose arrays share memory with the whole weights it was given."""
    bench = Bench()
    bench.layer = mlp_class(w["w1"], w["b1"], w["w2"], w["b2"], c, activation)
    named = dict(bench.layer.named_parameters())
    views = [name for name, p in named.items() if isinstance(p.data, np.ndarray)
             and any(np.shares_memory(p.data, whole) for whole in w.values())]
    return bench, {name: to_numpy(p.data).copy() for name, p in named.items()}, views


def mlp_refusal(mlp_class: type, c: Any, w: dict[str, np.ndarray], activation: str) -> bool:
    """Probe: whether ``mlp_class`` refuses weights whose hidden units P does not divide
    (a ValueError, as ``slice_of`` raises)."""
    try:
        mlp_class(w["w1"], w["b1"], w["w2"], w["b2"], c, activation)
    except ValueError:
        return True
    return False


def mlp_forward(bench: Bench, c: Any, x: np.ndarray) -> None:
    """Probe: the layer on a copy of x."""
    bench.x = Tensor(x.copy(), requires_grad=True)
    bench.y = bench.layer(bench.x)


def mlp_results(bench: Bench) -> dict[str, Any]:
    """Probe: the output, x's gradient and the layer's gradients."""
    return dict(y=to_numpy(bench.y.data), x_grad=bench.x.grad,
                grads={name: p.grad for name, p in bench.layer.named_parameters()})


# --- Task 3: the MoE dispatch ----------------------------------------------------------------
def dispatched(dispatch: Callable[..., Any], c: Any, rows: np.ndarray,
               counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Probe: ``dispatch`` alone: the rows received and the table."""
    received, table = dispatch(Tensor(rows.copy()), counts.copy(), c)
    return to_numpy(received.data), np.asarray(table)


def dispatch_phase(dispatch: Callable[..., Any], c: Any, rows: np.ndarray,
                   counts: np.ndarray) -> Bench:
    """Probe: ``dispatch`` of a copy of the rows, kept for ``send_back_phase``."""
    bench = Bench()
    bench.rows = Tensor(rows.copy(), requires_grad=True)
    bench.received, bench.table = dispatch(bench.rows, counts.copy(), c)
    return bench


def send_back_phase(send_back: Callable[..., Any], bench: Bench, c: Any,
                    scale: np.ndarray) -> None:
    """Probe: each received row times its expert's number (``scale``), sent back."""
    bench.back = send_back(bench.received * Tensor(scale), bench.table, c)


def dispatch_results(bench: Bench) -> dict[str, Any]:
    """Probe: the rows come home and their gradient."""
    return dict(back=to_numpy(bench.back.data), grad=bench.rows.grad)


_plugged = {"count": 0, "saved": {}}  # ranks running the MoE layer with the student's functions


@contextmanager
def plugged_for_ranks(**functions: Callable[..., Any]) -> Iterator[None]:
    """``moe``'s functions of those names are the given ones while any rank's probe runs
    (ranks take turns, so they enter and leave in any order); restored after the last."""
    if _plugged["count"] == 0:
        _plugged["saved"] = {name: getattr(moe, name) for name in functions}
        for name, function in functions.items():
            setattr(moe, name, function)
    _plugged["count"] += 1
    try:
        yield
    finally:
        _plugged["count"] -= 1
        if _plugged["count"] == 0:
            for name, function in _plugged["saved"].items():
                setattr(moe, name, function)


def moe_on_rank(dispatch: Callable[..., Any], send_back: Callable[..., Any], c: Any,
                sizes: tuple[int, int, int], seed: int, x: np.ndarray,
                dy: np.ndarray) -> dict[str, Any]:
    """Probe: the library's MoE layer (``sizes``: d, E, top-k; nothing dropped) calling
    ``dispatch`` and ``send_back``, forward and backward on this rank's tokens."""
    d, n_experts, top_k = sizes
    with plugged_for_ranks(dispatch=dispatch, send_back=send_back):
        layer = moe.MoE(d, 2 * d, n_experts, top_k, capacity_factor=None, comm=c,
                        dtype=np.float64, rng=seed)
        xt = Tensor(x, requires_grad=True)
        y = layer(xt)
        (y * Tensor(dy)).sum().backward()
    return dict(y=to_numpy(y.data), x_grad=xt.grad, gate=layer.gate.weight.grad,
                experts=[[p.grad for p in e.parameters()] for e in layer.experts])


# --- Task 4: ZeRO's step ---------------------------------------------------------------------
def zero_on_rank(zero_class: type, c: Any, sizes: list[int], seed: int, optimizer: str,
                 stage: int, hyper: dict[str, float], dtype: str = "float64") -> Bench:
    """Probe: this rank's MLP (its own weights: rank 0's are broadcast) and its optimiser."""
    bench = Bench()
    bench.model = MLP(sizes, dtype=np.dtype(dtype), rng=seed + c.rank)
    bench.zero = zero_class(bench.model.parameters(), c, optimizer, stage=stage, **hyper)
    return bench


def zero_backward(bench: Bench, c: Any, x: np.ndarray, y: np.ndarray,
                  unused: int | None = None) -> None:
    """Probe: zero_grad, then backward on this rank's rows; parameter ``unused``'s gradient
    then None (a parameter this rank did not use)."""
    bench.zero.zero_grad()
    cross_entropy(bench.model(Tensor(x.astype(bench.zero.flat.dtype))), y).backward()
    if unused is not None:
        list(bench.model.parameters())[unused].grad = None


def zero_stepped(bench: Bench, c: Any) -> None:
    """Probe: the optimiser's step."""
    bench.zero.step()


def zero_misshapen(bench: Bench, c: Any, index: int, shape: tuple[int, ...]) -> tuple[str, str]:
    """Probe: parameter ``index``'s gradient replaced by one of ``shape`` (its values, in
    another shape when it has as many), then a step: what it raised ("" if nothing)."""
    p = list(bench.model.parameters())[index]
    size = int(np.prod(shape))
    grad = np.ravel(p.grad)
    p.grad = (grad.reshape(shape) if size == grad.size else np.zeros(shape, grad.dtype))
    try:
        bench.zero.step()
    except Exception as error:  # the verdict is the check's: it reads what was raised
        return type(error).__name__, str(error)
    return "", ""


def zero_results(bench: Bench) -> dict[str, Any]:
    """Probe: the weights, the bytes of the arrays the optimiser keeps (and of those of them
    whose float dtype is not the model's), and which parameters still hold a gradient."""
    arrays, state = kept_arrays(bench.zero, bench.zero.comm)
    dtype = bench.zero.flat.dtype
    return dict(weights=[np.array(p.data) for p in bench.model.parameters()],
                kept=owned_bytes(arrays), state=owned_bytes(state),
                other=owned_bytes(a for a in arrays if a.dtype.kind == "f" and a.dtype != dtype),
                graded=[i for i, p in enumerate(bench.model.parameters()) if p.grad is not None])


def kept_arrays(root: Any, skip: Any) -> tuple[list[Any], list[Any]]:
    """Every array reachable from ``root`` through attributes, lists, tuples and dicts,
    except through ``skip`` (the communicator, which keeps its own buffers); and those in
    the state of an optimiser reachable so."""
    seen, found, state, todo = set(), [], [], [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or obj is skip or isinstance(
                obj, type | ModuleType | FunctionType | Communicator | str | int | float):
            continue
        seen.add(id(obj))
        if isinstance(obj, Optimizer):
            state += [v for entry in obj.state.values() for v in entry.values()]
        if type(obj).__name__ == "ndarray":  # numpy's or cupy's
            found.append(obj)
        elif isinstance(obj, dict):
            todo += list(obj.values())
        elif isinstance(obj, list | tuple | set | frozenset):
            todo += list(obj)
        elif hasattr(obj, "__dict__"):
            todo += list(vars(obj).values())
    return found, [a for a in state if type(a).__name__ == "ndarray"]
