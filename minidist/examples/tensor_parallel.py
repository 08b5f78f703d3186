"""Train a small transformer with tensor parallelism: every block split over P ranks.

    mpirun -n 2 python -m mpi4py -m minidist.examples.tensor_parallel             # TP = 2
    mpirun -n 4 python -m mpi4py -m minidist.examples.tensor_parallel --steps 100
    python -m minidist.examples.tensor_parallel --ranks 2    # two in-process ranks
    python -m minidist.examples.tensor_parallel              # one process: the whole blocks
    mpirun -n 2 python -m mpi4py -m minidist.examples.tensor_parallel --device cuda  # 1 GPU

The model is the course's transformer (``minidist.models.transformer``:
token and position embeddings, ``--layers`` pre-norm blocks of causal
self-attention with ``--heads`` heads and an MLP of width 4d, layer norms,
the projection to the characters), trained with Adam on the seeded
character-level text (``minidist.data.characters``: predict each next
character of ``--batch`` windows of ``--context`` characters per step).

Tensor parallelism (Megatron-LM): rank r holds 1/P of every block, its
H/P heads of attention and 4d/P hidden units of the MLP, and every rank
reads the same batch. Each block's attention and MLP end in one allreduce
forward (their partial outputs summed) and one backward (the partial
gradients of their input summed): per step 2 x 2 x ``--layers`` allreduces
of batch·context·d values. The example counts them from the transport's
messages (a ring allreduce sends 2(P-1) per rank); embeddings, norms and
the output projection are replicated and send nothing.

Rank 0 shows the progress bar, then trains the same model, data and
optimiser in one process (a communicator of its own rank) and prints both
final losses and the largest difference between the two loss curves. The
arithmetic is the same, only a sum of P partial products is rounded in
another order: in float64 (the default) the curves agree to ~1e-15; in
float32 (``--dtype float32``) the first steps agree to ~1e-7 and the
optimisation lets the difference grow (to ~1e-3 after 300 steps). A model
this small is dominated by Python and messages, so P ranks are slower than
one here; ``python -m minidist.bench.model_parallel`` times a block wide
enough for the split to pay.

``--device cuda`` (or ``strict``, the CI guard's stand-in) computes every
rank's slices on the device; each step's batch is copied there once, and the
partial sums cross to the host only to be allreduced.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
from tqdm import tqdm

from minidist import backend
from minidist.comm import Communicator, LocalCluster, LocalCommunicator, world
from minidist.data.characters import CharacterText
from minidist.examples.options import (
    add_device_option,
    choose_device,
    integer,
    number,
    options_checked,
    run_ranks,
)
from minidist.models.transformer import Transformer, sequence_loss
from minidist.optim import Adam

DTYPES = {"float32": np.float32, "float64": np.float64}


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """The model, data and optimiser options (shared with ``examples.parallel_3d``)."""
    parser.add_argument("--steps", type=integer(1), default=300)
    parser.add_argument("--d", type=integer(1), default=32, help="model width")
    parser.add_argument("--heads", type=integer(1), default=4)
    parser.add_argument("--layers", type=integer(1), default=2, help="transformer blocks")
    parser.add_argument("--context", type=integer(1), default=32, help="characters per window")
    parser.add_argument("--batch", type=integer(1), default=16, help="windows per step")
    parser.add_argument("--lr", type=number(above=0), default=3e-3, help="Adam's learning rate")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float64")
    parser.add_argument("--seed", type=integer(0), default=0)
    add_device_option(parser)


def check_model_args(args: argparse.Namespace, tp: int) -> None:
    """Refuse what the model cannot be, before any message."""
    if args.d % args.heads:
        raise ValueError(f"--d {args.d} is not divisible by --heads {args.heads}")
    if args.heads % tp:
        raise ValueError(f"{args.heads} heads cannot be split over {tp} tensor-parallel ranks")


def make_text(args: argparse.Namespace) -> CharacterText:
    return CharacterText.generate(seed=args.seed, num_tokens=20_000)


def make_model(args: argparse.Namespace, text: CharacterText, tp_group) -> Transformer:
    """The transformer with its blocks split over ``tp_group`` (every rank: the same seed)."""
    return Transformer(len(text.alphabet), d=args.d, heads=args.heads, layers=args.layers,
                       context=args.context, c=tp_group, seed=args.seed,
                       dtype=DTYPES[args.dtype])


def train(c: Communicator, args: argparse.Namespace, progress: bool = True) -> dict[str, Any]:
    """Train with the blocks split over ``c``: ``dict(losses, seconds, messages, bytes)``,
    the loss of each step (the same on every rank) and what this rank sent per step.
    Computes on the current device (``md.set_device``)."""
    text = make_text(args)
    model = make_model(args, text, c)                           # 1. my slice of each block
    opt = Adam(model.parameters(), lr=args.lr)
    rng, losses = np.random.default_rng(args.seed + 1), []
    xp = backend.xp()
    sent = (c.stats.messages_sent, c.stats.bytes_sent)
    start = time.perf_counter()
    label = f"TP = {c.size}" if c.size > 1 else "one process"
    bar = tqdm(range(args.steps), desc=f"steps, {label}", disable=not progress)
    for _ in bar:
        ids, targets = text.batch(rng, args.batch, args.context)  # 2. the same batch everywhere
        ids, targets = xp.asarray(ids), xp.asarray(targets)       # to the device, once
        opt.zero_grad()
        loss = sequence_loss(model(ids), targets)    # 3. forward: an allreduce per attention
        loss.backward()                              # 4. and per MLP; backward: one more each
        opt.step()                                   # 5. every rank updates its own slices
        losses.append(loss.item())
        bar.set_postfix(loss=f"{losses[-1]:.4f}")
    seconds = time.perf_counter() - start
    return dict(losses=np.array(losses), seconds=seconds,
                messages=(c.stats.messages_sent - sent[0]) / args.steps,
                bytes=(c.stats.bytes_sent - sent[1]) / args.steps)


def run(c: Communicator, args: argparse.Namespace) -> dict[str, Any]:
    """Tensor-parallel training on ``c``, then, on rank 0, the same in one process.

    Returns, on rank 0, the TP run's result with ``single`` (the one-process
    run's) added; on the other ranks the TP run's result alone.
    """
    result = train(c, args, progress=c.rank == 0)
    alone = c.split(color=c.rank)  # communication: a communicator of one rank each
    if c.rank == 0:
        result["single"] = train(alone, args, progress=True)
    c.barrier()  # the other ranks wait while rank 0 trains alone
    return result


def summary(result: dict[str, Any], ranks: int, args: argparse.Namespace) -> str:
    single, losses = result["single"], result["losses"]
    ring = 2 * (ranks - 1)  # messages per rank of one ring allreduce
    expected = 4 * args.layers
    activations = args.batch * args.context * args.d * np.dtype(DTYPES[args.dtype]).itemsize
    lines = [f"TP = {ranks}: final loss {losses[-1]:.6f} after {args.steps} steps "
             f"({result['seconds']:.1f} s); one process: {single['losses'][-1]:.6f} "
             f"({single['seconds']:.1f} s); largest difference over the curve "
             f"{np.max(np.abs(losses - single['losses'])):.1e} ({args.dtype} on {args.device})"]
    if ranks > 1:
        lines.append(f"allreduces per step: {result['messages'] / ring:g} counted "
                     f"({result['messages']:g} messages sent per rank, {ring} per ring "
                     f"allreduce), expected 2 per block and pass: {args.layers} blocks x 2 x 2 "
                     f"= {expected}; {result['bytes'] / 1e6:.3f} MB sent per rank per step "
                     f"(formula {expected} x 2(P-1)/P x batch·context·d values: "
                     f"{expected * ring / ranks * activations / 1e6:.3f} MB)")
    else:
        lines.append("one rank: the blocks are whole, no allreduce")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser)
    parser.add_argument("--ranks", type=integer(1), default=None,
                        help="in-process ranks when not under mpirun (default 1)")
    args = parser.parse_args(argv)
    args.device = choose_device(parser, args.device)  # on every rank, before the model
    return args


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    """Run the command line; returns rank 0's result (None on the other MPI ranks)."""
    args = parse_args(argv)
    c = world()
    in_process = isinstance(c, LocalCommunicator)
    with options_checked("tensor_parallel", c):
        ranks = run_ranks(c, args.ranks, default=1)
        check_model_args(args, ranks)
    if in_process:
        result = LocalCluster(ranks).run(run, args=(args,), timeout=None)[0]
    else:
        result = run(c, args)
        if c.rank != 0:
            return None
    print(summary(result, ranks, args), flush=True)
    return result


if __name__ == "__main__":
    main()
