"""The layers of the course: Linear, activations, Embedding, and the MLP.

Each layer is a ``Module`` holding its ``Parameter``s and a ``forward`` built
from Tensor operations (see ``functional.py``); autograd does the rest.

- ``Linear(in, out)``: y = x @ W.T + b, W of shape (out, in), both drawn
  from uniform(-1/sqrt(in), 1/sqrt(in)) as in PyTorch (see ``init.py``).
- ``ReLU``, ``Tanh``, ``Sigmoid``: element-wise, no parameters.
- ``LayerNorm(dim)``: each row scaled to mean 0 and variance 1 over its last
  axis, then multiplied by a gain and shifted by a bias (both learnt).
- ``Embedding(num, dim)``: a table of ``num`` vectors; ``forward(ids)``
  gathers rows, and backward adds each row's gradient into the rows it was
  read from (a row read twice gets both gradients).
- ``Sequential`` chains modules; ``ModuleList`` only holds them.
- ``MLP([d0, d1, ..., dk])``: Linear(d0, d1), act, Linear(d1, d2), act, ...,
  Linear(d_{k-1}, dk), with no activation after the last layer (the loss
  takes logits).

``dtype`` (float32 by default) sets the parameters' precision, ``rng`` their
random source (see ``init.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from minidist import backend
from minidist.autograd import Tensor
from minidist.nn import functional as F
from minidist.nn import init
from minidist.nn.module import Module, Parameter
from minidist.util.values import whole


class Linear(Module):
    """y = x @ weight.T + bias. Cost: 2 * batch * in * out flops forward."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 dtype=np.float32, rng: np.random.Generator | int | None = None) -> None:
        super().__init__()
        # 0 is a layer of zero width (it has gradients); True, 2.0 or -1 failed inside numpy
        in_features = whole("Linear: in_features", in_features)
        out_features = whole("Linear: out_features", out_features)
        self.in_features, self.out_features = in_features, out_features
        rng = init.resolve_rng(rng)
        self.weight = Parameter(init.uniform_fan_in((out_features, in_features), in_features,
                                                    rng, dtype))
        self.bias = (Parameter(init.uniform_fan_in((out_features,), in_features, rng, dtype))
                     if bias else None)

    def forward(self, x) -> Tensor:
        x = F.as_tensor(x)
        if x.ndim == 0 or x.shape[-1] != self.in_features:  # else numpy's matmul error
            raise ValueError(f"Linear({self.extra_repr()}) takes inputs whose last axis has "
                             f"in_features={self.in_features} values, got one of shape "
                             f"{x.shape}")
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, bias={self.bias is not None}"


class ReLU(Module):
    """max(x, 0), element-wise."""

    def forward(self, x: Tensor) -> Tensor:
        return x.relu()


class Tanh(Module):
    """tanh(x), element-wise."""

    def forward(self, x: Tensor) -> Tensor:
        return x.tanh()


class Sigmoid(Module):
    """1 / (1 + exp(-x)), element-wise."""

    def forward(self, x: Tensor) -> Tensor:
        return x.sigmoid()


ACTIVATIONS = {"relu": ReLU, "tanh": Tanh, "sigmoid": Sigmoid}


class LayerNorm(Module):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last axis (Ba et al. 2016).

    Cost: O(elements) both ways; autograd derives the backward from the ops.
    """

    def __init__(self, dim: int, eps: float = 1e-5, dtype=np.float32) -> None:
        super().__init__()
        self.dim, self.eps = whole("LayerNorm: dim", dim, least=1), eps
        self.weight = Parameter(np.ones(dim, dtype=dtype))
        self.bias = Parameter(np.zeros(dim, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        centred = x - x.mean(axis=-1, keepdims=True)
        variance = (centred * centred).mean(axis=-1, keepdims=True)
        return centred * (variance + self.eps) ** -0.5 * self.weight + self.bias

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


class Embedding(Module):
    """A lookup table: ``forward(ids)`` returns ``weight[ids]``, shape ids.shape + (dim,).

    Weights start as N(0, 1) draws, as in PyTorch. Cost: O(len(ids) * dim)
    both ways; the gradient is a dense (num, dim) array, zero in unread rows.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, dtype=np.float32,
                 rng: np.random.Generator | int | None = None) -> None:
        super().__init__()
        num_embeddings = whole("Embedding: num_embeddings", num_embeddings, least=1)
        embedding_dim = whole("Embedding: embedding_dim", embedding_dim, least=1)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = Parameter(init.normal((num_embeddings, embedding_dim),
                                            init.resolve_rng(rng), dtype=dtype))

    def forward(self, ids) -> Tensor:
        if isinstance(ids, Tensor):
            ids = ids.data
        # checked where the ids are: on the host before they move (no device sync), on a
        # device with one sync for the whole check (-1 would read the last row quietly)
        xp = backend.xp_of(ids) if backend.on_device(ids) else np
        ids = xp.asarray(ids)
        outside = (ids < 0) | (ids >= self.num_embeddings)
        if bool(outside.any()):
            bad = int(ids[outside].reshape(-1)[0])
            raise IndexError(f"Embedding: id {bad} is outside 0..{self.num_embeddings - 1}")
        return self.weight[backend.xp().asarray(ids)]

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


class ModuleList(Module):
    """A list of modules, registered as "0", "1", ... (no forward of its own)."""

    def __init__(self, modules: Iterable[Module] = ()) -> None:
        super().__init__()
        for module in modules:
            self.append(module)

    def append(self, module: Module) -> None:
        setattr(self, str(len(self._modules)), module)

    def __getitem__(self, index: int) -> Module:
        return list(self._modules.values())[index]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(list(self._modules.values()))


class Sequential(ModuleList):
    """Modules applied one after the other: forward(x) = m_k(...m_1(m_0(x)))."""

    def __init__(self, *modules: Module) -> None:
        super().__init__(modules)

    def forward(self, x) -> Tensor:
        for module in self:
            x = module(x)
        return x


class MLP(Sequential):
    """Multi-layer perceptron: Linear layers of the given ``sizes``, activations between.

    ``MLP([64, 128, 10])`` is Linear(64, 128), ReLU, Linear(128, 10); its
    parameters are named "0.weight", "0.bias", "2.weight", "2.bias".
    Cost per example: 2 * sum_i sizes[i] * sizes[i+1] flops forward.
    """

    def __init__(self, sizes: list[int], activation: str = "relu", bias: bool = True,
                 dtype=np.float32, rng: np.random.Generator | int | None = None) -> None:
        if len(sizes) < 2:
            raise ValueError(f"an MLP needs at least an input and an output size, got {sizes}")
        if not isinstance(activation, str) or activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, "
                             f"got {activation!r}")
        for i, size in enumerate(sizes):  # a layer 0 wide would pass nothing on
            whole(f"MLP: sizes[{i}]", size, least=1)
        rng = init.resolve_rng(rng)
        layers: list[Module] = []
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            if i > 0:
                layers.append(ACTIVATIONS[activation]())
            layers.append(Linear(fan_in, fan_out, bias=bias, dtype=dtype, rng=rng))
        super().__init__(*layers)
        self.sizes = list(sizes)
