"""Small helpers every layer may use, each the one way minidist does its job.

- :mod:`~minidist.util.parts`: ``chunk_bounds``, splitting N items into P parts;
- :mod:`~minidist.util.shuffle`: ``epoch_order``, the seeded shuffle of an epoch;
- :mod:`~minidist.util.processes`: ``stop_process_tree`` (SIGTERM, grace, SIGKILL);
- :mod:`~minidist.util.mpiexec`: the command line and environment of MPI ranks;
- :mod:`~minidist.util.download`: ``fetch``, a cached download checked against a hash;
- :mod:`~minidist.util.answers`: ``@lab_answer("lab03_cost")``, marking a library
  function as a lab task's answer (``labkit.blocked`` blocks it while that task is checked).
- :mod:`~minidist.util.pages`: ``page_aligned_empty``, a buffer that starts on a page
  (where a buffer lies can slow a copy several times).
- :mod:`~minidist.util.values`: ``whole``, ``finite``, a library argument's checks (a
  ``ValueError`` naming it); :mod:`~minidist.util.arguments` does the same for command lines.

The first two are imported here; import the others from their modules.
"""

from minidist.util.parts import chunk_bounds
from minidist.util.shuffle import epoch_order

__all__ = ["chunk_bounds", "epoch_order"]
