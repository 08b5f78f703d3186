"""Checkpoints of ZeRO training: the state gathered whole on rank 0, each rank's shard loaded
back, and a run resumed from the middle that ends equal to a run never stopped, to the bit
(in-process ranks, float64, P = 1 to 4; minidist/parallel/zero_checkpoint.py)."""

from __future__ import annotations

import numpy as np
import pytest

import minidist as md
from minidist import backend
from minidist.data import DistributedSampler
from minidist.nn import MLP
from minidist.nn.functional import cross_entropy
from minidist.optim import SGD, Adam
from minidist.parallel import ShardedOptimizer, load_checkpoint, save_checkpoint

SIZES = [4, 7, 3]  # N = 59 values: divisible by none of 2, 3, 4
LOCAL_BATCH, EPOCH = 5, 4  # steps an epoch
HYPER = {"sgd": dict(lr=0.1, momentum=0.9), "adam": dict(lr=0.05)}


def data(world_size: int):
    n = world_size * LOCAL_BATCH * EPOCH
    rng = np.random.default_rng(42)
    return rng.normal(size=(n, SIZES[0])), rng.integers(0, SIZES[-1], n)


def train(c, folder, optimizer: str, stage: int, epochs: range, seed: int = 100):
    """The epochs ``epochs`` of ZeRO training, resumed from ``folder``'s newest checkpoint
    if any, saving one at the end; the final parameters."""
    x, y = data(c.size)
    model = MLP(SIZES, dtype=np.float64, rng=seed + c.rank)
    opt = ShardedOptimizer(model.parameters(), c, optimizer, stage=stage, **HYPER[optimizer])
    saved = load_checkpoint(folder, model, opt, c)
    assert (saved.step if saved else 0) == epochs.start * EPOCH
    sampler = DistributedSampler(len(y), c.size, c.rank, seed=7, batch_size=LOCAL_BATCH)
    for epoch in epochs:
        sampler.set_epoch(epoch)
        for batch in sampler:
            opt.zero_grad()
            cross_entropy(model(x[batch]), y[batch]).backward()
            opt.step()
    save_checkpoint(folder, epochs.stop * EPOCH, model, opt, c)
    return model.state_dict()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("stage", [1, 2])
def test_zero_resumed_ends_equal_to_a_run_never_stopped(tmp_path, world_size, optimizer, stage):
    whole, halves = str(tmp_path / "whole"), str(tmp_path / "halves")
    never_stopped = md.launch(train, world_size, args=(whole, optimizer, stage, range(0, 2)),
                              backend="local")
    md.launch(train, world_size, args=(halves, optimizer, stage, range(0, 1)), backend="local")
    # resumed with other weights to start from: the checkpoint must replace all of them
    resumed = md.launch(train, world_size, args=(halves, optimizer, stage, range(1, 2), 5),
                        backend="local")
    for mine, reference in zip(resumed, never_stopped, strict=True):
        assert mine.keys() == reference.keys()
        for name, value in reference.items():
            np.testing.assert_array_equal(mine[name], value, err_msg=name)


def test_the_whole_state_is_one_optimisers_over_all_the_values():
    """Gathered on rank 0 from three shards: Adam's moments of all 59 values, in order; the
    step count once. It is what Adam over the flat vector holds after the same steps."""
    def run(c):
        xp = backend.xp()
        model = MLP(SIZES, dtype=np.float64, rng=1)
        opt = ShardedOptimizer(model.parameters(), c, "adam", lr=0.05)
        flat = md.nn.Parameter(opt.flat.copy())
        alone = Adam([flat], lr=0.05)
        for step in range(2):
            gradient = np.linspace(-1, 1, 59) * (step + 1)
            for p, (lo, hi) in zip(model.parameters(), opt.slots, strict=True):
                p.grad = xp.asarray(gradient[lo:hi].reshape(p.shape))
            opt.step()
            flat.grad = xp.asarray(gradient)
            alone.step()
        opt.consolidate_state_dict(to=0)
        return (opt.state_dict() if c.rank == 0 else None), alone.state_dict()

    results = md.launch(run, 3, backend="local")
    state, alone = results[0]
    assert state["state"].keys() == {0} and state["param_groups"] == alone["param_groups"]
    assert state["state"][0].keys() == alone["state"][0].keys()
    for name, value in alone["state"][0].items():
        np.testing.assert_allclose(state["state"][0][name], value, rtol=1e-15, err_msg=name)


def test_state_dict_before_consolidating_or_of_another_model_is_a_clear_error():
    world = md.comm.world()
    model = MLP(SIZES, dtype=np.float64, rng=1)
    opt = ShardedOptimizer(model.parameters(), world, "sgd", lr=0.1, momentum=0.9)
    with pytest.raises(RuntimeError, match="call consolidate_state_dict"):
        opt.state_dict()
    opt.consolidate_state_dict()
    state = opt.state_dict()
    with pytest.raises(RuntimeError, match="call consolidate_state_dict"):
        opt.state_dict()  # once: the whole state is not kept
    small = ShardedOptimizer(MLP([2, 3], dtype=np.float64, rng=1).parameters(), world, "sgd",
                             lr=0.1, momentum=0.9)
    small.load_state_dict(small.optimizer.state_dict())  # no step yet: nothing to check
    for p in small.params:
        p.grad = backend.xp().ones(p.shape)
    small.step()
    small.consolidate_state_dict()
    with pytest.raises(ValueError, match="has shape \\(9,\\), but the parameters are 59"):
        opt.load_state_dict(small.state_dict())
    with pytest.raises(ValueError, match="it is another optimiser's"):
        opt.load_state_dict(SGD(model.parameters(), lr=0.1, momentum=0.9).state_dict()
                            | {"state": {0: {}, 1: {}}})
    opt.load_state_dict(state)
