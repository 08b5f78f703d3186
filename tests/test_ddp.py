"""DataParallel on in-process ranks: P ranks with batch b train exactly as one process with P·b.

The test model has every case DDP must get right: a frozen weight, a
parameter never used, a parameter used on some ranks only, and tied weights
(an embedding table that is also the output layer).
"""

import numpy as np
import pytest

import minidist as md
from minidist import backend
from minidist.comm import LocalCluster
from minidist.data import BatchSampler, DistributedSampler
from minidist.nn import Embedding, Linear, Module, Parameter
from minidist.nn.functional import cross_entropy
from minidist.optim import SGD, Adam
from minidist.parallel.buckets import MB, Bucket, plan_buckets
from minidist.parallel.ddp import DataParallel

FEATURES, HIDDEN, CLASSES = 5, 6, 7
LOCAL_BATCH, STEPS = 4, 5
ONE_PER_TENSOR = dict(bucket_mb=0, first_bucket_mb=0)
UNEVEN = dict(bucket_mb=200 / 2**20, first_bucket_mb=100 / 2**20)  # 200 and 100 bytes
ALL_IN_ONE = dict(bucket_mb=float("inf"), first_bucket_mb=float("inf"))


class TiedNet(Module):
    """x, ids -> logits over CLASSES; the embedding table is also the output layer."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        rng = np.random.default_rng(seed)
        self.inp = Linear(FEATURES, HIDDEN, dtype=np.float64, rng=rng)
        self.table = Embedding(CLASSES, HIDDEN, dtype=np.float64, rng=rng)
        self.frozen = Linear(HIDDEN, HIDDEN, dtype=np.float64, rng=rng)
        self.frozen.weight.requires_grad_(False)  # its bias still trains
        self.unused = Linear(3, 3, dtype=np.float64, rng=rng)
        self.sometimes = Parameter(rng.normal(size=HIDDEN))  # only for rows with id 0

    def forward(self, x, ids):
        h = (self.inp(x) + self.table(ids)).tanh()
        h = self.frozen(h).tanh()
        logits = h @ self.table.weight.T  # second use of the table: tied weights
        rows = np.flatnonzero(ids == 0)
        extra = (h[rows] @ self.sometimes).sum() if len(rows) else None
        return logits, extra


def loss_of(out, y) -> md.Tensor:
    """Mean over the batch of cross-entropy plus the per-sample extra term."""
    logits, extra = out
    loss = cross_entropy(logits, y)
    return loss if extra is None else loss + extra * (1.0 / len(y))


def make_data(world_size: int):
    n = world_size * LOCAL_BATCH * STEPS
    rng = np.random.default_rng(42)
    x, y = rng.normal(size=(n, FEATURES)), rng.integers(0, CLASSES, n)
    ids = rng.integers(1, CLASSES, n)
    ids[::world_size * LOCAL_BATCH + 1] = 0  # id 0 is rare: some ranks never see it in a step
    return x, ids, y


def trainable(model: Module) -> list:
    return [p for p in model.parameters() if p.requires_grad]


def make_optimizer(name: str, params: list):
    return SGD(params, lr=0.1, momentum=0.9) if name == "sgd" else Adam(params, lr=0.05)


def train_ddp(c, optimizer: str, buckets: dict, algorithm: str = "ring"):
    """Rank c.rank: a model initialised differently per rank, wrapped, trained STEPS steps."""
    x, ids, y = make_data(c.size)
    model = DataParallel(TiedNet(seed=100 + c.rank), c, algorithm=algorithm, **buckets)
    opt = make_optimizer(optimizer, trainable(model))
    sampler = DistributedSampler(len(y), c.size, c.rank, seed=7, batch_size=LOCAL_BATCH)
    grads_none = []
    for batch in sampler:
        opt.zero_grad()
        loss_of(model(x[batch], ids[batch]), y[batch]).backward()
        grads_none.append([p.grad is None for p in model.module.parameters()])
        opt.step()
    return model.module.state_dict(), grads_none


def train_single(world_size: int, optimizer: str):
    """One process, batch P·b, the same order of samples."""
    x, ids, y = make_data(world_size)
    model = TiedNet(seed=100)
    opt = make_optimizer(optimizer, trainable(model))
    for batch in BatchSampler(len(y), world_size * LOCAL_BATCH, seed=7):
        opt.zero_grad()
        loss_of(model(x[batch], ids[batch]), y[batch]).backward()
        opt.step()
    return model.state_dict()


def assert_same_parameters(got: dict, expected: dict) -> None:
    assert got.keys() == expected.keys()
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=0, atol=1e-6, err_msg=name)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("buckets", [ONE_PER_TENSOR, UNEVEN, ALL_IN_ONE],
                         ids=["per-tensor", "uneven", "one-bucket"])
def test_ddp_equals_one_process_with_the_global_batch(world_size, optimizer, buckets):
    results = md.launch(train_ddp, world_size, args=(optimizer, buckets), backend="local")
    expected = train_single(world_size, optimizer)
    start = TiedNet(seed=100).state_dict()
    assert not np.allclose(expected["inp.weight"], start["inp.weight"])  # training moved it
    for state, grads_none in results:
        assert_same_parameters(state, expected)
        np.testing.assert_array_equal(state["frozen.weight"], start["frozen.weight"])
        names = [name for name, _ in TiedNet(seed=0).named_parameters()]
        for step in grads_none:  # frozen and unused keep grad None on every rank, every step
            assert step[names.index("frozen.weight")] and step[names.index("unused.weight")]
            assert not step[names.index("table.weight")]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algorithm", ["naive", "ps", "tree", "double_tree",
                                       "recursive_doubling", "mpi"])
def test_every_allreduce_algorithm_gives_the_same_training(algorithm):
    results = md.launch(train_ddp, 3, args=("sgd", UNEVEN, algorithm), backend="local")
    expected = train_single(3, "sgd")
    for state, _ in results:
        assert_same_parameters(state, expected)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("world_size", [2, 3])
def test_without_overlap_the_training_is_the_same(world_size):
    buckets = dict(UNEVEN, overlap=False)  # every bucket reduced after backward, no thread
    results = md.launch(train_ddp, world_size, args=("adam", buckets), backend="local")
    for state, _ in results:
        assert_same_parameters(state, train_single(world_size, "adam"))


def test_construction_broadcasts_rank_0_parameters():
    def fn(c):
        model = TiedNet(seed=c.rank)
        before = model.state_dict()
        DataParallel(model, c)
        return before, model.state_dict()

    results = md.launch(fn, 3, backend="local")
    rank0_before = results[0][0]
    assert not np.allclose(results[1][0]["inp.weight"], rank0_before["inp.weight"])
    for _, after in results:
        for name, value in rank0_before.items():  # frozen parameters too
            np.testing.assert_array_equal(after[name], value, err_msg=name)


def test_tied_weight_hook_fires_once_per_backward():
    model = TiedNet(seed=0)
    calls = []
    model.table.weight.register_grad_hook(lambda t: calls.append(t.grad.copy()))
    x, ids, y = make_data(1)
    loss_of(model(x[:8], ids[:8]), y[:8]).backward()
    assert len(calls) == 1
    np.testing.assert_array_equal(calls[0], model.table.weight.grad)  # both uses included


def test_no_sync_accumulates_locally_and_equals_a_bigger_batch():
    micro = 3

    def fn(c):
        x, ids, y = make_data(c.size)
        model = DataParallel(TiedNet(seed=100), c, **UNEVEN)
        batches = list(DistributedSampler(len(y), c.size, c.rank, shuffle=False,
                                          batch_size=LOCAL_BATCH))[:micro]
        before = c.stats.messages_sent  # the construction's broadcast
        with model.no_sync():
            for batch in batches[:-1]:
                (loss_of(model(x[batch], ids[batch]), y[batch]) * (1 / micro)).backward()
        silent = c.stats.messages_sent - before
        batch = batches[-1]
        (loss_of(model(x[batch], ids[batch]), y[batch]) * (1 / micro)).backward()
        sent = c.stats.messages_sent - before
        return silent, sent, {n: p.grad for n, p in model.module.named_parameters()}

    cluster = LocalCluster(2)
    results = cluster.run(fn, timeout=30)
    x, ids, y = make_data(2)
    reference = TiedNet(seed=100)
    for k in range(micro):  # one process: the same three global batches, accumulated
        rows = slice(k * 2 * LOCAL_BATCH, (k + 1) * 2 * LOCAL_BATCH)
        (loss_of(reference(x[rows], ids[rows]), y[rows]) * (1 / micro)).backward()
    for silent, total, grads in results:
        assert silent == 0 < total  # nothing sent under no_sync, buckets sent afterwards
        for name, p in reference.named_parameters():
            if p.grad is None:
                assert grads[name] is None, name
            else:
                np.testing.assert_allclose(grads[name], p.grad, atol=1e-12, err_msg=name)


def test_wrapping_a_module_again_averages_once_and_retires_the_old_wrapper():
    def fn(c, wraps):
        x, ids, y = make_data(c.size)
        model = TiedNet(seed=100)
        # a notebook cell run again wraps the same module again
        wrappers = [DataParallel(model, c, **ONE_PER_TENSOR) for _ in range(wraps)]
        before = c.stats.messages_sent
        loss_of(wrappers[-1](x[:4], ids[:4]), y[:4]).backward()
        sent = c.stats.messages_sent - before
        try:
            wrappers[0](x[:4], ids[:4])
            old = "still works"
        except RuntimeError as error:
            old = str(error)
        return sent, {n: p.grad for n, p in model.named_parameters()}, old

    (once, expected, _), _ = md.launch(fn, 2, args=(1,), backend="local")
    for sent, grads, old in md.launch(fn, 2, args=(2,), backend="local"):
        assert sent == once  # the old wrapper's hooks are gone: one allreduce per bucket
        for name, grad in expected.items():
            np.testing.assert_array_equal(grads[name], grad, err_msg=name)
        assert "wrapped again by a newer DataParallel" in old


def test_step_stats_describe_the_buckets():
    def fn(c):
        model = DataParallel(TiedNet(seed=0), c, **ONE_PER_TENSOR)
        x, ids, y = make_data(c.size)
        loss_of(model(x[:4], ids[:4]), y[:4]).backward()
        return model.last_step_stats, len(trainable(model))

    for stats, tensors in md.launch(fn, 2, backend="local"):
        assert stats["buckets"] == tensors
        assert stats["comm_seconds"] > 0 and 0 <= stats["overlap_fraction"] <= 1
        assert stats["overlapped_seconds"] <= stats["comm_seconds"]


def test_a_failing_rank_raises_instead_of_hanging():
    def fn(c):
        model = DataParallel(TiedNet(seed=0), c, **ONE_PER_TENSOR)
        x, ids, y = make_data(c.size)
        for _ in range(3):
            loss_of(model(x[:4], ids[:4]), y[:4]).backward()

    with pytest.raises(md.comm.RankError):
        md.launch(fn, 2, backend="local", failures={1: 12}, timeout=30)


# --- the bucket plan ---------------------------------------------------------------------

def tensors(*sizes, dtype=np.float32):
    return [Parameter(np.zeros(n, dtype=dtype)) for n in sizes]


def test_plan_walks_parameters_in_reverse_and_respects_capacities():
    mb = 2**20 // 4  # float32 values per MB
    params = tensors(mb, mb // 2, mb // 2, 3 * mb, 10, 10)
    plan = plan_buckets(params, bucket_bytes=MB, first_bucket_bytes=50)
    assert plan == [[5], [4], [3], [2, 1], [0]]
    assert plan_buckets(params, MB) == [[5, 4], [3], [2, 1], [0]]  # first bucket: the same
    assert plan_buckets(params, 0) == [[i] for i in reversed(range(6))]
    assert plan_buckets(params, float("inf")) == [[5, 4, 3, 2, 1, 0]]
    mixed = tensors(4, dtype=np.float64) + tensors(4, 4)
    assert plan_buckets(mixed, float("inf")) == [[2, 1], [0]]  # a buffer has one dtype


def test_bucket_flags_count_users_and_leave_unused_grads_none():
    a, b = Parameter(np.ones((2, 2))), Parameter(np.ones(3))
    bucket = Bucket([a, b], scale=1 / 2)  # 2 ranks: each contributes half its gradient
    xp = backend.xp()  # the gradients and the peer's half on the device the test runs on
    bucket.pack(0, xp.full((2, 2), 4.0))
    assert not bucket.complete
    bucket.pack_missing()  # b has no gradient on this rank: zeros and flag 0
    assert bucket.complete
    np.testing.assert_array_equal(bucket.buffer, [2, 2, 2, 2, 0, 0, 0, 1, 0])
    bucket.buffer += xp.asarray([1, 1, 1, 1, 0, 0, 0, 1, 0.0])  # the second rank's half
    bucket.unpack()  # the average, 3, is already there
    np.testing.assert_array_equal(a.grad, np.full((2, 2), 3.0))
    assert b.grad is None and not bucket.packed


@pytest.mark.timeout(120)
def test_the_example_trains_as_one_process_does():
    from minidist.examples import mlp, mlp_ddp

    def fn(c):
        result = mlp_ddp.train(c, epochs=4, progress=False)
        scaled = mlp_ddp.train(c, epochs=1, global_batch=64, scale_lr=True, warmup_epochs=0.5,
                               progress=False)
        return result["losses"], result["accuracy"], scaled["lr"]

    single = mlp.train(epochs=4, progress=False)
    for losses, acc, lr in md.launch(fn, 2, backend="local", timeout=100):
        # the same global batches, but for one padded sample: the same curve and accuracy
        np.testing.assert_allclose(losses, single["losses"], rtol=2e-3)
        assert abs(acc - single["accuracy"]) <= 0.01 and acc > 0.9
        assert lr == pytest.approx(3e-3 * 64 / 32)  # linear scaling, warm-up over


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="'fastest'"):
        md.parallel.DataParallel(TiedNet(seed=0), md.comm.world(), algorithm="fastest")
    with pytest.raises(ValueError, match="bucket_mb must be a number of MB >= 0 .*, got -1"):
        DataParallel(TiedNet(seed=0), md.comm.world(), bucket_mb=-1)
