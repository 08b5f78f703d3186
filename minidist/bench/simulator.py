"""The in-process simulator at scale: wall time of an allreduce on a thousand ranks and more.

    python -m minidist.bench.simulator                    # the targets below
    python -m minidist.bench.simulator --ranks 256 --algorithms ring,tree

Each row runs ``comm.allreduce`` of ``--values`` float64 values (64 Ki by
default) with one algorithm on P in-process ranks (``LocalCluster``: the ranks
are cooperative tasks of one thread, ``comm/transport/scheduler.py``) and
prints the wall time of the run, the CPU time of this process (less
disturbed by other load on the machine), the modelled time of the latest
rank, and whether the transport's counters and rounds equal the cost
model's prediction exactly and its clock to rounding (``comm.cost.predict``,
with the agreement check), as they must at any P.

Targets (issue 16): every algorithm at P = 1024 within 10 s of wall time;
recursive doubling at P = 4096 within 30 s. Each target row says met or
missed. The run is one process on one core: with other work on the machine
the wall time grows, so the CPU time is printed beside it.

Below the ring's row, its **floor**, timed in the same run
(``simulator_floor.py``): the ring's numpy work on P greenlets with nothing of
the transport (no clocks, counters, checks or matching rules). The ring's
wall time is shown as a multiple of it; a target under the floor says so.

The memory is real: every rank holds its vector, its result and its
messages in flight (P = 4096 with 64 Ki values: about 6 GiB).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from minidist.bench.simulator_floor import ring_floor
from minidist.comm import LocalCluster, NetworkModel, allreduce
from minidist.comm.cost import predict
from minidist.util.arguments import integer, listing, one_of

ALGORITHMS = ("naive", "ps", "ring", "tree", "double_tree", "recursive_doubling")
TARGETS = {1024: (ALGORITHMS, 10.0), 4096: (("recursive_doubling",), 30.0)}
TARGET_VALUES = 64 * 1024  # float64 values per rank in the targets' allreduce


def run_once(algorithm: str, p: int, values: int) -> dict:
    """One allreduce on ``p`` ranks: wall and CPU seconds, and the clock against the model."""
    network = NetworkModel()
    cluster = LocalCluster(p, network=network)

    def body(c):
        x = np.full(values, float(c.rank))
        allreduce(x, c, algorithm=algorithm, out=x)
        return bool((x == p * (p - 1) / 2).all())  # every value of every rank is the sum

    wall, cpu = time.perf_counter(), time.process_time()
    correct = all(cluster.run(body, timeout=None))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    model = predict(algorithm, p, values * 8, 8, network, check=True)
    clock = max(s.clock for s in cluster.stats)
    exact = (math.isclose(clock, model.time, rel_tol=1e-9)  # sums in another order
             and max(s.rounds for s in cluster.stats) == model.rounds
             and [s.bytes_sent for s in cluster.stats] == model.bytes_sent
             and [s.messages_sent for s in cluster.stats] == model.messages_sent
             and sum(s.bytes_recv for s in cluster.stats) == sum(model.bytes_sent)
             and sum(s.messages_recv for s in cluster.stats) == sum(model.messages_sent))
    return dict(wall=wall, cpu=cpu, clock=clock, exact=exact and correct)


def verdict(algorithm: str, p: int, values: int, row: dict) -> str:
    """Met or missed, for a row of a target's workload (TARGET_VALUES per rank) whose
    result and counters are right; else what keeps it from counting."""
    algorithms, limit = TARGETS.get(p, ((), 0.0))
    if algorithm not in algorithms:
        return ""
    if values != TARGET_VALUES:
        return f"(the target is for {TARGET_VALUES} values)"
    if not row["exact"]:
        return f"target <= {limit:g} s: missed (a wrong result or count)"
    return f"target <= {limit:g} s: {'met' if row['wall'] <= limit else 'missed'}"


def floor_row(p: int, values: int, ring_wall: float) -> str:
    """The ring's floor (``simulator_floor.py``), timed now, beside the ring's row."""
    floor = ring_floor(p, values)
    limit = TARGETS.get(p, ((), 0.0))[1]
    below = f"; the target ({limit:g} s) is under it" if limit and floor > limit else ""
    return (f"{p:>5} {'ring floor':>18} {floor:>8.2f} {'-':>8} {'-':>9} {'-':>8}  "
            f"ring {ring_wall / floor:.2f}x the floor{below}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=listing(integer(1)), default="256,1024,4096",
                        help="world sizes, comma-separated (default: 256,1024,4096)")
    parser.add_argument("--algorithms", type=listing(one_of(ALGORITHMS)), default=None,
                        help="comma-separated; default: all at P <= 1024, recursive "
                             "doubling above")
    parser.add_argument("--values", type=integer(1), default=TARGET_VALUES,
                        help="float64 values per rank (default 65536)")
    args = parser.parse_args(argv)
    sizes, chosen = args.ranks, args.algorithms

    print(f"allreduce of {args.values} float64 values on P in-process ranks, one process")
    print(f"{'P':>5} {'algorithm':>18} {'wall s':>8} {'cpu s':>8} {'clock ms':>9} "
          f"{'= model':>8}  target")
    for p in sizes:
        for algorithm in chosen or (ALGORITHMS if p <= 1024 else ("recursive_doubling",)):
            row = run_once(algorithm, p, args.values)
            print(f"{p:>5} {algorithm:>18} {row['wall']:>8.2f} {row['cpu']:>8.2f} "
                  f"{row['clock'] * 1e3:>9.3f} {'exact' if row['exact'] else 'DIFFERS':>8}  "
                  f"{verdict(algorithm, p, args.values, row)}", flush=True)
            if algorithm == "ring":
                print(floor_row(p, args.values, row["wall"]), flush=True)


if __name__ == "__main__":
    main()
