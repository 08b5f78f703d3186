"""Modules and parameters: how a model keeps track of its own weights.

A neural network is a function with learnable arrays inside it. ``Module`` is
the container that makes those arrays easy to find: assigning a ``Parameter``
or another ``Module`` to an attribute registers it, in the order you wrote it.

    class TwoLayer(Module):
        def __init__(self):
            super().__init__()
            self.hidden = Linear(4, 8)     # registered as "hidden"
            self.out = Linear(8, 2)        # registered as "out"

        def forward(self, x):
            return self.out(self.hidden(x).relu())

    model = TwoLayer()
    [name for name, _ in model.named_parameters()]
    # ['hidden.weight', 'hidden.bias', 'out.weight', 'out.bias']

That deterministic, dotted naming is what the rest of the course leans on: an
optimiser walks ``parameters()``, data parallelism broadcasts and averages them
in the same order on every rank, and a checkpoint is ``state_dict()`` — a plain
``{name: numpy array}`` dictionary that ``load_state_dict`` puts back.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from minidist import backend
from minidist.autograd import Tensor


class Parameter(Tensor):
    """A Tensor that is a learnable weight: it always requires a gradient."""

    def __init__(self, data) -> None:
        super().__init__(data, requires_grad=True)


class Module:
    """Base class of every layer and model.

    Subclasses set parameters and sub-modules as attributes in ``__init__``
    and write ``forward``; calling the module calls ``forward``.
    """

    def __init__(self) -> None:
        # object.__setattr__ skips our own __setattr__, which needs these dicts.
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", True)

    def __setattr__(self, name: str, value) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError("call super().__init__() before assigning attributes")
        # A name belongs to at most one registry; re-assigning moves it.
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        object.__delattr__(self, name)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # -- walking the tree -------------------------------------------------------

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """This module and every sub-module, depth first, with dotted names."""
        yield prefix, self
        for name, child in self._modules.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self) -> list[Module]:
        return [module for _, module in self.named_modules()]

    def children(self) -> list[Module]:
        return list(self._modules.values())

    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        """Every parameter with its dotted name, in registration order.

        A parameter shared by two modules (tied weights) is listed once, under
        the first name it was reached by, so an optimiser updates it once.
        """
        seen: set[int] = set()
        for module_name, module in self.named_modules():
            for name, param in module._parameters.items():
                if id(param) not in seen:
                    seen.add(id(param))
                    yield (f"{module_name}.{name}" if module_name else name), param

    def parameters(self) -> list[Parameter]:
        return [param for _, param in self.named_parameters()]

    # -- training helpers -------------------------------------------------------

    def train(self, mode: bool = True) -> Module:
        """Set training mode on this module and all sub-modules; returns self."""
        for module in self.modules():
            object.__setattr__(module, "training", mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self) -> None:
        """Forget accumulated gradients (sets ``.grad`` to None, freeing them)."""
        for param in self.parameters():
            param.grad = None

    # -- checkpoints ------------------------------------------------------------

    def state_dict(self) -> dict[str, np.ndarray]:
        """A copy of every parameter as a host numpy array, keyed by dotted name."""
        return {name: np.array(p.numpy(), copy=True) for name, p in self.named_parameters()}

    def load_state_dict(self, state: Mapping[str, np.ndarray], strict: bool = True) -> None:
        """Copy arrays from ``state`` into the parameters, in place.

        In place means an optimiser built before the load keeps working on the
        same arrays. With ``strict`` a missing or unexpected key is an error;
        a shape mismatch is always an error. Nothing is changed on error.
        """
        params = dict(self.named_parameters())
        missing = [name for name in params if name not in state]
        unexpected = [name for name in state if name not in params]
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict for {type(self).__name__}: "
                           f"missing keys {missing}, unexpected keys {unexpected}")
        for name, param in params.items():
            if name in state and tuple(np.shape(state[name])) != tuple(param.shape):
                raise ValueError(f"load_state_dict: shape mismatch for {name!r}: "
                                 f"checkpoint {tuple(np.shape(state[name]))}, "
                                 f"model {tuple(param.shape)}")
        xp = backend.xp()  # every value converted before the first is copied in
        values = {name: xp.asarray(state[name], dtype=param.data.dtype)
                  for name, param in params.items() if name in state}
        for name, value in values.items():
            params[name].data[...] = value

    # -- printing ---------------------------------------------------------------

    def extra_repr(self) -> str:
        """Subclasses describe their own settings here (e.g. sizes)."""
        return ""

    def __repr__(self) -> str:
        lines = [f"({name}): " + repr(child).replace("\n", "\n  ")
                 for name, child in self._modules.items()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not lines:
            return head + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"
