"""What the optimisers are given: their parameters and their learning rates, refused by name
when they could not train (test_optim.py checks the other hyper-parameters)."""

from __future__ import annotations

import numpy as np
import pytest

import minidist as md
from minidist.optim import SGD, AdaGrad, Adam

OPTIMIZERS = [SGD, Adam, AdaGrad]


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_one_tensor_as_the_parameters_is_refused_not_split_into_rows(optimizer):
    """``SGD(p)`` took p's rows, which never got gradients: ``step()`` never moved p."""
    p = md.Tensor(np.ones((2, 3)), requires_grad=True)
    with pytest.raises(TypeError, match="params must be an iterable of Tensors .*not a Tensor"):
        optimizer(p, lr=0.1)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_a_groups_params_may_be_one_tensor_as_in_pytorch(optimizer):
    p = md.Tensor(np.ones((2, 3)), requires_grad=True)
    opt = optimizer([{"params": p}], lr=0.1)
    [only] = opt.param_groups[0]["params"]
    assert only is p
    (p * p).sum().backward()
    opt.step()
    assert np.all(p.numpy() < 1.0)


@pytest.mark.parametrize("optimizer", [SGD, Adam])
def test_a_list_as_the_learning_rate_of_sgd_or_adam_is_refused_by_name(optimizer):
    """``lr=[-5.0]`` was let through (as if one rate per column, which only AdaGrad takes):
    ``step()`` failed in ``float()``, not naming lr."""
    p = md.Tensor(np.ones(3), requires_grad=True)
    for bad in ([-5.0], [0.1, 0.1, 0.1], np.array([0.1, 0.1, 0.1])):
        with pytest.raises(ValueError, match=r"param_groups\[0\]: lr must be a finite number"):
            optimizer([p], lr=bad)


@pytest.mark.parametrize("name", ["lr", "clip"])
def test_adagrads_rates_per_column_must_fit_every_parameter(name):
    """One per column of each parameter, or broadcast to it; a ragged list, or one of
    another length, failed at the first step in numpy, not naming lr or clip."""
    weight = md.Tensor(np.ones((2, 3)), requires_grad=True)
    bias = md.Tensor(np.ones(3), requires_grad=True)
    for bad in ([0.1, 0.2], [[0.1], [0.2]], [[0.1], [0.2, 0.3]], np.full((3, 3), 0.1)):
        with pytest.raises(ValueError, match=rf"AdaGrad: param_groups\[0\]: {name} "):
            AdaGrad([weight, bias], **{name: bad})
    for good in (0.1, [0.1, 0.2, 0.3], np.full(3, 0.1)):
        opt = AdaGrad([weight, bias], **{name: good})
        weight.grad, bias.grad = np.ones((2, 3)), np.ones(3)
        opt.step()
    scalar = md.Tensor(np.array(1.0), requires_grad=True)
    AdaGrad([scalar], **{name: [0.1]}).step()  # a scalar is stepped as a vector of one
    with pytest.raises(ValueError, match=rf"{name} of shape \(2,\) does not broadcast"):
        AdaGrad([scalar], **{name: [0.1, 0.2]})
