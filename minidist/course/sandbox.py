"""The sandbox a submission's kernel runs in: the only process that runs student code.

nbgrader starts a Jupyter kernel to execute a notebook. ``grade`` points the
``python3`` kernel spec at this module instead of ``ipykernel_launcher``, so
the kernel is born here, locks itself in, then becomes an ordinary IPython
kernel (``exec``, same pid, so nbgrader can still interrupt or kill it).
Locking in, in order:

1. hide the course and cut the network (root only): in a private mount namespace, an empty
   read-only tmpfs is mounted over ``solutions/``, ``grading/``, ``tests/``,
   ``.git/``, the submissions folder and the output folder; and where the
   Python installation sits in a folder other users cannot enter (``/root``),
   that folder is replaced by an empty one into which only the installation
   is bind-mounted, read-only; a network namespace of its own holds only a
   loopback (the grader talks to the kernel over unix sockets);
2. limits: address space (RLIMIT_AS), CPU seconds, processes (RLIMIT_NPROC,
   counted per user), file size, no core files;
3. drop privileges (root only): become a user id of its own, with no
   groups, so the grader's files (0700) and the gradebook are unreadable and
   every process the notebook leaves behind can be found by its uid;
4. an empty working directory that is also HOME and TMPDIR;
5. once it is a kernel (``load_ipython_extension``, which the kernel loads as
   an IPython extension), what a cell prints past ``MAX_OUTPUT`` characters on
   stdout, or on stderr, is dropped, and IPython keeps no copy of it: a cell
   that prints without end would send the grader more than it can read
   before the cell's time limit, and IPython's copy of every string printed
   would grow until the memory limit killed the kernel.

The settings come from the ``MINIDIST_SANDBOX`` environment variable (JSON),
written by ``minidist.course.grade``. Without root, steps 1 and 3 are skipped:
the notebook then runs as the grader's user and can read what that user can
read; grade inside a container, as root, for the full isolation.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import resource
import shutil
import socket
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from minidist.util.mpiexec import ONE_THREAD

CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWIPC = 0x00020000, 0x40000000, 0x08000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT = 1, 2, 4, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 1 << 14, 1 << 18
_libc = ctypes.CDLL(None, use_errno=True)
EXTENSION = "minidist.course.sandbox"  # this module, loaded by the kernel (step 5)
MAX_OUTPUT = 1_000_000  # characters a cell may print, on stdout and on stderr each
CUT = (f"\n[the grader cut this cell's output here: it printed more than {MAX_OUTPUT:,} "
       "characters]\n")


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           options: str | None = None) -> None:
    args = [s.encode() if s is not None else None for s in (source, target, fstype)]
    if _libc.mount(*args, flags, options.encode() if options else None) != 0:
        raise OSError(ctypes.get_errno(), f"mount {target}: {os.strerror(ctypes.get_errno())}")


def private_namespace() -> None:
    """A mount namespace of our own: mounts made from now on are invisible outside; and an
    IPC one: System V shared memory a cell makes (shmget) goes when the kernel's processes
    do, not held for later students (POSIX shared memory is /dev/shm's: removed after)."""
    if _libc.unshare(CLONE_NEWNS | CLONE_NEWIPC) != 0:
        raise OSError(ctypes.get_errno(), f"unshare: {os.strerror(ctypes.get_errno())}")
    _mount("none", "/", None, MS_REC | MS_PRIVATE)


def no_network() -> None:
    """A network namespace of our own, with only a loopback: nothing outside can be
    reached, while MPI jobs the notebook starts still talk over 127.0.0.1. (The grader
    reaches the kernel over unix sockets, which a network namespace does not cut.)"""
    if _libc.unshare(CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), f"unshare: {os.strerror(ctypes.get_errno())}")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))


def closed_ancestor(path: str) -> str | None:
    """The outermost folder on ``path`` that other users cannot enter, if any."""
    parts = Path(path).parts
    for depth in range(2, len(parts) + 1):
        folder = os.path.join(*parts[:depth])
        if not os.stat(folder).st_mode & 0o001:
            return folder
    return None


def expose(paths: list[str], staging: str) -> None:
    """Make each path readable although an ancestor is closed (``/root/.pyenv`` in ``/root``)."""
    groups: dict[str, list[str]] = {}
    for path in paths:
        ancestor = closed_ancestor(path)
        if ancestor is not None and ancestor != path:
            groups.setdefault(ancestor, []).append(path)
    for n, (ancestor, inside) in enumerate(groups.items()):
        staged = []
        for i, path in enumerate(inside):
            stage = os.path.join(staging, f"{n}-{i}")
            os.makedirs(stage, mode=0o700, exist_ok=True)  # a restarted kernel stages again
            _mount(path, stage, None, MS_BIND | MS_REC)
            staged.append((stage, path))
        _mount("tmpfs", ancestor, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
        for stage, path in staged:
            os.makedirs(path, exist_ok=True)
            for parent in [path, *map(str, Path(path).parents)]:
                if parent.startswith(ancestor):
                    os.chmod(parent, 0o755)
            _mount(stage, path, None, MS_BIND | MS_REC)
            _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY)


def hide(paths: list[str]) -> None:
    """Mount an empty read-only tmpfs over each folder in ``paths``."""
    for path in paths:
        if os.path.isdir(path):
            _mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=0555")


def set_limits(memory_mb: int, cpu_s: int, processes: int) -> None:
    """Bound the kernel and every process it starts (limits are inherited)."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 20, 256 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def kernel_environment(workdir: str) -> dict[str, str]:
    """A small, explicit environment: nothing of the grader's but PATH and the locale."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TERM")}
    return {**keep, "HOME": workdir, "TMPDIR": workdir, "IPYTHONDIR": f"{workdir}/.ipython",
            "JUPYTER_RUNTIME_DIR": workdir, "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1",
            **ONE_THREAD}


def capped(write: Callable[[str], Any], cell: Callable[[], Any]) -> Callable[[str], int]:
    """``write``, an output stream's, dropping what one cell writes past ``MAX_OUTPUT``
    characters (``cell()`` names the cell writing now)."""
    written = {"cell": None, "chars": 0}

    def write_capped(text: str) -> int:
        if cell() != written["cell"]:
            written.update(cell=cell(), chars=0)
        before = written["chars"]
        written["chars"] += len(text)
        if before < MAX_OUTPUT:
            write(text[:MAX_OUTPUT - before])
        if before <= MAX_OUTPUT < written["chars"]:  # the first write cut: say so, once
            write(CUT)
        return len(text)

    return write_capped


def load_ipython_extension(shell: Any) -> None:
    """Step 5: cut what a cell prints, each stream counted for the cell it came from. IPython
    (9) also keeps every string a cell prints, as its output history, which a cell printing
    without end grows until the kernel dies of its memory limit: that history is not kept."""
    # IPython's run_cell captures with its private _tee (a test fails if that changes)
    shell._tee = lambda channel: contextlib.nullcontext()
    for stream in (sys.stdout, sys.stderr):
        stream.write = capped(stream.write,
                              lambda s=stream: getattr(s, "parent_header", {}).get("msg_id"))


def main(argv: list[str]) -> None:
    settings = json.loads(os.environ["MINIDIST_SANDBOX"])
    workdir, uid = settings["workdir"], settings.get("uid")
    args = list(argv)
    connection = Path(args[args.index("-f") + 1])
    private_connection = Path(workdir) / ".kernel-connection.json"
    shutil.copyfile(connection, private_connection)  # the original sits where uid cannot look
    args[args.index("-f") + 1] = str(private_connection)
    if uid is not None:
        try:
            private_namespace()
            expose(settings["expose"], settings["staging"])
            hide(settings["hide"])
        except OSError as error:
            print(f"sandbox: could not hide the course ({error}); running unprivileged without it",
                  file=sys.stderr)
        try:
            no_network()
        except OSError as error:
            print(f"sandbox: could not cut the network ({error})", file=sys.stderr)
        os.chown(private_connection, uid, uid)
    set_limits(settings["memory_mb"], settings["cpu_s"], settings["processes"])
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    os.chdir(workdir)
    os.execve(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *args,
                               f"--IPKernelApp.extensions={EXTENSION}"],
              kernel_environment(workdir))


if __name__ == "__main__":
    main(sys.argv[1:])
