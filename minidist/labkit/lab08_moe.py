"""Checks for Lab 8, Task 3: a mixture of experts' tokens dispatched with all-to-all and back.

``check_dispatch`` gives each in-process rank rows already sorted by expert
(E experts, ``expert_counts[e]`` rows for expert e, some counts 0) and runs
the student's ``dispatch`` and ``send_back`` twice:

1. ``dispatch`` alone: rank r must receive exactly the rows every rank had for
   its experts r·E/P .. (r+1)·E/P - 1, sorted by expert, rank 0's first within
   an expert, and the table of counts (P, E/P), an integer array; a row that
   went to another rank is named (which rank had it, for which expert, and
   where that expert lives);
2. ``dispatch``, each expert's rows scaled by a number of its own (the
   "expert"), ``send_back``, then backward: every row comes home in its place,
   scaled by its expert, and its gradient is the upstream gradient scaled the
   same way; each phase sends what the library's all-to-alls send for these
   counts (one ``alltoall`` of the counts, one ``alltoallv`` of the rows each
   way and in backward).

``check_moe_layer`` runs the library's ``MoE`` layer with the student's
functions in place of its own (nothing dropped) on P ranks against one
process holding every expert: outputs, the input's gradient, each expert's
gradient and the gate's (summed over the ranks).

The rows are tensors and the layer a module, so each rank runs the
student's functions through probes of ``lab08_ranks.py`` (a phase each),
which when the lab is graded run in the kernel on a lent communicator; the
traffic of each phase is counted in the grader between its requests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from minidist.comm import alltoall, alltoallv
from minidist.labkit.checks import CheckFailed, expect, expect_close
from minidist.labkit.lab06_hotspots import plugged_in  # noqa: F401 (the notebook's import)
from minidist.labkit.lab08 import Phases, expect_traffic, per_rank
from minidist.labkit.lab08_ranks import (
    backward_of,
    dispatch_phase,
    dispatch_results,
    dispatched,
    moe_on_rank,
    send_back_phase,
)
from minidist.labkit.ranks import run_ranks
from minidist.labkit.remote import on_student
from minidist.parallel import moe

LIBRARY_DISPATCH = ("lab08_moe_dispatch",)
PHASES = ("dispatch", "send_back", "backward")


def layout(world_size: int, n_experts: int, d: int, seed: int) -> dict[str, Any]:
    """Each rank's expert counts (0 to 5 rows per expert) and rows sorted by expert, and
    what rank r must receive: every rank's rows of its experts, by expert then rank."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 6, (world_size, n_experts))
    counts[rng.integers(world_size), rng.integers(n_experts)] = 0
    experts = [np.repeat(np.arange(n_experts), row) for row in counts]
    rows = [rng.normal(size=(len(e), d)) for e in experts]
    local = n_experts // world_size
    received, tables = [], []
    for r in range(world_size):
        mine = range(r * local, (r + 1) * local)
        received.append(np.concatenate([rows[i][experts[i] == e] for e in mine
                                        for i in range(world_size)]).reshape(-1, d))
        tables.append(counts[:, r * local:(r + 1) * local])
    scale = 1.0 + np.arange(n_experts)  # what expert e does to a row: multiply it by e + 1
    return dict(counts=counts, experts=experts, rows=rows, received=received, tables=tables,
                scale=scale, local=local, upstream=[rng.normal(size=r.shape) for r in rows])


def library_traffic(world_size: int, lay: dict[str, Any], check: bool) -> list[Any]:
    """Each phase's traffic as the library sends it (``check``: the counts' alltoall's)."""
    def body(c: Any) -> dict[str, Any]:
        counts = lay["counts"][c.rank].reshape(world_size, -1)
        phases = Phases(c)
        with phases("dispatch"):
            table = alltoall(counts, c, check=check)
            alltoallv(lay["rows"][c.rank], counts.sum(axis=1), c)
        with phases("send_back"):
            alltoallv(lay["received"][c.rank], table.sum(axis=1), c)
        with phases("backward"):  # each row's gradient the way the row went, reversed
            alltoallv(lay["rows"][c.rank], counts.sum(axis=1), c)
            alltoallv(lay["received"][c.rank], table.sum(axis=1), c)
        return dict(sent=phases.sent)

    results, _ = run_ranks(body, world_size, "the library's all-to-alls", block=())
    return results


def check_dispatch(dispatch: Callable[..., Any], send_back: Callable[..., Any],
                   world_size: int, n_experts: int, d: int = 3, seed: int = 0,
                   block: tuple[str, ...] = LIBRARY_DISPATCH) -> None:
    """``dispatch(rows, expert_counts, c)`` and ``send_back(outputs, table, c)`` on
    ``world_size`` ranks with ``n_experts`` experts: the rows received, their way home,
    the gradients, and each phase's traffic."""
    __tracebackhide__ = True
    lay = layout(world_size, n_experts, d, seed)
    what = (f"dispatch and send_back, P = {world_size}, E = {n_experts} experts "
            f"({lay['local']} per rank), rows per expert on each rank "
            f"{lay['counts'].tolist()}")

    def only_dispatch(c: Any) -> tuple[np.ndarray, np.ndarray]:
        return on_student(dispatched, dispatch, c, lay["rows"][c.rank], lay["counts"][c.rank])

    results, _ = run_ranks(only_dispatch, world_size, what, block)
    for rank, (received, table) in enumerate(results):
        expect_received(what, rank, received, lay)
        expect(table.dtype == np.int64, f"{what}: rank {rank}'s table is an array of "
               f"{table.dtype}; it counts rows: an np.int64 array, as the text's counts are "
               "(alltoall returns them in the dtype they were sent in; send_back and the "
               "layer use them as counts)")
        expect(table.shape == lay["tables"][rank].shape and
               np.array_equal(table, lay["tables"][rank]), f"{what}: rank {rank}'s table is "
               f"{table.tolist()}, expected {lay['tables'][rank].tolist()}: table[i, e] rows "
               f"came from rank i for this rank's e-th expert (rank {rank} holds experts "
               f"{rank * lay['local']}..{(rank + 1) * lay['local'] - 1})")

    def there_and_back(c: Any) -> dict[str, Any]:
        phases = Phases(c)
        with phases("dispatch"):
            bench = on_student(dispatch_phase, dispatch, c, lay["rows"][c.rank],
                               lay["counts"][c.rank])
        mine = lay["scale"][c.rank * lay["local"]:(c.rank + 1) * lay["local"]]
        scale = np.repeat(mine, lay["tables"][c.rank].sum(axis=0))[:, None]
        with phases("send_back"):
            on_student(send_back_phase, send_back, bench, c, scale)
        with phases("backward"):
            on_student(backward_of, bench, c, "back", lay["upstream"][c.rank])
        return dict(on_student(dispatch_results, bench), sent=phases.sent)

    results, _ = run_ranks(there_and_back, world_size, what, block)
    for rank, r in enumerate(results):
        scale = lay["scale"][lay["experts"][rank]][:, None]
        expect_close(f"{what}: send_back on rank {rank}: its rows, each back in its place "
                     "and multiplied by its expert's number", r["back"],
                     lay["rows"][rank] * scale, 1e-12, 1e-14)
        expect_close(f"{what}: the gradient of rank {rank}'s rows (backward runs the two "
                     "all-to-alls in reverse)", r["grad"], lay["upstream"][rank] * scale,
                     1e-12, 1e-14)
    options = [library_traffic(world_size, lay, check) for check in (True, False)]
    claims = {"dispatch": "one alltoall of the counts and one all-to-all of the rows send",
              "send_back": "one all-to-all of the rows sends",
              "backward": "the reverse of the two all-to-alls of the rows sends"}
    for phase in PHASES:
        expect_traffic(f"{what}: {phase}", per_rank(results, phase),
                       [per_rank(option, phase) for option in options], claims[phase])


def expect_received(what: str, rank: int, received: np.ndarray, lay: dict[str, Any]) -> None:
    """Rank ``rank``'s rows after dispatch against what it must receive; a row that is not
    one of its experts' is named with where it came from."""
    __tracebackhide__ = True
    expected, local = lay["received"][rank], lay["local"]
    origin = {row.tobytes(): (i, int(e)) for i, (rows, experts) in
              enumerate(zip(lay["rows"], lay["experts"], strict=True))
              for row, e in zip(rows, experts, strict=True)}
    for row in received.reshape(-1, received.shape[-1]) if received.ndim else []:
        source = origin.get(np.ascontiguousarray(row).tobytes())
        if source is not None and source[1] // local != rank:
            i, e = source
            raise CheckFailed(f"{what}: rank {rank} received a row that rank {i} had for "
                              f"expert {e}, which lives on rank {e // local}: expert e lives "
                              f"on rank e // (E/P), E/P = {local} consecutive experts per rank")
    try:
        expect_close(f"{what}: the rows rank {rank} received (every rank's rows for its "
                     "first expert, rank 0's first, then for its second...)", received,
                     expected, 1e-12, 1e-14)
    except CheckFailed as failure:
        same_rows = received.shape == expected.shape and np.array_equal(
            np.sort(received, axis=0), np.sort(expected, axis=0))
        raise CheckFailed(f"{failure}" + (" -- the right rows in another order: sort them by "
                          "expert, rank by rank within an expert" if same_rows else "")
                          ) from None


def check_moe_layer(dispatch: Callable[..., Any], send_back: Callable[..., Any],
                    world_size: int, n_experts: int, top_k: int, tokens: int = 6,
                    d: int = 4, seed: int = 0, block: tuple[str, ...] = LIBRARY_DISPATCH) -> None:
    """The library's MoE layer (nothing dropped) calling the student's functions, on P
    ranks of ``tokens`` tokens each, against one process holding every expert."""
    __tracebackhide__ = True
    what = (f"the MoE layer with your dispatch and send_back, P = {world_size}, "
            f"E = {n_experts}, top-{top_k}, {tokens} tokens per rank")
    rng = np.random.default_rng(seed)
    x, dy = rng.normal(size=(world_size * tokens, d)), rng.normal(size=(world_size * tokens, d))

    def run(dispatch: Callable[..., Any], send_back: Callable[..., Any]) -> Callable:
        def body(c: Any) -> dict[str, Any]:
            mine = slice(c.rank * tokens, (c.rank + 1) * tokens) if c.size > 1 else slice(None)
            return on_student(moe_on_rank, dispatch, send_back, c, (d, n_experts, top_k),
                              seed, x[mine], dy[mine])
        return body

    one, = run_ranks(run(moe.dispatch, moe.send_back), 1, f"{what} (one process)",
                     block=())[0]
    results, _ = run_ranks(run(dispatch, send_back), world_size, what, block)
    rows = np.split(np.arange(world_size * tokens), world_size)
    for rank, r in enumerate(results):
        expect_close(f"{what}: rank {rank}'s output", r["y"], one["y"][rows[rank]], 1e-10, 1e-12)
        expect_close(f"{what}: the gradient of rank {rank}'s tokens", r["x_grad"],
                     one["x_grad"][rows[rank]], 1e-10, 1e-12)
        for k, grads in enumerate(r["experts"]):
            e = rank * (n_experts // world_size) + k
            for i, grad in enumerate(grads):
                expect_close(f"{what}: expert {e}'s gradient (parameter {i}, on rank {rank})",
                             grad, one["experts"][e][i], 1e-10, 1e-12)
    expect_close(f"{what}: the gate's gradient summed over the ranks",
                 sum(r["gate"] for r in results), one["gate"], 1e-10, 1e-12)

