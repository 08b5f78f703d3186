"""Lab 8's checks of Tasks 3 and 4 (the MoE dispatch, ZeRO's step) run on the library's
reference under their markers; each claim rejects a known-wrong answer in the sentence a
student reads, a deadlock fails and never hangs, and an answer that calls the library's own
is blocked (``test_lab08.py`` holds Tasks 1 and 2, the solution's code and the fixtures).
"""

from __future__ import annotations

import ast

import numpy as np
import pytest
from notebook_source import SOLUTIONS, answer_function

from minidist.backend import xp_of
from minidist.comm import allgather, allreduce, alltoall, reduce_scatter
from minidist.labkit import BlockedError, CheckFailed
from minidist.labkit.lab08_moe import check_dispatch, check_moe_layer
from minidist.labkit.lab08_zero import check_zero_shape_error, check_zero_step
from minidist.nn import Parameter
from minidist.parallel.moe import AllToAll, by_expert, dispatch, send_back
from minidist.parallel.zero import ShardedOptimizer

SOLUTION = SOLUTIONS / "lab08_model_parallel" / "lab08_model_parallel.ipynb"


def solution(name: str):
    """The function ``name`` of the solution notebook, defined as the notebook does."""
    namespace = {"np": np, "AllToAll": AllToAll, "alltoall": alltoall, "by_expert": by_expert,
                 "xp_of": xp_of}
    tree = ast.Module([answer_function(SOLUTION, name)], type_ignores=[])
    exec(compile(tree, str(SOLUTION), "exec"), namespace)
    return namespace[name]


# --- Task 3 ----------------------------------------------------------------------------------
@pytest.mark.lab08_moe_dispatch
@pytest.mark.timeout(120)
def test_moe_dispatch():
    for world_size, n_experts, seed in [(1, 3, 0), (2, 4, 1), (3, 6, 2), (4, 8, 3), (2, 2, 4),
                                        (1, 2, 2)]:
        check_dispatch(dispatch, send_back, world_size, n_experts, seed=seed, block=())
    for world_size, n_experts, top_k in [(1, 2, 1), (2, 4, 1), (4, 8, 2), (3, 3, 2)]:
        check_moe_layer(dispatch, send_back, world_size, n_experts, top_k, block=())


def round_robin(rows, expert_counts, c):
    counts = np.asarray(expert_counts, np.int64).reshape(-1, c.size).T
    table = alltoall(counts, c)
    received = AllToAll.apply(rows, counts.sum(axis=1), c)
    return received[xp_of(received.data).asarray(by_expert(table))], table


def unsorted(rows, expert_counts, c):
    counts = np.asarray(expert_counts, np.int64).reshape(c.size, -1)
    return AllToAll.apply(rows, counts.sum(axis=1), c), alltoall(counts, c)


def counts_gathered(rows, expert_counts, c):
    """Every rank's counts to every rank (P·E integers) instead of an alltoall."""
    counts = np.asarray(expert_counts, np.int64).reshape(c.size, -1)
    table = allgather(counts, c)[:, c.rank]
    received = AllToAll.apply(rows, counts.sum(axis=1), c)
    return received[xp_of(received.data).asarray(by_expert(table))], table


def float_table(rows, expert_counts, c):
    """The right rows, the table of counts as floats."""
    received, table = dispatch(rows, expert_counts, c)
    return received, table.astype(np.float64)


def int32_counts(rows, expert_counts, c):
    """The text's dispatch with its counts as int32: it lost its points on a traffic count
    (1000 bytes against 1008) that named no dtype."""
    counts = np.asarray(expert_counts, np.int32).reshape(c.size, -1)
    table = alltoall(counts, c)
    received = AllToAll.apply(rows, counts.sum(axis=1), c)
    return received[xp_of(received.data).asarray(by_expert(table))], table


def not_unsorted(outputs, table, c):
    return AllToAll.apply(outputs, table.sum(axis=1), c)


def waits_for_nobody(rows, expert_counts, c):
    """Rank 0 waits for a message rank 1 never sends."""
    if c.rank == 0:
        c.recv(np.empty(1), 1, tag=99)
    return rows, np.zeros((c.size, 1), np.int64)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("wrong, back, message", [
    (round_robin, send_back, r"rank 0 received a row that rank 0 had for expert 2, which "
                             r"lives on rank 1: expert e lives on rank e // \(E/P\)"),
    (unsorted, send_back, r"the rows rank \d received .* the right rows in another order"),
    (dispatch, not_unsorted, r"send_back on rank 0: its rows, each back in its place"),
    (counts_gathered, send_back, r"dispatch: rank 0 sent \d+ messages \(\d+ bytes\); one "
                                 r"alltoall of the counts and one all-to-all of the rows send"),
    (float_table, lambda o, t, c: send_back(o, t.astype(np.int64), c),
     r"rank 0's table is an array of float64; it counts rows: an np.int64 array"),
    (int32_counts, send_back, r"rank 0's table is an array of int32; it counts rows: an "
                              r"np.int64 array, as the text's counts are"),
    (waits_for_nobody, send_back, r"rank 0: recv from rank 1 tag 99 never matched \(rank 1 "
                                       r"finished\)"),
])
def test_dispatch_rejects(wrong, back, message):
    with pytest.raises(CheckFailed, match=message):
        check_dispatch(wrong, back, 2, 4, seed=1, block=("lab08_zero_step",))


def test_dispatch_and_the_layer_block_the_library():
    with pytest.raises(BlockedError, match="write your own dispatch"):
        check_dispatch(dispatch, send_back, 2, 4)
    with pytest.raises(BlockedError, match="write your own send_back"):
        check_moe_layer(solution("dispatch"), send_back, 2, 4, 1)
    with pytest.raises(CheckFailed, match=r"rank 0's output: differs"):
        check_moe_layer(round_robin, solution("send_back"), 2, 4, 1, seed=1)


# --- Task 4 ----------------------------------------------------------------------------------
@pytest.mark.lab08_zero_step
@pytest.mark.timeout(120)
@pytest.mark.parametrize("stage", [1, 2])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_zero_step(stage, optimizer):
    for world_size, sizes, seed in [(1, [3, 4, 2], 0), (2, [4, 7, 3], 1), (3, [4, 7, 3], 2),
                                    (4, [5, 6, 4], 3)]:
        check_zero_step(ShardedOptimizer, world_size, stage, optimizer, sizes, seed=seed,
                        block=())
        check_zero_step(ShardedOptimizer, world_size, stage, optimizer, sizes, seed=seed,
                        dtype="float32", block=())
        check_zero_step(ShardedOptimizer, world_size, stage, optimizer, sizes, seed=seed,
                        unused=seed % 4, block=())
        check_zero_shape_error(ShardedOptimizer, world_size, stage, sizes, seed % 4, seed=seed,
                               block=())


def pack(zero):
    """Step 1 of the text, as the reference writes it."""
    flat = np.zeros_like(zero.flat)
    for p, (start, stop) in zip(zero.params, zero.slots, strict=True):
        if p.grad is not None:
            flat[start:stop] = p.grad.reshape(-1) * zero.scale
        p.grad = None
    return flat


def gather(zero):
    lo, hi = zero.bounds[zero.comm.rank]
    mine = np.zeros(zero.bounds[0][1] - zero.bounds[0][0])
    mine[:hi - lo] = zero.shard.data
    for (start, stop), row in zip(zero.bounds, allgather(mine, zero.comm), strict=True):
        zero.flat[start:stop] = row[:stop - start]


class WholeVector(ShardedOptimizer):
    """The fixture's answer: the whole gradient allreduced, the whole vector updated."""

    def step(self):
        flat = pack(self)
        if not hasattr(self, "everything"):
            self.everything = Parameter(self.flat)
            hyper = {k: v for k, v in self.optimizer.param_groups[0].items() if k != "params"}
            self.whole_optimizer = type(self.optimizer)([self.everything], **hyper)
        self.everything.grad = allreduce(flat, self.comm)
        self.whole_optimizer.step()


class AllreducesThenShards(ShardedOptimizer):
    """Stage 1 holding what it should, but every rank gets every sum: an allreduce."""

    def step(self):
        lo, hi = self.bounds[self.comm.rank]
        self.grad_buffer[...] = allreduce(pack(self), self.comm)
        self.shard.grad = self.grad_buffer[lo:hi]
        self.optimizer.step()
        gather(self)


class NoAllgather(ShardedOptimizer):
    def step(self):
        self.shard.grad = reduce_scatter(pack(self), self.comm)
        self.optimizer.step()


class KeepsTheWholeGradient(ShardedOptimizer):
    """Stage 2 with a flat gradient kept between steps, as stage 1 keeps it."""

    def step(self):
        lo, hi = self.bounds[self.comm.rank]
        self.kept = pack(self)
        self.kept[lo:hi] = reduce_scatter(self.kept, self.comm)
        self.shard.grad = self.kept[lo:hi]
        self.optimizer.step()
        gather(self)


class Sums(ShardedOptimizer):
    """The gradients summed over the ranks, not averaged."""

    def step(self):
        self.shard.grad = reduce_scatter(pack(self) * self.comm.size, self.comm)
        self.optimizer.step()
        gather(self)


class SkipsNone(ShardedOptimizer):
    """A gradient that is None leaves its slot as it was (the last step's, in stage 1)."""

    def step(self):
        lo, hi = self.bounds[self.comm.rank]
        for p, (start, stop) in zip(self.params, self.slots, strict=True):
            if p.grad is not None:
                self.grad_buffer[start:stop] = p.grad.reshape(-1) * self.scale
            p.grad = None
        self.grad_buffer[lo:hi] = reduce_scatter(self.grad_buffer, self.comm)
        self.shard.grad = self.grad_buffer[lo:hi]
        self.optimizer.step()
        gather(self)


class Unchecked(ShardedOptimizer):
    """Any gradient of as many values goes in, whatever its shape (stage 1; its allgather
    pads the shard in float64, as ``gather`` does)."""

    def step(self):
        self.grad_buffer[...] = pack(self)
        lo, hi = self.bounds[self.comm.rank]
        self.grad_buffer[lo:hi] = reduce_scatter(self.grad_buffer, self.comm)
        self.shard.grad = self.grad_buffer[lo:hi]
        self.optimizer.step()
        gather(self)


class Float64Buffers(ShardedOptimizer):
    """The flat gradient of stage 2 and the padded shard in float64, whatever the model's."""

    def step(self):
        lo, hi = self.bounds[self.comm.rank]
        flat = np.zeros(len(self.flat))
        for p, (start, stop) in zip(self.params, self.slots, strict=True):
            flat[start:stop] = p.grad.reshape(-1) / self.comm.size
            p.grad = None
        self.shard.grad = reduce_scatter(flat, self.comm)
        self.optimizer.step()
        gather(self)  # pads in float64 too


class KeepsTheGradients(Unchecked):
    def step(self):
        grads = [p.grad for p in self.params]
        Unchecked.step(self)
        for p, g in zip(self.params, grads, strict=True):
            p.grad = g


class Inherited(ShardedOptimizer):
    def step(self):
        super().step()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("wrong, stage, message", [
    (WholeVector, 1, r"rank 0 keeps \d+ bytes of arrays, ZeRO-1 keeps 1424: .* the optimisers "
                     r"it keeps hold 944 bytes of state, 944 would be the whole vector's"),
    (WholeVector, 2, r"ZeRO-2 keeps \d+.* update only the shard"),
    (AllreducesThenShards, 1, r"step 1: rank 0 sent \d+ messages \(\d+ bytes\): that is an "
                              r"allreduce of the whole gradient"),
    (NoAllgather, 2, r"rank 1's parameter 0 after the last step, against rank 0's \(every "
                     r"rank must end with the same weights: after the update, allgather.*\): "
                     r"differs"),
    (KeepsTheWholeGradient, 2, r"ZeRO-2 keeps 1192: .* the whole flat gradient more"),
    (Sums, 1, r"rank 0's parameter 0 after the last step, against one process"),
])
def test_zero_step_rejects(wrong, stage, message):
    with pytest.raises(CheckFailed, match=message):
        check_zero_step(wrong, 2, stage, "adam", [4, 7, 3])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("wrong, stage, options, message", [
    (SkipsNone, 1, dict(unused=1), r"rank 1's gradient of parameter 1 None at step 2: rank 0's "
     r"parameter \d after the last step, against one process averaging the ranks' gradients, "
     r"rank 1's of parameter 1 zeros at step 2"),
    (Float64Buffers, 2, dict(dtype="float32"), r"\(float32\), 3 steps: after a step rank 0 keeps "
     r"\d+ bytes of arrays, ZeRO-2 keeps \d+: .*\(4 bytes a value\) -- \d+ bytes of it are in "
     r"arrays of another float dtype than the model's float32"),
    (Unchecked, 1, dict(dtype="float32"), r"step 1: rank 0 sent \d+ messages \(\d+ bytes\): "
     r"that is a reduce-scatter and an allgather with float64 values, where the model's are "
     r"float32"),
    (KeepsTheGradients, 1, {}, r"after the step rank 0's parameters \[0, 1, 2, 3\] still hold "
     r"their gradients: set p.grad = None"),
])
def test_zero_step_rejects_what_the_edges_show(wrong, stage, options, message):
    with pytest.raises(CheckFailed, match=message):
        check_zero_step(wrong, 2, stage, "adam", [4, 7, 3], **options)


def test_zero_step_wants_a_value_error_naming_both_shapes():
    with pytest.raises(CheckFailed, match=r"parameter 0 of shape \(7, 4\) given a gradient of "
                       r"shape \(4, 7\): on rank 0 the step went on as if nothing was wrong; a "
                       r"gradient whose shape is not its parameter's is an error: raise a "
                       r"ValueError naming both shapes"):
        check_zero_shape_error(Unchecked, 2, 1, [4, 7, 3], 0)
    # one value more: numpy's own ValueError names both shapes, (8,) into (7,)
    check_zero_shape_error(Unchecked, 2, 1, [4, 7, 3], 1)
    check_zero_step(Unchecked, 2, 1, "adam", [4, 7, 3], unused=2)  # right where shapes are


def test_zero_step_refuses_another_class_and_blocks_the_library():
    with pytest.raises(CheckFailed, match="build your class on ShardedOptimizer"):
        check_zero_step(WholeVector.__mro__[-1], 2, 1, "sgd", [4, 7, 3])
    with pytest.raises(BlockedError, match="write your own ShardedOptimizer.step"):
        check_zero_step(Inherited, 2, 1, "sgd", [4, 7, 3])
