"""The strict device, CI's guard for the GPU path: arrays that refuse what cupy refuses.

The guard must refuse implicit host conversion, numpy arrays mixed in and
attributes cupy lacks; a deliberate ``np.asarray`` of device data in
device-agnostic code must make it fail; and everything else must compute
exactly as numpy does (it is numpy underneath), collectives included.
"""

import numpy as np
import pytest

import minidist as md
from minidist import backend, comm
from minidist.autograd import ops
from minidist.comm.collectives.staging import STAGED
from minidist.nn.functional import cross_entropy
from minidist.parallel.ddp import DataParallel


def test_strict_arrays_refuse_what_cupy_refuses(strict):
    x = strict.asarray([1.0, 2.0, 3.0])
    host = np.ones(3)
    for implicit in (np.asarray, np.array, memoryview, lambda a: np.require(a, requirements="C")):
        with pytest.raises(TypeError, match="Implicit conversion|bytes-like"):
            implicit(x)
    for mixed in (lambda: x + host, lambda: host * x, lambda: strict.maximum(x, host),
                  lambda: strict.concatenate([x, host]), lambda: strict.cumsum([1, 2])):
        with pytest.raises(TypeError):
            mixed()
    with pytest.raises(AttributeError, match="writeable"):
        x.flags.writeable  # noqa: B018
    with pytest.raises(AttributeError, match="cupy arrays have no attribute 'ctypes'"):
        x.ctypes  # noqa: B018
    assert not isinstance(x, np.ndarray) and x.flags.c_contiguous


def test_explicit_copies_and_scalars_are_allowed(strict):
    x = strict.arange(6.0).reshape(2, 3)
    assert isinstance(x.get(), np.ndarray) and isinstance(backend.to_numpy(x), np.ndarray)
    np.testing.assert_array_equal(strict.asnumpy(x), np.arange(6.0).reshape(2, 3))
    total = x.sum()  # a 0-d device array, as cupy returns, not a numpy scalar
    assert backend.on_device(total) and float(total) == 15.0
    assert float((x * np.float32(2) + 1).max()) == 11.0  # numpy and python scalars mix
    y = strict.zeros(3)
    y[1:] = np.float64(2.0)  # a scalar fills
    y[:1] = strict.ones(1)
    assert y.tolist() == [1.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="cupy refuses to assign a host ndarray"):
        y[...] = np.ones(3)


OPTIMIZERS = {
    "adam": lambda params: md.optim.Adam(params, lr=0.01),
    "sgd": lambda params: md.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True),
    # per-column learning rates and clips: host arrays the optimiser must move to the device
    "adagrad": lambda params: md.optim.AdaGrad(params, lr=np.array([0.1, 0.05, 0.02]),
                                               convention="glove.c", clip=np.array([1, 2, 3.0])),
}


def _train_mlp_step(device, optimizer="adam"):
    md.set_device(device)
    rng = np.random.default_rng(0)
    model = md.nn.MLP([3, 3, 3], rng=1)
    opt = OPTIMIZERS[optimizer](model.parameters())
    x = md.Tensor(rng.standard_normal((5, 3)).astype(np.float32))
    y = md.Tensor(rng.integers(0, 3, 5))
    for _ in range(2):
        opt.zero_grad()
        cross_entropy(model(x), y).backward()
        opt.step()
    return {name: p.numpy() for name, p in model.named_parameters()}


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_training_on_the_strict_device_equals_numpy(strict, optimizer):
    on_strict = _train_mlp_step("strict", optimizer)
    on_cpu = _train_mlp_step("cpu", optimizer)
    for name, value in on_cpu.items():
        np.testing.assert_array_equal(on_strict[name], value)


def test_a_deliberate_implicit_conversion_makes_the_guard_fail(strict, monkeypatch):
    forward = ops.ReLU.forward
    # the bug the guard is for: device data turned into numpy inside device-agnostic code
    monkeypatch.setattr(ops.ReLU, "forward",
                        staticmethod(lambda ctx, a: forward(ctx, np.asarray(a))))
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array"):
        _train_mlp_step("strict")
    _train_mlp_step("cpu")  # numpy lets it pass: only the guard sees it


def test_collectives_stage_device_arrays_through_counted_host_copies(strict):
    def fn(c):
        x = backend.xp().arange(5.0) + c.rank
        total = comm.allreduce(x, c)
        comm.allreduce(x, c, out=x)  # in place
        rows = comm.allgather(x, c)
        return total, x, rows

    STAGED.reset()
    results = md.launch(fn, world_size=3)
    expected = np.arange(5.0) * 3 + 3
    for total, x, rows in results:
        assert backend.on_device(total) and backend.on_device(x) and backend.on_device(rows)
        np.testing.assert_array_equal(backend.to_numpy(total), expected)
        np.testing.assert_array_equal(backend.to_numpy(x), expected)
        np.testing.assert_array_equal(backend.to_numpy(rows), np.stack([expected] * 3))
    # each of the 3 calls on each of the 3 ranks: one copy to the host, one back
    assert STAGED.to_host == STAGED.to_device == 9
    assert STAGED.bytes_to_host == 3 * 3 * 5 * 8


def test_data_parallel_on_the_strict_device_equals_one_process(strict):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 4)), rng.integers(0, 3, 8)

    def fn(c):
        model = DataParallel(md.nn.MLP([4, 6, 3], dtype=np.float64, rng=c.rank), c)
        opt = md.optim.SGD(model.parameters(), lr=0.1)
        part = slice(4 * c.rank, 4 * c.rank + 4)
        cross_entropy(model(md.Tensor(x[part])), md.Tensor(y[part])).backward()
        opt.step()
        assert all(backend.on_device(p.data) for p in model.parameters())
        return {name: p.numpy() for name, p in model.module.named_parameters()}

    two_ranks = md.launch(fn, world_size=2)
    one = md.nn.MLP([4, 6, 3], dtype=np.float64, rng=0)
    opt = md.optim.SGD(one.parameters(), lr=0.1)
    cross_entropy(one(md.Tensor(x)), md.Tensor(y)).backward()
    opt.step()
    for name, p in one.named_parameters():
        for rank in two_ranks:
            np.testing.assert_allclose(rank[name], p.numpy(), rtol=1e-12, atol=1e-15)


def test_the_parameter_server_refuses_a_device_in_words(strict):
    """It failed deep in its key layout with cupy's implicit-conversion error; it runs on
    the CPU, as GloVe's CPU trainers do, and says so on every rank."""
    from minidist.parallel.ps.fedavg import fedavg
    from minidist.parallel.ps.training import train_mlp

    for trainer in (lambda c: train_mlp(c, steps=2), lambda c: fedavg(c, rounds=1)):
        with pytest.raises(comm.RankError, match=r"runs on the CPU \(its servers and workers "
                                                 r"exchange host arrays\).*'strict'"):
            comm.LocalCluster(3).run(trainer)


def test_device_counts_and_indices_go_to_the_host_where_they_decide(strict):
    """alltoallv's counts, apply_op's dtype check and a dataset's split and subset took
    device arrays through np.asarray (cupy refuses it)."""
    from minidist.data.dataset import Dataset, split_dataset

    def fn(c):
        rows = strict.arange(4.0).reshape(4, 1) + 10 * c.rank
        out, _ = comm.alltoallv(rows, strict.asarray([2, 2]), c)
        return backend.to_numpy(out).ravel().tolist()

    assert comm.LocalCluster(2).run(fn) == [[0.0, 1.0, 10.0, 11.0], [2.0, 3.0, 12.0, 13.0]]
    acc = strict.ones(3)
    comm.apply_op("sum", acc, strict.ones(3))
    assert backend.to_numpy(acc).tolist() == [2.0, 2.0, 2.0]
    data = Dataset(strict.arange(20.0).reshape(10, 2), strict.asarray([0, 1] * 5), 2, "d")
    train, test = split_dataset(data, 0.2)
    assert (len(train), len(test)) == (8, 2) and backend.on_device(train.x)
    assert backend.to_numpy(data.subset(strict.asarray([3, 1])).y).tolist() == [1, 1]


@pytest.mark.parametrize("example", ["ps_mlp", "fedavg", "ps_staleness"])
def test_parameter_server_examples_refuse_a_device_as_a_usage_error(strict, example, capsys):
    import importlib

    with pytest.raises(SystemExit) as ended:
        importlib.import_module(f"minidist.examples.{example}").main([])
    assert ended.value.code == 2 and "runs on the CPU" in capsys.readouterr().err
