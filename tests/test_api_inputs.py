"""The public API, tried as a student writing their own script would: wrong input is a
clear error naming it, before anything changes, and edge cases give the right numbers."""

from __future__ import annotations

import re

import numpy as np
import pytest

import minidist as md
from minidist import comm
from minidist.nn import Embedding, Linear, Sequential
from minidist.nn.functional import mse_loss
from minidist.optim import SGD, AdaGrad, Adam


def test_mse_loss_refuses_shapes_that_would_broadcast():
    """(3, 1) against (3,) broadcast to (3, 3): 1.333 for equal values, before."""
    with pytest.raises(ValueError, match=r"prediction of shape \(3, 1\) and target of shape "
                                         r"\(3,\)"):
        mse_loss(md.Tensor(np.arange(3.0).reshape(3, 1)), np.arange(3.0))


def test_an_embedding_refuses_an_id_outside_its_rows():
    table = Embedding(10, 3, rng=0)
    for bad in ([-1], [10], [[2, 11]]):  # -1 read the last row, before
        with pytest.raises(IndexError, match=r"Embedding: id -?\d+ is outside 0\.\.9"):
            table(np.array(bad))
    assert table(np.array([9])).shape == (1, 3)


def test_adagrad_steps_a_scalar_parameter_as_sgd_and_adam_do():
    p = md.Tensor(np.array(2.0), requires_grad=True)
    opt = AdaGrad([p], lr=0.1)
    p.grad = np.array(1.0)
    opt.step()  # G = 1: w -= 0.1 * 1 / (1 + eps)
    assert p.data.shape == () and p.data == pytest.approx(1.9)


def test_a_failed_load_state_dict_changes_nothing():
    model = Sequential(Linear(2, 2, rng=0), Linear(2, 1, rng=1))
    before = {name: value.copy() for name, value in model.state_dict().items()}
    state = dict(before)
    state["1.bias"] = np.array(["not a number"])
    with pytest.raises(ValueError):
        model.load_state_dict({**{k: v + 1 for k, v in before.items()}, "1.bias": state["1.bias"]})
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[name])


def test_a_scalar_leafs_gradient_is_an_array():
    a = md.Tensor(np.array(3.0), requires_grad=True)
    (a * a).backward()
    assert isinstance(a.grad, np.ndarray) and a.grad.shape == () and a.grad == 6.0


def test_the_gradient_of_a_zeroth_power_is_zero_also_at_zero():
    z = md.Tensor(np.array([0.0, 1.0, 2.0]), requires_grad=True)
    (z ** 0).sum().backward()  # nan at 0 before (0 * 0^-1)
    np.testing.assert_array_equal(z.grad, [0.0, 0.0, 0.0])
    e = md.Tensor(np.array([0.0, 3.0]), requires_grad=True)
    x = md.Tensor(np.array([0.0, 2.0]), requires_grad=True)
    (x ** e).sum().backward()  # and d/de 0^e = 0 for e >= 0 (1 · log 0 = -inf, before)
    np.testing.assert_array_equal(x.grad, [0.0, 12.0])
    np.testing.assert_allclose(e.grad, [0.0, 8 * np.log(2.0)])


@pytest.mark.parametrize("optimizer", [SGD, Adam, AdaGrad])
def test_a_learning_rate_that_is_not_a_finite_number_is_refused(optimizer):
    p = md.Tensor(np.ones(2), requires_grad=True)
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError, match=r"lr.* must be"):
            optimizer([p], lr=bad)


def test_an_optimizers_state_of_another_kind_or_shape_is_refused_before_it_loads():
    p = md.Tensor(np.ones(3), requires_grad=True)
    adam = Adam([p], lr=1e-3)
    p.grad = np.ones(3)
    adam.step()
    sgd = SGD([md.Tensor(np.ones(3), requires_grad=True)], lr=0.5, momentum=0.9)
    with pytest.raises(ValueError, match=r"another optimizer's: its settings are \['betas'"):
        sgd.load_state_dict(adam.state_dict())  # it set lr to 0.001, then KeyError, before
    assert sgd.param_groups[0]["lr"] == 0.5
    wider = Adam([md.Tensor(np.ones(4), requires_grad=True)], lr=1e-3)
    with pytest.raises(ValueError, match=r"exp_avg of parameter 0 has shape \(3,\), the "
                                         r"parameter \(4,\)"):
        wider.load_state_dict(adam.state_dict())


def test_backward_takes_a_list_as_its_gradient_and_join_refuses_nothing():
    t = md.Tensor(np.ones(2), requires_grad=True)
    (t * 2).backward([1.0, 0.5])
    np.testing.assert_array_equal(t.grad, [2.0, 1.0])
    for join in (md.concatenate, md.stack):
        with pytest.raises(ValueError, match="needs at least one tensor"):
            join([])


def test_launch_refuses_a_timeout_that_is_not_positive():
    for bad in (0, -1):
        with pytest.raises(ValueError, match=r"timeout must be > 0 seconds, or None"):
            md.launch(lambda c: c.rank, 2, timeout=bad)


def test_a_negative_checkpoint_step_is_refused(tmp_path):
    from minidist.parallel.checkpoint import save_checkpoint

    model = Linear(2, 1, rng=0)
    opt = SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="step must be an integer >= 0, got -5"):
        save_checkpoint(tmp_path, -5, model, opt, comm.world())
    assert not list(tmp_path.iterdir())  # step--0000005.npz, never found again, before


def test_collectives_name_a_tensor_or_a_root_or_peer_of_none():
    def tensor(c):
        comm.allreduce(md.Tensor(np.ones(2)), c)

    with pytest.raises(comm.RankError, match=r"allreduce: the data is a Tensor: pass its \.data"):
        md.launch(tensor, 2)
    for collective in (comm.broadcast, comm.reduce, comm.gather, comm.scatter):
        def rootless(c, collective=collective):
            collective(np.ones((2, 2)), c, root=None)

        with pytest.raises(comm.RankError, match=r"root None is not a rank"):
            md.launch(rootless, 2)
    with pytest.raises(comm.RankError, match=r"recv with rank None, but the communicator"):
        md.launch(lambda c: c.recv(np.empty(1), None), 2)


class _Returns(md.autograd.Function):
    """y = 2a, whose backward returns what the test asks (a wrong shape, a saved array)."""

    @staticmethod
    def forward(ctx, a, give):
        ctx.give = give
        ctx.save_for_backward(np.full(a.shape, 2.0))
        return 2 * a

    @staticmethod
    def backward(ctx, grad):
        (two,) = ctx.saved_tensors
        return (np.ones((1, 1)) if ctx.give == "wrong shape" else two), None


def test_a_custom_backward_of_the_wrong_shape_is_named():
    """It was kept as .grad (1 x 1 for a 2 x 3 input), or broadcast into an existing one."""
    a = md.Tensor(np.zeros((2, 3)), requires_grad=True)
    with pytest.raises(RuntimeError, match=r"_Returns.backward returned a gradient of shape "
                                           r"\(1, 1\) for input 0 of shape \(2, 3\)"):
        _Returns.apply(a, "wrong shape").sum().backward()


def test_a_gradient_a_rule_saved_is_copied_before_a_leaf_keeps_it():
    """.grad was the rule's own array: the next backward's += changed what it had saved."""
    a = md.Tensor(np.ones(2), requires_grad=True)
    for _ in range(2):
        _Returns.apply(a, "saved").sum().backward()
    np.testing.assert_array_equal(a.grad, [4.0, 4.0])


def test_cross_entropy_is_finite_where_a_class_is_masked_with_minus_infinity():
    """The one-hot mask multiplied log_softmax's -inf by 0: a NaN loss."""
    logits = md.Tensor(np.array([[1.0, -np.inf, 0.5], [0.2, 0.1, -np.inf]]), requires_grad=True)
    loss = md.nn.functional.cross_entropy(logits, np.array([0, 1]))
    z = np.array([[1.0, 0.5], [0.2, 0.1]])  # the finite logits; the targets' are 1.0 and 0.1
    expected = np.mean(np.log(np.exp(z).sum(1)) - np.array([1.0, 0.1]))
    assert loss.item() == pytest.approx(expected)
    loss.backward()
    assert np.isfinite(logits.grad).all()


def test_gradcheck_passes_integer_inputs_as_they_are():
    """It cast them to float64, and an index then failed in numpy."""
    table = md.Tensor(np.random.default_rng(0).normal(size=(5, 3)), requires_grad=True)
    assert md.autograd.gradcheck(lambda w, ids: w[ids], table, md.Tensor(np.array([4, 0, 4])))


@pytest.mark.parametrize("call", [
    lambda c: comm.allreduce(np.ones(3), c, op=None),
    lambda c: comm.allreduce(np.ones(300), c, op=None, algorithm="tree"),
    lambda c: comm.allreduce(np.ones(3), c, op=None, algorithm="mpi"),
    lambda c: comm.reduce(np.ones(3), c, op=None),
    lambda c: comm.reduce_scatter(np.ones(3), c, op=None),
])
@pytest.mark.parametrize("ranks", [1, 3])
def test_a_reduction_refuses_op_none_on_every_rank(call, ranks):
    """None passed the check as 'no op': reduce's other ranks returned None, an allreduce
    on one rank returned its input, on three one rank raised and the others waited."""
    def body(c):
        with pytest.raises(ValueError, match=r"op None is not supported; use one of"):
            call(c)
        return True

    assert md.launch(body, ranks) == [True] * ranks


def test_an_op_that_cannot_be_hashed_is_refused_on_every_rank():
    def body(c):
        with pytest.raises(ValueError, match=r"op \['sum'\] is not supported; use one of"):
            comm.allreduce(np.ones(3), c, op=["sum"])
        return True

    assert md.launch(body, 3) == [True] * 3


@pytest.mark.parametrize("bad, why", [
    (True, r"root True is not a rank"),  # was taken as rank 1
    (2 ** 70, r"root 1180591620717411303424 is not a rank"),  # OverflowError, on it alone
    ("ragged", r"the data is no array"),  # ValueError on it alone
    ("algorithm", r"ranks disagree on algorithm"),  # unhashable: TypeError on it alone
])
def test_a_mistake_on_one_rank_the_check_cannot_encode_is_an_error_on_every_rank(bad, why):
    def body(c):
        x = np.ones(2)
        mine = bad if c.rank == 1 else 0
        with pytest.raises(ValueError) as raised:
            if bad == "ragged":
                comm.allreduce([[1.0, 2.0], [3.0]] if c.rank == 1 else x, c)
            elif bad == "algorithm":
                comm.allreduce(x, c, algorithm=["ring"] if c.rank == 1 else "ring")
            else:
                comm.broadcast(x, c, root=mine)
        return str(raised.value)

    errors = md.launch(body, 3)
    assert len({re.search(r"ranks disagree on (\w+)", e)[1] for e in errors}) == 1
    assert re.search(why, errors[1])


@pytest.mark.parametrize("setting, said", [
    (dict(algorithm="rign"), r"unknown allreduce algorithm 'rign'"),
    (dict(algorithm=["ring"]), r"unknown allreduce algorithm \['ring'\]"),
    (dict(bucket_mb=-1), r"bucket_mb must be a number of MB >= 0 \(inf: one bucket\), got -1"),
    (dict(first_bucket_mb=float("nan")), r"first_bucket_mb must be a number of MB >= 0"),
])
def test_data_parallel_settings_wrong_on_one_rank_are_an_error_on_every_rank(setting, said):
    """Only the rank at fault raised; the others waited for it in the model check."""
    def body(c):
        settings = setting if c.rank == 1 else {}
        with pytest.raises(ValueError) as raised:
            md.parallel.DataParallel(Linear(3, 2, rng=0), c, **settings)
        return str(raised.value)

    errors = md.launch(body, 3)
    assert all("every rank must hold the same model and settings" in e for e in errors)
    assert re.search(said, errors[1]) and not re.search(said, errors[0] + errors[2])


COLLECTIVES = {"allreduce": lambda x, c: comm.allreduce(x, c),
               "allreduce tree": lambda x, c: comm.allreduce(x, c, algorithm="tree"),
               "reduce": lambda x, c: comm.reduce(x, c),
               "reduce_scatter": lambda x, c: comm.reduce_scatter(x, c),
               "broadcast": lambda x, c: comm.broadcast(x, c),
               "gather": lambda x, c: comm.gather(x, c),
               "scatter": lambda x, c: comm.scatter(x, c),
               "allgather": lambda x, c: comm.allgather(x, c),
               "alltoall": lambda x, c: comm.alltoall(x, c)}


@pytest.mark.parametrize("name, bad", [*((name, "ragged") for name in COLLECTIVES),
                                       ("allreduce", "tensor"), ("allreduce tree", "tensor")])
def test_data_that_makes_no_array_on_one_rank_is_named_as_such_on_every_rank(name, bad):
    """A ragged list stopped broadcast, gather, scatter, allgather and alltoall on its rank
    alone (np.shape raised before the check: the others waited); the others were told the
    dtype or length differed, which the stand-in for the bad data made so. (A Tensor is
    refused by allreduce; the others take its array.)"""
    wrong = [[1.0, 2.0], [3.0]] if bad == "ragged" else md.Tensor(np.ones((3, 2), np.float32))

    def body(c):
        with pytest.raises(ValueError) as raised:
            COLLECTIVES[name](wrong if c.rank == 1 else np.ones((3, 2), np.float32), c)
        return str(raised.value)

    errors = md.launch(body, 3)
    assert all("ranks disagree on valid_in" in e for e in errors), errors
    said = "the data is no array" if bad == "ragged" else "the data is a Tensor"
    assert said in errors[1] and "here:" not in errors[0] + errors[2]


@pytest.mark.parametrize("axis", [0, -1, (0,), ()])
def test_a_0d_tensor_summed_over_an_axis_numpy_allows_has_its_gradient(axis):
    """The forward worked, the backward raised numpy's 'cannot broadcast a non-scalar'."""
    x = md.Tensor(np.array(2.0), requires_grad=True)
    x.sum(axis=axis).backward()
    assert x.grad.shape == () and x.grad == 1.0
    with pytest.raises(np.exceptions.AxisError):
        md.Tensor(np.array(2.0)).sum(axis=1)  # what numpy refuses, still refused
