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
