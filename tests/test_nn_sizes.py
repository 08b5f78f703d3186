"""The sizes a layer is built with: whole numbers, refused by name (with the entry of an
MLP's list) before numpy's random module sees them (test_nn.py tests the layers)."""

from __future__ import annotations

import numpy as np
import pytest

from minidist import nn


def case(layer, *args, message):
    """``layer(*args)`` and its error, with the call as the test's id."""
    return pytest.param(layer, args, message,
                        id=f"{layer.__name__}({', '.join(map(repr, args))})")


BAD = [case(nn.Linear, True, 3, message=r"Linear: in_features must be an integer >= 0, got True"),
       case(nn.Linear, 2.0, 3, message=r"Linear: in_features must be an integer >= 0, got 2\.0"),
       case(nn.Linear, 2, -1, message=r"Linear: out_features must be an integer >= 0, got -1"),
       case(nn.MLP, [5, -1, 2], message=r"MLP: sizes\[1\] must be an integer >= 1, got -1"),
       case(nn.MLP, [5, 0, 2], message=r"MLP: sizes\[1\] must be an integer >= 1, got 0"),
       case(nn.MLP, [5, 3, 2.5], message=r"MLP: sizes\[2\] must be an integer >= 1, got 2\.5"),
       case(nn.Embedding, -2, 3, message=r"Embedding: num_embeddings must be .* >= 1, got -2"),
       case(nn.Embedding, 4, 0, message=r"Embedding: embedding_dim must be .* >= 1, got 0"),
       case(nn.LayerNorm, -1, message=r"LayerNorm: dim must be an integer >= 1, got -1")]


@pytest.mark.parametrize("layer, args, message", BAD)
def test_a_size_that_is_not_a_whole_number_is_refused_by_name(layer, args, message):
    """They failed inside numpy's random module, naming no argument; MLP([5, 0, 2]) built a
    hidden layer 0 wide."""
    with pytest.raises(ValueError, match=message):
        layer(*args)


def test_sizes_as_numpy_integers_build_the_same_layers():
    layer = nn.Linear(np.int64(3), np.int32(2), rng=0)
    assert layer.weight.shape == (2, 3) and type(layer.in_features) is int
    assert nn.MLP(np.array([4, 3, 2]), rng=0)(np.ones((1, 4), np.float32)).shape == (1, 2)
    assert nn.Embedding(np.int64(5), 2, rng=0).weight.shape == (5, 2)


def test_an_activation_that_is_no_name_is_refused_by_name():
    """A list failed with "unhashable type" from the dict lookup."""
    with pytest.raises(ValueError, match=r"activation must be one of .*, got \['relu'\]"):
        nn.MLP([4, 3, 2], activation=["relu"])
