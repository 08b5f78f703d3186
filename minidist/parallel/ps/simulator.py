"""The staleness simulator and the straggler race (Lecture 5): λ learners, one server, in-process.

Every run here is ``train_mlp`` (the digits MLP through a parameter server)
on a ``LocalCluster`` of λ + 1 ranks: rank 0 serves, ranks 1..λ learn. A
learner's step costs modelled seconds drawn from a seeded distribution per
(learner, clock), and the server takes requests in modelled-time order, so a
run is the same to the bit every time, on any machine load.

**1. Staleness-aware SGD** (Zhang, Gupta, Lian & Liu 2016). The same samples,
``epochs`` passes over the 1,438 training digits, go through four rules:

- ``ssgd``: synchronous SGD, BSP with 1-softsync: every update the mean of
  λ gradients, one from each learner (staleness τ = 1), step α0;
- ``asgd``: asynchronous SGD, ASP, every gradient an update, step α0;
- ``staleness_aware``: ASP, n-softsync (default n = λ: c = 1), each gradient's
  step α0/τ, τ = 1 + the updates it missed (``ServerOptimizer(staleness_aware=True)``);
- ``mean_staleness``: ASP, n-softsync, every step α0/n: the paper's α0/⟨τ⟩,
  since n-softsync keeps the mean staleness near n.

The global batch μλ is held fixed (each learner's batch is μ = B/λ), so
``ssgd`` is the same algorithm at every λ (the same number of updates of the
same size) and only staleness changes. A learner's step takes
``mean · exp(σz − σ²/2)`` modelled seconds, z ~ N(0, 1) drawn from (seed,
learner, clock): lognormal with mean ``mean`` (σ = 0: constant). α0 is the
rate SSGD does best with, the same for all four rules (``DEFAULT_LR`` = 2:
of 0.3, 0.5, 1, 2, 3, 4 at λ = 1, seeds 0-2, 2 scores best; 3 starts to
diverge). Defaults: B = 128, 4 epochs (45 clocks, 5,760 samples), σ = 0.25.

What it shows (the table: README, "Parameter servers";
``python -m minidist.examples.ps_staleness``). ASGD at α0 breaks from λ = 2
on: per epoch it takes λ times SSGD's steps, on stale gradients. α0/n stays
within a point of SSGD at every λ, level or above: the paper's finding. The
per-gradient α0/τ (τ = 1 + the updates missed, ``rules.py``) mostly follows
it, but its steps are larger on average than α0/⟨τ⟩'s (E[1/τ] > 1/E[τ]), and
α0 = 2 sits within 1.5x of divergence, so some λ lose a point or two.

**2. The straggler race.** W workers, one ``slowdown`` times slower; BSP,
SSP(s) and ASP race to a test loss (worker 0's reads, scored every clock),
on the modelled clock. Three kinds of slowness (``compute``):

- ``constant``: every step ``mean`` s, one worker always ``slowdown``× slower
  (``Straggler(slowdown=...)``): a persistent straggler;
- ``random``: the same, with lognormal steps (σ) for everyone;
- ``moving``: constant steps, but at each clock a different worker, drawn at
  random, is the slow one.

Why SSP helps a persistent straggler less than a moving one: under BSP each
clock lasts as long as its slowest worker. A persistent straggler is the
slowest at every clock, and any rule that bounds staleness must let the
others wait for it once they are s clocks ahead: from then on everyone moves
at its pace, as under BSP. SSP(s) gains a head start of about s + 1 fast
steps, once, so its time to a target is BSP's minus a constant, and the
ratio tends to 1 as the target recedes (ASP, unbounded, keeps the fast
workers' gradients coming). The constant is at most the (W-1)(s+1) extra
gradients' worth, (W-1)(s+1)/W of BSP's clocks: SSP(3) on 4 workers is at
0.8x BSP or below only for targets within 15 BSP clocks (bench.ps, target
5). When the slowness moves, BSP still pays the slowest worker at every
clock, but under SSP a worker slow at one clock
catches up at the next ones: the delays average out inside the s-clock
window, and SSP's time stays a fraction of BSP's at every target. Random
step times sit between the two: BSP pays the maximum of W draws per clock,
SSP about their mean, and the persistent straggler still sets the pace.

Defaults: W = 4, 2x, SSP(3), batch 32, SGD 0.1, 60 clocks. Against the
persistent straggler SSP(3)'s time is BSP's less about s + 1 fast steps at
every target; against the moving one, a fraction of it (README).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from minidist.comm import LocalCluster, Straggler
from minidist.parallel.ps.rules import ServerOptimizer
from minidist.parallel.ps.training import ComputeTime, PSRun, digits, train_mlp

LEARNERS = (1, 2, 4, 8, 16, 32)
METHODS = ("ssgd", "asgd", "staleness_aware", "mean_staleness")
DEFAULT_LR = 2.0  # α0: SSGD's best at B = 128, 4 epochs (module docstring)
DIVERGED = float(np.log(10))  # a test loss above a uniform guess's: the run diverged
CONSISTENCIES = ("bsp", "ssp", "asp")
COMPUTE = ("constant", "random", "moving")


def lognormal_times(mean: float, sigma: float, seed: int = 0) -> ComputeTime:
    """A step of learner w at clock t: ``mean · exp(σz − σ²/2)`` s, z drawn from (seed, w, t)."""
    if mean < 0 or sigma < 0:
        raise ValueError(f"compute times need mean >= 0 and sigma >= 0, got {mean}, {sigma}")

    def step_time(clock: int, learner: int) -> float:
        z = np.random.default_rng((seed, learner, clock)).standard_normal() if sigma else 0.0
        return float(mean * np.exp(sigma * z - sigma ** 2 / 2))
    return step_time


def moving_straggler_times(mean: float, slowdown: float, workers: int,
                           seed: int = 0) -> ComputeTime:
    """``mean`` s a step, ``slowdown``× that for the one worker drawn from (seed, clock)."""
    def step_time(clock: int, worker: int) -> float:
        slow = np.random.default_rng((seed, clock)).integers(workers)
        return mean * (slowdown if worker == slow else 1.0)
    return step_time


def method_options(method: str, learners: int, lr: float, softsync: int | None = None) -> dict:
    """The ``ParameterServer`` options of one rule of the module docstring, for λ learners."""
    n = learners if softsync is None else softsync
    if method == "ssgd":
        return dict(consistency="bsp", softsync=1, optimizer=ServerOptimizer("sgd", lr))
    if method == "asgd":
        return dict(consistency="asp", optimizer=ServerOptimizer("sgd", lr))
    if method == "staleness_aware":
        return dict(consistency="asp", softsync=n,
                    optimizer=ServerOptimizer("sgd", lr, staleness_aware=True))
    if method == "mean_staleness":
        return dict(consistency="asp", softsync=n, optimizer=ServerOptimizer("sgd", lr / n))
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")


@dataclass
class Trial:
    """One run of the table: a rule at λ learners, and what came of it."""

    method: str
    learners: int
    batch_size: int  # μ, each learner's
    steps: int  # clocks per learner
    accuracy: float
    loss: float
    staleness: Counter  # τ (1 + updates missed) -> gradients
    seconds: float  # modelled
    values: np.ndarray = field(repr=False)  # the final parameters

    @property
    def samples(self) -> int:
        return self.learners * self.batch_size * self.steps


def simulate(method: str, learners: int, global_batch: int = 128, epochs: float = 4.0,
             lr: float = DEFAULT_LR, sigma: float = 0.25, mean: float = 1e-3,
             softsync: int | None = None, hidden: int = 64, seed: int = 0,
             on_step: Callable[[int], object] | None = None) -> Trial:
    """Train with ``method`` on ``learners`` in-process learners and one server.

    Each learner's batch is ``global_batch // learners``; every learner runs
    ``round(epochs · 1438 / global_batch)`` clocks, so every (method, λ) sees the
    same number of samples. ``on_step(clock)`` is called by each learner after each
    step. Cost: λ·steps gradients of μ samples; O(λ) work on the server per request
    (in-process, it reads every learner's next request before choosing one).
    """
    if isinstance(learners, bool) or not isinstance(learners, int) or learners < 1:
        raise ValueError(f"learners must be an integer >= 1, got {learners!r}")
    if global_batch % learners:
        raise ValueError(f"global batch {global_batch} must be a multiple of the {learners} "
                         f"learners (each learner's batch is global_batch / learners)")
    data = digits()
    steps = max(1, round(epochs * len(data[0]) / global_batch))
    options = method_options(method, learners, lr, softsync)
    runs = LocalCluster(learners + 1).run(
        lambda c: train_mlp(c, steps=steps, batch_size=global_batch // learners, hidden=hidden,
                            seed=seed, compute_time=lognormal_times(mean, sigma, seed),
                            eval_every=steps + 1, on_step=on_step, data=data, **options),
        timeout=None)
    run: PSRun = runs[0]
    return Trial(method, learners, global_batch // learners, steps, run.accuracy, run.loss,
                 run.staleness.gradients, run.seconds, run.values)


def staleness_table(learners: Sequence[int] = LEARNERS, methods: Sequence[str] = METHODS,
                    on_trial: Callable[[Trial], object] | None = None,
                    **options) -> list[Trial]:
    """``simulate`` every method at every λ (``options`` as ``simulate``'s), λ by λ."""
    trials = []
    for count in learners:
        for method in methods:
            trials.append(simulate(method, count, **options))
            if on_trial is not None:
                on_trial(trials[-1])
    return trials


def format_table(trials: Sequence[Trial]) -> str:
    """Test accuracy (%) per method (rows) and λ (columns); * where the run diverged."""
    learners = sorted({t.learners for t in trials})
    methods = [m for m in METHODS if any(t.method == m for t in trials)]
    cell = {(t.method, t.learners): t for t in trials}
    lines = ["test accuracy (%)  " + "".join(f"{f'λ={n}':>7} " for n in learners)]
    for method in methods:
        row = [cell.get((method, n)) for n in learners]
        lines.append(f"{method:<19}" + "".join(
            " " * 8 if t is None else f"{100 * t.accuracy:7.1f}{'*' if diverged(t) else ' '}"
            for t in row))
    if any(diverged(t) for t in trials):
        lines.append(f"* diverged: test loss above ln 10 = {DIVERGED:.2f}, a uniform guess's")
    return "\n".join(lines)


def diverged(trial: Trial) -> bool:
    """Whether the run's final test loss is above ``DIVERGED`` (or not a number)."""
    return not trial.loss <= DIVERGED  # NaN included


@dataclass
class Race:
    """Times to each target loss (modelled s; None: not reached) per consistency rule."""

    compute: str
    staleness: int  # s of SSP(s)
    targets: tuple[float, ...]
    times: dict[str, list[float | None]]
    runs: dict[str, PSRun] = field(repr=False)

    def ratio(self, rule: str, target: float) -> float | None:
        """``rule``'s time to ``target`` over BSP's."""
        mine, bsp = (self.times[r][self.targets.index(target)] for r in (rule, "bsp"))
        return None if mine is None or bsp is None else mine / bsp


def straggler_race(workers: int = 4, compute: str = "constant", slowdown: float = 2.0,
                   staleness: int = 3, targets: Sequence[float] = (1.0, 0.7, 0.5, 0.3),
                   steps: int = 60, batch_size: int = 32, lr: float = 0.1, mean: float = 1e-3,
                   sigma: float = 0.5, seed: int = 0) -> Race:
    """BSP, SSP(``staleness``) and ASP on ``workers`` workers, one of them slow (module
    docstring, part 2: ``compute`` in COMPUTE); every gradient an SGD update of ``lr``.

    The persistent straggler is the last worker; worker 0 times the targets.
    """
    if compute not in COMPUTE:
        raise ValueError(f"compute must be one of {COMPUTE}, got {compute!r}")
    if workers < 2 or slowdown < 1:
        raise ValueError(f"a race needs workers >= 2 and slowdown >= 1, got {workers}, "
                         f"{slowdown}")
    step_time = (moving_straggler_times(mean, slowdown, workers, seed) if compute == "moving"
                 else lognormal_times(mean, sigma if compute == "random" else 0.0, seed))
    slow = {} if compute == "moving" else {workers: Straggler(slowdown=slowdown)}
    data, runs = digits(), {}
    for rule in CONSISTENCIES:
        cluster = LocalCluster(workers + 1, stragglers=slow)
        runs[rule] = cluster.run(lambda c, rule: train_mlp(
            c, steps=steps, batch_size=batch_size, seed=seed, compute_time=step_time,
            eval_every=1, data=data, consistency=rule,
            staleness=staleness if rule == "ssp" else None,
            optimizer=ServerOptimizer("sgd", lr)), args=(rule,), timeout=None)[1]  # worker 0
    times = {rule: [run.time_to_loss(t) for t in targets] for rule, run in runs.items()}
    return Race(compute, staleness, tuple(targets), times, runs)


def format_race(race: Race) -> str:
    """One line per rule: modelled ms to each target, and the ratio to BSP."""
    names = {"bsp": "BSP", "ssp": f"SSP({race.staleness})", "asp": "ASP"}
    lines = [f"{race.compute} compute: modelled ms to test loss <= target (ratio to BSP)",
             "          " + "".join(f"{f'<= {t:g}':>18}" for t in race.targets)]
    for rule in CONSISTENCIES:
        cells = []
        for target, seconds in zip(race.targets, race.times[rule], strict=True):
            ratio = race.ratio(rule, target)
            cells.append("never" if seconds is None else
                         f"{1e3 * seconds:.1f} ({'-' if ratio is None else f'{ratio:.2f}'})")
        lines.append(f"{names[rule]:<10}" + "".join(f"{c:>18}" for c in cells))
    return "\n".join(lines)
