"""Checkpoints of data-parallel training: a run killed and started again with the same
command ends with the parameters of a run never interrupted, to the bit.

    saved = load_checkpoint(folder, model, opt, c)   # the newest checkpoint, or None
    step = saved.step if saved else 0
    epoch, skip = divmod(step, len(loader))          # where in the data to go on
    ...                                              # after each optimiser step:
    step += 1
    if step % every == 0:
        save_checkpoint(folder, step, model, opt, c, extra={"losses": losses})

A checkpoint holds what the rest of the run depends on:

1. the model's parameters (``Module.state_dict``);
2. the optimiser's state: moments, step counts, hyper-parameters, the
   learning rate a schedule set (``Optimizer.state_dict``), and the
   schedule's own step count (``scheduler=``, an ``LRScheduler``), so that
   the steps after the resume take the rates the schedule gives them;
3. the position in the data: ``step``, the optimiser steps taken. A
   sampler's order depends only on its seed and the epoch
   (``minidist.data.distributed``), so ``divmod(step, len(loader))`` is the
   epoch to run and the number of its batches to skip;
4. the state of a random generator the run draws from (``rng=``), if any;
5. ``extra``: whatever else the loop wants back (the losses so far), as JSON;
6. the number of ranks: which samples each rank takes depends on it, so a
   run resumes on as many ranks as wrote the checkpoint (else a clear
   error on every rank); and ``settings``, the run's own such choices (the
   seed that orders and splits its data, its batch size, by which ``step``
   counts batches), each refused alike when a resume changes it.

**Rank 0 writes, every rank reads.** Data parallelism keeps the replicas
identical, so rank 0's copy is the checkpoint; every save checks it (one
allgather of a crc32 of each rank's parameters) and refuses, on every rank,
a model whose ranks hold different parameters: a tensor-parallel, expert or
pipeline model keeps a different part on each rank, which one file of rank
0's would put on every rank. ZeRO's ``ShardedOptimizer``
holds a different shard of the state on each rank: every rank first gathers
its shard to rank 0 (``consolidate_state_dict``), which saves the state of
one optimiser over all the parameters, and on resume every rank loads its
own shard of it (``zero_checkpoint.py``). On resume rank 0 chooses the
newest checkpoint and tells the others its step (one broadcast): every rank
loads the same file.

**Atomically.** The file is written under a temporary name in the same
folder, flushed to the disk (``fsync``), renamed to ``step-00000120.npz`` (a
rename within one file system is atomic) and the folder flushed too: a crash
at any instant leaves each checkpoint whole or absent, so the newest file
present is complete. The ``keep`` newest are kept.

The format: one ``.npz`` per checkpoint, each array under its path
(``model/0.weight``, ``optim/state/3/exp_avg``), everything else (the step,
hyper-parameters, ``extra``) as JSON in ``meta``; no pickle, so loading a
checkpoint runs no code. (The parameter server saves its shards in
``minidist.parallel.ps.checkpoint``, the same way.)
"""

from __future__ import annotations

import json
import os
import re
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from minidist import backend
from minidist.comm import Communicator, broadcast
from minidist.nn.module import Module
from minidist.parallel.replicas import compare_descriptions
from minidist.util.values import whole

NAME = re.compile(r"step-(\d+)\.npz")


@dataclass
class Checkpoint:
    """What :func:`load_checkpoint` restored: the step it was taken at, ``extra``, the file."""

    step: int
    extra: dict[str, Any]
    path: Path


def checkpoint_path(folder: str | os.PathLike, step: int) -> Path:
    return Path(folder) / f"step-{step:08d}.npz"


def latest_checkpoint(folder: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint in ``folder`` (temporary files are not checkpoints)."""
    found = _checkpoints(folder)
    return found[-1][1] if found else None


def _checkpoints(folder: str | os.PathLike) -> list[tuple[int, Path]]:
    """The checkpoints in ``folder`` by step, oldest first (files named otherwise are
    someone else's)."""
    return sorted((int(m[1]), p) for p in Path(folder).glob("step-*.npz")
                  if (m := NAME.fullmatch(p.name)))


def save_checkpoint(folder: str | os.PathLike, step: int, model: Module, optimizer: Any,
                    comm: Communicator, *, rng: np.random.Generator | None = None,
                    extra: dict[str, Any] | None = None, keep: int = 2,
                    scheduler: Any = None, settings: dict[str, Any] | None = None
                    ) -> Path | None:
    """Rank 0 writes the checkpoint of ``step`` atomically and keeps the ``keep`` newest;
    returns its path there, None on the other ranks (which do nothing). ``scheduler``:
    an ``LRScheduler`` whose state is saved too; ``settings``: JSON values a resume must
    not change (module docstring, 6).

    A checkpoint of a later step already in ``folder`` is another run's (this one
    started afresh there): it is removed, or a resume would take it for this run's."""
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    whole("step", step)  # step--0000005.npz would never be found again
    _check_has_state(optimizer, scheduler)
    model_state = model.state_dict()
    _check_replicas_equal(model_state, comm)
    if hasattr(optimizer, "consolidate_state_dict"):  # ZeRO: every rank's shard, to rank 0
        optimizer.consolidate_state_dict(to=0)
    if comm.rank != 0:
        return None
    arrays: dict[str, np.ndarray] = {}
    meta = {"step": int(step), "ranks": comm.size, "extra": extra or {},
            "settings": settings or {},
            "model": _split(model_state, "model", arrays),
            "optim": _split(optimizer.state_dict(), "optim", arrays),
            "rng": rng.bit_generator.state if rng is not None else None,
            "scheduler": scheduler.state_dict() if scheduler is not None else None}
    arrays["meta"] = np.array(json.dumps(meta))
    target = checkpoint_path(folder, step)
    target.parent.mkdir(parents=True, exist_ok=True)
    # 1. written under a temporary name (not step-*.npz: never taken for a checkpoint)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with open(temporary, "wb") as file:
        np.savez(file, **arrays)
        file.flush()
        os.fsync(file.fileno())                      # 2. on the disk
    os.replace(temporary, target)                    # 3. whole, under its name
    _fsync_folder(target.parent)                     # 4. the rename on the disk too
    found = _checkpoints(folder)
    stale = [path for saved, path in found if saved > step]  # another run's
    older = [path for saved, path in found if saved <= step][:-keep]
    for path in [*stale, *older, *Path(folder).glob(".step-*.tmp")]:  # and what a crash
        path.unlink(missing_ok=True)                                  # left half done
    return target


def load_checkpoint(folder: str | os.PathLike, model: Module, optimizer: Any,
                    comm: Communicator, *, rng: np.random.Generator | None = None,
                    scheduler: Any = None, settings: dict[str, Any] | None = None
                    ) -> Checkpoint | None:
    """Restore the newest checkpoint in ``folder`` into ``model``, ``optimizer`` (and
    ``rng``, ``scheduler``: built before, as for the first run) on every rank; None,
    changing nothing, when there is none. A checkpoint refused (another optimiser, other
    shapes, another number of ranks, another value of one of ``settings``: those
    ``save_checkpoint`` was given) changes nothing either."""
    _check_has_state(optimizer, scheduler)
    step = -1  # none
    if comm.rank == 0:
        newest = latest_checkpoint(folder) if Path(folder).is_dir() else None
        step = -2 if Path(folder).is_file() else int(NAME.fullmatch(newest.name)[1]) \
            if newest else -1
    # communication: rank 0 names the checkpoint every rank loads (-1: none; -2: a file)
    step = int(broadcast(np.array([step], np.int64), comm)[0])
    if step == -2:
        raise ValueError(f"load_checkpoint: {folder} is a file; pass the folder that holds "
                         "the checkpoints (the newest is loaded)")
    if step < 0:
        return None
    path = checkpoint_path(folder, step)
    meta, model_state, optim_state = _read(path)
    if meta.get("ranks", comm.size) != comm.size:  # the same on every rank: no hang
        raise ValueError(f"{path} was written by a run on {meta['ranks']} ranks, this one "
                         f"has {comm.size}: resume on {meta['ranks']} ranks, or start "
                         "afresh in another folder")
    saved = meta.get("settings", {})
    for name, value in (settings or {}).items():  # JSON's values: a tuple came back a list
        if name in saved and saved[name] != json.loads(json.dumps(value)):
            raise ValueError(f"{path} was written by a run with {name} {saved[name]!r}, this "
                             f"one has {value!r}: resume with {name} {saved[name]!r}, or "
                             "start afresh in another folder")
    # before anything changes
    _check_part(path, meta.get("scheduler"), scheduler, "learning-rate scheduler", "scheduler",
                "its step count would restart at 0, its learning rate not resumed")
    _check_part(path, meta["rng"], rng, "random generator", "rng",
                "it would go on from its seed; load it without rng=, or start afresh")
    before = model.state_dict()  # put back if the optimiser refuses its state
    model.load_state_dict(model_state)
    try:
        optimizer.load_state_dict(optim_state)
    except (ValueError, KeyError, TypeError):
        model.load_state_dict(before)
        raise
    if rng is not None:
        rng.bit_generator.state = meta["rng"]
    if scheduler is not None:
        scheduler.load_state_dict(meta["scheduler"])
    return Checkpoint(meta["step"], meta["extra"], path)


def _read(path: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The checkpoint's description, model state and optimiser state, read whole before
    anything changes; a file that is no checkpoint (damaged after it was written: a save
    is atomic) is named, with the way on."""
    try:
        with np.load(path) as saved:
            meta = json.loads(saved["meta"].item())
            return meta, _join(meta["model"], saved), _join(meta["optim"], saved)
    except (KeyError, ValueError, EOFError, OSError, zipfile.BadZipFile, zlib.error) as err:
        raise ValueError(f"{path} is no readable checkpoint ({type(err).__name__}: {err}); "
                         "remove it to resume from the one before") from err


def _check_replicas_equal(model_state: dict[str, Any], comm: Communicator) -> None:
    """Refuse, on every rank, to save rank 0's model for all when the ranks' models differ
    (names, shapes, dtypes or bits of their parameters: module docstring)."""
    crc = 0
    for name, value in model_state.items():
        value = backend.to_numpy(value)  # a copy to the host, to be hashed
        crc = zlib.crc32(f"{name} {value.shape} {value.dtype}".encode(), crc)
        crc = zlib.crc32(np.ascontiguousarray(value).tobytes(), crc)
    # communication: every rank's crc32 to every rank (one allgather of one integer each)
    _, _, others = compare_descriptions(comm, {"parameters": crc})
    if others:
        raise ValueError(
            f"save_checkpoint keeps one copy of the model, rank 0's, for every rank (data "
            f"parallelism keeps the replicas equal), but rank(s) {others} hold other "
            "parameters: a tensor-parallel, expert or pipeline model keeps a different part "
            "on each rank (save each rank's state_dict itself), or data-parallel replicas "
            "have drifted apart")


def _check_has_state(optimizer: Any, scheduler: Any = None) -> None:
    """Refuse, on every rank, an optimiser (or scheduler) that cannot give its state."""
    for what, holder in (("optimiser", optimizer), ("scheduler", scheduler)):
        if (holder is not None or what == "optimiser") and not callable(
                getattr(holder, "state_dict", None)):
            raise TypeError(f"a checkpoint holds the {what}'s state_dict, but a "
                            f"{type(holder).__name__} has none")


def _check_part(path: Path, saved: Any, given: Any, what: str, option: str,
                otherwise: str) -> None:
    """A part's state (a generator's, a scheduler's) is restored only into one passed as
    ``option=``, and one passed only from a checkpoint that holds it: else it would start
    afresh while the model went on (``otherwise`` says how)."""
    if saved is not None and given is None:
        raise ValueError(f"{path} holds a {what}'s state: pass {option}= to load it")
    if saved is None and given is not None:
        raise ValueError(f"{path} holds no {what}'s state (saved without {option}=): "
                         f"{otherwise}")


def _split(tree: Any, path: str, arrays: dict[str, np.ndarray]) -> Any:
    """``tree`` as JSON, each array (numpy scalars too) moved to ``arrays[path]``."""
    if isinstance(tree, dict):
        return {str(key): _split(value, f"{path}/{key}", arrays) for key, value in tree.items()}
    if isinstance(tree, list | tuple):
        return [_split(value, f"{path}/{i}", arrays) for i, value in enumerate(tree)]
    if hasattr(tree, "shape"):
        arrays[path] = np.asarray(tree)
        return {"__array__": path}
    return tree


def _join(tree: Any, arrays: Any) -> Any:
    """The inverse of :func:`_split` (keys come back as strings; ``state_dict``s accept them)."""
    if isinstance(tree, dict):
        if set(tree) == {"__array__"}:
            return arrays[tree["__array__"]]
        return {key: _join(value, arrays) for key, value in tree.items()}
    if isinstance(tree, list):
        return [_join(value, arrays) for value in tree]
    return tree


def _fsync_folder(folder: Path) -> None:
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)
