"""Expert parallelism: the all-to-all bytes of a MoE layer per step, and tokens per expert.

    python -m minidist.bench.moe                       # P = 2, 4, 8; E = 8; 256 tokens per rank
    python -m minidist.bench.moe --ranks 2,4 --tokens 32 --d-model 8 --hidden 16

Bytes are counted, not timed: the same on every machine. Each row runs one
step (forward and backward, the tokens needing a gradient as inside a model)
of ``minidist.parallel.moe.MoE`` on P in-process ranks (``LocalCluster``,
which counts every byte each rank sends) with a random gate, float32 tokens.

1. **All-to-all bytes per step**, on the busiest rank, top-1 and top-2:
   measured, and the formula of ``moe.py``'s docstring, exact given the
   routing (``8(P-1)(E/P + 4) + 2R(out + in)`` plus five agreement checks, R
   the bytes of a token, out/in the kept slots sent to / received from
   other ranks); beside them, the formula with the tokens spread evenly and
   nothing dropped (``out = in = k·n(P-1)/P``), and what data parallelism
   would send instead to keep all E experts' gradients in sync (a ring
   allreduce of their parameters: ``2(P-1)/P`` times their bytes). Expert
   parallelism moves tokens, data parallelism weights: which is cheaper
   depends on tokens per step against parameters per expert.
2. **Tokens per expert** at P = the largest of ``--ranks``, top-1: a random
   gate, then a skewed one (the tokens' first feature averages 1, and expert
   0's gate weight on it is raised by ``--skew``): the table of
   ``moe.load_table``, with what was dropped.

Target: measured bytes = the formula on every rank of every row (counting
is exact, so anything else is a bug).
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from minidist.autograd import Tensor
from minidist.comm import LocalCluster, NetworkModel
from minidist.comm.cost import check_cost, predict
from minidist.parallel.moe import MoE, format_load, load_table
from minidist.util.arguments import integer, listing, number


def formula_bytes(p: int, n_experts: int, row_bytes: int, out: int, into: int,
                  check_bytes: int) -> int:
    """Bytes one rank sends in a step of a MoE layer (``moe.py``'s docstring), with
    ``check_bytes`` the rank's share of one agreement check."""
    return 8 * (p - 1) * (n_experts // p + 4) + 2 * row_bytes * (out + into) + 5 * check_bytes


def measure(p: int, n_experts: int, top_k: int, tokens: int, d_model: int, hidden: int,
            capacity_factor: float, skew: float = 0.0, seed: int = 0) -> dict[str, Any]:
    """One step on P in-process ranks: bytes each rank sent, the slots each processed, the
    load table over all ranks."""
    def body(c):
        moe = MoE(d_model, hidden, n_experts, top_k, capacity_factor, comm=c, rng=seed)
        moe.gate.weight.data[0, 0] += skew  # expert 0's logit: + skew · (feature 0, about 1)
        x = np.random.default_rng([seed, c.rank]).standard_normal((tokens, d_model))
        x[:, 0] += 1
        moe(Tensor(x.astype(np.float32), requires_grad=True)).sum().backward()
        sent = c.stats.bytes_sent  # before load_table's own allreduce
        return sent, moe.load[1], load_table(moe)

    per_rank = LocalCluster(p).run(body)
    return dict(sent=[r[0] for r in per_rank], processed=[r[1] for r in per_rank],
                table=per_rank[0][2])


def bytes_row(p: int, n_experts: int, top_k: int, tokens: int, d_model: int, hidden: int,
              capacity_factor: float) -> dict[str, Any]:
    """Measured and predicted bytes of the busiest rank, for one (P, top-k)."""
    run = measure(p, n_experts, top_k, tokens, d_model, hidden, capacity_factor)
    local, row_bytes = n_experts // p, 4 * d_model
    check = check_cost(p, 0, NetworkModel()).bytes_sent
    predicted = []
    for r in range(p):
        mine = slice(r * local, (r + 1) * local)
        out = int(run["processed"][r].sum() - run["processed"][r][mine].sum())
        into = sum(int(run["processed"][s][mine].sum()) for s in range(p) if s != r)
        predicted.append(formula_bytes(p, n_experts, row_bytes, out, into, check[r]))
    even = top_k * tokens * (p - 1) // p
    expert_bytes = 4 * n_experts * (2 * d_model * hidden + hidden + d_model)
    return dict(p=p, top_k=top_k, measured=max(run["sent"]), formula=max(predicted),
                exact=run["sent"] == predicted,
                even=formula_bytes(p, n_experts, row_bytes, even, even, max(check)),
                data_parallel=max(predict("ring", p, expert_bytes, 4).bytes_sent))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=listing(integer(1)), default="2,4,8",
                        help="world sizes, comma-separated")
    parser.add_argument("--experts", type=integer(1), default=8, help="a multiple of every P")
    parser.add_argument("--tokens", type=integer(1), default=256, help="tokens per rank")
    parser.add_argument("--d-model", type=integer(1), default=64)
    parser.add_argument("--hidden", type=integer(1), default=128, help="each expert's hidden width")
    parser.add_argument("--capacity-factor", type=number(above=0), default=1.25)
    parser.add_argument("--skew", type=number(least=0), default=3.0,
                        help="added to expert 0's gate weight on feature 0, in table 2")
    args = parser.parse_args(argv)
    ranks = args.ranks
    if any(args.experts % p for p in ranks):
        parser.error(f"--experts {args.experts} must be a multiple of every P in --ranks "
                     f"{','.join(map(str, ranks))} (each rank holds as many)")
    shape = (args.tokens, args.d_model, args.hidden, args.capacity_factor)

    rows = [bytes_row(p, args.experts, k, *shape) for p in ranks for k in (1, 2)]
    print(f"1. all-to-all bytes per step of one MoE layer, busiest rank: E = {args.experts}, "
          f"{args.tokens} tokens per rank, d_model {args.d_model}, float32, capacity factor "
          f"{args.capacity_factor}")
    print(f"{'P':>3} {'top-k':>5} {'measured':>10} {'formula':>10} {'even, none dropped':>19} "
          f"{'data parallel':>14}")
    for row in rows:
        print(f"{row['p']:>3} {row['top_k']:>5} {row['measured']:>10,} {row['formula']:>10,} "
              f"{row['even']:>19,} {row['data_parallel']:>14,}")
    exact = all(row["exact"] for row in rows)
    print(f"target: measured = formula on every rank of every row: {'met' if exact else 'MISSED'}")

    p = max(ranks)
    tables = {}
    for name, skew in (("random gate", 0.0), (f"skewed gate (+{args.skew:g})", args.skew)):
        tables[name] = measure(p, args.experts, 1, *shape, skew=skew)["table"]
        print(f"\n2. tokens per expert, {name}, P = {p}, top-1, one step:")
        print(format_load(tables[name]))
    return dict(rows=rows, tables=tables)


if __name__ == "__main__":
    main()
