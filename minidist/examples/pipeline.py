"""Train the course's MLP on the digits with pipeline parallelism: K stages on K ranks.

    mpirun -n 2 python -m mpi4py -m minidist.examples.pipeline --schedule gpipe --micro-batches 8
    mpirun -n 2 python -m mpi4py -m minidist.examples.pipeline --schedule 1f1b --gantt 1f1b.png
    mpirun -n 3 python -m mpi4py -m minidist.examples.pipeline --hidden 256 256 --rematerialise
    python -m minidist.examples.pipeline                  # one process: the whole model
    python -m minidist.examples.pipeline --ranks 2        # two in-process ranks
    mpirun -n 2 python -m mpi4py -m minidist.examples.pipeline --device cuda  # 2 ranks, 1 GPU

The same model, data and hyper-parameters as ``minidist.examples.mlp``
(MLP([64, 256, 10]), Adam, batches of 32, 20 epochs; ``--hidden 256 256``
makes it deeper); what changes is who computes what. The model's layers are
cut into K consecutive stages (``Pipeline``: rank k holds stage k), each
batch into M micro-batches (``--micro-batches``); rank 0 reads the images,
the last rank the labels. Activations go forward and gradients backward
between neighbouring ranks, in the order of ``--schedule``:

- ``naive``: one micro-batch through the whole pipe and back before the next;
- ``gpipe``: all M forwards, then all M backwards;
- ``1f1b``: a forward, a backward, ... (at most K micro-batches held).

Each rank then steps the optimiser on its own stage's parameters. The
arithmetic is one process's on the whole batch (the micro-batches' losses
are weighted by their share of it), so the accuracy is the single-process
run's, about 97.5%, whatever the schedule, K or M: run it with one process
to see the same figure (float32 rounding moves the last digits only).
``--rematerialise`` keeps only each stage's input per micro-batch and
recomputes the rest in backward: the same numbers, less memory, one more
forward.

The last rank prints the schedule, shows the progress bar and prints the
accuracy and the bubble of the last mini-batch, per stage (idle share of its
span, on the wall clock), beside the formula: (K-1)/(M+K-1), or (K-1)/K for
the naive schedule. ``--gantt FILE.png`` draws that mini-batch as a Gantt
chart (``minidist.viz.plot_gantt``). The formula assumes equal stages; these
are not: with micro-batches of 4 digits, Python's cost per op outweighs the
arithmetic, and the last stage runs more ops (the activation, the loss), so
the first one idles most of the time, waiting for it.
``python -m minidist.bench.pipeline`` measures the bubble on a model big
enough for the arithmetic to dominate.

``--device cuda`` (or ``strict``, the CI guard's stand-in) puts every
stage on the device; each batch is copied there once, and activations and
gradients cross to the host only to be sent to the neighbouring stage.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
from tqdm import tqdm

from minidist import backend
from minidist.comm import Communicator, LocalCluster, LocalCommunicator, gather, world
from minidist.data import DataLoader, load_digits, standardize
from minidist.examples.mlp import OPTIMIZERS, make_optimizer
from minidist.examples.options import (
    add_device_option,
    choose_device,
    image_file,
    integer,
    number,
    options_checked,
    run_ranks,
)
from minidist.models.mlp import build_mlp
from minidist.parallel.pipeline import (
    SCHEDULES,
    Pipeline,
    bubble_formula,
    bubbles,
    format_schedule,
)


def train(c: Communicator, args: argparse.Namespace, progress: bool = True) -> dict[str, Any]:
    """Pipeline training on the ranks of ``c``; see the module's docstring.

    Returns, on the last rank, ``dict(losses, accuracy, seconds, traces)``: the
    mean training loss of each epoch, the test accuracy, the wall time of
    training, and every rank's trace of the last mini-batch (``plot_gantt``'s
    input); the other ranks return ``dict(seconds)``. Computes on the current device
    (``md.set_device``).
    """
    train_set, test_set = standardize(*load_digits(test_fraction=0.2, seed=args.seed))
    model = build_mlp((train_set.x.shape[1], *args.hidden, train_set.num_classes),
                      seed=args.seed)
    pipe = Pipeline(model, c, args.micro_batches, schedule=args.schedule,      # 1. the stages
                    rematerialise=args.rematerialise)
    params = pipe.parameters()  # a stage of ReLUs alone has none: nothing to update
    opt = make_optimizer(args.optimizer, params, args.lr) if params else None
    loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, seed=args.seed)
    first, last = c.rank == 0, pipe.is_last
    xp = backend.xp()
    if last and progress:
        print(f"{args.schedule} schedule, {c.size} stage(s), {args.micro_batches} "
              f"micro-batches per batch of {args.batch_size}:\n"
              f"{format_schedule(pipe.schedule)}", flush=True)

    losses: list[float] = []
    start = time.perf_counter()
    bar = tqdm(range(args.epochs), desc=f"epochs ({args.schedule}, K = {c.size})",
               disable=not (progress and last))
    for epoch in bar:
        total, count = 0.0, 0
        for x, y in loader:                     # every rank draws the same batches
            x, y = xp.asarray(x), xp.asarray(y)  # to the device, once
            if opt is not None:
                opt.zero_grad()
            loss = pipe.train_step(x if first else None, y if last else None)  # 2. pipeline
            if opt is not None:
                opt.step()                      # 3. each rank updates its own stage
            if last:
                total += loss * len(y)
                count += len(y)
        if last:
            losses.append(total / count)
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
            if progress:
                tqdm.write(f"epoch {epoch + 1:3d}  train loss {losses[-1]:.4f}")
    seconds = time.perf_counter() - start
    traces = gather_traces(pipe, c)
    logits = pipe.predict(test_set.x if first else None)                        # 4. test set
    if not last:
        return dict(seconds=seconds)
    predicted = backend.to_numpy(logits.argmax(axis=1))
    return dict(losses=losses, seconds=seconds, traces=traces,
                accuracy=float(np.mean(predicted == backend.to_numpy(test_set.y))))


def gather_traces(pipe: Pipeline, c: Communicator) -> list | None:
    """Every rank's ``(step, start, end)`` of the last mini-batch, on the last rank."""
    times = np.array([(start, end) for _, start, end in pipe.last_run.trace])
    # communication: each rank's step times to the last rank (2M steps on every rank)
    stacked = gather(times, c, root=c.size - 1)
    if stacked is None:
        return None
    return [[(str(step), float(s), float(e)) for step, (s, e) in zip(steps, rows, strict=True)]
            for steps, rows in zip(pipe.schedule, stacked, strict=True)]


def check_args(args: argparse.Namespace, ranks: int, train_rows: int) -> None:
    """Refuse what the pipeline cannot run, the same way on every rank, before any message."""
    layers = 2 * len(args.hidden) + 1  # Linear, ReLU, ..., Linear
    if not 1 <= ranks <= layers:
        raise ValueError(f"{ranks} ranks for {layers} layers (--hidden "
                         f"{' '.join(map(str, args.hidden))}): each stage needs a layer")
    smallest = train_rows % args.batch_size or args.batch_size  # the epoch's last batch
    if not 1 <= args.micro_batches <= smallest:
        raise ValueError(f"--micro-batches {args.micro_batches}: must be in 1..{smallest} (the "
                         f"smallest batch of {args.batch_size} has {smallest} rows)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), default="1f1b")
    parser.add_argument("--micro-batches", type=integer(1), default=8, help="M per batch")
    parser.add_argument("--rematerialise", action="store_true",
                        help="keep only each stage's input; recompute the rest in backward")
    parser.add_argument("--gantt", type=image_file, default=None,
                        help="PNG of the last mini-batch's schedule")
    parser.add_argument("--epochs", type=integer(1), default=20)
    parser.add_argument("--batch-size", type=integer(1), default=32)
    parser.add_argument("--lr", type=number(above=0), default=None,
                        help="learning rate (default: 3e-3 for adam, 0.05 for sgd)")
    parser.add_argument("--hidden", type=integer(1), nargs="+", default=[256],
                        help="widths of the hidden layers")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default="adam")
    parser.add_argument("--seed", type=integer(0), default=0)
    parser.add_argument("--ranks", type=integer(1), default=None,
                        help="in-process ranks when not under mpirun (default 1)")
    add_device_option(parser)
    args = parser.parse_args(argv)
    args.device = choose_device(parser, args.device)  # on every rank, before the model
    if args.lr is None:
        args.lr = 3e-3 if args.optimizer == "adam" else 0.05
    return args


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    """Run the command line; returns the last rank's result (None on the other MPI ranks)."""
    args = parse_args(argv)
    c = world()
    in_process = isinstance(c, LocalCommunicator)
    with options_checked("pipeline", c):
        ranks = run_ranks(c, args.ranks, default=1)
        check_args(args, ranks, len(load_digits(test_fraction=0.2, seed=args.seed)[0]))
    if in_process:
        result = LocalCluster(ranks).run(train, args=(args,), timeout=None)[-1]
    else:
        result = train(c, args)
        if c.rank != c.size - 1:
            return None
    measured = bubbles(result["traces"])
    formula = (f"(K-1)/K = {(ranks - 1) / ranks:.0%}" if args.schedule == "naive" else
               f"(K-1)/(M+K-1) = {bubble_formula(ranks, args.micro_batches):.0%}")
    print(f"test accuracy {result['accuracy']:.2%} after {args.epochs} epochs, "
          f"{args.schedule} on {ranks} stage(s), {args.micro_batches} micro-batches "
          f"({result['seconds']:.1f} s of training on {args.device}); "
          "bubble of the last mini-batch per stage "
          + ", ".join(f"{b:.0%}" for b in measured) + f" (formula {formula})", flush=True)
    if args.gantt:
        from minidist.viz.gantt import plot_gantt

        plot_gantt(result["traces"], args.gantt,
                   title=f"{args.schedule}, K = {ranks}, M = {args.micro_batches}: "
                         "the last mini-batch")
        print(f"Gantt chart written to {args.gantt}", flush=True)
    return result


if __name__ == "__main__":
    main()
