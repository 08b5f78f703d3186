"""MPI jobs at their edges, as an engineer's own scripts meet them: two launches side by
side, output piped into ``head``, an exception that cannot be rebuilt, ``-n 0``,
``python -m minidist``, a rank's exit status, a hostfile mpiexec would misread, a
shipped function's file and line in a rank's traceback."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import minidist.comm as comm
from minidist.comm import RankError
from minidist.comm.transport.mpirun import main as mpirun_main
from minidist.util.mpiexec import check_hostfile, mpi_vendor

MPIEXEC = Path(sys.executable).parent / "mpiexec"
needs_mpi = [pytest.mark.mpi,
             pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no {MPIEXEC}")]


def sleeps(c, seconds):
    time.sleep(seconds)
    return c.rank


@pytest.mark.timeout(120)
@pytest.mark.parametrize("_", [pytest.param(0, marks=needs_mpi)])
def test_two_launches_side_by_side_both_finish(_):
    """The first to end reaped every new child in another session: the other's mpiexec
    too, whose job then ended without a result (mpiexec's exit status -9)."""
    results = {}

    def run(seconds):
        results[seconds] = comm.launch(sleeps, 2, args=(seconds,), backend="mpi", timeout=90)

    threads = [threading.Thread(target=run, args=(seconds,)) for seconds in (1.0, 4.0)]
    for thread in threads:
        thread.start()
        time.sleep(0.5)
    for thread in threads:
        thread.join()
    assert results == {1.0: [0, 1], 4.0: [0, 1]}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("_", [pytest.param(0, marks=needs_mpi)])
def test_a_job_whose_output_is_closed_stops_with_sigpipes_status(tmp_path, _):
    """`minidist mpirun ... | head -1` hung: the relay thread died of a broken pipe and
    the ranks blocked writing into a pipe nobody read."""
    script = tmp_path / "talks.py"
    script.write_text("import time\nfor i in range(10**7):\n    print('line', i, 'x' * 60)\n")
    job = subprocess.Popen([sys.executable, "-m", "minidist", "mpirun", "-n", "2", str(script)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    job.stdout.readline()
    job.stdout.close()  # as head does, once it has its line
    try:
        assert job.wait(timeout=60) == 128 + 13
    finally:
        job.kill()
        job.wait()
    assert b"Traceback" not in job.stderr.read()


class NeedsTwo(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a}/{b}")


def raises_needs_two(c):
    if c.rank == 1:
        raise NeedsTwo(1, 2)
    return c.rank


@pytest.mark.timeout(120)
@pytest.mark.parametrize("_", [pytest.param(0, marks=needs_mpi)])
def test_an_exception_that_cannot_be_rebuilt_still_names_its_rank(_):
    """Unpickling it in the caller raised a bare TypeError (__init__ missing 'b')."""
    with pytest.raises(RankError, match=r"rank 1 raised NeedsTwo: 1/2") as info:
        comm.launch(raises_needs_two, 2, backend="mpi", timeout=90)
    assert "in raises_needs_two" in info.value.traceback_text


def test_no_ranks_is_a_usage_error(capsys):
    """-n 0 passed the digits check and ended in mpiexec_command's traceback."""
    for ranks in ("0", "00"):
        assert mpirun_main(["-n", ranks, "-c", "pass"]) == 2
        assert "usage: minidist mpirun -n RANKS" in capsys.readouterr().err


@pytest.mark.parametrize("argv, wrong", [
    (["-n", "0", "x.py"], "-n takes a number of ranks >= 1, not '0'"),
    (["x.py"], "-n RANKS is required"),
    (["-n", "2"], "no program to run"),
    (["-n", "2", "--grace", "abc", "x.py"], "--grace takes seconds, not 'abc'"),
])
def test_a_usage_error_says_which_part_is_wrong_and_help_describes_each_option(
        argv, wrong, capsys):
    """Each printed the usage line alone, and --help was a usage error too."""
    assert mpirun_main(argv) == 2
    assert f"minidist mpirun: {wrong}" in capsys.readouterr().err
    assert mpirun_main(["--help"]) == 0
    said = capsys.readouterr().out
    assert all(option in said for option in ("-n RANKS ", "-f HOSTFILE ", "--grace SECONDS "))


@pytest.mark.parametrize("command", ["example", "bench"])
def test_an_unknown_example_or_benchmark_is_named_with_those_there_are(command, capsys):
    """It ended in runpy's ImportError traceback."""
    from minidist.cli import main

    assert main([command, "mlpp"]) == 2
    said = capsys.readouterr().err
    assert f"no {command} named 'mlpp'; there are " in said
    assert ("mlp_ddp" if command == "example" else "allreduce") in said
    assert "options" not in said.split("there are ")[1]  # a helper, not a program
    assert main([command, "--help"]) == 0  # it said "no example named '--help'"
    assert f"minidist {command} NAME [ARGS...]" in capsys.readouterr().out


def test_python_dash_m_minidist_is_the_minidist_command():
    done = subprocess.run([sys.executable, "-m", "minidist", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "minidist mpirun -n P PROGRAM" in done.stdout


@pytest.mark.timeout(120)
@pytest.mark.parametrize("_", [pytest.param(0, marks=needs_mpi)])
def test_a_rank_that_exits_with_3_makes_the_command_exit_with_3(tmp_path, _):
    """It exited 9: hydra ORs the ranks' wait statuses, 3 << 8 with the 9 of the rank it
    killed, and reads that as "killed by signal 9"."""
    script = tmp_path / "exits.py"
    script.write_text("import os, time\nfrom mpi4py import MPI\n"
                      "if MPI.COMM_WORLD.rank == 1:\n    time.sleep(0.3)\n    os._exit(3)\n"
                      "MPI.COMM_WORLD.Barrier()\n")
    for _ in range(2):
        done = subprocess.run([sys.executable, "-m", "minidist", "mpirun", "-n", "2",
                               str(script)], capture_output=True, text=True, timeout=60)
        assert "rank 1" in done.stderr and "exited with status 3" in done.stderr
        assert done.returncode == 3


@pytest.mark.timeout(120)
@pytest.mark.parametrize("_", [pytest.param(0, marks=needs_mpi)])
def test_a_hostfile_slot_count_that_is_no_positive_integer_is_named(tmp_path, capsys, _):
    """`localhost:abc` (or `:0`) killed MPICH's mpiexec with SIGFPE: exit 136, no word."""
    hosts = tmp_path / "hosts"
    entries = ("localhost:abc", "localhost:0") if mpi_vendor() == "mpich" else \
        ("slots=abc", "slots=0")
    for entry, slots in zip(entries, ("'abc'", "'0'"), strict=True):
        line = f"{entry} user=me" if mpi_vendor() == "mpich" else f"localhost {entry}"
        hosts.write_text(f"# two ranks here\n{line}\n")
        assert mpirun_main(["-n", "2", "-f", str(hosts), "-c", "pass"]) == 2
        said = capsys.readouterr().err
        assert f"hostfile {hosts}, line 2: '{entry}'" in said
        assert f"must be a positive integer, not {slots}" in said
    with pytest.raises(ValueError, match=f"hosts, line 2: '{entries[1]}'"):
        comm.launch(sleeps, 2, args=(0,), backend="mpi", hostfile=hosts, timeout=60)
    assert mpirun_main(["-n", "2", "-f", str(tmp_path / "none"), "-c", "pass"]) == 2
    assert f"hostfile {tmp_path / 'none'}: cannot be read" in capsys.readouterr().err


@pytest.mark.parametrize("vendor, line, said", [
    ("mpich", "node1 slots=4", "'slots=4' is Open MPI's way to give slots; MPICH's hostfile "
                               "says 'node1:N'"),
    ("openmpi", "node1:4", "'node1:4' is MPICH's way to give slots; Open MPI's hostfile says "
                           "'node1 slots=N'"),
    ("openmpi", "node1 max_slots=-1", "'max_slots=-1': the slot count must be a positive "
                                      "integer, not '-1'"),
])
def test_a_hostfile_in_the_other_mpis_format_is_named(tmp_path, vendor, line, said):
    """MPICH stopped at "token slots not supported" without naming the file; Open MPI
    tried to reach "node1:4" over ssh and said a daemon failed to report back."""
    hosts = tmp_path / "hosts"
    hosts.write_text(f"node0\n{line}  # the second host\n")
    with pytest.raises(ValueError, match=f"hosts, line 2: {said}"):
        check_hostfile(hosts, vendor)
    for fine in ("node1:4 user=me", "node1"):
        hosts.write_text(fine + "\n")
        check_hostfile(hosts, "mpich")
    for fine in ("node1 slots=4 max_slots=8", "node1"):
        hosts.write_text(fine + "\n")
        check_hostfile(hosts, "openmpi")


def raises_here(c):
    raise ValueError(f"raised on rank {c.rank}")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("_", [pytest.param(0, marks=needs_mpi)])
def test_a_rank_traceback_names_the_file_and_line_of_the_shipped_function(_):
    """cloudpickle 3.1 ships code with the file name `<dynamic-code>`: the traceback named
    no file and showed no source line."""
    with pytest.raises(RankError) as info:
        comm.launch(raises_here, 2, backend="mpi", timeout=90)
    line = raises_here.__code__.co_firstlineno + 1
    assert f'File "{__file__}", line {line}, in raises_here' in info.value.traceback_text
    assert 'raise ValueError(f"raised on rank {c.rank}")' in info.value.traceback_text



@pytest.mark.timeout(120)
@pytest.mark.parametrize("_", [pytest.param(0, marks=needs_mpi)])
def test_a_notebook_functions_line_shows_in_a_ranks_traceback(_):
    """A cell's "file" (/tmp/ipykernel_*/*.py) exists only in the notebook's linecache:
    the ranks' traceback named it and showed no line."""
    import linecache

    cell = "/tmp/ipykernel_0/no-such-cell.py"
    source = "def from_a_cell(c):\n    raise ValueError('a cell raised')\n"
    linecache.cache[cell] = (len(source), None, source.splitlines(True), cell)
    try:
        namespace = {}
        exec(compile(source, cell, "exec"), namespace)
        with pytest.raises(RankError) as info:
            comm.launch(namespace["from_a_cell"], 2, backend="mpi", timeout=90)
    finally:
        del linecache.cache[cell]
    assert f'File "{cell}", line 2, in from_a_cell' in info.value.traceback_text
    assert "raise ValueError('a cell raised')" in info.value.traceback_text
