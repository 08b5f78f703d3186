"""GloVe's loss on a batch of records, and its gradients (Lab 5, Task 2).

With diff = w_i . w~_j + b_i + b~_j - log X_ij and fdiff = f(X_ij) diff,
one record's term of J = sum f diff^2 has gradient 2 fdiff [w~_j, 1] for the
row [w_i, b_i] and 2 fdiff [w_i, 1] for the row [w~_j, b~_j]. The reference
C code (glove.c) drops the 2: it differentiates J / 2 (and reports the cost
0.5 f diff^2). We stay faithful to it: ``batch_gradients`` returns the
gradients of J / 2, and the cost printed per epoch is J / 2 per record.
Once AdaGrad's sums outgrow their start at 1 the factor cancels
(g / sqrt(sum g^2) ignores g's scale); before, it would double the first steps.

A word may occur in several records of a batch: its row's gradient is the
sum of their contributions. Only the rows the batch touched have a
gradient, so it is kept as (distinct ids, summed rows): ``SparseGradients``.
(Lab 5 asks for the same sums as dense arrays of the tables' shape, with
``np.add.at``; ``vectorised.sum_rows`` is the faster way to the same sums.)

``autograd_loss`` builds the same J / 2 from minidist's tensor operations;
its ``backward`` gives the same gradients (the tests check it).

Everything here computes with the array module of the tables (numpy, or
cupy on a GPU: ``vectorised`` says what that changes); a batch's cost stays
a 0-d array on the tables' device, read back once an epoch (``training``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from minidist import backend
from minidist.autograd import Tensor
from minidist.glove.model import GloVe, Records
from minidist.glove.vectorised import sum_rows
from minidist.util.answers import lab_answer


@dataclass
class SparseGradients:
    """Gradients of J / 2 on a batch, only for the rows the batch touched."""

    words: Any                 # distinct word ids
    word_grad: Any             # (len(words), d + 1)
    contexts: Any              # distinct context ids
    context_grad: Any          # (len(contexts), d + 1)
    cost: Any                  # J / 2 on the batch: a number, 0-d on a device


@lab_answer("lab05_loss_gradients")
def gather_residuals(model: GloVe, batch: Records) -> tuple[Any, Any, Any]:
    """The batch's rows [w_i, b_i] and [w~_j, b~_j] (copies), and every record's
    diff = w_i . w~_j + b_i + b~_j - log X_ij."""
    xp = backend.xp_of(model.word)
    w, c = model.word[batch.row], model.context[batch.col]
    diff = xp.einsum("bk,bk->b", w[:, :-1], c[:, :-1]) + w[:, -1] + c[:, -1] - batch.log_x
    return w, c, diff


@lab_answer("lab05_loss_gradients")
def loss(model: GloVe, records: Records) -> float:
    """J = sum f(X_ij) diff^2 over the records (the paper's loss, twice glove.c's cost),
    as a number on the host."""
    diff = gather_residuals(model, records)[2]
    return float(records.weight @ (diff * diff))  # the one copy to the host


@lab_answer("lab05_loss_gradients")
def batch_gradients(model: GloVe, batch: Records) -> SparseGradients:
    """glove.c's cost J / 2 on ``batch`` and its gradients, for the rows the batch touched.

    1. gather the batch's rows [w_i, b_i] and [w~_j, b~_j];
    2. every record's residual diff;
    3. every record's gradients, fdiff [w~_j, 1] for row i and fdiff [w_i, 1] for row j
       (none for a record whose diff is not finite: glove.c's guard);
    4. a word in several records gets the sum of their gradients.

    Cost: O(B d) arithmetic and O(B log B) to group the ids, for B records.
    """
    w, c, diff = gather_residuals(model, batch)                             # 1. 2.
    return row_gradients(batch, w, c, diff)                                 # 3. 4.


@lab_answer("lab05_loss_gradients")
def row_gradients(batch: Records, w: Any, c: Any, diff: Any) -> SparseGradients:
    """Phases 3 and 4 of ``batch_gradients``, from the gathered rows (overwritten, see
    ``vectorised``) and the residuals; the sharded step computes ``diff`` its own way."""
    fdiff = batch.weight * diff
    skipped = ~backend.xp_of(fdiff).isfinite(fdiff)  # glove.c skips a NaN or inf diff
    if skipped.any():  # one flag read from the device
        fdiff[skipped] = diff[skipped] = 0.0
        c[skipped] = w[skipped] = 0.0
    cost = 0.5 * (fdiff @ diff)  # stays on the device
    # 3. d cost / d [w_i, b_i] = fdiff [w~_j, 1];  d cost / d [w~_j, b~_j] = fdiff [w_i, 1]
    c[:, -1] = 1.0
    w[:, -1] = 1.0
    c *= fdiff[:, None]
    w *= fdiff[:, None]
    # 4. a word in several records gets the sum of their gradients
    words, word_grad = sum_rows(batch.row, c)
    contexts, context_grad = sum_rows(batch.col, w)
    return SparseGradients(words, word_grad, contexts, context_grad, cost)


@lab_answer("lab05_loss_gradients")
def autograd_loss(word: Tensor, context: Tensor, batch: Records) -> Tensor:
    """J / 2 on a batch, built from tensor operations: backward gives glove.c's gradients."""
    w, c = word[batch.row], context[batch.col]      # embedding gathers, (B, d + 1)
    dot = (w[:, :-1] * c[:, :-1]).sum(axis=1)
    diff = dot + w[:, -1] + c[:, -1] - batch.log_x
    return 0.5 * (batch.weight * diff * diff).sum()
