"""Train the course's MLP through a parameter server: BSP, SSP or ASP, with or without a straggler.

    mpirun -n 4 python -m mpi4py -m minidist.examples.ps_mlp --consistency ssp --staleness 3
    mpirun -n 4 python -m mpi4py -m minidist.examples.ps_mlp --consistency bsp --straggler 3:2
    python -m minidist.examples.ps_mlp --ranks 4 --consistency asp --plot loss.png   # in-process

Ranks 0..S-1 are servers (``--servers S``), the others workers. Each worker,
every clock, pulls the weights, computes the gradient of its own batch, pushes
it and ticks its clock, the push, the tick and the next pull in one request
(``minidist.parallel.ps.training.train_mlp``). The
servers apply the optimiser (``--optimizer``, ``--lr``; ``--staleness-aware``
scales each gradient's step by 1/τ, τ = 1 + the updates it missed; ``--softsync N``
applies the average of ⌊W/N⌋ gradients as one update) and enforce the
consistency model: ``bsp``, a barrier every clock; ``ssp``, no worker more
than ``--staleness`` clocks ahead of the slowest; ``asp``, none.

``--checkpoint-dir D`` has the servers save their shards there every
``--checkpoint-every`` clocks; the same command started again resumes from
them (the workers' state is their clock: their batches depend on the seed,
the worker and the clock only).

``--straggler RANK:FACTOR`` makes the worker of rank RANK FACTOR times slower.
Under MPI it really sleeps, before each push, (FACTOR-1)× its own step as
measured (the gradient and the traffic; the median of its last few steps,
from its second step on). Without mpirun, ``--ranks`` ranks run as tasks of this
process on a modelled clock: each step costs ``--compute`` modelled seconds,
FACTOR times that on the straggler, and a run is the same to the bit every time.

Worker 0 shows a progress bar and scores the model on the test set every
``--eval-every`` clocks (``--plot PATH`` draws that test loss against time);
rank 0 prints a summary line: the final model's accuracy and loss, the time,
when worker 0 first saw the test loss at ``--target`` or below, the staleness
of the reads the servers answered (clocks behind the slowest worker), and
the requests the servers received (pushes and pulls; messages and bytes).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import deque

import numpy as np
from tqdm import tqdm

from minidist.comm import (
    Communicator,
    LocalCluster,
    LocalCommunicator,
    Straggler,
    allreduce,
    broadcast,
    world,
)
from minidist.examples.options import (
    cpu_only,
    image_file,
    integer,
    number,
    options_checked,
    output_folder,
    run_ranks,
)
from minidist.parallel.ps import ServerOptimizer, consistency
from minidist.parallel.ps.checkpoint import saved_clock, shard_file
from minidist.parallel.ps.training import train_mlp

LEARNING_RATES = {"sgd": 0.1, "adagrad": 0.05, "adam": 0.003}  # each rule's default


class SleepingStraggler:
    """A worker made ``factor`` times slower in real time, through ``train_mlp``'s hooks.

    ``compute_time`` (called once the gradient is computed, before the push) sleeps
    (factor-1)× the median of the last ``window`` steps measured; a step is measured
    from one ``on_step`` (a step's end) to the next, less the sleep: the gradient and
    the traffic. The median keeps worker 0's scoring and the machine's hiccups out.
    """

    def __init__(self, factor: float, window: int = 5) -> None:
        self.factor, self.step_began, self.slept = factor, None, 0.0
        self.recent: deque[float] = deque(maxlen=window)

    def compute_time(self, clock: int, worker: int) -> float:
        self.slept = (self.factor - 1) * statistics.median(self.recent) if self.recent else 0.0
        time.sleep(self.slept)
        return 0.0  # real time passed: nothing to add to a modelled clock

    def on_step(self, clock: int) -> None:
        now = time.perf_counter()
        if self.step_began is not None:
            self.recent.append(now - self.step_began - self.slept)
        self.step_began = now


def parse_straggler(text: str) -> tuple[int, float]:
    """'3:2' -> (rank 3, 2x slower)."""
    rank, sep, factor = text.partition(":")
    try:  # each half a kind of value the command lines share (util.arguments)
        if sep:
            return integer(0)(rank), number(least=1)(factor)
    except argparse.ArgumentTypeError:
        pass
    raise argparse.ArgumentTypeError(f"wants RANK:FACTOR with a finite FACTOR >= 1 (e.g. 3:2), "
                                     f"got {text!r}")


def ps_options(args: argparse.Namespace, ranks: int) -> dict:
    """The ``ParameterServer`` options the command line asks for on ``ranks`` ranks,
    checked here, before any message, so a mistake is the same error on every rank."""
    if args.servers >= ranks:
        raise ValueError(f"--servers {args.servers} on {ranks} ranks: need 1 <= servers < "
                         f"ranks, so that at least one rank is a worker")
    workers = ranks - args.servers
    if args.softsync is not None and not 1 <= args.softsync <= workers:
        raise ValueError(f"--softsync {args.softsync}: n must be in 1..{workers} (the workers)")
    if args.straggler is not None and not args.servers <= args.straggler[0] < ranks:
        raise ValueError(f"--straggler rank {args.straggler[0]}: the workers are ranks "
                         f"{args.servers}..{ranks - 1}")
    lr = args.lr if args.lr is not None else LEARNING_RATES[args.optimizer]
    return dict(servers=args.servers, consistency=consistency(args.consistency, args.staleness),
                softsync=args.softsync,
                optimizer=ServerOptimizer(args.optimizer, lr, staleness_aware=args.staleness_aware))


def run(c: Communicator, args: argparse.Namespace, progress: bool = True) -> dict:
    """One rank's part of the run; rank 0 returns the summary, the others ``{"run": ...}``."""
    options = ps_options(args, c.size)
    worker = c.rank - args.servers
    hooks, compute_time = [], None
    if isinstance(c, LocalCommunicator):  # modelled time (a straggler's slowdown included)
        def compute_time(clock: int, w: int) -> float:
            return args.compute
    elif args.straggler is not None and args.straggler[0] == c.rank:
        slow = SleepingStraggler(args.straggler[1])
        compute_time = slow.compute_time
        hooks.append(slow.on_step)
    bar = tqdm(total=args.steps, desc=f"worker 0 ({options['consistency']})",
               disable=not progress or worker != 0)
    hooks.append(lambda clock: bar.update())
    if args.checkpoint_dir is not None:
        options.update(checkpoint_every=args.checkpoint_every, **resuming(c, args.checkpoint_dir))
    result = train_mlp(c, steps=args.steps, batch_size=args.batch_size, hidden=args.hidden,
                       seed=args.seed, compute_time=compute_time, eval_every=args.eval_every,
                       on_step=lambda clock: [hook(clock) for hook in hooks], **options)
    bar.close()
    reached = result.time_to_loss(args.target) if worker == 0 else None
    server = c.rank < args.servers
    mine = np.array([reached if reached is not None else (np.nan if worker == 0 else 0.0),
                     c.stats.messages_recv if server else 0, c.stats.bytes_recv if server else 0,
                     result.curve[-1][1] if worker == 0 else 0])
    # communication: rank 0 learns worker 0's time to the target and clocks, and the
    # servers' traffic
    reached, messages, nbytes, clocks = allreduce(mine, c)
    if c.rank != 0:
        return {"run": result}
    return {"run": result, "accuracy": result.accuracy, "loss": result.loss,
            "seconds": result.seconds, "time_to_target": None if np.isnan(reached) else reached,
            "messages": int(messages), "bytes": int(nbytes), "clocks": int(clocks)}


def resuming(c: Communicator, folder: str) -> dict:
    """``checkpoint=`` and whether to ``resume`` from a checkpoint in ``folder``: rank 0
    looks, so that every rank decides alike."""
    found = np.array([shard_file(folder, 0).exists() if c.rank == 0 else 0], np.int64)
    # communication: rank 0 tells every rank whether there is a checkpoint to resume from
    resume = bool(broadcast(found, c)[0])
    if resume and c.rank == 0:
        print(f"resuming from the checkpoint in {folder}")
    return dict(checkpoint=folder, resume=resume)


def summary_line(summary: dict, args: argparse.Namespace, ranks: int, modelled: bool) -> str:
    reads, requests = summary["run"].staleness.reads, summary["run"].requests
    count = sum(reads.values())
    mean = sum(s * n for s, n in reads.items()) / count if count else 0.0
    reached = summary["time_to_target"]
    clock = "modelled s" if modelled else "s"
    first, past = summary["run"].first_clock, ""
    if summary["clocks"] > args.steps:
        past = f" (resumed past --steps {args.steps})"
    elif first:  # the model's clocks are the whole run's; what was timed and counted, this one's
        past = f" (resumed at clock {first}: times and counts are of the clocks since)"
    return (f"{args.consistency}{f'({args.staleness})' if args.consistency == 'ssp' else ''}, "
            f"{args.servers} server(s) + {ranks - args.servers} worker(s), {summary['clocks']} "
            f"clocks{past}: "
            f"test accuracy {summary['accuracy']:.2%}, loss {summary['loss']:.4f}, "
            f"{summary['seconds']:.3g} {clock}; loss <= {args.target} at "
            f"{'never' if reached is None else f'{reached:.3g} {clock}'}; read staleness max "
            f"{max(reads, default=0)} mean {mean:.2f}; servers received "
            f"{requests['PUSH'] + requests['PUSH_PULL']} pushes and "
            f"{requests['PULL'] + requests['PUSH_PULL']} pulls in "
            f"{summary['messages']} messages, {summary['bytes'] / 1e6:.1f} MB")


def plot_curve(curve: list[tuple[float, int, float, float]], path: str, title: str,
               modelled: bool) -> None:
    """Worker 0's test loss against time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([t for t, *_ in curve], [loss for _, _, loss, _ in curve], "o-", markersize=3)
    ax.set_xlabel("modelled seconds" if modelled else "seconds")
    ax.set_ylabel("test loss (worker 0's reads)")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=integer(1), default=1, help="S: ranks 0..S-1 serve")
    parser.add_argument("--consistency", choices=("bsp", "ssp", "asp"), default="ssp")
    parser.add_argument("--staleness", type=integer(0), default=None,
                        help="s of SSP(s) (default 3; ssp only)")
    parser.add_argument("--softsync", type=integer(1), default=None,
                        help="n of n-softsync: one update per floor(W/n) gradients")
    parser.add_argument("--staleness-aware", action="store_true",
                        help="each gradient's step scaled by 1/tau (Zhang et al. 2016)")
    parser.add_argument("--optimizer", choices=tuple(LEARNING_RATES), default="sgd",
                        help="the servers' update rule (default sgd)")
    parser.add_argument("--lr", type=number(above=0), default=None,
                        help="learning rate (default: " + ", ".join(
                            f"{rule} {lr:g}" for rule, lr in LEARNING_RATES.items()) + ")")
    parser.add_argument("--straggler", type=parse_straggler, default=None,
                        metavar="RANK:FACTOR", help="this worker rank is FACTOR times slower")
    parser.add_argument("--steps", type=integer(1), default=200, help="clocks per worker")
    parser.add_argument("--batch-size", type=integer(1), default=32)
    parser.add_argument("--hidden", type=integer(1), default=64)
    parser.add_argument("--seed", type=integer(0), default=0)
    parser.add_argument("--eval-every", type=integer(1), default=10,
                        help="worker 0 scores every k clocks")
    parser.add_argument("--target", type=number(above=0), default=0.3, help="the test loss to time")
    parser.add_argument("--plot", type=image_file, default=None,
                        help="save worker 0's loss against time (PNG)")
    parser.add_argument("--ranks", type=integer(1), default=None,
                        help="in-process ranks when not under mpirun (default 4)")
    parser.add_argument("--compute", type=number(least=0), default=1e-3,
                        help="in-process: modelled seconds of one worker step")
    parser.add_argument("--checkpoint-dir", type=output_folder, default=None, metavar="D",
                        help="the servers save their shards here, and a run started again "
                             "resumes from them")
    parser.add_argument("--checkpoint-every", type=integer(1), default=50, metavar="K",
                        help="clocks between checkpoints (with --checkpoint-dir)")
    args = parser.parse_args(argv)
    cpu_only(parser, "ps_mlp (a parameter server)")
    if args.staleness is not None and args.consistency != "ssp":  # once ignored silently
        parser.error(f"--staleness {args.staleness}: only SSP has a staleness bound "
                     f"(--consistency ssp), not {args.consistency}")
    if args.staleness_aware and args.optimizer != "sgd":
        parser.error(f"--staleness-aware scales SGD's steps by 1/tau; {args.optimizer}'s "
                     "normalised step would cancel it: use --optimizer sgd")
    args.staleness = 3 if args.consistency == "ssp" and args.staleness is None else args.staleness
    return args


def main(argv: list[str] | None = None) -> dict | None:
    """Run the command line; returns rank 0's summary (None on the other MPI ranks)."""
    args = parse_args(argv)
    c = world()
    modelled = isinstance(c, LocalCommunicator)
    with options_checked("ps_mlp", c):
        ranks = run_ranks(c, args.ranks, default=4)
        ps_options(args, ranks)
        if args.checkpoint_dir is not None and shard_file(args.checkpoint_dir, 0).exists():
            saved_clock(args.checkpoint_dir, args.servers, args.optimizer)  # as saved?
    if modelled:
        slow = {args.straggler[0]: Straggler(slowdown=args.straggler[1])} if args.straggler else {}
        results = LocalCluster(ranks, stragglers=slow).run(run, args=(args,), timeout=None)
        summary, curve = results[0], results[args.servers]["run"].curve
    else:
        summary = run(c, args)
        curve = summary["run"].curve if c.rank == args.servers else None
    if args.plot and curve is not None:
        plot_curve(curve, args.plot, f"{args.consistency}, {ranks - args.servers} workers"
                   + (f", rank {args.straggler[0]} {args.straggler[1]:g}x slower"
                      if args.straggler else ""), modelled)
    if c.rank == 0:
        print(summary_line(summary, args, ranks, modelled), flush=True)
        return summary
    return None


if __name__ == "__main__":
    main()
