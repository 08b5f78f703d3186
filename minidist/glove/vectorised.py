"""What makes the GloVe step fast in numpy, explained once.

glove.c updates the model after every record, in C. A Python loop over
records would run ~100x slower, so ``training.step`` takes a *batch* of B
records at a time and does each phase with a few numpy operations
over whole arrays. Four mechanisms carry it; the lesson code uses them
without further comment:

1. **Batches.** Gather the B rows [w_i, b_i] and [w~_j, b~_j] once, compute
   every residual with one ``einsum`` (row-wise dot products, no B x d
   temporary), every gradient with one multiplication. Where no word repeats
   inside a batch this is exactly glove.c's sequence of updates (with
   batch_size=1 it always is); a word seen k times takes one AdaGrad step with
   the sum of its k gradients where glove.c would take k smaller ones. For
   the biases that matters: glove.c steps them at rate 1, not eta, so a
   first step is the summed gradient itself. Keep batches small against
   how often words repeat in one (256 records suit an 860-word vocabulary;
   4096 throw its biases far off). On a CPU, glove.c's own loop
   (``per_record``, compiled) is faster still and takes the k steps.
2. **Gathered copies reused.** A fancy-index gather is a copy; after the
   residuals the copies of [w~_j, b~_j] and [w_i, b_i] become the gradients
   in place (set the bias column to 1, scale by f diff): no new B x (d + 1)
   arrays.
3. **Summing repeated rows by sorting** (``sum_rows``): sort the ids, find
   where each run of equal ids starts, ``np.add.reduceat`` each run. The
   obvious tool, ``np.add.at``, does the same and is about twice as slow.
   It also yields the distinct ids, so AdaGrad touches each row once.
4. **AdaGrad's sums read once** (``minidist.optim.adagrad_rows``): the rows'
   G are gathered once, updated in the gathered copy, written back once.

Cost per batch of B records, dimension d, U distinct rows: O(B d)
arithmetic, O(B log B) for the sorts, and ~2(B + U)(d + 1) random row reads
and writes. Those gathers, sorts and scatters take most of the time: the
tables of a large vocabulary live in main memory, not in the caches.

**On a GPU** the same lines run through cupy (``xp``, the array module of the
tables): every function used here exists in cupy with numpy's meaning for
these arguments (``argsort(kind="stable")``, ``diff(prepend=)``,
``flatnonzero``, ``einsum``, ``add.reduceat`` since cupy 12 (for ``add``
only), and the numpy ufuncs of ``glove_c_update``, which dispatch to cupy's).
Two differences: cupy's ``add.reduceat`` takes differences of one running
sum, so a run's sum may differ from numpy's in the last bits; and
``flatnonzero`` must learn its length, so the two ``sum_rows`` of a step each
wait once for the device. A GPU wants batches of thousands of records where
a CPU does well with hundreds; the repeated-word caveat of 1. then weighs more.
"""

from __future__ import annotations

from typing import Any

from minidist import backend
from minidist.util.answers import lab_answer


@lab_answer("lab05_loss_gradients")
def sum_rows(ids: Any, grads: Any) -> tuple[Any, Any]:
    """The distinct ids (sorted) and, per id, the sum of its rows of ``grads``.

    Sort the ids (all >= 0, as ``Records.from_counts`` and ``fit`` make sure: with
    ``prepend=-1`` no run would start at an id -1, and its rows would be dropped), find
    where each run of equal ids starts, add up each run with ``add.reduceat``:
    O(B log B + B d).
    """
    xp = backend.xp_of(grads)
    order = xp.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    starts = xp.flatnonzero(xp.diff(sorted_ids, prepend=-1))
    return sorted_ids[starts], xp.add.reduceat(grads[order], starts, axis=0)
