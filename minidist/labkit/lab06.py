"""Checks for Lab 6 (parameter servers and consistency): each claim of a task's text, one check.

1. ``shard_update``: in ``lab06_shard.py``.
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

When the lab is graded, the checks run in the grader and only data crosses
to the student's kernel: a server consults the student's rule through
``AskedSSP`` (its answers, one call each), an accumulator's arrays come
back through a probe (``accumulated``), and the servers, their ranks and
their traffic are the grader's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from minidist.comm import Straggler
from minidist.labkit.blocking import blocked
from minidist.labkit.checks import CheckFailed, expect, expect_close
from minidist.labkit.lab06_shard import check_shard_update  # noqa: F401 (the notebook's import)
from minidist.labkit.ranks import run_ranks
from minidist.labkit.remote import name_of, on_student
from minidist.parallel.ps import KeyLayout, ParameterServer, ServerOptimizer
from minidist.parallel.ps.consistency import SSP

LIBRARY_SSP = ("lab06_ssp_rule",)
LIBRARY_SOFTSYNC = ("lab06_staleness_lr", "lab06_softsync")


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
               f"{name_of(rule_class)}({staleness}).may_serve(clock={clock}, clocks={clocks}) "
               f"{said}; {because}, and SSP(s) serves a read iff that is at most "
               f"s = {staleness}: expected {expected}")


class AskedSSP(SSP):
    """SSP(s) whose ``may_serve`` is ``rule``'s: a server consults the student's rule only
    by its answers (here, or in the student's kernel when the lab is graded)."""

    def __init__(self, staleness: int, rule: Any) -> None:
        super().__init__(staleness)
        self.rule = rule

    def may_serve(self, clock: int, clocks: Any) -> bool:
        return self.rule.may_serve(clock, list(clocks))


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
    what = (f"{name_of(rule_class)}({staleness}) in a parameter server, {workers} workers "
            f"(the last 3x slower), {steps} clocks")
    values, log = regression_run(SSP(staleness), workers, steps, seed, what)
    got_values, got_log = regression_run(AskedSSP(staleness, rule_class(staleness)), workers,
                                         steps, seed, what, block)
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


def accumulated(acc: Any) -> tuple[np.ndarray, np.ndarray, Any]:
    """Probe: copies of an n-softsync accumulator's sum and touched keys, and its count."""
    return np.array(acc.total), np.array(acc.touched), acc.count


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
    what = f"{name_of(softsync_class)}, c = {c}, a shard of {rows} rows of {width}"
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
        got_total, got_touched, got_count = on_student(accumulated, acc)
        try:
            expect_close(f"{where}: total", got_total, total, rtol=1e-12, atol=1e-14)
        except CheckFailed as failure:
            hint = (" -- that is the sum without the scales: add scale * grad" if
                    np.allclose(got_total, plain, rtol=1e-12, atol=1e-14) else
                    " -- add sums (total[index] += scale * grad); take() divides by c" if
                    np.allclose(got_total * c, total, rtol=1e-12, atol=1e-14) else "")
            raise CheckFailed(f"{failure}{hint}") from None
        expect(np.array_equal(got_touched, touched), f"{where}: touched is "
               f"{np.flatnonzero(got_touched).tolist()}, expected keys "
               f"{np.flatnonzero(touched).tolist()}: mark every key a gradient touched")
        answer = isinstance(done, bool | np.bool_) and done == (count == c)
        expect(got_count == count and answer, f"{where}: count is "
               f"{got_count} and add returned {done!r}; expected count {count} and "
               f"{count == c}: add counts the gradients and answers True exactly when the "
               f"c-th has arrived")
        if count == c:
            keys_taken, mean = acc.take()
            expect(np.array_equal(keys_taken, np.flatnonzero(touched))
                   and np.allclose(mean, total / c, rtol=1e-12, atol=1e-14),
                   f"{where}: take() after the c-th add gave another average")
            total[:], touched[:], count = 0.0, False, 0
