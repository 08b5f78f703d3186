"""Lab 4's rank side: the models and data of its checks, and what each rank runs.

A Lab 4 answer takes a model, which is not data, so it cannot be handed to
the student's code in another process (``remote.py``). Each rank's part of
a check is therefore a probe (``remote.on_student``): a function here that
builds the rank's model from numbers (sizes, a seed, rows of data), runs
the student's function on it with the rank's communicator, and returns
data: gradients, weights, a trace. When the lab is graded, the probe runs
in the student's kernel on a communicator the grader lends (``relay.py``),
so every message, byte and modelled second is counted on the grader's
fabric; the check that reads the returned data and the reference it
compares with stay in the grader (``lab04.py``, ``lab04_straggler.py``).

Tasks 3 and 5 hand the student's training an ``average(model, c)`` (Task
1's answer) whose averaging is done by a :class:`GradientAverager`, lent
like the communicator: the gradients each rank computed before averaging
reach the grader, which compares them with the gradient of that rank's own
b rows. A rank that ran forward on other rows (the whole global batch, say)
is seen there, whatever its kernel says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from minidist.autograd import Tensor
from minidist.comm import allreduce
from minidist.nn import MLP
from minidist.nn.functional import cross_entropy


def seeded_mlp(sizes: list[int], seed: int) -> MLP:
    """An MLP of float64 layers ``sizes``, its weights drawn from ``seed``."""
    return MLP(list(sizes), dtype=np.float64, rng=np.random.default_rng(seed))


def make_data(rows: int, sizes: list[int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` random inputs of ``sizes[0]`` features and labels in ``range(sizes[-1])``."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, sizes[0])), rng.integers(0, sizes[-1], rows)


def mean_loss(model: Any, x: np.ndarray, y: np.ndarray) -> Any:
    """Mean cross-entropy of ``model`` on the rows ``x``, labels ``y``."""
    return cross_entropy(model(Tensor(x)), y)


def gradients_on(model: Any, x: np.ndarray, y: np.ndarray) -> list[np.ndarray | None]:
    """The gradients of ``mean_loss`` on the rows ``x``, ``y`` at ``model``'s weights."""
    for p in model.parameters():
        p.grad = None
    mean_loss(model, x, y).backward()
    return grads_of(model.parameters())


class GradientAverager:
    """Task 1's answer, given to later tasks so they do not depend on yours: each gradient
    summed over the ranks of ``c`` with ``comm.allreduce``, divided by P. It keeps the
    gradients of each call (``received``): what the rank computed before averaging, and
    when each call began and ended on the modelled clock (``spans``).

    It lives where the check runs; a graded answer gets it lent (``relay.py``), so its
    allreduces run on the grader's ranks and ``received`` is kept there."""

    def __init__(self, c: Any) -> None:
        self.c, self.received = c, []
        self.spans: list[tuple[float, float]] = []  # each call's (start, end), modelled

    def average(self, grads: Any) -> list[np.ndarray]:
        if not (isinstance(grads, list) and all(isinstance(g, np.ndarray) for g in grads)):
            raise TypeError("average(model, c) needs every parameter's gradient: run "
                            "backward before average (a parameter's .grad is None)")
        self.received.append([np.array(g) for g in grads])
        start = self.c.stats.clock
        # communication: each parameter's gradient, summed over all ranks
        means = [allreduce(g, self.c) / self.c.size for g in grads]
        self.spans.append((start, self.c.stats.clock))
        return means


def averaging_with(averager: Any) -> Callable[[Any, Any], None]:
    """``average(model, c)`` as Tasks 3 and 5 receive it: the model's gradients replaced
    by their average over the ranks, done by ``averager`` (a lent one, when graded)."""
    def average(model: Any, c: Any) -> None:
        params = list(model.parameters())
        for p, mean in zip(params, averager.average([p.grad for p in params]), strict=True):
            p.grad = mean

    return average


def grads_of(params: Any) -> list[np.ndarray | None]:
    """Copies of the ``.grad`` of each of ``params`` (None where there is none)."""
    return [None if p.grad is None else np.array(p.grad) for p in params]


def fake_params(shapes: list[tuple[int, ...]], dtypes: list[str] | None = None,
                grads: list[np.ndarray] | None = None) -> list[Any]:
    """Tensors of ``shapes`` and ``dtypes`` (default float64), ``.grad`` from ``grads``."""
    dtypes = dtypes or ["float64"] * len(shapes)
    params = [Tensor(np.zeros(shape, dtype=dtype), requires_grad=True)
              for shape, dtype in zip(shapes, dtypes, strict=True)]
    for p, grad in zip(params, grads or [], strict=False):
        p.grad = grad.reshape(p.shape).copy()
    return params


# --- probes: one rank's part of a check, from numbers to numbers --------------------------
def average_on_rank(average_gradients: Callable[[Any, Any], None], c: Any, sizes: list[int],
                    seed: int, x: np.ndarray, y: np.ndarray) -> list[np.ndarray | None]:
    """Task 1: backward on this rank's rows ``x``, ``y``, then ``average_gradients``; the
    gradients."""
    model = seeded_mlp(sizes, seed)
    mean_loss(model, x, y).backward()
    average_gradients(model, c)
    return grads_of(model.parameters())


def plan_of(plan_buckets: Callable[..., Any], shapes: list[tuple[int, ...]],
            dtypes: list[str] | None, bucket_bytes: int, extra: tuple) -> list[list[int]]:
    """Task 2: the plan of tensors of ``shapes`` and ``dtypes``, as lists of indices."""
    got = plan_buckets(fake_params(shapes, dtypes), bucket_bytes, *extra)
    return [[int(i) for i in bucket] for bucket in got]


def buckets_on_rank(allreduce_in_buckets: Callable[..., None], c: Any,
                    shapes: list[tuple[int, ...]], dtypes: list[str] | None,
                    grads: list[np.ndarray], bucket_bytes: int,
                    extra: tuple) -> list[np.ndarray | None]:
    """Task 2: ``allreduce_in_buckets`` on tensors holding this rank's ``grads``; the
    gradients."""
    mine = fake_params(shapes, dtypes, grads)
    allreduce_in_buckets(mine, c, bucket_bytes, *extra)
    return grads_of(mine)


def train_on_rank(train_data_parallel: Callable[..., Any], c: Any, averager: Any,
                  sizes: list[int], seed: int, x: np.ndarray, y: np.ndarray,
                  batch_per_rank: int, steps: int, lr: float) -> list[np.ndarray]:
    """Task 3: ``train_data_parallel`` from weights of ``seed + c.rank``, averaging with
    ``averager``; the weights."""
    model = seeded_mlp(sizes, seed + c.rank)
    train_data_parallel(c, model, x, y, batch_per_rank, steps, lr, averaging_with(averager))
    return [np.array(p.data) for p in model.parameters()]


def timed_on_rank(timed_steps: Callable[..., Any], c: Any, averager: Any, sizes: list[int],
                  x: np.ndarray, y: np.ndarray, steps: int, slow_rank: int,
                  delay: float) -> tuple[list[tuple], list[np.ndarray]]:
    """Task 5: ``timed_steps`` from the weights of seed 0, averaging with ``averager``; its
    trace and the weights."""
    model = seeded_mlp(sizes, seed=0)
    trace = timed_steps(c, model, x, y, steps, slow_rank, delay, averaging_with(averager))
    return [tuple(i) for i in trace], [np.array(p.data) for p in model.parameters()]
