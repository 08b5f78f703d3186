"""DataParallel when something goes wrong: a backward that raises, replicas that differ.

A backward that raises on every rank (a user's check in a custom Function, caught, the
batch skipped) must not leave the later backwards local; ranks whose models or bucket
plans differ must get the same ValueError at construction, never a hang or an error on
one rank only. Each runs in-process and under a real mpiexec, where the buckets leave on
the communication thread while backward still runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import minidist as md
from minidist.autograd import Function
from minidist.nn import MLP, Linear, Module, Parameter
from minidist.nn.functional import cross_entropy
from minidist.optim import SGD
from minidist.parallel.ddp import DataParallel

MPIEXEC = Path(sys.executable).parent / "mpiexec"
UNDER_MPI = [pytest.mark.mpi, pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no {MPIEXEC}")]


class Guard(Function):
    """The identity; its backward raises when told to (a user's NaN check, say)."""

    @staticmethod
    def forward(ctx, x, fail):
        ctx.fail = fail
        return x

    @staticmethod
    def backward(ctx, grad):
        if ctx.fail:
            raise FloatingPointError("bad gradient in this batch")
        return grad


class GuardedNet(Module):
    """Two layers with the guard between them: the last layer's gradients are packed (and,
    under MPI, their buckets sent) before the guard raises."""

    def __init__(self, seed: int):
        super().__init__()
        self.l1 = Linear(4, 5, dtype=np.float64, rng=seed)
        self.l2 = Linear(5, 3, dtype=np.float64, rng=seed + 10)

    def forward(self, x, fail=False):
        return self.l2(Guard.apply(self.l1(x).tanh(), fail=fail))


def local_batch(rank: int):
    rng = np.random.default_rng(rank)  # each rank its own data
    return rng.standard_normal((6, 4)), rng.integers(0, 3, 6)


def skip_a_failing_batch(c):
    model = DataParallel(GuardedNet(seed=c.rank), c, bucket_mb=0)  # one bucket per tensor
    x, y = local_batch(c.rank)
    skipped = 0
    for step in range(3):
        model.zero_grad()
        try:
            cross_entropy(model(x, fail=step == 0), y).backward()  # every rank fails at step 0
        except FloatingPointError:
            skipped += 1
    return skipped, [p.grad.copy() for p in model.module.parameters()], model.reducer.overlap


@pytest.mark.timeout(90)
@pytest.mark.parametrize("backend", ["local", pytest.param("mpi", marks=UNDER_MPI)])
def test_a_backward_that_raised_leaves_the_next_ones_averaging(backend):
    results = md.launch(skip_a_failing_batch, 2, backend=backend, timeout=60)
    per_rank = []
    for rank in range(2):  # one process: the mean of the ranks' gradients, from rank 0's weights
        model = GuardedNet(seed=0)
        x, y = local_batch(rank)
        cross_entropy(model(x), y).backward()
        per_rank.append([p.grad for p in model.parameters()])
    expected = [(a + b) / 2 for a, b in zip(*per_rank, strict=True)]
    for skipped, grads, overlap in results:
        assert skipped == 1 and overlap == (backend == "mpi")  # MPI: the thread sent buckets
        for got, want, first in zip(grads, expected, results[0][1], strict=True):
            np.testing.assert_array_equal(got, first)  # the same bits on every rank
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)



def step_with_a_rate_set_to_nan(c):
    """The error this rank's step raised, and whether its weights stayed finite."""
    model = DataParallel(GuardedNet(seed=0), c)
    opt = SGD(model.module.parameters(), lr=0.1)
    opt.param_groups[0]["lr"] = float("nan")  # by hand, after the checks of construction
    x, y = local_batch(c.rank)
    cross_entropy(model(x), y).backward()
    try:
        opt.step()
        said = "stepped"
    except ValueError as error:
        said = str(error)
    return said, all(bool(np.isfinite(p.data).all()) for p in model.module.parameters())


@pytest.mark.timeout(60)
def test_a_rate_set_to_nan_after_construction_stops_every_rank_before_the_update():
    """Every rank trained on, quietly, to NaN weights."""
    for said, finite in md.launch(step_with_a_rate_set_to_nan, 2, backend="local", timeout=50):
        assert said == "param_groups[0]: lr must be a finite number >= 0, got nan"
        assert finite

class Flat(Module):
    """Parameters of the given shapes, each a float32 vector or array."""

    def __init__(self, *shapes):
        super().__init__()
        for i, shape in enumerate(shapes):
            setattr(self, f"p{i}", Parameter(np.ones(shape, np.float32)))

    def forward(self, x):
        return sum((p * x).sum() for p in self.parameters())


def frozen_first(model: Module) -> Module:
    model.parameters()[0].requires_grad = False
    return model


# case: (what the last rank builds differently, the words of the error)
CASES = {
    "trainable": (lambda odd: frozen_first(MLP([6, 8, 4], rng=0)) if odd else
                  MLP([6, 8, 4], rng=0), {}, "trainable parameters (requires_grad): "
                  "rank 0: 4 of 4 tensors trainable"),
    "tensors": (lambda odd: Flat((16,)) if odd else Flat((10,), (6,)), {},
                "number of parameter tensors: rank 0: 2"),
    "shapes": (lambda odd: Linear(8, 6, bias=False) if odd else Linear(6, 8, bias=False), {},
               "parameter shapes or dtypes"),
    "dtypes": (lambda odd: MLP([6, 8, 4], dtype=np.float64 if odd else np.float32), {},
               "parameter shapes or dtypes"),
    "plan": (lambda odd: MLP([6, 8, 4], rng=0), {"bucket_mb": 0, "first_bucket_mb": 0},
             "bucket plan"),
    "algorithm": (lambda odd: MLP([6, 8, 4], rng=0), {"algorithm": "tree"}, "algorithm"),
}


def wrap_differing_models(c, names):
    """For each case, the message of the error DataParallel raised on this rank (or what
    happened instead, if it did not raise)."""
    said = []
    for name in names:
        build, options, _ = CASES[name]
        odd = c.rank == c.size - 1
        try:
            model = DataParallel(build(odd), c, **(options if odd else {}))
        except ValueError as error:
            said.append(str(error))
            continue
        x = np.ones((2, 6), model.module.parameters()[0].dtype)
        (model(x) ** 2).sum().backward()  # would hang, or fail on one rank only
        said.append("constructed")
    return said


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend, world_size",
                         [("local", 3), pytest.param("mpi", 2, marks=UNDER_MPI)])
def test_ranks_with_different_models_raise_the_same_error_at_construction(backend,
                                                                         world_size):
    results = md.launch(wrap_differing_models, world_size, args=(list(CASES),),
                        backend=backend, timeout=90)
    for name, *messages in zip(CASES, *results, strict=True):
        assert len(set(messages)) == 1, messages  # the same error on every rank
        assert messages[0].startswith("DataParallel: every rank must hold the same model")
        assert f"rank(s) [{world_size - 1}] differ from rank 0" in messages[0]
        assert CASES[name][2] in messages[0], (name, messages[0])
