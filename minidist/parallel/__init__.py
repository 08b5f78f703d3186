"""Parallel training machinery (Lectures 4-7): data parallelism with buckets and its
checkpoints (``checkpoint``), Hogwild's shared memory and worker processes, parameter
servers (``ps``), pipelines (``pipeline``), mixtures of experts over ranks (``moe``),
sharded data parallelism (``zero``), tensor parallelism (``tensor_parallel``).
GloVe's strategies live
with GloVe, in ``minidist.glove``."""

from importlib import import_module
from typing import Any

from minidist.parallel.checkpoint import load_checkpoint, save_checkpoint
from minidist.parallel.ddp import DataParallel
from minidist.parallel.hogwild import HogwildRun, run_hogwild
from minidist.parallel.moe import MoE
from minidist.parallel.pipeline import Pipeline
from minidist.parallel.ps import KeyLayout, ParameterServer, ServerOptimizer
from minidist.parallel.shared_arrays import SharedArrays
from minidist.parallel.tensor_parallel import ParallelMLP, ParallelSelfAttention
from minidist.parallel.zero import ShardedOptimizer

__all__ = ["DataParallel", "HogwildRun", "KeyLayout", "MoE", "ParallelMLP",
           "ParallelSelfAttention", "ParameterServer", "Pipeline", "ServerOptimizer",
           "ShardedOptimizer", "SharedArrays", "load_checkpoint", "run_hogwild", "save_checkpoint"]

# Old names of GloVe's trainers, resolved on first use (minidist.glove builds on this package).
_MOVED = {"train_glove_ddp": "minidist.glove.ddp", "train_glove_sharded": "minidist.glove.sharded",
          "train_hogwild": "minidist.glove.hogwild", "glove_ddp": "minidist.glove.ddp",
          "glove_sharded": "minidist.glove.sharded"}


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = import_module(_MOVED[name])
    return module if name.startswith("glove_") else getattr(module, name)
