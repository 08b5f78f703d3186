"""Federated averaging on the digits: what non-IID data costs (Lecture 5).

    python -m minidist.examples.fedavg --clients 8 --rounds 20 --local-epochs 2 \\
        --split noniid --plot fedavg.png                       # in-process ranks
    mpirun -n 9 python -m mpi4py -m minidist.examples.fedavg --split noniid   # 1 server, 8 clients

K clients hold shards of the digits' training set; each round they pull the
global model from a parameter server, train E epochs on their own shard and
push their change; the servers form the average weighted by shard size
(``minidist.parallel.ps.fedavg`` says how, and what a round costs). Without
``mpirun`` the ranks are in-process tasks (``LocalCluster``); under it,
``comm.world()``'s ranks: 0..S-1 serve, the others are the clients.

The same MLP is trained three ways, on the same number of sample gradients
(each round's E·n_S of them; with C < 1 the clients drawn hold shards of
other sizes under each split, and the baseline follows the IID run):

- **centralised**: mini-batch SGD on all the data in one process (batch B,
  rate η): no averaging, no drift: the ceiling;
- **FedAvg, IID shards**: every client sees every class;
- **FedAvg, the ``--split`` shards**: ``noniid`` is the paper's pathological
  split (sorted by label, two shards per client: one or two classes each),
  ``dirichlet`` shares each class among clients in Dirichlet(α) proportions.

With non-IID shards each client's E epochs pull the model towards its own
classes, and the average of models that disagree learns more slowly: the
cost shows as accuracy lost after R rounds and as extra rounds (each a round
of communication) to reach ``--target``. Client 0 scores the global model
each round (not counted as work) and prints the summary.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from itertools import count, islice

import numpy as np
from tqdm import tqdm

from minidist.comm import Communicator, LocalCluster, world
from minidist.examples.options import cpu_only, image_file, integer, number
from minidist.models.mlp import accuracy, classification_loss
from minidist.optim import SGD
from minidist.parallel.ps.fedavg import (
    SPLITS,
    FedRun,
    fedavg,
    float64_mlp,
    round_bytes,
    split_clients,
)
from minidist.parallel.ps.training import digits, mlp_layout


def train_centralised(samples: Sequence[int], batch_size: int | None = 10, lr: float = 0.1,
                      hidden: int = 64, seed: int = 0) -> FedRun:
    """Mini-batch SGD on the whole training set, scored whenever the sample gradients
    computed reach the next of ``samples`` (cumulative: a FedAvg run's ``samples``)."""
    train_set, test_set = digits(np.float64)
    model = float64_mlp(hidden, seed)
    opt = SGD(model.parameters(), lr=lr)
    stream = (i for epoch in count()
              for i in np.random.default_rng((seed, epoch)).permutation(len(train_set)))
    size = len(train_set) if batch_size is None else batch_size
    run, done = FedRun(samples=list(samples)), 0
    for target in run.samples:
        while done < target:  # the last batch before a round's end may be short
            rows = np.fromiter(islice(stream, min(size, target - done)), np.int64)
            opt.zero_grad()
            classification_loss(model, train_set.x[rows], train_set.y[rows]).backward()
            opt.step()
            done += len(rows)
        run.loss.append(float(classification_loss(model, test_set.x, test_set.y).data))
        run.accuracy.append(accuracy(model, test_set.x, test_set.y))
    return run


def run_fedavg(c: Communicator, split: str, args: argparse.Namespace) -> FedRun | None:
    """FedAvg on ``c``'s ranks (in-process ranks when ``c`` has one): client 0's run on
    the process that holds it, None elsewhere."""
    options = dict(rounds=args.rounds, local_epochs=args.local_epochs, lr=args.lr,
                   batch_size=args.batch_size, fraction=args.fraction, split=split,
                   alpha=args.alpha, hidden=args.hidden, servers=args.servers, seed=args.seed)
    holder = c.size == 1 or c.rank == args.servers
    bar = tqdm(total=args.rounds, desc=f"FedAvg, {split} shards", unit="round",
               disable=not holder or args.quiet)
    if c.size == 1:
        runs = LocalCluster(args.servers + args.clients).run(
            lambda comm: fedavg(comm, on_round=lambda t: bar.update(), **options), timeout=None)
        run = runs[args.servers]
    else:
        run = fedavg(c, on_round=lambda t: bar.update(), **options)
    bar.close()
    return run if holder else None


def rounds_to(run: FedRun, target: float) -> int | None:
    """The first round after which the accuracy is >= ``target``."""
    return next((t for t, a in enumerate(run.accuracy) if a >= target), None)


def summary(runs: dict[str, FedRun], args: argparse.Namespace) -> str:
    """One line: what non-IID shards and federation cost, the settings, the traffic."""
    final = {name: run.accuracy[-1] for name, run in runs.items()}
    iid, central = final["FedAvg, iid shards"], final["centralised SGD"]
    line = (f"after {args.rounds} rounds ({runs['centralised SGD'].samples[-1]} sample "
            f"gradients, centralised and IID alike): FedAvg IID "
            f"{100 * (iid - central):+.1f} points against centralised")
    if args.split != "iid":
        other = runs[f"FedAvg, {args.split} shards"]
        late = [rounds_to(run, args.target) for run in (runs["FedAvg, iid shards"], other)]
        extra = ("never reached" if late[1] is None else "not reached by IID" if late[0] is None
                 else f"{late[1] - late[0]:+d} rounds")
        line += (f", {args.split} shards {100 * (other.accuracy[-1] - iid):+.1f} points "
                 f"against IID ({args.target:.0%}: {extra})")
    sent, received = round_bytes(mlp_layout(float64_mlp(args.hidden, args.seed)), args.servers)
    return (f"{line}; K={args.clients}, C={args.fraction}, E={args.local_epochs}, "
            f"B={args.batch_size}, lr={args.lr}; a selected client sends {sent / 1e3:.1f} kB "
            f"and receives {received / 1e3:.1f} kB per round")


def plot(runs: dict[str, FedRun], shards: list[np.ndarray], labels: np.ndarray, split: str,
         path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), width_ratios=(3, 2))
    for name, run in runs.items():
        left.plot(range(len(run.accuracy)), [100 * a for a in run.accuracy], label=name)
    left.set(xlabel="round (centralised: after the same sample gradients)",
             ylabel="test accuracy (%)", title="FedAvg against centralised SGD")
    left.set_ylim(max(0, 100 * min(min(r.accuracy[1:]) for r in runs.values()) - 5), 100)
    left.xaxis.get_major_locator().set_params(integer=True)
    left.legend()
    left.grid(alpha=0.3)
    counts = np.array([np.bincount(labels[s], minlength=10) for s in shards])
    image = right.imshow(counts.T, aspect="auto", cmap="viridis")
    right.set(xlabel="client", ylabel="class", title=f"samples per class, {split} shards")
    fig.colorbar(image, ax=right)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, FedRun] | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=integer(1), default=None,
                        help="K (default 8 in-process; under MPI: the ranks less the servers)")
    parser.add_argument("--servers", type=integer(1), default=1)
    parser.add_argument("--rounds", type=integer(1), default=20)
    parser.add_argument("--local-epochs", type=integer(1), default=2, help="E")
    parser.add_argument("--batch-size", type=integer(1), default=10, help="B")
    parser.add_argument("--lr", type=number(above=0), default=0.1)
    parser.add_argument("--fraction", type=number(above=0, most=1), default=1.0,
                        help="C: the fraction of clients drawn each round")
    parser.add_argument("--split", choices=SPLITS, default="noniid")
    parser.add_argument("--alpha", type=number(above=0), default=0.5, help="Dirichlet's alpha")
    parser.add_argument("--hidden", type=integer(1), default=64)
    parser.add_argument("--seed", type=integer(0), default=0)
    parser.add_argument("--target", type=number(least=0, most=1), default=0.93,
                        help="report the rounds each run needs to reach this accuracy")
    parser.add_argument("--plot", type=image_file,
                        help="save the accuracy curves (and the shards) here")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    cpu_only(parser, "fedavg (through a parameter server)")
    c = world()
    if c.size > 1:  # under MPI the ranks say how many clients there are
        if args.servers >= c.size:
            parser.error(f"--servers {args.servers} with {c.size} MPI ranks leaves no client: "
                         f"start at least {args.servers + 1} ranks")
        if args.clients not in (None, c.size - args.servers):
            parser.error(f"--clients {args.clients} with {c.size} MPI ranks and "
                         f"{args.servers} server(s): start {args.clients + args.servers} ranks")
        args.clients = c.size - args.servers
    elif args.clients is None:
        args.clients = 8

    runs = {f"FedAvg, {split} shards": run_fedavg(c, split, args)
            for split in dict.fromkeys(["iid", args.split])}
    if None in runs.values():  # not client 0's process
        return None
    iid = runs["FedAvg, iid shards"]
    runs = {"centralised SGD": train_centralised(iid.samples, args.batch_size, args.lr,
                                                 args.hidden, args.seed), **runs}
    for name, run in runs.items():
        reached = rounds_to(run, args.target)
        print(f"{name:24} {run.accuracy[-1]:7.2%}   " + (f"{args.target:.0%} not reached"
              if reached is None else f"{args.target:.0%} reached at round {reached}"))
    print(summary(runs, args))
    if args.plot:
        train_set, _ = digits(np.float64)
        shards = split_clients(args.split, train_set.y, args.clients, args.seed, args.alpha)
        plot(runs, shards, train_set.y, args.split, args.plot)
        print(f"plot saved to {args.plot}")
    return runs


if __name__ == "__main__":
    main()
