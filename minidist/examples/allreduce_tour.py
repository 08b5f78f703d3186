"""A tour of the allreduce algorithms: same data, same answer, different traffic.

    mpirun -n 4 python -m mpi4py -m minidist.examples.allreduce_tour
    python -m minidist.examples.allreduce_tour                  # one rank
    python -m minidist.examples.allreduce_tour --local 6        # 6 in-process ranks

Every rank makes its own vector (seeded by its rank), so every rank can also
compute the exact answer with numpy. Each algorithm then runs on the same
vectors; the tour checks its result against numpy on every rank and prints
what each rank sent (counted by the transport) beside what ``comm.cost``
predicts. The in-process transport also reports rounds and modelled time.
"""

from __future__ import annotations

import argparse

import numpy as np

from minidist import comm
from minidist.comm.transport.communicator import Communicator
from minidist.examples.options import integer


def rank_vector(rank: int, n: int) -> np.ndarray:
    return np.random.default_rng([2024, rank]).standard_normal(n)


def tour(c: Communicator, n: int) -> list[dict]:
    """Run every algorithm once on ``n`` float64 values; return rank 0's table rows."""
    mine = rank_vector(c.rank, n)
    exact = np.sum([rank_vector(r, n) for r in range(c.size)], axis=0)
    rows = []
    for algorithm in comm.ALGORITHMS:
        c.stats.reset()
        result = comm.allreduce(mine, c, "sum", algorithm, check=False)
        counted = np.array([np.allclose(result, exact, rtol=1e-12, atol=1e-12),
                            c.stats.bytes_sent, c.stats.messages_sent,
                            getattr(c.stats, "rounds", -1), getattr(c.stats, "clock", -1.0)])
        table = comm.gather(counted, c, root=0)  # after the reset: not counted above
        if c.rank == 0:
            model = comm.cost.predict(algorithm, c.size, n * 8, 8)
            rows.append({"algorithm": algorithm, "correct": bool(table[:, 0].all()),
                         "bytes": table[:, 1].astype(int).tolist(),
                         "model_bytes": model.bytes_sent,
                         "messages": table[:, 2].astype(int).tolist(),
                         "model_messages": model.messages_sent,
                         "rounds": int(table[:, 3].max()), "model_rounds": model.rounds,
                         "clock": float(table[:, 4].max()), "model_time": model.time})
    return rows


def show(rows: list[dict], size: int, n: int) -> None:
    print(f"allreduce of {n} float64 ({n * 8} bytes) on {size} ranks; per rank: "
          "measured | model")
    for row in rows:
        if row["algorithm"] == "mpi" and row["rounds"] < 0:
            print(f"{'mpi':>19}  {'ok' if row['correct'] else 'WRONG':5}"
                  "  (MPI's own Allreduce: its messages are not counted)")
            continue
        print(f"{row['algorithm']:>19}  {'ok' if row['correct'] else 'WRONG':5}"
              f"  bytes sent {row['bytes']} | {row['model_bytes']}")
        line = f"{'':>28}messages {row['messages']} | {row['model_messages']}"
        if row["rounds"] >= 0:
            line += (f"; rounds {row['rounds']} | {row['model_rounds']}; time "
                     f"{row['clock'] * 1e6:.1f} | {row['model_time'] * 1e6:.1f} us")
        else:  # MPI counts messages and bytes; rounds come from the model alone
            line += f"; rounds (model) {row['model_rounds']}"
        print(line)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--length", type=integer(0), default=1001)
    parser.add_argument("--local", type=integer(1), help="run on this many in-process ranks")
    args = parser.parse_args(argv)
    if args.local is not None:
        rows = comm.launch(tour, args.local, args=(args.length,), backend="local")[0]
        show(rows, args.local, args.length)
        return
    c = comm.world()
    rows = tour(c, args.length)
    if c.rank == 0:
        show(rows, c.size, args.length)


if __name__ == "__main__":
    main()
