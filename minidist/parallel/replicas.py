"""Identical replicas: every rank starts from rank 0's parameters.

Data parallelism (and any strategy that replicates a model) is only correct
if the replicas start equal: after that, equal updates keep them equal.
Random initialisation differs between processes unless seeded alike, so the
wrapper copies one rank's values to all instead of trusting the seeds.
"""

from __future__ import annotations

import numpy as np

from minidist import backend
from minidist.autograd import Tensor
from minidist.comm import Communicator, broadcast
from minidist.nn.module import Module
from minidist.util.answers import lab_answer


@lab_answer("lab04")
def broadcast_parameters(module: Module, comm: Communicator, root: int = 0) -> None:
    """Copy rank ``root``'s parameters (frozen ones too) into every rank's ``module``.

    One broadcast per dtype of a flat buffer; it first checks that all ranks
    have the same number of values, so different models raise instead of hanging.
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
