"""Checks for Lab 6 (parameter servers and consistency): each claim of a task's text, one check.

1. ``shard_update``: a shard of the student's class takes a sequence of
   pushes (slices and index arrays, values pushed several times, one row
   never); after each, its values and optimiser state against the rule
   written here in numpy, the arrays changed in place and only at ``index``,
   the version one more. The state of the untouched row is 0 and eps is 0
   in some cases: an answer that computes on every value writes NaN there.
2. ``ssp_rule``: ``may_serve`` on a table of clocks; then the rule inside
   real servers (in-process, seeded compute times, one straggler): no read
   more than s clocks stale, and each answered as soon as SSP(s) allows (the
   same staleness histogram and the same weights, bit for bit, as the
   library's SSP(s) in deterministic mode).
3. ``softsync``: ``staleness_lr`` on a table; ``SoftSync.add`` over pushes
   of overlapping rows: the sum, the touched keys, the count and the answer
   after each, and the average ``take`` makes of them.
4. ``hot_keys``: in ``lab06_hotspots.py``.

While a task is checked, the library's answers to it are blocked.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from minidist.comm import Straggler
from minidist.labkit.blocking import blocked
from minidist.labkit.checks import CheckFailed, expect, expect_close
from minidist.labkit.ranks import run_ranks
from minidist.parallel.ps import KeyLayout, ParameterServer, ServerOptimizer
from minidist.parallel.ps.consistency import SSP

LIBRARY_SHARD = ("lab06_shard_update",)
LIBRARY_SSP = ("lab06_ssp_rule",)
LIBRARY_SOFTSYNC = ("lab06_staleness_lr", "lab06_softsync")


# --- Task 1: the server's update of its shard --------------------------------------------------
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


def state_of(shard: Any) -> dict[str, np.ndarray]:
    """The optimiser state a shard keeps, by name (what a checkpoint saves)."""
    state = {}
    if shard.sums is not None:
        state["sums"] = shard.sums
    if shard.moments is not None:
        state.update(zip(("steps", "first", "second"), shard.moments, strict=True))
    return state


def check_shard_update(shard_class: type, rule: str, rows: int = 6, width: int = 3,
                       pushes: int = 6, lr: float = 0.1, eps: float = 0.0,
                       scale: float = 1.0, seed: int = 0,
                       block: tuple[str, ...] = LIBRARY_SHARD) -> None:
    """``shard_class(values, ServerOptimizer(rule, lr=lr, eps=eps))`` then ``pushes`` calls
    of ``.apply(index, grad)``: each against the rule, in place, only at ``index``."""
    __tracebackhide__ = True
    opt = ServerOptimizer(rule, lr=lr, eps=eps)
    what = (f"{shard_class.__name__}.apply, rule {rule!r}, lr = {lr:g}, eps = {eps:g}, "
            f"a shard of {rows} rows of {width}")
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(rows * width)
    shard = shard_class(values, opt)
    state = state_of(shard)
    arrays = {"values": values, **state}
    expected = {name: a.copy() for name, a in arrays.items()}
    expected["version"] = 0
    never = slice((rows - 1) * width, rows * width)  # the row no push touches
    with blocked(*block), np.errstate(divide="ignore", invalid="ignore"):
        for k, (index, grad) in enumerate(random_pushes(rows, width, pushes, scale, rng), 1):
            before = {name: a.copy() for name, a in arrays.items()}
            hint_state = copy.deepcopy(expected)
            reference_apply(opt, expected["values"], expected, index, grad)
            shard.apply(index, grad.copy())
            where = f"{what}: push {k} ({'a slice' if isinstance(index, slice) else 'an index'})"
            kept = shard.values is values and all(
                a is state[name] for name, a in state_of(shard).items())
            expect(kept, f"{where}: the shard's arrays were replaced by new ones; update "
                   "shard.values and the state arrays in place (the server and its checkpoints "
                   "hold them)")
            expect(shard.version == k, f"{where}: the version is {shard.version}, expected {k}: "
                   "each update adds 1 (version += 1)")
            for name, array in arrays.items():
                expect(np.array_equal(array[never], before[name][never]), f"{where} changed "
                       f"{name} at values never pushed: an update reads and writes only "
                       "[index], O(values pushed) whatever the shard's size (their state is "
                       "0 here, so computing on every value writes NaN)")
            for name, array in arrays.items():
                try:
                    expect_close(f"{where}, {name}", array, expected[name], rtol=1e-12,
                                 atol=1e-14)
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


def outcome(function: Callable[..., Any], *args: Any) -> tuple[Any, str]:
    """(what ``function(*args)`` returned, "returned X"), or (None, "raised E: message"); a
    NotImplementedError (not done yet, or a blocked library answer) passes through."""
    try:
        got = function(*args)
    except NotImplementedError:
        raise
    except Exception as error:  # the student's code raised: the check says so in its sentence
        return None, f"raised {type(error).__name__}: {error}"
    return got, f"returned {got!r}"


# --- Task 2: the SSP rule -----------------------------------------------------------------------
def ssp_cases(staleness: int, seed: int) -> list[tuple[int, list[int]]]:
    """(clock, clocks) pairs: reads 0..s+2 clocks ahead of the slowest, faster workers
    too, the reader alone, and no worker counted at all."""
    rng = np.random.default_rng(seed)
    cases = []
    for gap in range(staleness + 3):
        clock = int(rng.integers(gap, gap + 6))
        others = list(rng.integers(clock - gap, clock + 3, 2))
        cases.append((clock, [int(o) for o in [clock, clock - gap, *others]]))
    return cases + [(4, [4]), (2, [])]


def check_ssp_cases(rule_class: type, staleness: int, seed: int = 0,
                    block: tuple[str, ...] = LIBRARY_SSP) -> None:
    """``rule_class(s).may_serve(clock, clocks)`` against SSP(s)'s rule on ``ssp_cases``."""
    __tracebackhide__ = True
    rule = rule_class(staleness)
    for clock, clocks in ssp_cases(staleness, seed):
        with blocked(*block):
            got, said = outcome(rule.may_serve, clock, list(clocks))
        slowest = min(clocks, default=clock)
        expected = clock - slowest <= staleness
        because = (f"the read is {clock - slowest} clock(s) stale (its clock minus the slowest "
                   f"worker's, {slowest})" if clocks else "no worker is counted (the others "
                   "stopped), so the read has nobody to wait for: it is 0 clocks stale")
        expect(isinstance(got, bool | np.bool_) and got == expected,
               f"{rule_class.__name__}({staleness}).may_serve(clock={clock}, clocks={clocks}) "
               f"{said}; {because}, and SSP(s) serves a read iff that is at most "
               f"s = {staleness}: expected {expected}")


REGRESSION = KeyLayout({"W": (4, 2), "b": (1, 2)})


def regression_run(rule: Any, workers: int, steps: int, seed: int, what: str,
                   block: tuple[str, ...] = ()) -> tuple[np.ndarray, Any]:
    """Least squares through one server under ``rule``: workers with seeded compute times,
    the last one 3x slower (modelled clock). The final values and the server's log."""
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((64, 4)), rng.standard_normal((64, 2))
    initial = rng.standard_normal(REGRESSION.num_values)
    compute = rng.exponential(1e-3, (steps, workers))
    keys = REGRESSION.all_keys()

    def body(c: Any) -> Any:
        ps = ParameterServer(c, REGRESSION, consistency=rule,
                             optimizer=ServerOptimizer("sgd", lr=0.05))
        if ps.is_server:
            return ps.serve(initial)
        worker, w = ps.worker(), c.rank - 1
        for t in range(steps):
            flat = worker.pull(keys)
            c.compute(float(compute[t, w]))
            rows = slice((t * workers + w) * 4 % 64, (t * workers + w) * 4 % 64 + 4)
            residual = x[rows] @ flat[:8].reshape(4, 2) + flat[8:] - y[rows]
            worker.push(keys, np.concatenate([(x[rows].T @ residual).ravel(), residual.sum(0)]))
            worker.tick()
        worker.stop()
        return None

    results, _ = run_ranks(body, 1 + workers, what, block,
                           stragglers={workers: Straggler(slowdown=3.0)})
    return results[0].values, results[0].staleness


def check_ssp_run(rule_class: type, staleness: int, workers: int, steps: int = 10,
                  seed: int = 0, block: tuple[str, ...] = LIBRARY_SSP) -> None:
    """The rule ``rule_class(s)`` inside a parameter server: the reads' staleness and the
    final weights equal those of the library's SSP(s), bit for bit (deterministic mode)."""
    __tracebackhide__ = True
    what = (f"{rule_class.__name__}({staleness}) in a parameter server, {workers} workers "
            f"(the last 3x slower), {steps} clocks")
    values, log = regression_run(SSP(staleness), workers, steps, seed, what)
    got_values, got_log = regression_run(rule_class(staleness), workers, steps, seed, what,
                                         block)
    reads = dict(sorted(got_log.reads.items()))
    expect(max(reads, default=0) <= staleness, f"{what}: the server answered reads up to "
           f"{max(reads)} clocks stale (staleness: reads {reads}); SSP({staleness}) allows at "
           f"most {staleness}")
    expect(reads == dict(sorted(log.reads.items())), f"{what}: the reads' staleness was "
           f"{reads} (staleness: count); SSP({staleness}) answers each read as soon as it is at "
           f"most {staleness} clocks stale, which gives {dict(sorted(log.reads.items()))}")
    expect(np.array_equal(got_values, values), f"{what}: the final weights differ from those "
           f"of SSP({staleness}), though every read waited as long: is may_serve pure (no "
           "state kept between calls)?")


# --- Task 3: staleness-aware learning rate and n-softsync ----------------------------------
def check_staleness_lr(staleness_lr: Callable[[float, int], float], lr0: float,
                       block: tuple[str, ...] = LIBRARY_SOFTSYNC) -> None:
    """``staleness_lr(lr0, tau)`` for tau = 1..6 and 40: lr0 / tau."""
    __tracebackhide__ = True
    for tau in [*range(1, 7), 40]:
        with blocked(*block):
            got, said = outcome(staleness_lr, lr0, tau)
        expected = lr0 / tau
        number = isinstance(got, int | float | np.integer | np.floating)
        expect(number and np.isclose(float(got), expected, rtol=1e-12, atol=0),
               f"staleness_lr(lr0={lr0:g}, tau={tau}) {said}, expected {expected:g}: "
               "alpha(tau) = alpha0 / tau, tau >= 1 being 1 + the updates the gradient "
               "missed (a fresh gradient has tau = 1 and gets alpha0)")


def check_softsync(softsync_class: type, rows: int, width: int, c: int, adds: int,
                   seed: int = 0, block: tuple[str, ...] = LIBRARY_SOFTSYNC) -> None:
    """``adds`` calls of ``add(keys, index, grad, scale)`` on ``softsync_class(rows,
    rows·width, float64, c)``: after each, the sum, the touched keys, the count and the
    answer; after the c-th, ``take()`` (the library's) gives the average and starts again."""
    __tracebackhide__ = True
    layout = KeyLayout({"table": (rows, width)})
    rng = np.random.default_rng(seed)
    acc = softsync_class(rows, layout.num_values, np.dtype(np.float64), c)
    total, touched, count = np.zeros(layout.num_values), np.zeros(rows, bool), 0
    what = f"{softsync_class.__name__}, c = {c}, a shard of {rows} rows of {width}"
    for k in range(1, adds + 1):
        keys = np.sort(rng.choice(rows, int(rng.integers(1, rows + 1)), replace=False))
        index, grad = layout.value_index(keys), rng.standard_normal(layout.value_count(keys))
        scale = 1.0 / int(rng.integers(1, 5))  # alpha(tau) / alpha0 for tau in 1..4
        plain = total.copy()
        plain[index] += grad
        total[index] += scale * grad
        touched[keys], count = True, count + 1
        with blocked(*block):
            done = acc.add(keys, index, grad.copy(), scale)
        where = f"{what}: add {k} (keys {keys.tolist()}, scale {scale:g})"
        try:
            expect_close(f"{where}: total", acc.total, total, rtol=1e-12, atol=1e-14)
        except CheckFailed as failure:
            hint = (" -- that is the sum without the scales: add scale * grad" if
                    np.allclose(acc.total, plain, rtol=1e-12, atol=1e-14) else
                    " -- add sums (total[index] += scale * grad); take() divides by c" if
                    np.allclose(acc.total * c, total, rtol=1e-12, atol=1e-14) else "")
            raise CheckFailed(f"{failure}{hint}") from None
        expect(np.array_equal(acc.touched, touched), f"{where}: touched is "
               f"{np.flatnonzero(acc.touched).tolist()}, expected keys "
               f"{np.flatnonzero(touched).tolist()}: mark every key a gradient touched")
        expect(acc.count == count and done is (count == c), f"{where}: count is "
               f"{acc.count} and add returned {done!r}; expected count {count} and "
               f"{count == c}: add counts the gradients and answers True exactly when the "
               f"c-th has arrived")
        if count == c:
            keys_taken, mean = acc.take()
            expect(np.array_equal(keys_taken, np.flatnonzero(touched))
                   and np.allclose(mean, total / c, rtol=1e-12, atol=1e-14),
                   f"{where}: take() after the c-th add gave another average")
            total[:], touched[:], count = 0.0, False, 0
