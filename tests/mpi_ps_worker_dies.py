"""A parameter server whose worker's process is killed in the middle of training.

    mpiexec --with-ft ulfm -n 4 python -m mpi4py tests/mpi_ps_worker_dies.py    # Open MPI

Rank 0 serves, ranks 1-3 train 10 clocks under SSP(1); rank 2 kills itself
(SIGKILL) at its fourth. Under an MPI with fault tolerance the server drops
it, naming it, and the others finish: each survivor prints how many clocks
it trained, the server which workers it dropped.
"""

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from test_ps import train  # noqa: E402  (the suite's small model and its training loop)

from minidist.comm import world  # noqa: E402

c = world()


def compute(t: int, w: int) -> float:
    if c.rank == 2 and t == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return 1e-3


result = train(c, 1, consistency="ssp", staleness=1, steps=10, compute=compute)
print(f"rank {c.rank}: {result.dropped if c.rank == 0 else result}", flush=True)
