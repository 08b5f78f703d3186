"""Train the small transformer on a DP x PP x TP grid of ranks ("3-D parallelism").

    mpirun -n 4 python -m mpi4py -m minidist.examples.parallel_3d --dp 2 --pp 2
    mpirun -n 4 python -m mpi4py -m minidist.examples.parallel_3d --dp 2 --tp 2
    mpirun -n 8 python -m mpi4py -m minidist.examples.parallel_3d --dp 2 --pp 2 --tp 2
    python -m minidist.examples.parallel_3d --ranks 4 --dp 2 --pp 2    # in-process ranks
    mpirun -n 4 python -m mpi4py -m minidist.examples.parallel_3d --dp 2 --pp 2 --device cuda

The model, data and optimiser of ``minidist.examples.tensor_parallel``.
``ProcessGrid`` lays the ranks on the grid, rank = (d·pp + p)·tp + t, and
cuts a communicator for each line of it (``minidist.parallel.grid``). Each step:

1. every rank draws the same batch; replica d (its dp coordinate) takes the
   d-th of ``--dp`` equal shares of it;
2. the replica's pipeline of ``--pp`` stages (``Pipeline``, 1F1B,
   ``--micro-batches`` M) runs forward and backward: activations and
   gradients between neighbouring stages, in the **pp group**; inside each
   stage every block is split over the **tp group** (two allreduces per
   block and micro-batch forward, two backward);
3. the ranks holding the same slice of the same stage average their
   gradients, one allreduce in the **dp group** (``average_gradients``);
4. Adam updates each rank's own slices of its own stage.

The arithmetic is one process's on the whole batch (equal shares, the
micro-batches' losses weighted by their rows), so the loss curve is the
single-process one to rounding (float64 by default).

The last stage of replica 0, which has that replica's loss, prints the
grid (each rank's coordinates and the members of its three groups), shows
the progress bar, and then trains the same model in one process. It prints
each rank's collectives per step: how many, in which group, and the
messages the rank sent, counted by the transport in two phases (forward and
backward: the tp and pp groups; averaging: the dp group) beside what the
formulas add up to; and both final losses (the grid's: the mean over the
replicas) with the largest difference between the two loss curves.

``--device cuda`` (or ``strict``, the CI guard's stand-in) computes every
rank's slices on the device, its share of each batch copied there once;
what the groups exchange crosses to the host only to be communicated. The
ranks under ``mpirun`` may share one GPU.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
from tqdm import tqdm

from minidist import backend
from minidist.comm import Communicator, LocalCluster, LocalCommunicator, allreduce, gather, world
from minidist.examples.options import choose_device, integer, options_checked, run_ranks
from minidist.examples.tensor_parallel import (
    add_model_args,
    check_model_args,
    make_model,
    make_text,
)
from minidist.models.transformer import Block, sequence_loss
from minidist.optim import Adam
from minidist.parallel.grid import ProcessGrid, average_gradients
from minidist.parallel.pipeline import Pipeline
from minidist.util import chunk_bounds


def train(grid: ProcessGrid, args: argparse.Namespace, progress: bool = True
          ) -> dict[str, Any]:
    """Train on ``grid`` (its shape is ``args.dp x args.pp x args.tp``).

    Returns ``dict(losses, seconds, counts)``: ``losses`` this rank's replica's
    loss per step (nan off the last stage); ``counts`` the first and last layer
    of its stage, its blocks, and the messages it sent per step while running
    forward and backward and while averaging.
    """
    c, (d, p, _) = grid.c, grid.coords
    text = make_text(args)
    model = make_model(args, text, grid.tp_group)              # 1. blocks split over tp
    pipe = (Pipeline(model, grid.pp_group, args.micro_batches, loss_fn=sequence_loss)
            if args.pp > 1 else None)                           # 2. cut into pp stages
    stage = pipe.stage if pipe is not None else model
    params = (pipe or model).parameters()
    opt = Adam(params, lr=args.lr)
    lo, hi = chunk_bounds(args.batch, args.dp)[d]               # this replica's share
    rng, losses = np.random.default_rng(args.seed + 1), []
    xp = backend.xp()
    sent = np.zeros(2)  # messages sent in forward+backward, in averaging
    last = p == args.pp - 1
    start = time.perf_counter()
    bar = tqdm(range(args.steps), desc=f"steps, {shape_name(args)}", disable=not progress)
    for _ in bar:
        ids, targets = text.batch(rng, args.batch, args.context)  # the same batch everywhere
        ids, targets = xp.asarray(ids[lo:hi]), xp.asarray(targets[lo:hi])  # to the device
        opt.zero_grad()
        before = c.stats.messages_sent
        if pipe is None:                        # 3. forward and backward: tp (and pp) groups
            loss = sequence_loss(model(ids), targets)
            loss.backward()
            loss = loss.item()
        else:
            loss = pipe.train_step(ids if p == 0 else None, targets if last else None)
        middle = c.stats.messages_sent
        average_gradients(params, grid.dp_group)                # 4. the dp group
        opt.step()                                              # 5. my slices of my stage
        sent += (middle - before, c.stats.messages_sent - middle)
        losses.append(np.nan if loss is None else loss)
        if last:
            bar.set_postfix(loss=f"{loss:.4f}")
    seconds = time.perf_counter() - start
    held = sorted({int(name.split(".")[0]) for name, _ in stage.named_parameters()})
    blocks = sum(isinstance(layer, Block) for layer in stage)
    counts = np.array([held[0], held[-1], blocks, *(sent / args.steps)])
    return dict(losses=np.array(losses), seconds=seconds, counts=counts)


def run(c: Communicator, args: argparse.Namespace) -> dict[str, Any]:
    """Train on the grid; the reporter (the last stage of replica 0) prints the grid, shows
    the progress bar, and returns the mean loss over the replicas, every rank's counts and
    the same training in one process (``single``); the other ranks their own result."""
    grid = ProcessGrid(c, args.dp, args.pp, args.tp)
    reporter = c.rank == reporter_rank(args)
    if reporter:
        print(grid.describe(), flush=True)
    result = train(grid, args, progress=reporter)
    # communication: the last stages' losses, summed over the replicas of each slice
    mean = allreduce(np.nan_to_num(result["losses"]), grid.dp_group) / args.dp
    # communication: every rank's counts, to the reporter
    counts = gather(result["counts"], c, root=reporter_rank(args))
    alone = c.split(color=c.rank)  # communication: a communicator of one rank each
    if reporter:
        one = argparse.Namespace(**(vars(args) | dict(dp=1, pp=1, tp=1)))
        result.update(grid=grid, losses=mean, counts=counts,
                      single=train(ProcessGrid(alone), one, progress=True))
    c.barrier()  # the other ranks wait while the reporter trains alone
    return result


def reporter_rank(args: argparse.Namespace) -> int:
    """Coordinates (0, pp-1, 0): the last stage of replica 0, which has its loss."""
    return (args.pp - 1) * args.tp


def shape_name(args: argparse.Namespace) -> str:
    return f"dp={args.dp} x pp={args.pp} x tp={args.tp}"


def layer_name(index: int, layers: int) -> str:
    return "Embed" if index == 0 else "Head" if index == layers + 1 else f"Block{index}"


def collectives_table(result: dict[str, Any], args: argparse.Namespace) -> str:
    """Per rank and step: each collective, its group, and the messages sent beside the
    formulas (a ring allreduce sends 2(P-1) per rank; a pipeline stage a header and M
    activations forward, M gradients back)."""
    grid, pp, tp, dp = result["grid"], args.pp, args.tp, args.dp
    micro = args.micro_batches if pp > 1 else 1
    lines = ["per step: each rank's collectives, the group they run in, the messages it sent "
             "(counted = formula)",
             f"{'rank':>4}  {'layers':<13} {'tp allreduces':>14} {'pp messages':>12} "
             f"{'dp allreduces':>14}   {'forward+backward':<18} averaging"]
    for rank, (first, final, blocks, running, averaging) in enumerate(result["counts"]):
        _, p, _ = grid.coordinates(rank)
        tp_calls = int(4 * blocks * micro)
        pp_messages = (1 + micro if p < pp - 1 else 0) + (micro if p > 0 else 0)
        layers = layer_name(int(first), args.layers)
        if final != first:
            layers += "-" + layer_name(int(final), args.layers)
        fb = f"{running:g} = {tp_calls * 2 * (tp - 1)} + {pp_messages}"
        lines.append(f"{rank:>4}  {layers:<13} {tp_calls:>14} {pp_messages:>12} "
                     f"{int(dp > 1):>14}   {fb:<18} {averaging:g} = {2 * (dp - 1)}")
    lines.append("(tp allreduces: 2 per block forward and 2 backward, per micro-batch; "
                 "each sends 2(tp-1) messages; one dp allreduce sends 2(dp-1))")
    return "\n".join(lines)


def summary(result: dict[str, Any], args: argparse.Namespace) -> str:
    single, losses = result["single"], result["losses"]
    return (f"{shape_name(args)}: final loss {losses[-1]:.6f} after {args.steps} steps "
            f"({result['seconds']:.1f} s, the mean over {args.dp} replica(s)); one process: "
            f"{single['losses'][-1]:.6f} ({single['seconds']:.1f} s); largest difference "
            f"over the curve {np.max(np.abs(losses - single['losses'])):.1e} "
            f"({args.dtype} on {args.device})")


def check_args(args: argparse.Namespace, ranks: int) -> None:
    """Refuse what the grid cannot run, the same way on every rank, before any message."""
    if min(args.dp, args.pp, args.tp) < 1 or args.dp * args.pp * args.tp != ranks:
        raise ValueError(f"a grid of {shape_name(args)} needs {args.dp * args.pp * args.tp} "
                         f"ranks, there are {ranks}")
    check_model_args(args, args.tp)
    if args.batch % args.dp:
        raise ValueError(f"--batch {args.batch} cannot be cut into {args.dp} equal "
                         "data-parallel shares")
    if args.pp > args.layers + 2:
        raise ValueError(f"--pp {args.pp}: the model has {args.layers + 2} layers "
                         "(Embed, the blocks, Head), one at least per stage")
    if args.pp > 1 and not 1 <= args.micro_batches <= args.batch // args.dp:
        raise ValueError(f"--micro-batches {args.micro_batches}: must be in "
                         f"1..{args.batch // args.dp} (the rows of a replica's share)")


def parse_args(argv: list[str] | None, ranks: int) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dp", type=integer(1), default=None,
                        help="data-parallel replicas (default: the ranks / (pp x tp))")
    parser.add_argument("--pp", type=integer(1), default=1, help="pipeline stages")
    parser.add_argument("--tp", type=integer(1), default=1, help="tensor-parallel ranks per stage")
    parser.add_argument("--micro-batches", type=integer(1), default=4, help="M per replica's share")
    add_model_args(parser)
    parser.add_argument("--ranks", type=integer(1), default=None,
                        help="in-process ranks when not under mpirun (default: dp x pp x tp)")
    args = parser.parse_args(argv)
    args.device = choose_device(parser, args.device)  # on every rank, before the model
    if args.dp is None:
        given = ranks if args.ranks is None else args.ranks
        args.dp = max(1, given // max(1, args.pp * args.tp))
    return args


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    """Run the command line; returns the reporter's result (None on the other MPI ranks)."""
    c = world()
    in_process = isinstance(c, LocalCommunicator)
    args = parse_args(argv, 1 if in_process else c.size)
    with options_checked("parallel_3d", c):
        ranks = run_ranks(c, args.ranks, default=args.dp * args.pp * args.tp)
        check_args(args, ranks)
    if in_process:
        result = LocalCluster(ranks).run(run, args=(args,), timeout=None)[reporter_rank(args)]
    else:
        result = run(c, args)
        if c.rank != reporter_rank(args):
            return None
    print(collectives_table(result, args), summary(result, args), sep="\n", flush=True)
    return result


if __name__ == "__main__":
    main()
