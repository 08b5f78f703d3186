"""ZeRO's memory and traffic per rank: DDP, ZeRO-1 and ZeRO-2 at P = 1, 2, 4, 8.

    python -m minidist.bench.zero                     # the course MLP [64, 256, 10], Adam, float32
    python -m minidist.bench.zero --sizes 784,1024,1024,10 --ranks 1,2,4,8,16 --optimizer sgd

P in-process ranks (the transport counts every byte) train two
steps of an MLP on random data with each strategy: ``DataParallel`` and an
optimiser, then ``ShardedOptimizer`` at stages 1 and 2. After the second
step every rank counts the model states it holds, from its arrays
(``zero.bytes_held``: parameters, gradients, optimiser state), and the bytes
it sent during that step; beside them, the formulas of ``parallel/zero.py``
for the same rank (DDP's gradients with its buckets' flag per tensor, its
traffic the ring allreduce's of its buckets, ``comm.cost.predict``). The
table shows the busiest rank (the most bytes held, the most sent); the
last line says whether every rank's counts equal the formulas.

Nothing here is timed: bytes are the same on every machine. With K optimiser
values per parameter (Adam: 2), per rank:

    held:  DDP (2 + K)N,  ZeRO-1 (2 + K/P)N,  ZeRO-2 (1 + (1 + K)/P)N
    sent:  2(P-1)/P·N per step, the same for all three
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from minidist.comm import Communicator, cost, launch
from minidist.nn import MLP
from minidist.nn.functional import cross_entropy
from minidist.optim import SGD, Adam
from minidist.parallel.ddp import DataParallel
from minidist.parallel.zero import ShardedOptimizer, bytes_held, bytes_sent_per_step, values_held
from minidist.util.arguments import integer, listing

HYPER = {"adam": dict(lr=1e-3), "sgd": dict(lr=0.05, momentum=0.9)}
STATES = {"adam": 2, "sgd": 1}  # optimiser values per parameter: m and s; the velocity
NAMES = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2"}
BATCH = 8


def measure(c: Communicator, sizes: list[int], stage: int, optimizer: str,
            dtype: str) -> dict[str, Any]:
    """This rank's bytes held and sent in the second of two steps (``stage`` 0: DDP), and
    the formulas' for it."""
    rng = np.random.default_rng(c.rank)
    x = rng.standard_normal((BATCH, sizes[0])).astype(dtype)
    y = rng.integers(0, sizes[-1], BATCH)
    net = MLP(sizes, dtype=dtype, rng=0)
    if stage == 0:
        model = DataParallel(net, c)
        opt = {"adam": Adam, "sgd": SGD}[optimizer](model.parameters(), **HYPER[optimizer])
    else:
        model = net
        opt = ShardedOptimizer(net.parameters(), c, optimizer, stage, **HYPER[optimizer])
    for _ in range(2):
        opt.zero_grad()
        before = c.stats.bytes_sent
        cross_entropy(model(x), y).backward()
        opt.step()
        sent = c.stats.bytes_sent - before
    params = net.parameters()
    n, itemsize = sum(p.size for p in params), np.dtype(dtype).itemsize
    values = values_held(n, c.size, c.rank, stage, STATES[optimizer])
    if stage == 0:
        values["gradients"] += len(params)  # DDP's buckets: one flag per tensor
        formula_sent = sum(cost.predict("ring", c.size, bucket.nbytes, itemsize).bytes_sent[c.rank]
                           for bucket in model.buckets)
    else:
        formula_sent = bytes_sent_per_step(n, c.size, c.rank, itemsize)
    return dict(held=bytes_held(params, opt), sent=sent, formula_sent=formula_sent,
                formula_held={name: v * itemsize for name, v in values.items()})


def table(sizes: list[int], ranks: list[int], optimizer: str, dtype: str) -> list[dict]:
    """One row per P and strategy: the busiest rank's counts and formulas, and whether
    every rank's counts equal its formulas."""
    rows = []
    for p in ranks:
        for stage in NAMES:
            per_rank = launch(measure, p, args=(sizes, stage, optimizer, dtype),
                              backend="local")
            busiest = max(per_rank, key=lambda r: sum(r["held"].values()))
            rows.append(dict(
                ranks=p, strategy=NAMES[stage], held=busiest["held"],
                formula_held=busiest["formula_held"],
                sent=max(r["sent"] for r in per_rank),
                formula_sent=max(r["formula_sent"] for r in per_rank),
                exact=all(r["held"] == r["formula_held"] and r["sent"] == r["formula_sent"]
                          for r in per_rank)))
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=listing(integer(1)), default="64,256,10",
                        help="the MLP's layer sizes")
    parser.add_argument("--ranks", type=listing(integer(1)), default="1,2,4,8",
                        help="the values of P")
    parser.add_argument("--optimizer", choices=sorted(HYPER), default="adam")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    args = parser.parse_args(argv)
    sizes, ranks = args.sizes, args.ranks
    if len(sizes) < 2:
        parser.error(f"--sizes needs two or more layer sizes, got {sizes}")

    rows = table(sizes, ranks, args.optimizer, args.dtype)
    n = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:], strict=True))
    print(f"MLP {sizes}: N = {n:,} {args.dtype} parameters in {2 * (len(sizes) - 1)} tensors, "
          f"{args.optimizer} (K = {STATES[args.optimizer]} state values per parameter); "
          f"bytes per rank, the busiest rank")
    print(f"{'P':>3}  {'strategy':8}{'parameters':>12}{'gradients':>12}{'opt. state':>12}"
          f"{'total':>12}{'formula':>12}{'x DDP':>7}{'sent/step':>12}{'formula':>12}")
    for row in rows:
        total = sum(row["held"].values())
        if row["strategy"] == "DDP":
            ddp = total
        print(f"{row['ranks']:>3}  {row['strategy']:8}"
              + "".join(f"{v:>12,}" for v in row["held"].values())
              + f"{total:>12,}{sum(row['formula_held'].values()):>12,}{total / ddp:>7.2f}"
              f"{row['sent']:>12,}{row['formula_sent']:>12,}")
    exact = all(row["exact"] for row in rows)
    print(f"counted = formula on every rank, bytes held and sent: {'yes' if exact else 'NO'}")
    return rows


if __name__ == "__main__":
    main()
