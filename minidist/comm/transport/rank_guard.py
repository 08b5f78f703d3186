"""The guard each rank of a ``minidist mpirun`` job runs under, and the lines it writes.

``RANK_GUARD`` is a few lines of POSIX sh that start the rank and wait for
it; when the rank is killed by a signal, or exits with an error status, the
guard names it on stderr (``minidist: rank 1 (pid 4242 on host) was killed
by signal 9``). ``DEATH_LINE`` and ``FAILED_LINE`` find those lines in the
job's output, and a :class:`Death` is one of them read back
(``mpirun.py`` says why the guard, and what the job does with its lines).
"""

from __future__ import annotations

import re
import signal
import time
from dataclasses import dataclass, field

# $1..: the rank's command, run in the background so that $! is its pid. When the rank dies
# by a signal, the guard says so at once (builtins only: a survivor that sees its peer gone may
# abort the job a few milliseconds later) and dies by the same signal, so mpiexec sees what it
# sees without a guard. A rank that exits with a status other than 0 (os._exit, a crash in
# native code, MPI_Abort) is named the same way, with its status. Told to stop (SIGTERM from a
# stop, SIGINT, SIGHUP), it passes it on, waits for the rank (an orphan would linger until
# init reaps it) and says nothing.
RANK_GUARD = r"""
host=$(uname -n)
trap 'stopping=1; kill -s TERM $pid 2>/dev/null' TERM INT HUP
"$@" 0<&0 &
pid=$!
wait $pid 2>/dev/null
status=$?
while kill -0 $pid 2>/dev/null; do wait $pid 2>/dev/null; status=$?; done
if [ $status -gt 128 ] && [ -z "$stopping" ]; then
  echo "minidist: rank ${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-?}} (pid $pid on $host)" \
       "was killed by signal $((status - 128))" >&2
  trap - TERM INT HUP
  kill -$((status - 128)) $$
elif [ $status -ne 0 ] && [ -z "$stopping" ]; then
  echo "minidist: rank ${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-?}} (pid $pid on $host)" \
       "exited with status $status" >&2
fi
exit $status
""".strip()
GUARD_COMMAND = ("sh", "-c", RANK_GUARD, "sh")  # "sh": the guard's $0; the rank's words follow

DEATH_LINE = re.compile(r"minidist: rank (\d+) \(pid (\d+) on (\S+)\) was killed by signal (\d+)")
FAILED_LINE = re.compile(r"minidist: rank \d+ \(pid \d+ on \S+\) "
                         r"(was killed by signal|exited with status) (\d+)")


@dataclass
class Death:
    """A rank that ended by a signal, as its guard reported it."""

    rank: int
    pid: int
    host: str
    signal: int
    seen: float = field(default_factory=time.monotonic)

    @property
    def name(self) -> str:
        """The signal's name: "SIGKILL" for 9."""
        try:
            return signal.Signals(self.signal).name
        except ValueError:
            return f"signal {self.signal}"

    def __str__(self) -> str:
        return f"rank {self.rank} (pid {self.pid} on {self.host}) was killed by {self.name}"
