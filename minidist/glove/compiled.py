"""What makes glove.c's record loop fast: numba, explained once.

``per_record.sgd_records`` is plain Python, one record and one component at
a time, as Lecture 6 and glove.c state the algorithm. Run by the
interpreter it would take minutes per epoch (a billion bytecodes for 18 M
records at d = 50). ``jit`` hands the same function to numba, which
compiles it through LLVM to machine code, as a C compiler would; MiniTorch's
fast CPU backend is built the same way. Three of numba's options carry it:

1. **nopython mode** (``numba.njit``): every variable gets a machine type
   (float64, int64, arrays of them) and the loop touches no Python object,
   so it runs at the speed of the C it resembles.
2. **nogil=True**: the compiled loop releases Python's global interpreter
   lock while it runs, so several threads run it at once on the same numpy
   arrays, which is Hogwild as glove.c runs it, with threads, not processes.
3. **cache=True**: the machine code is saved on disk and the next process
   loads it at once instead of compiling it again (a few seconds).

The functions a loop calls, AdaGrad's rule from ``minidist.optim`` above
all, are compiled with it and inlined: one rule, run by numpy on arrays in
the mini-batch trainer and by numba on numbers here. numba's cache notices
a change of the loop's own file, not of the files of what it calls, so the
cache lives in a folder named by a hash of all their sources (under
``$NUMBA_CACHE_DIR`` if set, else ``~/.cache/minidist/numba``).

``compiled.python`` is the function itself, uncompiled: the tests run both.
numba is imported at the first call, not when ``minidist`` is.

**CPU only.** numba compiles for the host, on host memory: this is the record
loop of numpy tables. For tables on a GPU, ``train_records`` runs the same
loop as a CUDA kernel instead (``cuda_records``).
"""

from __future__ import annotations

import hashlib
import inspect
import os
import threading
from collections.abc import Callable
from pathlib import Path
from types import FunctionType
from typing import Any


def cache_folder(*functions: Callable[..., Any]) -> Path:
    """Where numba keeps the machine code of ``functions``: one folder per version of them."""
    digest = hashlib.sha256()
    for function in functions:
        digest.update(inspect.getsource(function).encode())
    base = os.environ.get("NUMBA_CACHE_DIR") or Path.home() / ".cache" / "minidist" / "numba"
    return Path(base) / digest.hexdigest()[:16]


class Compiled:
    """``loop`` compiled by numba (nopython, nogil, cached) with the functions it calls."""

    def __init__(self, loop: Callable[..., Any], *calls: Callable[..., Any]) -> None:
        self.python, self.calls = loop, calls
        self.dispatcher: Any = None
        self.lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        if self.dispatcher is None:
            with self.lock:  # the first threads to arrive wait for one compilation
                if self.dispatcher is None:
                    self.dispatcher = self.compile()
        return self.dispatcher(*args)

    def compile(self) -> Any:
        import numba
        from numba.core import config

        namespace = dict(self.python.__globals__)
        for call in self.calls:  # each call compiled into the loop, where the loop names it
            namespace[call.__name__] = numba.njit(inline="always")(call)
        loop = FunctionType(self.python.__code__, namespace, self.python.__name__,
                            self.python.__defaults__)
        loop.__module__, loop.__qualname__ = self.python.__module__, self.python.__qualname__
        saved, config.CACHE_DIR = config.CACHE_DIR, str(cache_folder(self.python, *self.calls))
        try:
            return numba.njit(nogil=True, cache=True)(loop)
        finally:
            config.CACHE_DIR = saved


def jit(loop: Callable[..., Any], *calls: Callable[..., Any]) -> Compiled:
    """``loop`` as machine code, compiled at its first call; ``calls``: what it calls."""
    return Compiled(loop, *calls)
