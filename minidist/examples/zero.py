"""Train the course's MLP on the digits with ZeRO: the optimiser state (and gradients) sharded.

    mpirun -n 2 python -m mpi4py -m minidist.examples.zero              # ZeRO-1
    mpirun -n 2 python -m mpi4py -m minidist.examples.zero --stage 2    # gradients sharded too
    python -m minidist.examples.zero                                    # 1 process, same code
    mpirun -n 2 python -m mpi4py -m minidist.examples.zero --device cuda  # 2 ranks, 1 GPU

The model, data and hyper-parameters of ``minidist.examples.mlp_ddp``: each
step the global batch (32 samples) is split over the P ranks, every rank runs
forward and backward on its share, and ``ShardedOptimizer``
(``minidist.parallel.zero``) reduce-scatters the gradients, updates this
rank's shard of the weights with that shard's optimiser state alone, and
allgathers the weights. Then the same run with ``DataParallel``, and one
process on the whole global batch (on rank 0), for a summary: how far apart
the three runs' weights end (float32 rounding: ZeRO and DDP sum the same
gradients in the same order at P = 2; one process averages the whole batch
at once; where P does not divide the 1,438 training samples, the ranks also
read the first few of each epoch twice, ``DistributedSampler``'s padding,
which one process does not, and the summary says so), and what a rank holds
for DDP and for ZeRO, counted from its
arrays, beside the formula, with the bytes it sent per step
(``--no-compare`` skips the other two runs).

``--device cuda`` (or ``strict``, the CI guard's stand-in) puts every rank's
model, shard and optimiser state on the device; each local batch is copied
there once, and the shards cross to the host only to be communicated.

Only rank 0 prints and shows the progress bar; every rank trains.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
from tqdm import tqdm

from minidist import backend
from minidist.comm import Communicator, allreduce, world
from minidist.data import DataLoader, DistributedSampler, load_digits, standardize
from minidist.examples import mlp
from minidist.examples.mlp import OPTIMIZERS, make_optimizer
from minidist.examples.options import (
    add_device_option,
    check_global_batch,
    choose_device,
    integer,
    number,
    options_checked,
)
from minidist.models.mlp import accuracy, build_mlp, classification_loss
from minidist.parallel.ddp import DataParallel
from minidist.parallel.zero import ShardedOptimizer, bytes_held, bytes_sent_per_step, values_held

STATES = {"adam": 2, "sgd": 1}  # optimiser values per parameter (K): m and s; the velocity
NAMES = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2"}


def train(comm: Communicator | None = None, stage: int = 1, epochs: int = 20,
          global_batch: int = 32, lr: float = 3e-3, hidden: int = 256,
          optimizer: str = "adam", seed: int = 0, progress: bool = True) -> dict[str, Any]:
    """ZeRO (``stage`` 1 or 2; 0: DataParallel) on the ranks of ``comm`` (default: the world),
    on the current device (``md.set_device``).

    Returns, on every rank, ``dict(model, losses, accuracy, seconds, held, sent)``:
    ``losses`` the mean training loss of each epoch over all ranks, ``held`` the bytes
    of model states this rank holds after the last step (``bytes_held``), ``sent`` the
    bytes it sent in the last step.
    """
    c = comm if comm is not None else world()
    if global_batch % c.size:
        raise ValueError(f"global batch {global_batch} must be a multiple of the {c.size} ranks")
    train_set, test_set = standardize(*load_digits(test_fraction=0.2, seed=seed))
    net = build_mlp((train_set.x.shape[1], hidden, train_set.num_classes), seed=seed)
    if stage == 0:
        model = DataParallel(net, c)
        opt = make_optimizer(optimizer, model.parameters(), lr)
    else:  # make_optimizer's optimisers, built by the ShardedOptimizer on this rank's shard
        hyper = dict(lr=lr, momentum=0.9) if optimizer == "sgd" else dict(lr=lr)
        model, opt = net, ShardedOptimizer(net.parameters(), c, optimizer, stage, **hyper)
    sampler = DistributedSampler(len(train_set), c.size, c.rank, seed=seed,
                                 batch_size=global_batch // c.size)
    loader = DataLoader(train_set, sampler=sampler)
    xp = backend.xp()

    losses, sent = [], 0
    start = time.perf_counter()
    bar = tqdm(range(epochs), desc=f"{NAMES[stage]} ({c.size} ranks)",
               disable=not progress or c.rank)
    for _ in bar:
        total = np.zeros(2)  # this rank's summed loss and sample count
        for x, y in loader:
            x, y = xp.asarray(x), xp.asarray(y)  # the batch to the device, once
            opt.zero_grad()
            before = c.stats.bytes_sent
            loss = classification_loss(model, x, y)
            loss.backward()  # local gradients (DDP: averaged when it returns)
            opt.step()  # ZeRO: reduce-scatter, update my shard, allgather
            sent = c.stats.bytes_sent - before
            total += (loss.item() * len(y), len(y))
        # communication: the epoch's loss over all ranks (one small allreduce per epoch)
        loss_sum, count = allreduce(total, c)
        losses.append(loss_sum / count)
        bar.set_postfix(loss=f"{losses[-1]:.4f}")
    seconds = time.perf_counter() - start
    return dict(model=net, losses=losses, seconds=seconds, sent=sent, samples=len(train_set),
                accuracy=accuracy(net, test_set.x, test_set.y),
                held=bytes_held(net.parameters(), opt))


def largest_difference(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    return max(float(np.abs(a[name] - b[name]).max()) for name in a)


def summary(c: Communicator, stage: int, optimizer: str, runs: dict[str, dict]) -> str:
    """What rank 0 prints: accuracies and weight differences, then memory and traffic."""
    zero = runs[NAMES[stage]]
    weights = zero["model"].state_dict()
    lines = [f"{NAMES[stage]} on {c.size} rank(s), {optimizer}: test accuracy "
             f"{zero['accuracy']:.2%} after {len(zero['losses'])} epochs "
             f"({zero['seconds']:.1f} s of training on {backend.get_device()})"]
    for name, run in runs.items():
        if name != NAMES[stage]:
            lines.append(f"  {name + ':':<28} test accuracy {run['accuracy']:.2%}, largest "
                         f"weight difference from {NAMES[stage]}'s "
                         f"{largest_difference(run['model'].state_dict(), weights):.1e}")
    padded = -zero["samples"] % c.size  # samples each epoch reads twice on P ranks
    if padded and "one process" in runs:
        lines.append(f"  ({c.size} ranks do not divide the {zero['samples']:,} training "
                     f"samples: each epoch they read {padded} of them twice, DistributedSampler's"
                     " padding, and one process does not; so its weights differ by more than "
                     "rounding)")
    params = zero["model"].parameters()
    n, itemsize, tensors = sum(p.size for p in params), params[0].data.itemsize, len(params)
    lines.append(f"model states held by rank 0 (N = {n:,} parameters of {itemsize} bytes), "
                 "bytes sent by rank 0 per step:")
    lines.append(f"  {'':8}{'parameters':>12}{'gradients':>12}{'opt. state':>12}{'total':>12}"
                 f"{'formula':>12}{'sent':>12}")
    for strategy in (0, stage):
        run = runs.get(NAMES[strategy])
        if run is None:
            continue
        formula = values_held(n, c.size, 0, strategy, STATES[optimizer])
        formula["gradients"] += tensors if strategy == 0 else 0  # DDP's flags, one a tensor
        held = run["held"]
        lines.append(f"  {NAMES[strategy]:8}" + "".join(f"{v:>12,}" for v in held.values())
                     + f"{sum(held.values()):>12,}{sum(formula.values()) * itemsize:>12,}"
                     f"{run['sent']:>12,}")
    lines.append(f"  ZeRO's traffic by the formula: {bytes_sent_per_step(n, c.size, 0, itemsize):,}"
                 f" bytes; 2(P-1)/P·N·b = {2 * (c.size - 1) * n * itemsize / c.size:,.0f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", type=int, choices=(1, 2), default=1)
    parser.add_argument("--epochs", type=integer(1), default=20)
    parser.add_argument("--global-batch", type=integer(1), default=32,
                        help="samples per step over all ranks (a multiple of P)")
    parser.add_argument("--lr", type=number(above=0), default=None,
                        help="learning rate (default: 3e-3 for adam, 0.05 for sgd)")
    parser.add_argument("--hidden", type=integer(1), default=256)
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default="adam")
    parser.add_argument("--seed", type=integer(0), default=0)
    parser.add_argument("--no-compare", action="store_true",
                        help="skip the DDP and one-process runs")
    add_device_option(parser)
    args = parser.parse_args(argv)
    choose_device(parser, args.device)  # on every rank, before the models are built
    lr = args.lr if args.lr is not None else (3e-3 if args.optimizer == "adam" else 0.05)
    c = world()
    with options_checked("zero", c):
        check_global_batch(args.global_batch, c.size)
    options = dict(epochs=args.epochs, global_batch=args.global_batch, lr=lr,
                   hidden=args.hidden, optimizer=args.optimizer, seed=args.seed)
    runs = {NAMES[args.stage]: train(c, args.stage, **options)}
    if not args.no_compare:
        runs[NAMES[0]] = train(c, 0, **options, progress=False)
        if c.rank == 0:  # one process, the whole global batch each step
            runs["one process"] = mlp.train(batch_size=args.global_batch, progress=False,
                                            **{k: v for k, v in options.items()
                                               if k != "global_batch"})
    if c.rank == 0:
        print(summary(c, args.stage, args.optimizer, runs))
    return runs[NAMES[args.stage]]


if __name__ == "__main__":
    main()
