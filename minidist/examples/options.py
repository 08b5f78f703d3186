"""What the examples share on their command lines: how many ranks a run has, where the
model computes (``--device``), the kinds of value an option takes, and a bad option
reported as one clear line on every rank.

Under ``mpirun`` the ranks are mpirun's ``-n``; alone, an example runs its
ranks in process, ``--ranks`` of them. A wrong option must not leave some
ranks waiting for others that have quit: every rank checks the same
options, says what is wrong on its own line of stderr, waits until all have
said it, and exits with status 2 (argparse's status for a usage error).

``--device cuda`` computes on the GPU (cupy), ``cpu`` with numpy, ``strict``
with the CI guard's stand-in (numpy on the CPU behind arrays that refuse what
cupy refuses: a check that the device path works, its speed meaningless).
Every rank chooses the device before it builds its model; ranks under
``mpirun`` may share one GPU (each process has its own context). Asked for
with no GPU, every rank fails alike: a usage error naming the problem.

An option's own range is its argparse ``type`` (``integer``, ``number``,
``output_file``, ``output_folder``, from ``minidist.util.arguments``, which the benchmarks use
too): ``--batch-size 0``, a factor of
``nan`` or a plot into a folder that cannot be made is a usage error
naming the option, on every rank alike, before anything runs. What depends
on the ranks (a batch that must divide among them) is checked next, inside
:func:`options_checked`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from minidist import backend
from minidist.comm import Communicator, LocalCommunicator
from minidist.comm.transport.world import exit_together
from minidist.util.arguments import (  # noqa: F401 (the examples')
    image_file,
    integer,
    number,
    output_file,
    output_folder,
)

DEVICES = ("cpu", "cuda", "strict")


def add_device_option(parser: argparse.ArgumentParser) -> None:
    """``--device {cpu,cuda,strict}``; by default ``MINIDIST_DEVICE``, else cpu."""
    parser.add_argument("--device", choices=DEVICES, default=None,
                        help="where the model computes (default: MINIDIST_DEVICE, else cpu; "
                             "strict: the CI guard's stand-in, on the CPU)")


def choose_device(parser: argparse.ArgumentParser, device: str | None) -> str:
    """Compute on ``device`` (None: the default); a usage error when it cannot be had."""
    try:
        backend.set_device(device if device is not None else backend.get_device())
    except (RuntimeError, ValueError) as exc:  # no cupy, no GPU, a bad MINIDIST_DEVICE
        parser.error(f"--device {device or 'from MINIDIST_DEVICE'}: {exc}")
    return backend.get_device()


def cpu_only(parser: argparse.ArgumentParser, what: str) -> None:
    """A usage error when ``MINIDIST_DEVICE`` asks for a device that ``what`` (a parameter
    server's run) does not compute on (``backend.require_cpu``)."""
    try:
        backend.require_cpu(what)
    except (RuntimeError, ValueError) as exc:  # a device, or a bad MINIDIST_DEVICE
        parser.error(str(exc))


def run_ranks(c: Communicator, requested: int | None, default: int) -> int:
    """The run's ranks: ``c.size`` under mpirun (``--ranks``, if given, must agree), else
    ``requested`` in-process ranks (``default`` when not given)."""
    if not isinstance(c, LocalCommunicator):
        if requested not in (None, c.size):
            raise ValueError(f"--ranks {requested} under mpirun, which started {c.size}: "
                             "the ranks are mpirun's -n")
        return c.size
    return default if requested is None else requested  # --ranks: integer(1)


def check_global_batch(global_batch: int, ranks: int) -> None:
    """``--global-batch`` must divide evenly: each rank takes the same share of a step."""
    if global_batch % ranks:
        raise ValueError(f"--global-batch {global_batch} must be a multiple of the {ranks} "
                         "ranks (each takes an equal share of a step)")


@contextmanager
def options_checked(example: str, c: Communicator) -> Iterator[None]:
    """A ValueError raised inside: ``example (rank r): message`` on stderr, then exit 2
    (under MPI after a clean ``MPI_Finalize``, every rank having said it)."""
    try:
        yield
    except ValueError as err:
        sys.stderr.write(f"{example} (rank {c.rank}): {err}\n")  # one write: lines stay whole
        sys.stderr.flush()
        c.barrier()  # every rank has said it before the first one's exit ends the job
        exit_together(2)
