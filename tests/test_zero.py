"""ZeRO stages 1 and 2: the same training as DDP and as one process, with the memory and the
traffic per rank that the formulas give (float64, in-process ranks; one run under MPI)."""

import sys
from pathlib import Path

import numpy as np
import pytest

import minidist as md
from minidist.data import BatchSampler, DistributedSampler
from minidist.nn import MLP, Parameter
from minidist.nn.functional import cross_entropy
from minidist.optim import SGD, Adam
from minidist.parallel.ddp import DataParallel
from minidist.parallel.zero import (
    ShardedOptimizer,
    bytes_held,
    bytes_sent_per_step,
    values_held,
)

SIZES = [4, 7, 3]  # N = 28 + 7 + 21 + 3 = 59 parameters: divisible by none of 2, 3, 4
N = 59
LOCAL_BATCH, STEPS = 5, 4
HYPER = {"sgd": dict(lr=0.1, momentum=0.9), "adam": dict(lr=0.05)}
STATES = {"sgd": 1, "adam": 2}  # optimiser values per parameter: velocity; m and s
OPTIMIZERS = {"sgd": SGD, "adam": Adam}
MPIEXEC = Path(sys.executable).parent / "mpiexec"


def make_data(world_size: int):
    n = world_size * LOCAL_BATCH * STEPS
    rng = np.random.default_rng(42)
    return rng.normal(size=(n, SIZES[0])), rng.integers(0, SIZES[-1], n)


def train(c, strategy: str, optimizer: str):
    """Rank c.rank trains STEPS steps from its own initialisation (rank 0's is broadcast);
    returns the final parameters, the bytes held after the last step, the bytes sent
    in each step."""
    x, y = make_data(c.size)
    model = MLP(SIZES, dtype=np.float64, rng=100 + c.rank)
    if strategy == "ddp":
        model = DataParallel(model, c)
        opt = OPTIMIZERS[optimizer](model.parameters(), **HYPER[optimizer])
    else:
        opt = ShardedOptimizer(model.parameters(), c, optimizer, stage=int(strategy[-1]),
                               **HYPER[optimizer])
    sent = []
    for batch in DistributedSampler(len(y), c.size, c.rank, seed=7, batch_size=LOCAL_BATCH):
        opt.zero_grad()
        before = c.stats.bytes_sent
        cross_entropy(model(x[batch]), y[batch]).backward()
        opt.step()
        sent.append(c.stats.bytes_sent - before)
    module = model.module if strategy == "ddp" else model
    return module.state_dict(), bytes_held(module.parameters(), opt), sent


def train_single(world_size: int, optimizer: str) -> dict:
    """One process, batch P·b, the same order of samples."""
    x, y = make_data(world_size)
    model = MLP(SIZES, dtype=np.float64, rng=100)
    opt = OPTIMIZERS[optimizer](model.parameters(), **HYPER[optimizer])
    for batch in BatchSampler(len(y), world_size * LOCAL_BATCH, seed=7):
        opt.zero_grad()
        cross_entropy(model(x[batch]), y[batch]).backward()
        opt.step()
    return model.state_dict()


def assert_same(got: dict, expected: dict, atol: float) -> None:
    assert got.keys() == expected.keys()
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=0, atol=atol, err_msg=name)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("stage", [1, 2])
def test_zero_trains_as_ddp_and_as_one_process(world_size, optimizer, stage):
    zero = md.launch(train, world_size, args=(f"zero{stage}", optimizer), backend="local")
    ddp = md.launch(train, world_size, args=("ddp", optimizer), backend="local")
    single = train_single(world_size, optimizer)
    start = MLP(SIZES, dtype=np.float64, rng=100).state_dict()
    assert not np.allclose(single["0.weight"], start["0.weight"])  # training moved it
    for (state, _, _), (reference, _, _) in zip(zero, ddp, strict=True):
        assert_same(state, reference, atol=1e-13)
        assert_same(state, single, atol=1e-10)
    for state, _, _ in zero[1:]:
        for name, value in zero[0][0].items():  # every rank ends with the same bits
            np.testing.assert_array_equal(state[name], value, err_msg=name)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_bytes_held_and_sent_per_rank_are_the_formulas(world_size):
    for optimizer in ("sgd", "adam"):
        k = STATES[optimizer]
        for stage in (1, 2):
            results = md.launch(train, world_size, args=(f"zero{stage}", optimizer))
            for rank, (_, held, sent) in enumerate(results):
                expected = {name: 8 * values for name, values
                            in values_held(N, world_size, rank, stage, k).items()}
                assert held == expected, (optimizer, stage, rank)
                assert sent == [bytes_sent_per_step(N, world_size, rank, 8)] * STEPS
        ddp = md.launch(train, world_size, args=("ddp", optimizer))
        for rank, (_, held, _) in enumerate(ddp):
            expected = values_held(N, world_size, rank, 0, k)
            expected["gradients"] += 4  # DDP's buckets: one flag per tensor
            assert held == {name: 8 * values for name, values in expected.items()}


def test_the_formulas_are_the_lecture_s_when_p_divides_n():
    n, p = 1200, 4
    for rank in range(p):
        assert sum(values_held(n, p, rank, 0, 2).values()) == 4 * n  # DDP, Adam: (1+1+2)N
        assert sum(values_held(n, p, rank, 1, 2).values()) == 2 * n + 2 * n // p
        assert sum(values_held(n, p, rank, 2, 2).values()) == n + 3 * n // p
        assert bytes_sent_per_step(n, p, rank, 4) == 2 * (p - 1) * n // p * 4
    assert bytes_sent_per_step(n, 1, 0, 8) == 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("stage", [1, 2])
def test_fewer_values_than_ranks_leaves_some_shards_empty(stage):
    def fn(c):
        w = Parameter(np.array([1.0, -2.0, 3.0]) * (c.rank + 1))
        opt = ShardedOptimizer([w], c, "sgd", stage=stage, lr=0.1, momentum=0.9)
        for _ in range(3):
            opt.zero_grad()
            ((w * w).sum() * (c.rank + 1.0)).backward()
            opt.step()
        return w.data.copy(), opt.shard.data.size

    results = md.launch(fn, 4, backend="local")
    w, velocity = np.array([1.0, -2.0, 3.0]), np.zeros(3)
    for _ in range(3):  # one process: the mean over the ranks of (rank + 1) * 2w is 5w
        velocity = 0.9 * velocity + 5 * w
        w = w - 0.1 * velocity
    assert [size for _, size in results] == [1, 1, 1, 0]
    for got, _ in results:
        np.testing.assert_allclose(got, w, rtol=1e-14)


def test_parameters_are_rank_0_s_after_construction():
    def fn(c):
        model = MLP(SIZES, dtype=np.float64, rng=c.rank)
        ShardedOptimizer(model.parameters(), c, "sgd", stage=2, lr=0.1)
        return model.state_dict()

    results = md.launch(fn, 3, backend="local")
    for state in results:
        assert_same(state, MLP(SIZES, dtype=np.float64, rng=0).state_dict(), atol=0)


def test_a_learning_rate_schedule_reaches_the_shard_s_optimiser():
    model = MLP(SIZES, dtype=np.float64, rng=0)
    opt = ShardedOptimizer(model.parameters(), md.comm.world(), "adam", lr=0.1)
    opt.param_groups[0]["lr"] = 0.01
    assert opt.optimizer.param_groups[0]["lr"] == 0.01 and opt.parameters() == model.parameters()


@pytest.mark.parametrize("stage", [0, 3, "1"])
def test_a_stage_other_than_1_or_2_is_an_error(stage):
    model = MLP(SIZES, dtype=np.float64, rng=0)
    with pytest.raises(ValueError, match="stage must be one of"):
        ShardedOptimizer(model.parameters(), md.comm.world(), "adam", stage=stage)


def test_bad_parameters_or_optimizer_are_errors():
    world = md.comm.world()
    with pytest.raises(ValueError, match="empty parameter list"):
        ShardedOptimizer([], world)
    with pytest.raises(TypeError, match="requires_grad"):
        ShardedOptimizer([md.Tensor(np.zeros(3))], world)
    with pytest.raises(TypeError, match="one dtype"):
        ShardedOptimizer([Parameter(np.zeros(3)), Parameter(np.zeros(2, np.float32))], world)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        ShardedOptimizer([Parameter(np.zeros(3))], world, "rmsprop")
    # its rows, as the list, got no gradients: step() never moved it, silently
    with pytest.raises(TypeError, match=r"params must be an iterable of Tensors: pass \[p\]"):
        ShardedOptimizer(Parameter(np.zeros((2, 3))), world)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("change, field", [
    (lambda rank: dict(sizes=[4, 7 + rank, 3]), r"values \(rank 0: 59, rank 1: 67\)"),
    (lambda rank: dict(sizes=[4, 3] if rank else [4, 7, 3]), r"tensors \(rank 0: 4, rank 1: 2"),
    (lambda rank: dict(stage=1 + rank), r"their stage \(rank 0: 1, rank 1: 2\)"),  # not shapes
    (lambda rank: dict(stage=2 + rank), "stage must be one of"),
    (lambda rank: dict(optimizer="sgd" if rank else "adam"), r"optimizer \(this rank's: "),
])
def test_ranks_that_disagree_all_raise_the_same_error(change, field):
    def fn(c):
        args = {**dict(sizes=SIZES, stage=1, optimizer="adam"), **change(c.rank)}
        model = MLP(args["sizes"], dtype=np.float64, rng=0)
        with pytest.raises(ValueError, match=field) as error:
            ShardedOptimizer(model.parameters(), c, args["optimizer"], stage=args["stage"],
                             lr=0.1)
        return str(error.value).split("(this rank")[0]

    messages = md.launch(fn, 2, backend="local")
    assert messages[0] == messages[1]


def _train_under_mpi(c):
    return [train(c, f"zero{stage}", optimizer) for stage in (1, 2)
            for optimizer in ("sgd", "adam")]


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no {MPIEXEC}")
def test_zero_under_mpi_equals_one_process():
    results = md.launch(_train_under_mpi, 2, backend="mpi", timeout=100)
    cases = [(stage, optimizer) for stage in (1, 2) for optimizer in ("sgd", "adam")]
    for rank, runs in enumerate(results):
        for (stage, optimizer), (state, held, sent) in zip(cases, runs, strict=True):
            assert_same(state, train_single(2, optimizer), atol=1e-10)
            assert held == {name: 8 * v for name, v
                            in values_held(N, 2, rank, stage, STATES[optimizer]).items()}
            assert sent == [bytes_sent_per_step(N, 2, rank, 8)] * STEPS


@pytest.mark.timeout(60)
def test_the_benchmark_prints_its_table_and_every_count_is_the_formula(capsys):
    from minidist.bench.zero import main

    rows = main(["--sizes", "4,7,3", "--ranks", "1,3", "--dtype", "float64"])
    out = capsys.readouterr().out
    assert [(row["ranks"], row["strategy"]) for row in rows] == [
        (p, name) for p in (1, 3) for name in ("DDP", "ZeRO-1", "ZeRO-2")]
    assert all(row["exact"] for row in rows)
    assert out.strip().endswith("counted = formula on every rank, bytes held and sent: yes")
    ddp, one, two = (sum(row["held"].values()) for row in rows[3:])
    assert ddp > one > two  # at P = 3 each stage holds less
    assert len({row["sent"] for row in rows[4:]}) == 1  # ZeRO-1 and ZeRO-2 send the same
