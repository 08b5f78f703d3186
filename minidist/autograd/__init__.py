"""Reverse-mode automatic differentiation: Tensor, Function, the backward pass, gradcheck,
gradient checkpointing and the count of the bytes a graph keeps."""

from minidist.autograd.checkpoint import checkpoint, checkpoint_sequential
from minidist.autograd.engine import topological_order
from minidist.autograd.function import (
    Context,
    Function,
    enable_grad,
    is_grad_enabled,
    no_grad,
    observe_ops,
    queue_callback,
)
from minidist.autograd.gradcheck import gradcheck
from minidist.autograd.memory import saved_bytes
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
    "enable_grad", "observe_ops", "checkpoint", "checkpoint_sequential", "saved_bytes",
    "Add", "Sub", "Mul", "Div", "Neg", "Pow", "MatMul", "Exp", "Log", "Tanh", "Sigmoid", "ReLU",
    "Sum", "Mean", "Max", "LogSoftmax",
    "Reshape", "Transpose", "GetItem", "Concatenate", "Stack",
]
