"""Lab 6, Task 4: hot keys replicated on the workers, checked by the servers' own traffic.

``choose_hot_keys`` is compared with its definition on small samples. Then
the library's matrix factorisation (``hotspots.train_mf``: power-law ids,
BSP servers, SGD) runs on in-process ranks three times: plain servers, the
library's replication of the ``hot`` hottest keys, and the student's three
functions plugged into the same loop. Two claims are checked:

1. the same model: the student's run ends with the plain servers' model
   (to the order of additions), every worker's replica alike;
2. less traffic where it hurts: the bytes each server rank sent and
   received, counted by the transport on the server ranks (the answer runs
   on the workers and cannot touch them), must show the busiest server down
   to what replicating those keys gives. Pulling or pushing a hot row moves
   it back to the servers and fails.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import numpy as np

from minidist.labkit.blocking import blocked
from minidist.labkit.checks import expect, expect_close
from minidist.labkit.ranks import run_ranks
from minidist.parallel.ps import hotspots

LIBRARY_HOT_KEYS = ("lab06_hot_keys",)


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
    shown = accessed.tolist() if accessed.size <= 16 else f"{accessed.size} keys"
    expect(isinstance(got, np.ndarray) and np.issubdtype(got.dtype, np.integer)
           and np.array_equal(got, expected), f"choose_hot_keys({shown}, hot={hot}) returned "
           f"{got!r}, expected {expected.tolist()}: the {hot} most requested keys (ties to the "
           "smaller key; all of them when fewer are distinct), sorted, as an integer array")


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
           block: tuple[str, ...] = (), **functions: Callable[..., Any]) -> tuple[Any, ...]:
    """``train_mf`` on in-process ranks: the results and each server's bytes (in + out)."""
    def body(c: Any) -> Any:
        return hotspots.train_mf(c, data, dim=4, steps=steps, batch=64, hot=hot,
                                 servers=servers, sample_clocks=10)

    with plugged_in(hotspots, **functions):
        results, stats = run_ranks(body, servers + workers, what, block)
    return results, [s.bytes_sent + s.bytes_recv for s in stats[:servers]]


def check_replication(choose_hot_keys: Callable[..., Any], read_rows: Callable[..., Any],
                      write_rows: Callable[..., Any], servers: int, workers: int, hot: int,
                      steps: int = 6, seed: int = 0,
                      block: tuple[str, ...] = LIBRARY_HOT_KEYS) -> None:
    """Matrix factorisation with the ``hot`` hottest keys replicated through the three
    functions: the plain servers' model, and the busiest server's bytes down to what
    replicating those keys gives (the library's, measured before)."""
    __tracebackhide__ = True
    what = (f"train_mf with your functions, {servers} servers, {workers} workers, "
            f"hot = {hot}, {steps} clocks")
    data = hotspots.ratings(num_users=300, num_items=300, count=4000, dim=4, seed=seed)
    layout = hotspots.mf_layout(data, 4)
    plain, plain_load = mf_run(data, servers, workers, 0, steps, what)
    _, replicated_load = mf_run(data, servers, workers, hot, steps, what)
    mine = dict(choose_hot_keys=choose_hot_keys, read_rows=read_rows, write_rows=write_rows)
    results, load = mf_run(data, servers, workers, hot, steps, what, block, **mine)
    replicas = results[servers:]
    for w, r in enumerate(replicas):
        expect(r.hot_rows is not None and np.array_equal(r.hot_rows, replicas[0].hot_rows),
               f"{what}: worker {w}'s replica of the hot rows differs from worker 0's: every "
               "worker applies the same summed gradient to its copy")
    expect_close(f"{what}: the trained model (the servers' rows and the hot rows of worker 0's "
                 "replica) against the plain servers' model: each hot row's gradient is summed "
                 "over the workers (comm.allreduce over group) and applied as the servers "
                 "would", hotspots.assemble(results, layout),
                 hotspots.assemble(plain, layout), rtol=1e-9, atol=1e-12)
    busiest = int(np.argmax(plain_load))
    expect(max(load) <= 1.02 * max(replicated_load) and max(load) < max(plain_load),
           f"{what}: the servers moved {load} bytes (in + out, each server's own counters); "
           f"with no replication {plain_load}, the busiest server {busiest}. Replicating the "
           f"{hot} hottest keys brings the busiest to {max(replicated_load)}: hot rows are read "
           "from the replica and their gradients summed among the workers, never pulled from "
           "or pushed to the servers")
