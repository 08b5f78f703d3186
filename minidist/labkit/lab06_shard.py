"""Lab 6, Task 1: the server's update of its shard, one push at a time.

A shard of the student's class takes a sequence of pushes (slices and index
arrays, values pushed several times, one row never); after each, its values
and optimiser state against the rule written here in numpy, the arrays
changed in place and only at ``index``, the version one more. The state of
the untouched row is 0 and eps is 0 in some cases: an answer that computes
on every value writes NaN there.

A shard is not data, so it is built and pushed to by probes
(``built_shard``, ``pushed_once``): when the lab is graded they run in the
student's kernel, on arrays mapped from files this check made and reads
back after each push (``shared.py``), so "in place" is seen here, not
reported; the rule, the verdict and its hints stay here.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import numpy as np

from minidist.labkit.blocking import blocked
from minidist.labkit.checks import CheckFailed, expect, expect_close
from minidist.labkit.remote import Remote, name_of, on_student
from minidist.labkit.shared import File, SharedArrays, mapped
from minidist.parallel.ps import KeyLayout, ServerOptimizer

LIBRARY_SHARD = ("lab06_shard_update",)


def random_pushes(rows: int, width: int, pushes: int, scale: float,
                  rng: np.random.Generator) -> list[tuple[Any, np.ndarray]]:
    """``(index, grad)`` as a server makes them for a table of ``rows`` x ``width``: a
    slice for a run of keys, else an index array; the last row is never pushed."""
    layout = KeyLayout({"table": (rows, width)})
    out = []
    for k in range(pushes):
        if k % 3 == 0:  # a dense run of keys
            first = int(rng.integers(0, rows - 2))
            keys = np.arange(first, int(rng.integers(first + 1, rows)))
        else:           # sparse rows, in key order as the server has them
            keys = np.sort(rng.choice(rows - 1, int(rng.integers(1, rows - 1)), replace=False))
        index = layout.value_index(keys)
        out.append((index, scale * rng.standard_normal(layout.value_count(keys))))
    return out


def reference_apply(opt: ServerOptimizer, values: np.ndarray, state: dict[str, np.ndarray],
                    index: Any, grad: np.ndarray, steps: str = "per value") -> None:
    """The text's rules, in place; ``steps="per shard"``: Adam's t counted for the whole
    shard (a wrong answer, for the hint)."""
    if opt.rule == "sgd":
        values[index] -= opt.lr * grad
    elif opt.rule == "adagrad":
        state["sums"][index] += grad ** 2
        values[index] -= opt.lr * grad / (np.sqrt(state["sums"][index]) + opt.eps)
    else:
        (b1, b2), t = opt.betas, state["steps"][index] + 1
        if steps == "per shard":
            t = np.full_like(t, state["version"] + 1)
        state["steps"][index] = t
        state["first"][index] = b1 * state["first"][index] + (1 - b1) * grad
        state["second"][index] = b2 * state["second"][index] + (1 - b2) * grad ** 2
        m_hat = state["first"][index] / (1 - b1 ** t)
        s_hat = state["second"][index] / (1 - b2 ** t)
        values[index] -= opt.lr * m_hat / (np.sqrt(s_hat) + opt.eps)
    state["version"] += 1


# the optimiser state each rule keeps, by the names ``state_of`` gives it
STATE_NAMES = {"sgd": (), "adagrad": ("sums",), "adam": ("steps", "first", "second")}


def state_of(shard: Any) -> dict[str, np.ndarray]:
    """The optimiser state a shard keeps, by name (what a checkpoint saves)."""
    state = {}
    if shard.sums is not None:
        state["sums"] = shard.sums
    if shard.moments is not None:
        state.update(zip(STATE_NAMES["adam"], shard.moments, strict=True))
    return state


def built_shard(shard_class: type, files: dict[str, File], rule: str, lr: float,
                eps: float) -> Any:
    """Probe: ``shard_class(values, ServerOptimizer(rule, lr=lr, eps=eps))`` on the values
    mapped from ``files["values"]``; its optimiser state copied into the arrays mapped
    from the files of the same names, which the shard then keeps (``shared.py``). What
    the shard writes in place lands where the check reads it."""
    values = mapped(files["values"])
    shard = shard_class(values, ServerOptimizer(rule, lr=lr, eps=eps))
    state = state_of(shard)
    for name, array in state.items():
        if name in files:
            if np.shape(array) != values.shape:
                raise ValueError(f"{name} has shape {np.shape(array)}: the optimiser's state "
                                 f"holds one number per value, shape {values.shape}")
            state[name] = mapped(files[name])
            state[name][...] = array
    if "sums" in state:
        shard.sums = state["sums"]
    if shard.moments is not None and all(n in state for n in STATE_NAMES["adam"]):
        shard.moments = tuple(state[n] for n in STATE_NAMES["adam"])
    return shard


def pushed_once(shard: Any, files: dict[str, File], index: Any,
                grad: np.ndarray) -> tuple[int, bool]:
    """Probe: ``shard.apply(index, grad)``; the version, and whether the shard still holds
    the arrays ``built_shard`` mapped from ``files`` (a hint for the sentence: the check
    reads the arrays themselves)."""
    shard.apply(index, grad.copy())
    held = {"values": shard.values, **state_of(shard)}
    kept = all(getattr(held.get(name), "filename", None) == os.path.abspath(path)
               for name, (path, _, _) in files.items() if name in held)
    return shard.version, kept


def check_shard_update(shard_class: type, rule: str, rows: int = 6, width: int = 3,
                       pushes: int = 6, lr: float = 0.1, eps: float = 0.0,
                       scale: float = 1.0, seed: int = 0,
                       block: tuple[str, ...] = LIBRARY_SHARD) -> None:
    """``shard_class(values, ServerOptimizer(rule, lr=lr, eps=eps))`` then ``pushes`` calls
    of ``.apply(index, grad)``: each against the rule, in place, only at ``index``. The
    arrays are read after each push from files the shard's arrays are mapped on
    (``shared.py``), not from the student's side's report."""
    __tracebackhide__ = True
    opt = ServerOptimizer(rule, lr=lr, eps=eps)
    what = (f"{name_of(shard_class)}.apply, rule {rule!r}, lr = {lr:g}, eps = {eps:g}, "
            f"a shard of {rows} rows of {width}")
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(rows * width)
    sequence = random_pushes(rows, width, pushes, scale, rng)
    names = ("values", *STATE_NAMES[rule])
    with SharedArrays(remote=isinstance(shard_class, Remote)) as shared, blocked(*block):
        files = {name: shared.add(name, values if name == "values" else 0 * values)
                 for name in names}
        shard = on_student(built_shard, shard_class, files, rule, lr, eps)
        arrays = {name: shared.read(name) for name in names}
        expected = {**{name: a.copy() for name, a in arrays.items()}, "version": 0}
        with np.errstate(divide="ignore", invalid="ignore"):
            for k, (index, grad) in enumerate(sequence, 1):
                version, kept = on_student(pushed_once, shard, files, index, grad)
                before, arrays = arrays, {name: shared.read(name) for name in names}
                hint_state = copy.deepcopy(expected)
                reference_apply(opt, expected["values"], expected, index, grad)
                where = (f"{what}: push {k} "
                         f"({'a slice' if isinstance(index, slice) else 'an index'})")
                judge_push(where, opt, index, grad, arrays, before, expected, hint_state,
                           version, kept, rows * width - width)


def judge_push(where: str, opt: ServerOptimizer, index: Any, grad: np.ndarray,
               arrays: dict[str, np.ndarray], before: dict[str, np.ndarray],
               expected: dict[str, Any], hint_state: dict[str, Any], version: int,
               kept: bool, never: int) -> None:
    """One push's verdict, from the arrays read back; ``never``: where the row no push
    touches begins."""
    expect(kept, f"{where}: the shard's arrays were replaced by new ones; update "
           "shard.values and the state arrays in place (the server and its checkpoints "
           "hold them)")
    expect(version == expected["version"], f"{where}: the version is {version}, expected "
           f"{expected['version']}: each update adds 1 (version += 1)")
    for name, array in arrays.items():
        expect(np.array_equal(array[never:], before[name][never:]), f"{where} changed "
               f"{name} at values never pushed: an update reads and writes only "
               "[index], O(values pushed) whatever the shard's size (their state is "
               "0 here, so computing on every value writes NaN)")
    for name, array in arrays.items():
        try:
            expect_close(f"{where}, {name}", array, expected[name], rtol=1e-12, atol=1e-14)
        except CheckFailed as failure:
            hint = (f" -- {name} did not change: keep the optimiser's state in "
                    "self.sums (AdaGrad) and self.moments (Adam), the arrays a "
                    "checkpoint saves" if name != "values"
                    and np.array_equal(array, before[name]) else
                    shard_hint(opt, hint_state, index, grad, array, name))
            raise CheckFailed(f"{failure}{hint}") from None


def shard_hint(opt: ServerOptimizer, state: dict[str, Any], index: Any, grad: np.ndarray,
               got: np.ndarray, name: str) -> str:
    """Which rule of the text a wrong update breaks, when the check can tell ('' if not)."""
    if opt.rule == "adam":
        reference_apply(opt, state["values"], state, index, grad, steps="per shard")
        if np.allclose(got, state[name], rtol=1e-12, atol=1e-14):
            return (" -- this is Adam with one step count for the whole shard; each value "
                    "counts its own steps (steps[index] + 1): a value pushed for the first time "
                    "is corrected as a first step")
    if opt.rule == "adagrad" and name == "values":
        old = state["sums"][index]
        if np.allclose(got[index], state["values"][index] - opt.lr * grad
                       / (np.sqrt(old) + opt.eps), rtol=1e-12, atol=1e-14):
            return (" -- you divided by G before adding this gradient's square; the server "
                    "uses the textbook order: G += g², then the step")
    return ""
