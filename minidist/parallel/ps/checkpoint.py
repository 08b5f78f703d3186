"""Saving a server's shard so that a killed run can resume, atomically.

A checkpoint is taken at a clock every running worker has reached (they all
ask for it; ``server.py`` saves once the last has). Each server writes its
own file, ``{path}/shard-{server}.npz``: the values, the optimiser's state,
the version, the clock, its key range, the number of servers and the
optimiser's rule (a run resumes with as many servers as saved it, each
server's range depending on the count, and with the same rule, whose state
the file holds).
Atomically: written to a temporary file in the same directory, flushed to the
disk (``fsync``), then renamed over the old one (a rename within one file
system is atomic), so a crash leaves either the old checkpoint or the new one,
never half of one.

Workers need nothing saved: their state at a clock is the clock (the data
they read at iteration t depends only on the seed and t).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from minidist.parallel.ps.rules import ShardState, SoftSync


def shard_file(path: str | os.PathLike, server: int) -> Path:
    return Path(path) / f"shard-{server}.npz"


def refuse_to_save(path: str | os.PathLike | None, clock: int, accumulator: SoftSync | None
                   ) -> None:
    """A clear error if no checkpoint can be taken at ``clock``: the server was given no
    ``path``, or n-softsync's ``accumulator`` holds gradients (a checkpoint saves none)."""
    if path is None:
        raise ValueError("a worker asked for a checkpoint, but the parameter server "
                         "was given no checkpoint path")
    if accumulator is not None and accumulator.count:
        raise ValueError(f"checkpoint at clock {clock}: n-softsync holds "
                         f"{accumulator.count} of its {accumulator.c} gradients, "
                         f"which a checkpoint does not save; take it at a clock where the "
                         f"pushes so far are a multiple of c")


def save_shard(path: str | os.PathLike, server: int, shard: ShardState, clock: int,
               key_range: tuple[int, int], servers: int) -> Path:
    """Write ``shard`` at ``clock`` to ``{path}/shard-{server}.npz``, atomically."""
    target = shard_file(path, server)
    target.parent.mkdir(parents=True, exist_ok=True)
    arrays = {"values": shard.values, "version": np.int64(shard.version),
              "clock": np.int64(clock), "key_range": np.array(key_range, np.int64),
              "servers": np.int64(servers), "rule": np.array(shard.optimizer.rule)}
    if shard.sums is not None:
        arrays["sums"] = shard.sums
    if shard.moments is not None:
        arrays.update(steps=shard.moments[0], first=shard.moments[1], second=shard.moments[2])
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with open(temporary, "wb") as file:
        np.savez(file, **arrays)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, target)
    return target


def saved_clock(path: str | os.PathLike, servers: int, rule: str) -> int:
    """The clock the checkpoint in ``path`` was taken at, read from server 0's file by
    every rank alike; a checkpoint saved by another number of servers than ``servers``
    (each server's key range depends on the count) or by another optimiser ``rule``
    (its state is another's) is refused."""
    first = shard_file(path, 0)
    if not first.exists():
        raise FileNotFoundError(f"resume: no checkpoint in {path} ({first} does not exist)")
    with np.load(first) as saved:
        if "servers" in saved and int(saved["servers"]) != servers:  # (older files: no count)
            raise ValueError(f"the checkpoint in {path} was saved by {int(saved['servers'])} "
                             f"server(s), and this run has {servers}: resume with as many, "
                             f"or start again in another folder")
        if "rule" in saved and str(saved["rule"]) != rule:
            raise ValueError(f"the checkpoint in {path} holds the state of the servers' "
                             f"{saved['rule']} optimiser, and this run's is {rule}: resume "
                             "with it, or start again in another folder")
        return int(saved["clock"])


def load_shard(path: str | os.PathLike, server: int, shard: ShardState,
               key_range: tuple[int, int]) -> int:
    """Fill ``shard`` from its checkpoint; return the clock it was taken at."""
    target = shard_file(path, server)
    if not target.exists():
        raise FileNotFoundError(f"no checkpoint for server {server}: {target} does not exist")
    with np.load(target) as saved:
        saved_range = tuple(int(key) for key in saved["key_range"])
        if saved_range != tuple(key_range):
            raise ValueError(f"{target} holds keys {saved_range}, but server {server} now "
                             f"holds {tuple(key_range)}: was it saved for another model?")
        shard.values[...] = saved["values"].reshape(shard.values.shape)  # flat, or as rows
        shard.version = int(saved["version"])
        if shard.sums is not None:
            shard.sums[...] = saved["sums"].reshape(shard.sums.shape)
        if shard.moments is not None:
            for array, name in zip(shard.moments, ("steps", "first", "second"), strict=True):
                array[...] = saved[name].reshape(array.shape)
        return int(saved["clock"])
