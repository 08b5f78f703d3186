"""Pipeline parallelism (Lecture 7): stages on ranks, micro-batches, schedules as data.

- ``schedules.py``: naive, GPipe and 1F1B as lists of steps per rank; checked
  and simulated on a unit clock (bubble, deadlock) before anything runs;
- ``stages.py``: a Sequential cut into K consecutive parts;
- ``engine.py``: one engine that runs any schedule, activations forward and
  gradients backward, point to point;
- ``pipeline.py``: ``Pipeline``, the wrapper a training loop uses.
"""

from minidist.parallel.pipeline.engine import StageEngine, StageRun
from minidist.parallel.pipeline.pipeline import Pipeline
from minidist.parallel.pipeline.schedules import (
    SCHEDULES,
    Schedule,
    ScheduleError,
    Step,
    bubble_formula,
    bubbles,
    check_schedule,
    format_schedule,
    gpipe,
    make_schedule,
    naive,
    one_f_one_b,
    simulate,
)
from minidist.parallel.pipeline.stages import split_stages

__all__ = [
    "Pipeline", "StageEngine", "StageRun", "Step", "Schedule", "ScheduleError", "SCHEDULES",
    "naive", "gpipe", "one_f_one_b", "make_schedule", "check_schedule", "simulate",
    "bubbles", "bubble_formula", "format_schedule", "split_stages",
]
