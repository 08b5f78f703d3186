"""Parallel training strategies (Lectures 4-7): each trains the course's models on P workers."""

from minidist.parallel.ddp import DataParallel
from minidist.parallel.glove_ddp import train_glove_ddp
from minidist.parallel.glove_sharded import train_glove_sharded
from minidist.parallel.hogwild import train_hogwild

__all__ = ["DataParallel", "train_glove_ddp", "train_glove_sharded", "train_hogwild"]
