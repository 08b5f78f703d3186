"""Train a small mixture-of-experts classifier on the digits, its experts spread over the ranks.

    mpirun -n 2 python -m mpi4py -m minidist.examples.moe            # 4 experts, 2 per rank
    mpirun -n 4 python -m mpi4py -m minidist.examples.moe --top-k 2
    python -m minidist.examples.moe                                  # 1 process, all 4 experts
    mpirun -n 2 python -m mpi4py -m minidist.examples.moe --device cuda  # 2 ranks, 1 GPU

The model is the course's digits classifier with a mixture of experts in the
middle: Linear(64, 32), ReLU, then ``h + moe(h)`` (E = 4 expert MLPs 32 → 64
→ 32, top-1, capacity factor 1.25: ``minidist.parallel.moe``), then
Linear(32, 10). Each image is one token. The loss is the cross-entropy plus
0.1 times the MoE's balancing loss (``--balance``): the experts' loads stay
within a few percent of each other. With ``--balance 0`` the gate soon sends
most images to one or two experts, which drop what exceeds their capacity
while the others idle: the load imbalance of Lecture 7.

Each step the global batch (64 images) is split into P local batches
(``DistributedSampler``). Every rank routes its own images, sends each to the
rank holding its expert and gets the outputs back (``comm.alltoallv``, both
ways, and again in backward); ``average_gradients`` then makes every gradient
that of the mean loss over the ranks, and Adam applies the same update to the
replicated layers on every rank and to each expert on its own rank.

At the end rank 0 trains the same model alone, every expert in one process,
each global batch processed as the same P groups (the capacity counts each
rank's tokens), and prints both loss curves, which agree to rounding; then
the tokens per expert over the last epoch (all ranks): an expert over its
capacity drops tokens while others idle.

``--device cuda`` (or ``strict``, the CI guard's stand-in) computes every
rank's layers and experts on the device; each local batch is copied there
once, and the routed tokens cross to the host only to be communicated.
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
from minidist.examples.options import (
    add_device_option,
    check_global_batch,
    choose_device,
    integer,
    number,
    options_checked,
)
from minidist.models.mlp import accuracy
from minidist.nn import Linear, Module
from minidist.nn.functional import cross_entropy
from minidist.optim import Adam
from minidist.parallel.moe import MoE, average_gradients, format_load, load_table


class MoEClassifier(Module):
    """Linear(inputs, width), ReLU, ``h + moe(h)``, Linear(width, classes); drawn from
    ``seed`` alike for any number of ranks."""

    def __init__(self, inputs: int, classes: int, width: int = 32, experts: int = 4,
                 expert_hidden: int = 64, top_k: int = 1, capacity_factor: float | None = 1.25,
                 comm: Communicator | None = None, dtype=np.float32, seed: int = 0) -> None:
        super().__init__()
        rng = np.random.default_rng(seed)
        self.embed = Linear(inputs, width, dtype=dtype, rng=rng)
        self.moe = MoE(width, expert_hidden, experts, top_k, capacity_factor, comm, dtype, rng)
        self.head = Linear(width, classes, dtype=dtype, rng=rng)

    def forward(self, x):
        h = self.embed(x).relu()
        return self.head(h + self.moe(h))  # a dropped token passes through the residual


def train(comm: Communicator | None = None, groups: int = 1, epochs: int = 10,
          global_batch: int = 64, lr: float = 3e-3, balance: float = 0.1, seed: int = 0,
          dtype=np.float32, progress: bool = True, **model: Any) -> dict[str, Any]:
    """Expert-parallel training on the ranks of ``comm``; with ``comm=None``, one process
    that splits each global batch into ``groups`` (a run on P ranks: P groups).

    The loss is the cross-entropy plus ``balance`` times the MoE's balancing
    loss. ``model`` are :class:`MoEClassifier`'s options. Returns, on every
    rank, ``dict(model, losses, table, accuracy, seconds)``: the mean
    cross-entropy of each epoch, :func:`load_table` over the last epoch, the
    test accuracy. Computes on the current device (``md.set_device``).
    """
    parts = comm.size if comm is not None else groups
    if global_batch % parts:
        raise ValueError(f"global batch {global_batch} must be a multiple of the {parts} ranks")
    train_set, test_set = standardize(*load_digits(test_fraction=0.2, seed=seed))
    net = MoEClassifier(train_set.x.shape[1], train_set.num_classes, comm=comm, dtype=dtype,
                        seed=seed, **model)
    c = net.moe.comm  # comm, or one process's communicator of size 1
    mine = [c.rank] if comm is not None else range(parts)  # the parts of a batch I compute
    loaders = [DataLoader(train_set, sampler=DistributedSampler(
        len(train_set), parts, part, seed=seed, batch_size=global_batch // parts)) for part in mine]
    opt = Adam(net.parameters(), lr=lr)
    xp = backend.xp()

    losses = []
    start = time.perf_counter()
    bar = tqdm(range(epochs), desc=f"epochs ({parts} ranks)", disable=not progress or c.rank)
    for _ in bar:
        net.moe.reset_load()
        total = np.zeros(2)  # summed loss and samples, of my parts
        for batches in zip(*loaders, strict=True):
            # each part's batch to the device, once
            batches = [(xp.asarray(x, dtype=dtype), xp.asarray(y)) for x, y in batches]
            opt.zero_grad()
            part_losses, objective = [], 0
            for x, y in batches:
                part_losses.append(cross_entropy(net(x), y))
                objective = objective + part_losses[-1] + balance * net.moe.balance_loss
            (objective / len(batches)).backward()
            average_gradients(net, c)  # the gradient of the mean loss over the ranks
            opt.step()
            total += (sum(loss.item() * len(y) for loss, (_, y) in
                          zip(part_losses, batches, strict=True)), sum(len(y) for _, y in batches))
        # communication: the epoch's loss over all ranks (one small allreduce per epoch)
        loss_sum, count = allreduce(total, c)
        losses.append(loss_sum / count)
        bar.set_postfix(loss=f"{losses[-1]:.4f}")
    seconds = time.perf_counter() - start
    table = load_table(net.moe)  # before the test set adds its tokens
    return dict(model=net, losses=losses, table=table, seconds=seconds,
                accuracy=accuracy(net, test_set.x.astype(dtype), test_set.y))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=integer(1), default=10)
    parser.add_argument("--global-batch", type=integer(1), default=64,
                        help="images per step over all ranks (a multiple of P)")
    parser.add_argument("--experts", type=integer(1), default=4, help="a multiple of P")
    parser.add_argument("--top-k", type=integer(1), default=1)
    parser.add_argument("--capacity-factor", type=number(least=0), default=1.25,
                        help="0: no capacity, nothing dropped")
    parser.add_argument("--width", type=integer(1), default=32)
    parser.add_argument("--expert-hidden", type=integer(1), default=64)
    parser.add_argument("--lr", type=number(above=0), default=3e-3)
    parser.add_argument("--balance", type=number(least=0), default=0.1,
                        help="weight of the balancing loss (0: none)")
    parser.add_argument("--seed", type=integer(0), default=0)
    add_device_option(parser)
    args = parser.parse_args(argv)
    device = choose_device(parser, args.device)  # on every rank, before the model is built
    options = dict(epochs=args.epochs, global_batch=args.global_batch, lr=args.lr,
                   balance=args.balance, seed=args.seed, experts=args.experts, top_k=args.top_k,
                   capacity_factor=args.capacity_factor or None, width=args.width,
                   expert_hidden=args.expert_hidden)
    c = world()
    with options_checked("moe", c):
        check_global_batch(args.global_batch, c.size)
        if args.experts % c.size:
            raise ValueError(f"--experts {args.experts} must be a multiple of the {c.size} "
                             "ranks (each holds as many)")
        if args.top_k > args.experts:
            raise ValueError(f"--top-k {args.top_k} is more than the {args.experts} experts")
    result = train(c, **options)
    if c.rank == 0:
        alone = train(groups=c.size, progress=False, **options)
        print(f"{'epoch':>5} {f'loss, {c.size} ranks':>16} {'loss, 1 process':>16} "
              f"{'difference':>10}")
        for epoch, (mine, one) in enumerate(zip(result["losses"], alone["losses"], strict=True)):
            print(f"{epoch + 1:>5} {mine:>16.6f} {one:>16.6f} {mine - one:>10.1e}")
        print(f"tokens per expert, last epoch, all {c.size} ranks "
              f"(E = {args.experts}, top-{args.top_k}):")
        print(format_load(result["table"]))
        print(f"test accuracy {result['accuracy']:.2%} on {c.size} ranks ({device}), "
              f"{alone['accuracy']:.2%} in one process ({result['seconds']:.1f} s of training)")
        result["alone"] = alone
    return result


if __name__ == "__main__":
    main()
