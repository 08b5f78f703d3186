"""Ring allreduces back to back, for a test to kill a rank in the middle of one.

    mpiexec -n P python -m mpi4py tests/mpi_allreduce_loop.py

Rank 0 prints "allreducing" once every rank has finished a first allreduce;
the loop ends by itself after 20,000 of them, so a job nobody kills still ends.
"""

import numpy as np

from minidist.comm import allreduce, world

c = world()
x = np.ones(1 << 17)  # 1 MiB: a rank spends its time inside allreduce, not between two
allreduce(x, c, algorithm="ring")
if c.rank == 0:
    print("allreducing", flush=True)
for _ in range(20_000):
    allreduce(x, c, algorithm="ring")
