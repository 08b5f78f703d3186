"""Lab 8's checks, run on the library's reference code, one pytest marker per task (Tasks 1
and 2 here, 3 and 4 in ``test_lab08_moe_zero.py``).

``pytest -m lab08_zero_step`` runs the check that grades Task 4 against the library's
``ShardedOptimizer.step``; the solution's answers are the library's code (syntax trees
compared), and Task 2's check runs the solution's class (a class built on the library's
``ParallelMLP`` is refused). Each claim a check makes rejects a known-wrong answer with the
sentence a student reads — values against one process, and each phase's traffic and each
rank's memory where the answer computes the right numbers the wrong way — a deadlock fails
and never hangs, and an answer that calls the library's own is blocked. The notebooks in
``tests/fixtures/lab08/`` each fail exactly their task's check here, as they lose exactly
its points under real grading (``test_course_kit.py``).
"""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from lab08_cells import CELLS, SOLUTION, run_cells
from notebook_source import answer_function, code

from minidist.autograd import Function, Tensor, concatenate
from minidist.comm import allreduce, barrier
from minidist.labkit import BlockedError, CheckFailed
from minidist.labkit.lab08 import check_f_and_g, check_mlp_split
from minidist.labkit.lab08_moe import check_dispatch, check_moe_layer
from minidist.labkit.lab08_zero import check_zero_step
from minidist.nn import Module, Parameter
from minidist.nn import functional as F
from minidist.parallel.moe import dispatch, send_back
from minidist.parallel.tensor_parallel import (
    CopyToRanks,
    ParallelMLP,
    SumOverRanks,
    copy_to_ranks,
    slice_of,
    sum_over_ranks,
)
from minidist.parallel.zero import ShardedOptimizer
from minidist.util.answers import answers_to

FIXTURES = Path(__file__).parent / "fixtures" / "lab08"


def answer_method(class_name: str, name: str) -> ast.FunctionDef:
    """The method ``name`` of the class ``class_name`` defined in a code cell of the solution."""
    for cell in CELLS:
        if cell["cell_type"] == "code":
            for node in ast.parse("".join(cell["source"])).body:
                if isinstance(node, ast.ClassDef) and node.name == class_name:
                    return next(f for f in node.body
                                if isinstance(f, ast.FunctionDef) and f.name == name)
    raise LookupError(f"{SOLUTION} defines no {class_name}.{name}")


def failed_in_a_fresh_process(answers: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """``run_cells(answers)``'s failed checks, run in a process of its own, as a kernel is."""
    (tmp_path / "answers.json").write_text(json.dumps(answers))
    subprocess.run([sys.executable, str(Path(__file__).parent / "lab08_cells.py"),
                    str(tmp_path)], check=True, timeout=100, capture_output=True)
    return json.loads((tmp_path / "failed.json").read_text())


SOLVED, SOLVED_FAILURES = run_cells({})


@pytest.mark.parametrize("answer, library", [
    (("MyCopyToRanks", "forward"), CopyToRanks.forward),
    (("MyCopyToRanks", "backward"), CopyToRanks.backward),
    (("MySumOverRanks", "forward"), SumOverRanks.forward),
    (("MySumOverRanks", "backward"), SumOverRanks.backward),
    (("MyParallelMLP", "__init__"), ParallelMLP.__init__),
    (("MyParallelMLP", "forward"), ParallelMLP.forward),
    ("dispatch", dispatch),
    ("send_back", send_back),
    (("MyZeRO", "step"), ShardedOptimizer.step),
])
def test_the_solutions_are_the_library_code(answer, library):
    tree = answer_method(*answer) if isinstance(answer, tuple) else answer_function(SOLUTION,
                                                                                    answer)
    assert code(tree) == code(library)


@pytest.mark.parametrize("check, task, blocked", [
    (check_f_and_g, "lab08_f_and_g", {"CopyToRanks.forward", "CopyToRanks.backward",
                                      "SumOverRanks.forward", "SumOverRanks.backward"}),
    (check_mlp_split, "lab08_mlp_split", {"ParallelMLP.forward"}),
    (check_dispatch, "lab08_moe_dispatch", {"dispatch", "send_back"}),
    (check_moe_layer, "lab08_moe_dispatch", {"dispatch", "send_back"}),
    (check_zero_step, "lab08_zero_step", {"ShardedOptimizer.step"}),
])
def test_each_check_blocks_the_library_answer_to_its_task(check, task, blocked):
    assert inspect.signature(check).parameters["block"].default == (task,)
    assert {f.__qualname__ for f in answers_to(task)} == blocked


@pytest.mark.timeout(300)
def test_the_solution_passes_every_check_and_each_fixture_fails_exactly_its_own(tmp_path):
    assert SOLVED_FAILURES == {}
    losses = json.loads((FIXTURES / "expected_losses.json").read_text())
    assert len(losses) >= 4
    for fixture, lost in losses.items():
        cells = json.loads((FIXTURES / f"{fixture}.ipynb").read_text())["cells"]
        answers = {c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"]) for c in cells
                   if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
        failed = failed_in_a_fresh_process(answers, tmp_path)
        if list(failed) != list(lost):
            pytest.fail(f"{fixture}: expected to fail {list(lost)}, failed "
                        + "; ".join(f"{task}: {said}" for task, said in failed.items()))


# --- Task 1 ----------------------------------------------------------------------------------
@pytest.mark.lab08_f_and_g
@pytest.mark.timeout(60)
def test_f_and_g():
    for world_size, shape, seed in [(1, (4,), 0), (2, (3, 4), 1), (3, (2, 3, 2), 2),
                                    (5, (7,), 3)]:
        check_f_and_g(CopyToRanks, SumOverRanks, world_size, shape, seed, block=())


class OwnGradient(Function):
    """f whose backward keeps this rank's part of dL/dx."""

    @staticmethod
    def forward(ctx, x, c):
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class SummedBackward(Function):
    """g whose backward sums dL/dz over the ranks as well."""

    @staticmethod
    def forward(ctx, partial, c):
        ctx.c = c
        return allreduce(partial, c)

    @staticmethod
    def backward(ctx, grad):
        return allreduce(grad, ctx.c), None


class AveragedForward(Function):
    """f that 'makes sure every rank has x' with an allreduce: right values, one more message."""

    @staticmethod
    def forward(ctx, x, c):
        ctx.c = c
        return allreduce(x, c) / c.size

    @staticmethod
    def backward(ctx, grad):
        return allreduce(grad, ctx.c), None


class CheckedSum(Function):
    """g with the allreduce's agreement check left on: accepted."""

    @staticmethod
    def forward(ctx, partial, c):
        return allreduce(partial, c)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class ThroughTheLibrary(Function):
    @staticmethod
    def forward(ctx, x, c):
        return CopyToRanks.forward(ctx, x, c)

    @staticmethod
    def backward(ctx, grad):
        return CopyToRanks.backward(ctx, grad)


@pytest.mark.timeout(60)
def test_f_and_g_reject_each_wrong_rule_in_a_sentence():
    cases = [
        (CopyToRanks, CopyToRanks, r"g's forward on rank 0: differs.* that is this rank's own "
                                   r"partial output: g's forward sums"),
        (OwnGradient, SumOverRanks, r"f's backward, x's gradient on rank 0: differs.* that is "
                                    r"this rank's own dL/dx"),
        (CopyToRanks, SummedBackward, r"g's backward, the partial's gradient on rank 0.* the sum "
                                      r"over the ranks of dL/dz; .* identity"),
        (AveragedForward, SumOverRanks, r"f's forward: rank 0 sent \d+ messages \(\d+ bytes\); "
                                        r"f's forward sends nothing: 0 messages"),
        (SumOverRanks.forward, SumOverRanks, r"f must be a minidist Function"),
    ]
    for f, g, message in cases:
        with pytest.raises(CheckFailed, match=message):
            check_f_and_g(f, g, 3, (2, 3), block=())
    check_f_and_g(CopyToRanks, CheckedSum, 3, (2, 3), block=())
    with pytest.raises(BlockedError, match="write your own CopyToRanks.forward"):
        check_f_and_g(ThroughTheLibrary, CheckedSum, 2, (3,))


# --- Task 2 ----------------------------------------------------------------------------------
MyParallelMLP = SOLVED["MyParallelMLP"]


@pytest.mark.lab08_mlp_split
@pytest.mark.timeout(60)
def test_mlp_split():
    for world_size, d, hidden, rows, activation in [(1, 3, 4, (2,), "relu"),
                                                    (2, 4, 8, (5,), "relu"),
                                                    (4, 3, 8, (2, 3), "tanh"),
                                                    (3, 5, 12, (2, 2, 2), "relu")]:
        check_mlp_split(MyParallelMLP, world_size, d, hidden, rows, activation, seed=hidden)


class GathersTheHiddenLayer(MyParallelMLP):
    def forward(self, x):
        x = copy_to_ranks(x, self.c)
        mine = F.relu(F.linear(x, self.w1, self.b1))
        part, rank, size = mine.shape[-1], self.c.rank, self.c.size
        padded = concatenate([Tensor(np.zeros((*mine.shape[:-1], rank * part))), mine,
                              Tensor(np.zeros((*mine.shape[:-1], (size - rank - 1) * part)))],
                             axis=-1)
        whole = sum_over_ranks(padded, self.c)  # the whole hidden layer on every rank
        return sum_over_ranks(F.linear(whole[..., rank * part:(rank + 1) * part], self.w2),
                              self.c) + self.b2


class SumsInHalves(MyParallelMLP):
    def forward(self, x):
        x = copy_to_ranks(x, self.c)
        partial = F.linear(F.relu(F.linear(x, self.w1, self.b1)), self.w2)
        half = partial * 0.5
        return sum_over_ranks(half, self.c) + sum_over_ranks(half, self.c) + self.b2


class Synchronises(MyParallelMLP):
    def forward(self, x):
        barrier(self.c)  # "to be safe": one more exchange of messages per forward
        return super().forward(x)


class BiasOnEveryRank(MyParallelMLP):
    def forward(self, x):
        x = copy_to_ranks(x, self.c)
        h = F.relu(F.linear(x, self.w1, self.b1))
        return sum_over_ranks(F.linear(h, self.w2, self.b2), self.c)


class Whole(Module):
    """No split at all: every rank computes the whole block, sends nothing."""

    def __init__(self, w1, b1, w2, b2, c, activation="relu"):
        super().__init__()
        self.w1, self.b1, self.w2, self.b2 = (Parameter(w.copy()) for w in (w1, b1, w2, b2))

    def forward(self, x):
        return F.linear(F.relu(F.linear(x, self.w1, self.b1)), self.w2, self.b2)


class KeepsViews(MyParallelMLP):
    """The right slices, as views of the caller's whole arrays, not copies."""

    def __init__(self, w1, b1, w2, b2, c, activation="relu"):
        Module.__init__(self)
        hidden = slice_of(w1.shape[0], c, "hidden units")
        self.c, self.activation = c, activation
        self.w1, self.b1 = Parameter(w1[hidden]), Parameter(b1[hidden])
        self.w2, self.b2 = Parameter(w2[:, hidden]), Parameter(b2)


class FloorSplit(MyParallelMLP):
    """hidden // P units a rank, not slice_of: with P not dividing hidden, units dropped
    without a word (it scored full marks: every case had P dividing hidden)."""

    def __init__(self, w1, b1, w2, b2, c, activation="relu"):
        Module.__init__(self)
        n = w1.shape[0] // c.size
        hidden = slice(c.rank * n, (c.rank + 1) * n)
        self.c, self.activation = c, activation
        self.w1, self.b1 = Parameter(w1[hidden].copy()), Parameter(b1[hidden].copy())
        self.w2, self.b2 = Parameter(w2[:, hidden].copy()), Parameter(b2.copy())


class OnTheLibrary(ParallelMLP):
    pass


class CallsTheLibrary(MyParallelMLP):
    def forward(self, x):
        return ParallelMLP.forward(self, x)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("wrong, message", [
    (GathersTheHiddenLayer, r"forward: rank 0 sent \d+ messages \(\d+ bytes\): that is an "
                            r"allreduce of the hidden layer \(n x hidden values\) and one of the "
                            r"output; the column-then-row split sends exactly one allreduce"),
    (SumsInHalves, r"forward: rank 0 sent \d+ messages \(\d+ bytes\): that is two allreduces "
                   r"of n x d values; .*exactly one allreduce of the output \(5 x 4 values\)"),
    (Synchronises, r"forward: rank 0 sent \d+ messages .*exactly one allreduce of the output"),
    (BiasOnEveryRank, r"the output on rank 0: differs.* off by \(P - 1\)·b2: add b2 once"),
    (Whole, r"rank 0's w1, of which it keeps hidden units 0..3 \(it kept the whole matrix"),
    (OnTheLibrary, r"build your class on Module, not on the library's ParallelMLP"),
    (FloorSplit, r"with 9 hidden units on P = 2 ranks the layer was made without an error "
                 r"\(on ranks \[0, 1\]: .*split them with slice_of"),
    (KeepsViews, r"rank 0's w1, b1, w2, b2 share memory with the whole weights the layer was "
                 r"given \(views of w1, b1, w2, b2\): keep copies of your slices"),
])
def test_mlp_split_rejects(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_mlp_split(wrong, 2, 4, 8, (5,))


def test_mlp_split_blocks_the_library():
    with pytest.raises(BlockedError, match="write your own ParallelMLP.forward"):
        check_mlp_split(CallsTheLibrary, 2, 4, 8, (5,))
