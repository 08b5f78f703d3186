"""Lab 6, Task 4: hot keys replicated on the workers, checked by the servers' own traffic.

``choose_hot_keys`` is compared with its definition on small samples. Then
the library's matrix factorisation (``hotspots.train_mf``: power-law ids,
BSP servers, SGD) runs on in-process ranks three times: plain servers, the
library's replication of the ``hot`` hottest keys, and the student's three
functions plugged into the same loop. Three claims are checked:

1. the same hot keys: those the student's ``choose_hot_keys`` picked in the
   run (``MFResult.hot_keys``) are the library's on the same sample, so that
   a tie broken the wrong way is named there, not as a model that differs;
2. the same model: the student's run ends with the plain servers' model
   (to the order of additions), every worker's replica alike;
3. less traffic where it hurts: the bytes each server rank sent and
   received, counted by the transport on the server ranks (the answer runs
   on the workers and cannot touch them), must show the busiest server down
   to what replicating those keys gives. Pulling or pushing a hot row moves
   it back to the servers and fails.

Two kinds of run test the edges: ``hot = 0`` (nothing replicated, the
replica None: no allreduce at all), and small batches with few hot keys,
where some worker's batch at some clock holds no hot row: every worker must
still call the allreduce, or the others wait in theirs; the transport turns
that deadlock into an error, and the check names the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import numpy as np

from minidist.labkit.blocking import blocked
from minidist.labkit.checks import CheckFailed, expect, expect_close
from minidist.labkit.ranks import run_ranks
from minidist.parallel.ps import hotspots

LIBRARY_HOT_KEYS = ("lab06_hot_keys",)
SAMPLE_CLOCKS = 10  # the clocks of batches train_mf counts to choose the hot keys


def check_choose_hot_keys(choose_hot_keys: Callable[..., Any], accessed: Any, hot: int,
                          block: tuple[str, ...] = LIBRARY_HOT_KEYS) -> None:
    """The ``hot`` most frequent keys of ``accessed``, ties to the smaller key, sorted."""
    __tracebackhide__ = True
    accessed = np.asarray(accessed, np.int64)
    keys, counts = np.unique(accessed, return_counts=True)
    order = sorted(range(len(keys)), key=lambda i: (-counts[i], keys[i]))[:hot]
    expected = np.sort(keys[order]).astype(np.int64)
    with blocked(*block):
        got = choose_hot_keys(accessed.copy(), hot)
    shown = (accessed.tolist() if accessed.size <= 16 else
             f"a sample of {accessed.size} requests of {len(keys)} distinct keys")
    expect(isinstance(got, np.ndarray) and np.issubdtype(got.dtype, np.integer)
           and np.array_equal(got, expected), f"choose_hot_keys({shown}, hot={hot}) returned "
           f"{got!r}, expected {expected.tolist()}: the {hot} most requested keys (ties to the "
           "smaller key; all of them when fewer are distinct), sorted, as an integer array"
           + tie_hint(accessed, got, expected))


def tie_hint(accessed: np.ndarray, got: Any, expected: np.ndarray) -> str:
    """When ``got`` has the right number of keys but some tied ones swapped for others
    requested as often: which, and why a sort may do that ('' otherwise)."""
    keys, counts = np.unique(accessed, return_counts=True)
    count = dict(zip(keys.tolist(), counts.tolist(), strict=True))
    try:
        chosen = {int(k) for k in np.asarray(got).ravel()}
    except (TypeError, ValueError):
        return ""
    took, left = sorted(chosen - set(expected.tolist())), sorted(set(expected.tolist()) - chosen)
    if not took or len(took) != len(left) or len(chosen) != len(expected) or any(
            count.get(k) != count[left[0]] for k in took + left):
        return ""
    return (f" -- it took keys {took[:6]} and left out keys {left[:6]}, each requested "
            f"{count[left[0]]} times: a tie, which goes to the smaller key (np.argsort's "
            "default sort is not stable and may break ties either way; np.lexsort((keys, "
            "-counts)) breaks them by key)")


@contextmanager
def plugged_in(module: ModuleType, **functions: Callable[..., Any]) -> Iterator[None]:
    """While it lasts, ``module``'s functions of those names are the given ones: the
    library's loop (here ``train_mf``) calls the student's answers. Restored on exit."""
    missing = [name for name in functions if not hasattr(module, name)]
    if missing:
        raise AttributeError(f"{module.__name__} has no {missing}: the check is out of date")
    saved = {name: getattr(module, name) for name in functions}
    try:
        for name, function in functions.items():
            setattr(module, name, function)
        yield
    finally:
        for name, function in saved.items():
            setattr(module, name, function)


def mf_run(data: Any, servers: int, workers: int, hot: int, steps: int, what: str,
           block: tuple[str, ...] = (), batch: int = 64,
           **functions: Callable[..., Any]) -> tuple[Any, ...]:
    """``train_mf`` on in-process ranks: the results and each server's bytes (in + out)."""
    def body(c: Any) -> Any:
        return hotspots.train_mf(c, data, dim=4, steps=steps, batch=batch, hot=hot,
                                 servers=servers, sample_clocks=SAMPLE_CLOCKS)

    with plugged_in(hotspots, **functions):
        results, stats = run_ranks(body, servers + workers, what, block)
    return results, [s.bytes_sent + s.bytes_recv for s in stats[:servers]]


def without_hot_rows(data: Any, hot_keys: np.ndarray, workers: int, steps: int,
                     batch: int) -> list[tuple[int, int]]:
    """(worker, clock) of every batch of the run that holds no hot row."""
    layout = hotspots.mf_layout(data, 4)
    return [(w, t) for t in range(steps) for w in range(workers) if not np.isin(
        hotspots.batch_keys(data, layout, hotspots.batch_rows(data, 0, w, t, batch)),
        hot_keys).any()]


def listed(keys: Any) -> str:
    """Up to 8 keys, then how many more."""
    keys = np.asarray(keys).ravel().tolist()
    return f"{keys[:8]}" + (f" and {len(keys) - 8} more" if len(keys) > 8 else "")


def run_yours(data: Any, servers: int, workers: int, hot: int, steps: int, batch: int,
              what: str, block: tuple[str, ...], hot_keys: np.ndarray,
              **functions: Callable[..., Any]) -> tuple[Any, ...]:
    """``mf_run`` with the student's functions; a failure that a batch without hot rows,
    or no replica at all (hot = 0), explains says so."""
    __tracebackhide__ = True
    try:
        return mf_run(data, servers, workers, hot, steps, what, block, batch, **functions)
    except CheckFailed as failure:
        said = str(failure).removeprefix(f"{what}: ")
        lacking = without_hot_rows(data, hot_keys, workers, steps, batch)
        if hot and lacking and ("deadlock" in said or "did not finish" in said):
            w, t = lacking[0]
            raise CheckFailed(f"{what}: the ranks deadlocked: at clock {t} worker {w}'s batch "
                              "holds no hot row, and every worker calls allreduce at every "
                              "clock, with or without hot rows in its batch (the others wait "
                              f"in theirs for it). The transport said: "
                              f"{said.split('; blocked:')[0]}") from None
        if not hot and " raised " in said:
            raise CheckFailed(f"{what}: {said} -- with hot = 0 nothing is replicated: hot_keys is "
                              "empty and replica is None, so read_rows pulls every row and "
                              "write_rows pushes every gradient, with no replica to update "
                              "and nothing to allreduce") from None
        raise


def check_replication(choose_hot_keys: Callable[..., Any], read_rows: Callable[..., Any],
                      write_rows: Callable[..., Any], servers: int, workers: int, hot: int,
                      steps: int = 6, batch: int = 64, seed: int = 0,
                      block: tuple[str, ...] = LIBRARY_HOT_KEYS) -> None:
    """Matrix factorisation with the ``hot`` hottest keys replicated through the three
    functions (hot = 0: none, replica None), batches of ``batch`` ratings: the hot keys
    the library chooses, the plain servers' model, and the busiest server's bytes down to
    what replicating those keys gives (the library's, measured before)."""
    __tracebackhide__ = True
    what = (f"train_mf with your functions, {servers} servers, {workers} workers, "
            f"hot = {hot}, {steps} clocks, batches of {batch} ratings")
    data = hotspots.ratings(num_users=300, num_items=300, count=4000, dim=4, seed=seed)
    layout = hotspots.mf_layout(data, 4)
    plain, plain_load = mf_run(data, servers, workers, 0, steps, what, batch=batch)
    library, replicated_load = (mf_run(data, servers, workers, hot, steps, what, batch=batch)
                                if hot else (plain, plain_load))
    hot_keys = library[servers].hot_keys
    mine = dict(choose_hot_keys=choose_hot_keys, read_rows=read_rows, write_rows=write_rows)
    results, load = run_yours(data, servers, workers, hot, steps, batch, what, block,
                              hot_keys, **mine)
    sample = hotspots.sample_access(data, layout, SAMPLE_CLOCKS, workers, batch, 0)
    got = results[servers].hot_keys
    expect(got is not None and np.array_equal(got, hot_keys), f"{what}: your "
           f"choose_hot_keys did not return the {hot} most requested keys, sorted, of the sample "
           f"train_mf counts ({sample.size} requests of {np.unique(sample).size} distinct keys)"
           + (tie_hint(sample, got, hot_keys)
              or f": it returned {listed(got)}, expected {listed(hot_keys)}"))
    replicas = results[servers:]
    for w, r in enumerate(replicas if hot else []):
        expect(r.hot_rows is not None and np.array_equal(r.hot_rows, replicas[0].hot_rows),
               f"{what}: worker {w}'s replica of the hot rows differs from worker 0's: every "
               "worker applies the same summed gradient to its copy")
    expect_close(f"{what}: the trained model (the servers' rows and the hot rows of worker 0's "
                 "replica) against the plain servers' model: each hot row's gradient is summed "
                 "over the workers (comm.allreduce over group) and applied as the servers "
                 "would", hotspots.assemble(results, layout),
                 hotspots.assemble(plain, layout), rtol=1e-9, atol=1e-12)
    busiest = int(np.argmax(plain_load))
    expect(max(load) <= 1.02 * max(replicated_load) and (max(load) < max(plain_load) or not hot),
           f"{what}: the servers moved {load} bytes (in + out, each server's own counters); "
           f"with no replication {plain_load}, the busiest server {busiest}. Replicating the "
           f"{hot} hottest keys brings the busiest to {max(replicated_load)}: hot rows are read "
           "from the replica and their gradients summed among the workers, never pulled from "
           "or pushed to the servers")
