"""Pipeline schedules as data: which forward and backward each stage runs, in what order.

A model split into K stages sits on K ranks (rank k holds stage k); a
mini-batch is split into M micro-batches. A **schedule** is, for each rank,
the list of its steps: ``Step(stage, micro, "F")`` runs the forward of
micro-batch ``micro`` through the stage, ``Step(stage, micro, "B")`` its
backward. One engine (``engine.py``) runs any schedule; the three of the
lecture differ only in the order of the steps:

- ``naive``: one micro-batch at a time through the whole pipe, forward and
  back, before the next starts. One stage busy at a time: bubble (K-1)/K.
- ``gpipe`` (all forwards, then all backwards, "AFAB"): rank k runs
  F0 .. F(M-1), then B(M-1) .. B0. Bubble (K-1)/(M+K-1); every stage holds
  the activations of all M micro-batches before its first backward.
- ``one_f_one_b`` (PipeDream-flush): rank k runs K-1-k warm-up forwards, then
  alternates one forward and one backward, then drains the backwards. Same
  bubble as GPipe, but at most K - k micro-batches in flight on stage k.

Dependencies: F(k, m) needs F(k-1, m)'s activation; B(k, m) needs
B(k+1, m)'s gradient and F(k, m) on the same rank. ``simulate`` runs a
schedule on a unit clock under these rules (forward 1, backward 2, messages
free): it gives each step's start and end, the bubble of each stage, and
finds a schedule that can never finish (a **deadlock**), naming the ranks
and the steps they wait on, before any process starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from minidist.util.answers import lab_answer
from minidist.util.values import whole

PHASES = ("F", "B")


class ScheduleError(ValueError):
    """A schedule that is malformed or cannot finish; the message names what is wrong."""


@dataclass(frozen=True)
class Step:
    """One step of one rank: the forward ("F") or backward ("B") of one micro-batch."""

    stage: int
    micro: int
    phase: str

    def __str__(self) -> str:
        return f"{self.phase}{self.micro}"


Schedule = list[list[Step]]  # schedule[k]: the steps of rank k (stage k), in order


def naive(stages: int, micro_batches: int) -> Schedule:
    """Every rank: F0 B0 F1 B1 ...: a micro-batch goes through and back before the next."""
    _check_sizes(stages, micro_batches)
    return [[Step(k, m, phase) for m in range(micro_batches) for phase in PHASES]
            for k in range(stages)]


@lab_answer("lab07_gpipe")
def gpipe(stages: int, micro_batches: int) -> Schedule:
    """Every rank: all forwards F0 .. F(M-1), then all backwards B(M-1) .. B0."""
    _check_sizes(stages, micro_batches)
    return [[Step(k, m, "F") for m in range(micro_batches)]
            + [Step(k, m, "B") for m in reversed(range(micro_batches))]
            for k in range(stages)]


@lab_answer("lab07_1f1b")
def one_f_one_b(stages: int, micro_batches: int) -> Schedule:
    """Rank k: min(K-1-k, M) warm-up forwards, then one forward one backward, then the rest."""
    _check_sizes(stages, micro_batches)
    schedule = []
    for k in range(stages):
        warmup = min(stages - 1 - k, micro_batches)
        steps = [Step(k, m, "F") for m in range(warmup)]             # 1. warm-up
        for m in range(micro_batches - warmup):                      # 2. steady state
            steps += [Step(k, warmup + m, "F"), Step(k, m, "B")]
        steps += [Step(k, m, "B")                                    # 3. drain
                  for m in range(micro_batches - warmup, micro_batches)]
        schedule.append(steps)
    return schedule


SCHEDULES = {"naive": naive, "gpipe": gpipe, "1f1b": one_f_one_b}


def make_schedule(name: str, stages: int, micro_batches: int) -> Schedule:
    """The schedule called ``name`` (one of ``SCHEDULES``) for K stages and M micro-batches."""
    if name not in SCHEDULES:
        raise ValueError(f"schedule must be one of {sorted(SCHEDULES)}, got {name!r}")
    return SCHEDULES[name](stages, micro_batches)


def format_schedule(schedule: Schedule) -> str:
    """One line per rank: ``rank 0: F0 F1 B1 B0``."""
    return "\n".join(f"rank {k}: " + " ".join(map(str, steps))
                     for k, steps in enumerate(schedule))


def bubble_formula(stages: int, micro_batches: int) -> float:
    """GPipe's idle fraction of every stage: (K-1)/(M+K-1)."""
    _check_sizes(stages, micro_batches)  # 0 stages and 1 micro-batch divided by zero
    return (stages - 1) / (micro_batches + stages - 1)


def check_schedule(schedule: Schedule, micro_batches: int) -> None:
    """Raise ScheduleError unless every rank k runs F and B of each micro-batch
    exactly once, on stage k, the forward first, and the whole schedule can finish."""
    micro_batches = whole("micro_batches", micro_batches, least=1)
    if not schedule:
        raise ScheduleError("a schedule needs at least one rank")
    for k, steps in enumerate(schedule):
        for step in steps:
            if not isinstance(step, Step) or step.phase not in PHASES:
                raise ScheduleError(f"rank {k}: {step!r} is not a Step(stage, micro, 'F'|'B')")
            if step.stage != k:
                raise ScheduleError(f"rank {k} holds stage {k}, but its schedule has {step!r}")
            if not 0 <= step.micro < micro_batches:
                raise ScheduleError(f"rank {k}: micro-batch {step.micro} of {step!r} is not in "
                                    f"0..{micro_batches - 1}")
        expected = {(m, p) for m in range(micro_batches) for p in PHASES}
        seen = [(s.micro, s.phase) for s in steps]
        if len(seen) != len(set(seen)) or set(seen) != expected:
            missing = sorted(expected - set(seen))
            twice = sorted({x for x in seen if seen.count(x) > 1})
            raise ScheduleError(f"rank {k} must run F and B of each of the {micro_batches} "
                                f"micro-batches once; missing {_names(missing)}, "
                                f"twice {_names(twice)}")
        for m in range(micro_batches):
            if seen.index((m, "B")) < seen.index((m, "F")):
                raise ScheduleError(f"rank {k} runs B{m} before F{m}")
    simulate(schedule)


def simulate(schedule: Schedule, forward: float = 1.0,
             backward: float = 2.0) -> list[list[tuple[Step, float, float]]]:
    """Each rank's steps with their (start, end) on a clock where a forward takes
    ``forward``, a backward ``backward`` and messages nothing; ScheduleError on deadlock.

    A step starts when its rank is free and its input has arrived. Cost: O(steps).
    """
    last = len(schedule) - 1
    done: dict[tuple[int, int, str], float] = {}
    timed: list[list[tuple[Step, float, float]]] = [[] for _ in schedule]
    position, free = [0] * len(schedule), [0.0] * len(schedule)
    progress = True
    while progress:
        progress = False
        for k, steps in enumerate(schedule):
            while position[k] < len(steps):
                step = steps[position[k]]
                needed = _needs(step, last)
                if any(key not in done for key in needed):
                    break
                start = max([free[k], *(done[key] for key in needed)])
                free[k] = start + (forward if step.phase == "F" else backward)
                done[(k, step.micro, step.phase)] = free[k]
                timed[k].append((step, start, free[k]))
                position[k] += 1
                progress = True
    stuck = [(k, steps[position[k]]) for k, steps in enumerate(schedule)
             if position[k] < len(steps)]
    if stuck:
        waits = "; ".join(f"rank {k} waits at {step} for "
                          + " and ".join(_describe(key, k) for key in _needs(step, last)
                                         if key not in done)
                          for k, step in stuck)
        raise ScheduleError(f"deadlock: {waits}")
    return timed


@lab_answer("lab07_bubble")
def bubbles(timed: list[list[tuple[Step | str, float, float]]]) -> list[float]:
    """Each stage's idle fraction: 1 - (its busy time) / (the whole schedule's span).

    ``timed[k]``: rank k's (step, start, end), from ``simulate`` or an engine's trace.
    """
    span = max(end for steps in timed for _, _, end in steps)
    return [1.0 - sum(end - start for _, start, end in steps) / span for steps in timed]


def _needs(step: Step, last: int) -> list[tuple[int, int, str]]:
    """The steps whose results ``step`` needs: (stage, micro, phase) keys."""
    k, m = step.stage, step.micro
    if step.phase == "F":
        return [(k - 1, m, "F")] if k > 0 else []
    return [(k, m, "F")] + ([(k + 1, m, "B")] if k < last else [])


def _describe(key: tuple[int, int, str], rank: int) -> str:
    stage, micro, phase = key
    if stage == rank:
        return f"its own F{micro}"
    what = "activation" if phase == "F" else "gradient"
    return f"the {what} of micro-batch {micro} from rank {stage}"


def _names(keys: list[tuple[int, str]]) -> str:
    return "[" + " ".join(f"{p}{m}" for m, p in keys) + "]"


def _check_sizes(stages: int, micro_batches: int) -> None:
    whole("stages", stages, least=1)
    whole("micro_batches", micro_batches, least=1)
