"""Reverse-mode automatic differentiation: Tensor, Function, the backward pass, gradcheck."""

from minidist.autograd.engine import topological_order
from minidist.autograd.function import Context, Function, is_grad_enabled, no_grad, queue_callback
from minidist.autograd.gradcheck import gradcheck
from minidist.autograd.ops import (
    Add,
    Div,
    Exp,
    Log,
    MatMul,
    Mul,
    Neg,
    Pow,
    ReLU,
    Sigmoid,
    Sub,
    Tanh,
    unbroadcast,
)
from minidist.autograd.ops_reduce import LogSoftmax, Max, Mean, Sum
from minidist.autograd.ops_shape import (
    Concatenate,
    GetItem,
    Reshape,
    Stack,
    Transpose,
    concatenate,
    stack,
)
from minidist.autograd.tensor import Tensor

__all__ = [
    "Tensor", "Function", "Context", "no_grad", "is_grad_enabled", "gradcheck",
    "topological_order", "unbroadcast", "concatenate", "stack", "queue_callback",
    "Add", "Sub", "Mul", "Div", "Neg", "Pow", "MatMul", "Exp", "Log", "Tanh", "Sigmoid", "ReLU",
    "Sum", "Mean", "Max", "LogSoftmax",
    "Reshape", "Transpose", "GetItem", "Concatenate", "Stack",
]
