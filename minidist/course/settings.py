"""Per-lab grading limits: the one table that nbgrader's config and ``grade`` both read.

nbgrader stops a cell after 30 s by default; a lab whose cells train a model
or start an MPI job needs more, so every lab states its limits here on
purpose. ``grading/nbgrader_config.py`` sets nbgrader's cell timeout to the
largest of them (for plain ``nbgrader`` commands); ``python -m
minidist.course grade`` uses each lab's own row.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LabLimits:
    """What one student's notebook of this lab may use while it is graded."""

    cell_timeout_s: int = 60       # nbgrader's per-cell timeout: the cell then scores zero
    notebook_timeout_s: int = 600  # wall clock for the whole autograde of one student
    memory_mb: int = 4096          # address space of the kernel (RLIMIT_AS)
    cpu_s: int = 600               # CPU seconds of the kernel (RLIMIT_CPU)
    processes: int = 256           # processes and threads of the sandbox user (RLIMIT_NPROC)
    trusted_checks: bool = False   # the checks run in the grader, not in the kernel (trusted.py)


LAB_LIMITS: dict[str, LabLimits] = {
    # Lab 1: gradient checks take a second each; training the MLP takes ~10 s.
    "lab01_autograd": LabLimits(cell_timeout_s=60, notebook_timeout_s=300, memory_mb=3072,
                                cpu_s=300, trusted_checks=True),
    # Labs 2 and 3: in-process runs take well under a second each; one check cell and the
    # explore cell each start an MPI job (~1 s, more on a loaded machine). Lab 2's ranks run
    # in the grader, the student's functions in the kernel (labkit/relay.py); Lab 3's too.
    "lab02_messages": LabLimits(cell_timeout_s=60, notebook_timeout_s=300, memory_mb=3072,
                                cpu_s=300, trusted_checks=True),
    "lab03_allreduce": LabLimits(cell_timeout_s=60, notebook_timeout_s=300, memory_mb=3072,
                                 cpu_s=300, trusted_checks=True),
    # Lab 4: every check trains tiny models on in-process ranks (~1 s); the explore cells
    # train on the digits (~1 s) and start one 2-process MPI job (~1 s, more when loaded).
    # Its ranks run in the grader; each rank's model is built and trained in the kernel by a
    # probe (labkit/lab04_ranks.py) on a lent communicator.
    "lab04_data_parallel": LabLimits(cell_timeout_s=60, notebook_timeout_s=300,
                                     memory_mb=3072, cpu_s=300, trusted_checks=True),
    # Lab 5: checks take well under a second each; Task 5's check and one explore cell start
    # Hogwild's worker processes (spawn, under a second each time; the address-space limit
    # applies to each process). The explore cells train on a synthetic corpus (~5 s); the
    # whole notebook runs in ~10 s. Its checks run in the grader: a batch and a model cross
    # as arrays (probes of labkit/lab05.py, lab05_hogwild.py), Task 4's ranks are the grader's.
    "lab05_glove": LabLimits(cell_timeout_s=60, notebook_timeout_s=300, memory_mb=3072,
                             cpu_s=300, trusted_checks=True),
    # Lab 6: every check runs a few small parameter-server jobs on in-process ranks (threads;
    # about a second per check cell); the explore cells train the digits MLP and the matrix
    # factorisation through in-process servers, up to 9 ranks (~10 s for the whole notebook).
    # Its servers and ranks run in the grader: a shard's pushes and an accumulator's arrays
    # cross through probes (labkit/lab06_shard.py, lab06.py), a server asks the student's
    # rule for its answers, and Task 4's workers are lent to read_rows and write_rows.
    "lab06_parameter_servers": LabLimits(cell_timeout_s=60, notebook_timeout_s=300,
                                         memory_mb=3072, cpu_s=300, trusted_checks=True),
    # Lab 7: every check runs small pipelines on in-process ranks (well under a second per
    # check cell); the explore cells draw Gantt charts and start one 2-process MPI job (~1 s,
    # more when loaded); the whole notebook runs in ~10 s. Its ranks run in the grader: each
    # pipeline step runs on a stage the kernel keeps (probes of labkit/lab07_stages.py), a
    # schedule's Steps cross as data, Tasks 4-5 build their model in the kernel.
    "lab07_pipelines": LabLimits(cell_timeout_s=60, notebook_timeout_s=300, memory_mb=3072,
                                 cpu_s=300, trusted_checks=True),
    # Lab 8: every check runs small tensor-parallel blocks, all-to-alls and ZeRO steps on up to
    # 5 in-process ranks (well under a second per check cell); the explore cells count ZeRO's
    # memory at P = 1-8, a split MLP's traffic and the experts' load (~5 s for the notebook).
    # Its ranks run in the grader and drive the student's Functions, layer and optimiser in
    # the kernel phase by phase (probes of labkit/lab08_ranks.py), each phase's traffic
    # counted in the grader.
    "lab08_model_parallel": LabLimits(cell_timeout_s=60, notebook_timeout_s=300,
                                      memory_mb=3072, cpu_s=300, trusted_checks=True),
}
DEFAULT_LIMITS = LabLimits()


def limits_for(lab: str) -> LabLimits:
    """The limits of ``lab``, or the defaults for a lab not in the table."""
    return LAB_LIMITS.get(lab, DEFAULT_LIMITS)


def course_root() -> Path:
    """The repository root: ``solutions/``, ``labs/`` and ``grading/`` live there."""
    return Path(__file__).resolve().parents[2]


def known_labs(root: Path) -> list[str]:
    """The labs that have source notebooks in ``solutions/``."""
    return sorted(p.name for p in (root / "solutions").iterdir()
                  if p.is_dir() and any(p.glob("*.ipynb")))
