"""Optimiser and schedule state: when it is taken, how a run resumes from it.

A learning-rate schedule resumed from its ``state_dict`` goes on at the rate the
interrupted run had reached, bit for bit; Lookahead takes its slow copy of the
weights at its first step, so a ``DataParallel`` built after it (which replaces
every rank's weights with rank 0's) keeps the replicas identical.
"""

from __future__ import annotations

import numpy as np
import pytest

import minidist as md
from minidist.nn import MLP
from minidist.nn.functional import cross_entropy
from minidist.optim import SGD, Adam, Lookahead, LRScheduler, schedules
from minidist.parallel.ddp import DataParallel


def schedule():
    return schedules.with_warmup(schedules.cosine(0.05, total_steps=20), warmup_steps=4)


def train(model, opt, scheduler, steps):
    for t in steps:
        rng = np.random.default_rng(t)
        opt.zero_grad()
        cross_entropy(model(rng.standard_normal((8, 5))), rng.integers(0, 3, 8)).backward()
        opt.step()
        scheduler.step()


@pytest.mark.parametrize("lookahead", [False, True])
def test_a_scheduler_resumed_from_its_state_dict_goes_on_bit_for_bit(lookahead):
    def build(seed):
        model = MLP([5, 7, 3], dtype=np.float64, rng=seed)
        opt = Adam(model.parameters(), lr=1e-2)
        opt = Lookahead(opt, k=3) if lookahead else opt
        return model, opt, LRScheduler(opt, schedule())

    model, opt, scheduler = build(1)
    train(model, opt, scheduler, range(7))
    saved = model.state_dict(), opt.state_dict(), scheduler.state_dict()
    train(model, opt, scheduler, range(7, 15))

    resumed, resumed_opt, resumed_scheduler = build(2)  # lr = schedule(0) for now
    resumed.load_state_dict(saved[0])
    resumed_opt.load_state_dict(saved[1])
    resumed_scheduler.load_state_dict(saved[2])
    assert saved[2] == {"step_count": 7}
    assert resumed_opt.param_groups[0]["lr"] == schedule()(7)
    train(resumed, resumed_opt, resumed_scheduler, range(7, 15))
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(resumed.state_dict()[name], value)
    assert resumed_scheduler.last_lr == scheduler.last_lr


def test_a_bad_scheduler_state_is_named():
    scheduler = LRScheduler(SGD(MLP([2, 2]).parameters(), lr=0.1), schedule())
    with pytest.raises(ValueError, match="step_count"):
        scheduler.load_state_dict({"step_count": -3})


def lookahead_before_data_parallel(c):
    model = MLP([4, 5, 3], dtype=np.float64, rng=c.rank)  # each rank its own weights at first
    opt = Lookahead(SGD(model.parameters(), lr=0.1), k=2)
    before = opt.state_dict()  # before the first step: no slow weights yet
    ddp = DataParallel(model, c)  # rank 0's weights, everywhere
    x, y = np.ones((2, 4)), np.array([0, 1])
    for _ in range(4):  # two slow steps
        opt.zero_grad()
        cross_entropy(ddp(x), y).backward()
        opt.step()
    return before["slow_weights"], model.state_dict()


def test_lookahead_built_before_data_parallel_keeps_the_replicas_identical():
    (slow, first), (_, second) = md.launch(lookahead_before_data_parallel, 2, backend="local")
    assert slow is None
    for name, value in first.items():
        np.testing.assert_array_equal(second[name], value)


def test_lookahead_state_dict_round_trips_before_and_after_its_first_step():
    def build():
        model = MLP([3, 4, 2], dtype=np.float64, rng=0)
        return model, Lookahead(SGD(model.parameters(), lr=0.1), k=2)

    model, opt = build()
    fresh = opt.state_dict()
    _, other = build()
    other.load_state_dict(fresh)  # nothing taken yet: taken at its first step
    assert other.slow_weights is None
    x, y = np.ones((2, 3)), np.array([0, 1])
    for _ in range(3):
        opt.zero_grad()
        cross_entropy(model(x), y).backward()
        opt.step()
    other.load_state_dict(opt.state_dict())
    for slow, saved in zip(other.slow_weights, opt.slow_weights, strict=True):
        np.testing.assert_array_equal(slow, saved)
        assert slow.dtype == np.float64
