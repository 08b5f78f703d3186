"""Neural-network building blocks: Module, Parameter, layers and losses.

    import minidist as md
    md.nn.manual_seed(0)
    model = md.nn.MLP([64, 128, 10])
    loss = md.nn.functional.cross_entropy(model(x), y)
    loss.backward()

``module.py`` explains how a model finds its parameters, ``layers.py`` the
layers, ``functional.py`` the losses, ``init.py`` the initial weights.
"""

from minidist.nn import functional, init
from minidist.nn.init import manual_seed
from minidist.nn.layers import (
    MLP,
    Embedding,
    LayerNorm,
    Linear,
    ModuleList,
    ReLU,
    Sequential,
    Sigmoid,
    Tanh,
)
from minidist.nn.module import Module, Parameter

__all__ = [
    "MLP", "Embedding", "LayerNorm", "Linear", "Module", "ModuleList", "Parameter", "ReLU",
    "Sequential", "Sigmoid", "Tanh", "functional", "init", "manual_seed",
]
