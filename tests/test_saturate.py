"""``python -m minidist.util.saturate -- COMMAND``: every core busy while COMMAND runs, then
nothing left behind (``make test-loaded`` runs the suite under it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import suppress

import psutil
import pytest

from minidist.util.saturate import BUSY_LOOP, cores, main, saturated

TOOL = [sys.executable, "-m", "minidist.util.saturate"]

# The command under the tool: writes what it sees beside it (the tool's other children,
# its busy loops) to argv[1], flushes a line, then exits with argv[2] or sleeps.
REPORT = """
import json, os, sys, time
import psutil
me = psutil.Process()
loads = [p for p in me.parent().children() if p.pid != me.pid]
json.dump({"loads": [p.pid for p in loads], "cmdlines": [p.cmdline() for p in loads],
           "nice": [p.nice() for p in loads], "my_nice": me.nice()}, open(sys.argv[1], "w"))
print("reported", flush=True)
if sys.argv[2] == "sleep":
    time.sleep(600)
sys.exit(int(sys.argv[2]))
"""


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids: list[int], limit: float = 60.0) -> bool:
    """Whether every pid has ended (a zombie has) within ``limit`` seconds: a hang guard."""
    deadline = time.monotonic() + limit
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(running(pid) for pid in pids)


def end(*pids: int) -> None:
    """Kill what a failed test would otherwise leave behind."""
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(120)
def test_saturated_keeps_a_busy_process_per_core_then_stops_them():
    with saturated(per_core=2) as loads:
        assert len(loads) == 2 * cores()
        processes = [psutil.Process(p.pid) for p in loads]
        for process in processes:  # busy: each keeps using CPU (a hang guard, not a timing)
            while sum(process.cpu_times()[:2]) < 0.3:
                time.sleep(0.05)
        assert all(p.nice() == psutil.Process().nice() for p in processes)  # same priority
    assert [p.returncode for p in loads] == [-signal.SIGTERM] * len(loads)
    assert not any(running(p.pid) for p in loads)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("exit_code", [0, 7])
def test_the_command_runs_beside_the_load_and_its_exit_code_comes_back(tmp_path, exit_code):
    report = tmp_path / "report.json"
    done = subprocess.run([*TOOL, "--", sys.executable, "-c", REPORT, str(report),
                           str(exit_code)], capture_output=True, text=True, timeout=100)
    seen = json.loads(report.read_text())
    end(*seen["loads"])
    assert done.returncode == exit_code, done.stderr
    assert done.stdout == "reported\n"  # the command's own output, as it wrote it
    assert f"{cores()} busy processes on {cores()} cores" in done.stderr
    assert len(seen["loads"]) == cores()
    assert all(BUSY_LOOP in cmdline for cmdline in seen["cmdlines"])
    assert seen["nice"] == [seen["my_nice"]] * cores()  # no lower priority than the command
    assert not any(running(pid) for pid in seen["loads"])


def start_sleeping_command(tmp_path):
    """The tool running a command that reports and sleeps: (tool, command pid, load pids)."""
    report = tmp_path / "report.json"
    tool = subprocess.Popen([*TOOL, "--", sys.executable, "-c", REPORT, str(report), "sleep"],
                            stdout=subprocess.PIPE, text=True)
    assert tool.stdout.readline() == "reported\n"
    loads = json.loads(report.read_text())["loads"]
    [command] = [p.pid for p in psutil.Process(tool.pid).children() if p.pid not in loads]
    return tool, command, loads


@pytest.mark.timeout(120)
def test_sigterm_stops_the_command_and_the_load(tmp_path):
    tool, command, loads = start_sleeping_command(tmp_path)
    try:
        tool.send_signal(signal.SIGTERM)
        assert tool.wait(timeout=60) == 128 + signal.SIGTERM
        assert not any(running(pid) for pid in [command, *loads])
    finally:
        end(tool.pid, command, *loads)
        tool.stdout.close()


@pytest.mark.timeout(120)
def test_the_load_ends_by_itself_when_the_tool_is_killed(tmp_path):
    tool, command, loads = start_sleeping_command(tmp_path)
    try:
        tool.kill()  # no chance to clean up
        tool.wait()
        assert wait_gone(loads)  # each sees that its parent is gone, and ends
    finally:
        end(command, *loads)
        tool.stdout.close()


@pytest.mark.timeout(60)
def test_a_missing_or_killed_command_exits_as_a_shell_would():
    missing = subprocess.run([*TOOL, "--", "no-such-command-here"], capture_output=True,
                             text=True, timeout=50)
    assert missing.returncode == 127 and "cannot run 'no-such-command-here'" in missing.stderr
    killed = subprocess.run([*TOOL, "--", sys.executable, "-c",
                             "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
                            timeout=50)
    assert killed.returncode == 128 + signal.SIGKILL


def test_bad_arguments_are_named(capsys):
    for argv, message in ([["--"], "no command"], [["--per-core", "0", "--", "true"],
                                                    "--per-core must be at least 1, got 0"]):
        with pytest.raises(SystemExit):
            main(argv)
        assert message in capsys.readouterr().err
