"""Staleness-aware SGD against synchronous and asynchronous SGD, and the straggler race.

    python -m minidist.examples.ps_staleness --plot staleness.png    # the table and the races
    python -m minidist.examples.ps_staleness --only stragglers       # the races alone
    python -m minidist.examples.ps_staleness --learners 1,4,16 --sigma 0.5

Part 1 (``minidist.parallel.ps.simulator``, whose docstring holds the
setting and the figures): λ learners and one server on in-process ranks,
each learner's step a seeded lognormal number of modelled seconds, so the
table is the same on every run. For each λ, the same samples are trained
with synchronous SGD, asynchronous SGD at α0, staleness-aware SGD (α0/τ per
gradient) and α0/n (the paper's α0/⟨τ⟩); the table gives the test accuracy,
the plot the accuracy against λ and each λ's staleness histogram.

Part 2: BSP, SSP(s) and ASP race to a test loss with one worker 2x slower:
always the same one (constant or random step times) or a different one each
clock, on the modelled clock.

A progress bar counts gradients; a summary line ends the run.
"""

from __future__ import annotations

import argparse
import time

from tqdm import tqdm

from minidist.examples.options import cpu_only, image_file, integer, number
from minidist.parallel.ps.simulator import (
    COMPUTE,
    DEFAULT_LR,
    LEARNERS,
    METHODS,
    Race,
    Trial,
    diverged,
    format_race,
    format_table,
    staleness_table,
    straggler_race,
)
from minidist.parallel.ps.training import digits
from minidist.viz.figure import pyplot, save
from minidist.viz.staleness import race_curves, staleness_histogram


def run_table(args: argparse.Namespace) -> list[Trial]:
    steps = max(1, round(args.epochs * len(digits()[0]) / args.global_batch))
    bar = tqdm(total=steps * sum(args.learners) * len(args.methods), unit="grad",
               desc="staleness table")

    def done(trial: Trial) -> None:
        bar.set_postfix_str(f"{trial.method}, λ={trial.learners}: {trial.accuracy:.1%}")

    trials = staleness_table(args.learners, args.methods, on_trial=done,
                             global_batch=args.global_batch, epochs=args.epochs, lr=args.lr,
                             sigma=args.sigma, softsync=args.softsync, seed=args.seed,
                             on_step=lambda clock: bar.update())
    bar.close()
    return trials


def run_races(args: argparse.Namespace) -> list[Race]:
    races = []
    for compute in tqdm(COMPUTE, desc="straggler races"):
        races.append(straggler_race(workers=args.workers, compute=compute,
                                    slowdown=args.slowdown, staleness=args.staleness,
                                    targets=args.targets, seed=args.seed))
    return races


def plot(trials: list[Trial], races: list[Race], path: str) -> None:
    """Accuracy against λ; the staleness histograms; the persistent straggler's race."""
    plt = pyplot()
    panels = (2 if trials else 0) + (1 if races else 0)
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 4), squeeze=False)
    axes = list(axes[0])
    if trials:
        ax = axes.pop(0)
        for method in METHODS:
            mine = sorted((t.learners, 100 * t.accuracy) for t in trials if t.method == method)
            if mine:
                ax.plot(*zip(*mine, strict=True), "o-", label=method)
        ax.set_xscale("log", base=2)
        learners = sorted({t.learners for t in trials})
        ax.set_xticks(learners, [str(n) for n in learners])
        ax.set_xlabel("learners λ")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title("same samples, same α0", loc="left")
        ax.legend(fontsize="small")
        ax.grid(True, alpha=0.3)
        ax = axes.pop(0)  # the async rules share one schedule: one histogram per λ
        staleness_histogram(ax, [t for t in trials if t.method == _async_method(trials)
                                 and t.learners > 1])
        ax.set_title("staleness of the asynchronous rules", loc="left")
    if races:
        ax, race = axes.pop(0), races[0]
        race_curves(ax, race)
        ax.set_title(f"one worker slower ({race.compute} steps)", loc="left")
    save(fig, path)


def _async_method(trials: list[Trial]) -> str | None:
    methods = {t.method for t in trials}
    return next((m for m in ("staleness_aware", "asgd", "mean_staleness") if m in methods), None)


def summary_line(trials: list[Trial], races: list[Race], seconds: float) -> str:
    parts = []
    if trials:
        top = max(t.learners for t in trials)
        cells = ", ".join(f"{t.method} {100 * t.accuracy:.1f}%"
                          + (" (diverged)" if diverged(t) else "")
                          for t in trials if t.learners == top)
        parts.append(f"{trials[0].samples} samples per run; at λ={top}: {cells}")
    for race in races:
        target = race.targets[len(race.targets) // 2]
        ratio = race.ratio("ssp", target)
        parts.append(f"{race.compute}: SSP({race.staleness})/BSP to loss {target:g} = "
                     + ("never reached" if ratio is None else f"{ratio:.2f}"))
    return "; ".join(parts) + f"; {seconds:.0f} s"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    def integers(text: str) -> list[int]:
        return [int(part) for part in text.split(",")]

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("table", "stragglers"), default=None)
    parser.add_argument("--learners", type=integers, default=list(LEARNERS),
                        help="comma-separated λ values (each dividing --global-batch)")
    parser.add_argument("--methods", type=lambda s: s.split(","), default=list(METHODS),
                        help=f"comma-separated, of {', '.join(METHODS)}")
    parser.add_argument("--global-batch", type=integer(1), default=128, help="B = μλ")
    parser.add_argument("--epochs", type=number(above=0), default=4.0)
    parser.add_argument("--lr", type=number(above=0), default=DEFAULT_LR, help="α0")
    parser.add_argument("--sigma", type=number(least=0), default=0.25,
                        help="spread of the lognormal step times (0: constant)")
    parser.add_argument("--softsync", type=integer(1), default=None, help="n (default λ: c = 1)")
    parser.add_argument("--workers", type=integer(1), default=4, help="the races' workers")
    parser.add_argument("--slowdown", type=number(least=1), default=2.0)
    parser.add_argument("--staleness", type=integer(0), default=3, help="s of SSP(s)")
    parser.add_argument("--targets", type=lambda s: [float(x) for x in s.split(",")],
                        default=[1.0, 0.7, 0.5, 0.3], help="test losses the races time")
    parser.add_argument("--seed", type=integer(0), default=0)
    parser.add_argument("--plot", type=image_file, default=None, help="save the figure here (PNG)")
    args = parser.parse_args(argv)
    cpu_only(parser, "ps_staleness (a parameter server)")
    for method in args.methods:
        if method not in METHODS:
            parser.error(f"--methods: {method!r} is not one of {', '.join(METHODS)}")
    for learners in args.learners:
        if learners < 1 or args.global_batch % learners:
            parser.error(f"--learners: {learners} must be >= 1 and divide --global-batch "
                         f"{args.global_batch}")
    if args.softsync is not None and not 1 <= args.softsync <= min(args.learners):
        parser.error(f"--softsync {args.softsync}: n must be in 1..{min(args.learners)} "
                     f"(the fewest learners asked for)")
    return args


def main(argv: list[str] | None = None) -> tuple[list[Trial], list[Race]]:
    args = parse_args(argv)
    started = time.perf_counter()
    trials = run_table(args) if args.only != "stragglers" else []
    races = run_races(args) if args.only != "table" else []
    if trials:
        print(format_table(trials))
    for race in races:
        print(format_race(race))
    if args.plot:
        plot(trials, races, args.plot)
    print(summary_line(trials, races, time.perf_counter() - started), flush=True)
    return trials, races


if __name__ == "__main__":
    main()
