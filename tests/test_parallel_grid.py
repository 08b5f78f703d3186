"""Composed parallelism on a DP x PP x TP grid: the course's transformer trains as one process."""

from __future__ import annotations

import numpy as np
import pytest

import minidist as md
from minidist.data.characters import CharacterText
from minidist.models.transformer import Transformer, sequence_loss
from minidist.parallel.grid import ProcessGrid, average_gradients
from minidist.parallel.pipeline import Pipeline
from minidist.util import chunk_bounds

BATCH, CONTEXT, STEPS = 8, 12, 4


def train_on_grid(c, dp: int, pp: int, tp: int) -> list[float | None]:
    """Each step's loss of this rank's data-parallel shard (None off the last stage)."""
    grid = ProcessGrid(c, dp, pp, tp)
    text = CharacterText.generate(seed=0, num_tokens=3000)
    model = Transformer(len(text.alphabet), d=16, heads=4, layers=2, context=CONTEXT,
                        c=grid.tp_group, seed=0, dtype=np.float64)
    pipe = (Pipeline(model, grid.pp_group, micro_batches=3, loss_fn=sequence_loss)
            if pp > 1 else None)
    params = (pipe or model).parameters()
    opt = md.optim.Adam(params, lr=3e-3)
    rng, losses = np.random.default_rng(1), []
    lo, hi = chunk_bounds(BATCH, dp)[grid.coords[0]]
    for _ in range(STEPS):
        ids, targets = text.batch(rng, BATCH, CONTEXT)   # the same batch everywhere
        ids, targets = ids[lo:hi], targets[lo:hi]       # this replica's share
        opt.zero_grad()
        if pipe is None:
            loss = sequence_loss(model(ids), targets)
            loss.backward()
            losses.append(loss.item())
        else:
            losses.append(pipe.train_step(ids, targets))
        average_gradients(params, grid.dp_group)
        opt.step()
    return losses


@pytest.mark.timeout(180)
@pytest.mark.parametrize("shape", [(2, 2, 1), (2, 1, 2), (1, 2, 2), (4, 1, 1)])
def test_every_composition_on_four_ranks_trains_as_one_process(shape):
    one = md.launch(train_on_grid, 1, args=(1, 1, 1), backend="local", timeout=60)[0]
    results = md.launch(train_on_grid, 4, args=shape, backend="local", timeout=120)
    dp = shape[0]
    finals = [r for r in results if r[0] is not None]   # the last stage of each pipeline
    assert len(finals) == dp * shape[2]
    replicas = np.mean([finals[i * shape[2]] for i in range(dp)], axis=0)
    np.testing.assert_allclose(replicas, one, rtol=1e-10)
    assert one[-1] < one[0]


def test_grid_groups_and_diagram():
    def rank(c):
        grid = ProcessGrid(c, dp=2, pp=2, tp=2)
        return grid.coords, [g.size for g in (grid.tp_group, grid.pp_group, grid.dp_group)], \
            grid.describe()

    results = md.launch(rank, 8, backend="local", timeout=30)
    assert [r[0] for r in results] == [(d, p, t) for d in range(2) for p in range(2)
                                       for t in range(2)]
    assert all(r[1] == [2, 2, 2] for r in results)
    table = results[0][2].splitlines()
    assert table[0] == "grid dp=2 x pp=2 x tp=2"
    assert table[2].split() == ["0", "(0,", "0,", "0)", "[0,", "1]", "[0,", "2]", "[0,", "4]"]
    assert table[7 + 2].split()[-2:] == ["[3,", "7]"]

    with pytest.raises(Exception, match="dp=2 x pp=2 x tp=2 needs 8 ranks, the communicator "
                                        "has 4"):
        md.launch(lambda c: ProcessGrid(c, 2, 2, 2), 4, backend="local", timeout=30)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shape, message", [
    ((-1, -2, 2), r"dp must be an integer >= 1, got -1"),
    ((0.5, 4, 2), r"dp must be an integer >= 1, got 0.5"),
    ((2.0, 1, 2), r"dp must be an integer >= 1, got 2.0"),
    ((2, "1", 2), r"pp must be an integer >= 1, got '1'"),
    ((2, 2, None), r"tp must be an integer >= 1, got None"),
])
def test_grid_sizes_are_whole_numbers_named(shape, message):
    with pytest.raises(Exception, match=message):
        md.launch(lambda c: ProcessGrid(c, *shape), 4, backend="local", timeout=30)
