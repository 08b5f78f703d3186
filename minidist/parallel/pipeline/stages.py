"""Cutting a model into K stages: consecutive layers of a ``Sequential``, one part per rank.

``split_stages(model, K)`` gives K ``Sequential`` parts; run one after the
other they are the model (the same Module objects, so the same parameters,
under the same names: stage 1 of an MLP holds "2.weight", not "0.weight").
Where to cut decides the pipeline's speed: a stage waits for the slowest,
so the parts should cost about the same. By default the cut balances the
parameters' count (for Linear layers, the forward's flops per example are
twice that): layers are added to a stage until it holds its share, and
every stage gets at least one layer. ``balance=[n_0, ..., n_{K-1}]`` gives
the number of layers of each stage instead (GPipe's ``balance`` argument).
Cost: O(layers).
"""

from __future__ import annotations

from collections.abc import Sequence

from minidist.nn import Module, Sequential


def split_stages(model: Sequential, stages: int,
                 balance: Sequence[int] | None = None) -> list[Sequential]:
    """The ``stages`` consecutive parts of ``model``'s layers, as Sequentials."""
    if not isinstance(model, Sequential):
        raise TypeError(f"split_stages needs a Sequential (an MLP is one), got "
                        f"{type(model).__name__}")
    named = list(model._modules.items())
    layers = [module for _, module in named]
    if not 1 <= stages <= len(layers):
        raise ValueError(f"cannot cut {len(layers)} layers into {stages} stages: each stage "
                         f"needs at least one layer")
    counts = list(balance) if balance is not None else _balanced(layers, stages)
    if len(counts) != stages or min(counts) < 1 or sum(counts) != len(layers):
        raise ValueError(f"balance must give {stages} positive layer counts summing to "
                         f"{len(layers)}, got {counts}")
    parts, start = [], 0
    for count in counts:
        part = Sequential()
        for name, layer in named[start:start + count]:
            setattr(part, name, layer)       # the model's own name for the layer
        parts.append(part)
        start += count
    return parts


def _balanced(layers: list[Module], stages: int) -> list[int]:
    """Layer counts per stage, each stage as near as it can to an equal share of the
    parameters: a stage ends where taking the next layer would overshoot its share by
    more than stopping falls short of it (and early enough to leave a layer per stage)."""
    sizes = [sum(p.data.size for p in layer.parameters()) for layer in layers]
    share = sum(sizes) / stages
    counts, held, done = [], 0, 0.0
    for i, size in enumerate(sizes[:-1]):
        held += 1
        done += size
        target = share * (len(counts) + 1)
        stages_left, layers_left = stages - len(counts) - 1, len(sizes) - i - 1
        if stages_left and (layers_left == stages_left
                            or done + sizes[i + 1] - target > target - done):
            counts.append(held)
            held = 0
    counts.append(held + 1)
    return counts
