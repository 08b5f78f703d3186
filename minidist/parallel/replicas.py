"""Identical replicas: every rank starts from rank 0's parameters.

Data parallelism (and any strategy that replicates a model) is only correct
if the replicas start equal: after that, equal updates keep them equal.
Random initialisation differs between processes unless seeded alike, so the
wrapper copies one rank's values to all instead of trusting the seeds.
"""

from __future__ import annotations

import zlib

import numpy as np

from minidist import backend
from minidist.autograd import Tensor
from minidist.comm import Communicator, allgather, broadcast
from minidist.nn.module import Module
from minidist.util.answers import lab_answer


@lab_answer("lab04")
def broadcast_parameters(module: Module, comm: Communicator, root: int = 0) -> None:
    """Copy rank ``root``'s parameters (frozen ones too) into every rank's ``module``.

    One broadcast per dtype of a flat buffer; it first checks that all ranks
    have the same number of values, so different models raise instead of hanging.
    (Equal counts may still be cut into other shapes: :func:`check_same_model`
    compares the shapes too, as ``DataParallel`` does before calling this.)
    Cost (binomial tree): ``ceil(log2 P)`` rounds of N bytes.
    """
    by_dtype: dict[np.dtype, list[Tensor]] = {}
    for p in module.parameters():
        by_dtype.setdefault(np.dtype(p.dtype), []).append(p)
    for dtype in sorted(by_dtype, key=str):  # the same order on every rank
        params = by_dtype[dtype]
        flat = backend.xp_of(params[0].data).concatenate([p.data.ravel() for p in params])
        # communication: rank root's values of every parameter of this dtype, to all ranks
        flat = broadcast(flat, comm, root=root)
        offset = 0
        for p in params:
            p.data[...] = flat[offset:offset + p.size].reshape(p.shape)
            offset += p.size


def check_same_model(module: Module, comm: Communicator, what: str = "DataParallel",
                     **settings: object) -> None:
    """Raise the same ``ValueError`` on every rank unless every rank's ``module`` has the
    same parameters (number, shapes, dtypes), the same trainable ones, and the same
    ``settings`` (e.g. the bucket plan; compared by their ``repr``).

    Replicas that differ break the collectives that follow: another number of
    buckets, or buckets of other sizes, leave a rank waiting for a message that
    never comes, or fail on one rank only; the same values cut into other
    shapes are broadcast without a word and train another model. A rank
    cannot see it alone, so each describes its model in a few integers
    (:func:`compare_descriptions`). Cost: one allgather of ``4 + len(settings)``
    integers per rank.
    """
    if comm.size == 1:
        return
    params = module.parameters()
    trainable = [i for i, p in enumerate(params) if p.requires_grad]
    fields = {"number of parameter tensors": len(params),
              "number of parameter values": sum(p.size for p in params),
              "parameter shapes or dtypes": digest([(tuple(p.shape), np.dtype(p.dtype).str)
                                                    for p in params]),
              "trainable parameters (requires_grad)": digest(trainable),
              **{name: digest(value) for name, value in settings.items()}}
    # the trainable count last, to show: its digest above differs first
    table, name, differ = compare_descriptions(comm, {**fields, "trainable": len(trainable)})
    if name is None:
        return
    column = list(fields).index(name)
    if column < 2:
        shown = ": " + ", ".join(f"rank {r}: {row[column]}" for r, row in enumerate(table))
    elif column == 3:
        shown = ": " + ", ".join(f"rank {r}: {row[-1]} of {row[0]} tensors trainable"
                                 for r, row in enumerate(table))
    else:
        shown = ""
    raise ValueError(f"{what}: every rank must hold the same model and settings, but "
                     f"rank(s) {differ} differ from rank 0 in their {name}{shown}")


def compare_descriptions(comm: Communicator, fields: dict[str, int]
                         ) -> tuple[list[list[int]], str | None, list[int]]:
    """Every rank's ``fields`` (a few integers describing what it holds: counts, and
    :func:`digest` of the rest) gathered to every rank, with the first field in which
    some rank differs from rank 0 and those ranks (``None`` and ``[]`` when all agree).

    A rank cannot see alone that its peers hold something else; after one
    allgather every rank holds the same table, so every rank finds the same
    first difference and can raise the same error, and none is left waiting
    for a message that never comes.
    """
    # communication: every rank's description, to every rank
    table = allgather(np.array(list(fields.values()), np.int64), comm).tolist()
    for column, name in enumerate(fields):
        differ = [rank for rank, row in enumerate(table) if row[column] != table[0][column]]
        if differ:
            return table, name, differ
    return table, None, []


def digest(value: object) -> int:
    """A crc32 of ``repr(value)``: an integer that differs when ``value`` does."""
    return zlib.crc32(repr(value).encode())
