"""Train the course's MLP on the digits with data parallelism: P ranks, one model.

    mpirun -n 4 python -m mpi4py -m minidist.examples.mlp_ddp     # 4 processes
    python -m minidist.examples.mlp_ddp                           # 1 process, same code
    mpirun -n 4 python -m mpi4py -m minidist.examples.mlp_ddp --global-batch 256 --scale-lr
    mpirun -n 4 python -m mpi4py -m minidist.examples.mlp_ddp --checkpoint-dir ckpt
    mpirun -n 2 python -m mpi4py -m minidist.examples.mlp_ddp --device cuda  # 2 ranks, 1 GPU

The same model, data and hyper-parameters as ``minidist.examples.mlp``; what
changes is who computes what. Each step the *global* batch (32 samples by
default) is split into P local batches (``DistributedSampler``: rank r takes
every P-th sample of the epoch's shuffled order), every rank runs forward and
backward on its own share, and ``DataParallel`` averages the gradients, so
every rank applies the update one process would have applied with the whole
batch. The accuracy matches the single-process run's (about 97-98%).

**Large batches** (Lecture 4): more ranks invite a larger global batch (more
samples per step keeps each rank busy), hence fewer steps per epoch. The
*linear scaling rule* (Goyal et al. 2017) keeps the progress per epoch: a
batch k times larger takes a k times larger learning rate, reached by a
linear warm-up from the base rate (``--scale-lr``, using
``minidist.optim.schedules.linear_scaling``). The trade-off: a larger batch
means fewer, cheaper-to-synchronise steps, but each one averages away more
gradient noise and the scaled step can overshoot; too small a rate wastes
the large batch (slow progress per epoch), too large a rate — or no warm-up
while the weights still move fast — diverges. Past some batch size no
learning rate recovers the small-batch accuracy in the same number of epochs.

**Checkpoints** (``--checkpoint-dir D``): every ``--checkpoint-every K``
steps, and at the end, rank 0 saves the model, the optimiser and the step
(``minidist.parallel.checkpoint``), with each rank's loss sums of the epoch
so far. Started with the same command, a run resumes from the newest
checkpoint in D: the epoch and batch it stopped at, the same optimiser state
and learning rate, so it ends with the parameters (and losses) of a run
never interrupted. Killed ranks end the job (``minidist.comm.transport.mpirun``
names them); the command again resumes it.

**On a device** (``--device cuda``; ``strict``: the CI guard's stand-in):
every rank chooses it before building its model, so the model, the
optimiser state and the gradient buckets live there; each local batch is
copied there once, and the buckets cross to the host only to be
communicated. Ranks may share one GPU (each process has its own context).

Only rank 0 prints and shows the progress bar; every rank trains.
"""

from __future__ import annotations

import argparse
import itertools
import time
from typing import Any

import numpy as np
from tqdm import tqdm

from minidist import backend
from minidist.comm import Communicator, allgather, allreduce, world
from minidist.comm.collectives import ALGORITHMS
from minidist.data import DataLoader, DistributedSampler, load_digits, standardize
from minidist.examples.mlp import OPTIMIZERS, make_optimizer
from minidist.examples.options import (
    add_device_option,
    check_global_batch,
    choose_device,
    integer,
    number,
    options_checked,
    output_folder,
)
from minidist.models.mlp import accuracy, build_mlp, classification_loss
from minidist.optim.schedules import LRScheduler, linear_scaling
from minidist.parallel.checkpoint import load_checkpoint, save_checkpoint
from minidist.parallel.ddp import DataParallel

BASE_BATCH = 32  # the batch size the single-process learning rates were tuned for


def train(comm: Communicator | None = None, epochs: int = 20, global_batch: int = BASE_BATCH,
          lr: float = 3e-3, scale_lr: bool = False, warmup_epochs: float = 2.0,
          hidden: int = 256, optimizer: str = "adam", seed: int = 0, bucket_mb: float = 25,
          algorithm: str = "ring", progress: bool = True, checkpoint_dir: str | None = None,
          checkpoint_every: int = 100, dtype: Any = np.float32) -> dict[str, Any]:
    """Data-parallel training on the ranks of ``comm`` (default: ``comm.world()``), in
    ``dtype`` on the current device (``md.set_device``); resumed from
    ``checkpoint_dir``'s newest checkpoint when it has one.

    Returns, on every rank, ``dict(model, losses, accuracy, seconds, lr, overlap)``:
    ``losses`` the mean training loss of each epoch over all ranks, ``accuracy``
    on the test set, ``lr`` the final learning rate, ``overlap`` the mean share of
    communication hidden behind backward.
    """
    c = comm if comm is not None else world()
    if global_batch % c.size:
        raise ValueError(f"global batch {global_batch} must be a multiple of the {c.size} ranks")
    if checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be >= 1 step, got {checkpoint_every}")
    train_set, test_set = standardize(*load_digits(test_fraction=0.2, seed=seed))
    model = DataParallel(build_mlp((train_set.x.shape[1], hidden, train_set.num_classes),
                                   seed=seed, dtype=dtype),
                         c, bucket_mb=bucket_mb, algorithm=algorithm)
    sampler = DistributedSampler(len(train_set), c.size, c.rank, seed=seed,
                                 batch_size=global_batch // c.size)
    loader = DataLoader(train_set, sampler=sampler)
    xp = backend.xp()
    opt = make_optimizer(optimizer, model.parameters(), lr)
    scheduler = None
    if scale_lr:  # lr * global_batch / BASE_BATCH, reached by a linear warm-up
        schedule = linear_scaling(lr, global_batch, BASE_BATCH,
                                  warmup_steps=round(warmup_epochs * len(loader)))
        scheduler = LRScheduler(opt, schedule)

    step, losses, overlap = 0, [], []
    total = np.zeros(2)  # this rank's summed loss and sample count in the epoch
    # the seed orders and splits the data, the batch size is what a step counts: as saved
    settings = {"seed": seed, "global_batch": global_batch}
    saved = (load_checkpoint(checkpoint_dir, model, opt, c, scheduler=scheduler,
                             settings=settings)
             if checkpoint_dir else None)  # the schedule goes on from its saved step
    if saved is not None:
        step, losses = saved.step, saved.extra["losses"]
        total = np.array(saved.extra["totals"][c.rank])
    first_epoch, skip = divmod(step, len(loader))
    if saved is not None and progress and c.rank == 0:
        print(f"resumed from {saved.path}: step {step}, epoch {first_epoch}, batch {skip}",
              flush=True)

    def checkpoint() -> None:
        # communication: every rank's loss sums so far, saved by rank 0 with the model
        totals = allgather(total, c).tolist()
        save_checkpoint(checkpoint_dir, step, model, opt, c, scheduler=scheduler,
                        extra={"losses": losses, "totals": totals}, settings=settings)

    start = time.perf_counter()
    bar = tqdm(range(first_epoch, epochs), desc=f"epochs ({c.size} ranks)",
               disable=not progress or c.rank)
    for epoch in bar:
        loader.set_epoch(epoch)
        for x, y in itertools.islice(loader, skip if epoch == first_epoch else 0, None):
            x, y = xp.asarray(x, dtype=dtype), xp.asarray(y)  # the batch to the device, once
            opt.zero_grad()
            loss = classification_loss(model, x, y)
            loss.backward()  # gradients averaged over the ranks when it returns
            opt.step()
            if scheduler is not None:
                scheduler.step()
            total += (loss.item() * len(y), len(y))
            overlap.append(model.last_step_stats["overlap_fraction"])
            step += 1
            if checkpoint_dir and step % checkpoint_every == 0 and step % len(loader):
                checkpoint()  # within the epoch
        # communication: the epoch's loss over all ranks (one small allreduce per epoch)
        loss_sum, count = allreduce(total, c)
        losses.append(loss_sum / count)
        total = np.zeros(2)
        bar.set_postfix(loss=f"{losses[-1]:.4f}")
        if checkpoint_dir and (step % checkpoint_every == 0 or epoch == epochs - 1):
            checkpoint()  # at the epoch's end; at the run's, so that a rerun has nothing to do
    seconds = time.perf_counter() - start
    return dict(model=model.module, losses=losses, seconds=seconds,
                epochs=step / len(loader),  # trained: past `epochs` if resumed from beyond
                accuracy=accuracy(model.module, test_set.x, test_set.y),
                lr=opt.param_groups[0]["lr"],
                overlap=float(np.mean(overlap)) if overlap else 0.0)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=integer(1), default=20,
                        help="passes over the training set (default 20)")
    parser.add_argument("--global-batch", type=integer(1), default=BASE_BATCH,
                        help="samples per step over all ranks (a multiple of P)")
    parser.add_argument("--lr", type=number(above=0), default=None,
                        help="base learning rate (default: 3e-3 for adam, 0.05 for sgd)")
    parser.add_argument("--scale-lr", action="store_true",
                        help=f"linear scaling: lr * global_batch / {BASE_BATCH}, with warm-up")
    parser.add_argument("--warmup-epochs", type=number(least=0), default=2.0,
                        help="epochs of linear warm-up of the rate (default 2)")
    parser.add_argument("--hidden", type=integer(1), default=256,
                        help="width of the hidden layer (default 256)")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default="adam",
                        help="default adam")
    parser.add_argument("--bucket-mb", type=number(least=0), default=25,
                        help="gradient bucket size in MB for the allreduce (default 25)")
    parser.add_argument("--algorithm", choices=ALGORITHMS, default="ring",
                        help="allreduce algorithm")
    parser.add_argument("--seed", type=integer(0), default=0,
                        help="seeds the weights and the shuffle (default 0)")
    parser.add_argument("--checkpoint-dir", type=output_folder, default=None,
                        help="save checkpoints here, and resume from the newest one")
    parser.add_argument("--checkpoint-every", type=integer(1), default=100, metavar="K",
                        help="steps between checkpoints (and one at the end)")
    add_device_option(parser)
    args = parser.parse_args(argv)
    device = choose_device(parser, args.device)  # on every rank, before the model is built
    lr = args.lr if args.lr is not None else (3e-3 if args.optimizer == "adam" else 0.05)
    c = world()
    with options_checked("mlp_ddp", c):
        check_global_batch(args.global_batch, c.size)
    result = train(c, epochs=args.epochs, global_batch=args.global_batch, lr=lr,
                   scale_lr=args.scale_lr, warmup_epochs=args.warmup_epochs, hidden=args.hidden,
                   optimizer=args.optimizer, seed=args.seed, bucket_mb=args.bucket_mb,
                   algorithm=args.algorithm, checkpoint_dir=args.checkpoint_dir,
                   checkpoint_every=args.checkpoint_every)
    if c.rank == 0:
        past = f" (resumed past --epochs {args.epochs})" if result["epochs"] > args.epochs else ""
        print(f"test accuracy {result['accuracy']:.2%} after {result['epochs']:g} epochs{past} "
              f"on {c.size} ranks ({device}), global batch {args.global_batch}, final lr "
              f"{result['lr']:.3g} "
              f"({result['seconds']:.1f} s of training, {result['overlap']:.0%} of "
              "communication hidden behind backward)")
    return result


if __name__ == "__main__":
    main()
