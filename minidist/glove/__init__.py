"""GloVe word vectors, in one place (Lab 5, Lecture 6). Read in this order:

    model.py       the tables [w_i, b_i], the records X_ij, the weighting f, AdaGrad per column
    per_record.py  glove.c's own loop: record by record, AdaGrad, lock-free threads (Hogwild)
    recordfile.py  glove.c's record file, streamed a chunk at a time
    compiled.py    what makes the record loop fast (numba), explained once
    cuda_records.py  the record loop on a GPU: one CUDA kernel, a warp per record
    gradients.py   J / 2 on a batch and its gradients, for the rows it touched   (Task 2)
    training.py    the update of one batch, then one training loop for every strategy
    sharded.py     strategy: every vector's dimensions split over P ranks        (Task 4)
    ddp.py         strategy: every batch split over P ranks, touched rows exchanged
    hogwild.py     strategy: P processes, one shared model, no locks            (Task 5)
    vectorised.py  what makes the batch step fast in numpy, explained once
    io.py          the GloVe text format;   evaluate.py  neighbours, analogies, similarity

AdaGrad as the current glove.c runs it (Task 3) is ``minidist.optim.glove_c_update``,
one rule for every trainer: the record loop runs it compiled, number by number;
the mini-batch trainer through ``minidist.optim.adagrad_rows`` on the rows a batch
touched, with ``adagrad_columns``' rate and clip per column.

    from minidist import glove
    glove.write_records("records.bin", counts.row, counts.col, counts.val)  # shuffled once
    model = glove.GloVe.create(vocab_size, dim=50)
    run = glove.train_records(model, glove.RecordFile("records.bin"), epochs=10, threads=2)
    records = glove.Records.from_counts(counts.row, counts.col, counts.val)
    costs = glove.train(model, records, epochs=10, batch_size=256)   # mini-batches (GPU, labs)
    glove.train_hogwild(model, records, workers=2, epochs=10)       # lock-free processes
    md.launch(glove.train_glove_sharded, world_size=2, args=(model, records, 10))

On a device (``md.set_device("cuda")``; ``"strict"``, the CI guard, on the
CPU) ``GloVe.create`` and ``Records.from_counts`` make their arrays there and
``train`` keeps the tables, their AdaGrad sums and the batches there; the
costs come back once an epoch, the vectors when asked
(``backend.to_numpy(model.vectors())``). On a GPU the record loop runs too, as
a CUDA kernel (``cuda_records``). Hogwild, sharded and DDP run on the CPU only
and refuse device arrays (the record loop refuses the strict guard's);
``model.to(numpy)`` is the explicit host copy.

(``minidist.models.glove`` and ``minidist.models.glove_eval``, the old paths,
still import this package and ``evaluate``.)
"""

from minidist.glove.ddp import SparseDDP, sparse_ddp_step, train_glove_ddp
from minidist.glove.evaluate import analogy_accuracy, nearest_neighbours, similarity_spearman
from minidist.glove.gradients import (
    SparseGradients,
    autograd_loss,
    batch_gradients,
    gather_residuals,
    loss,
    row_gradients,
)
from minidist.glove.hogwild import HogwildWorker, train_hogwild
from minidist.glove.io import load_vectors, save_vectors
from minidist.glove.model import (
    ALPHA,
    ETA,
    GRAD_CLIP,
    X_MAX,
    GloVe,
    Records,
    adagrad_columns,
    weighting,
)
from minidist.glove.per_record import RecordRun, sgd_records, train_records
from minidist.glove.recordfile import RECORD, RecordFile, to_records, write_records
from minidist.glove.sharded import Sharded, shard, sharded_step, train_glove_sharded
from minidist.glove.training import (
    Strategy,
    adagrad_step,
    apply_gradients,
    epoch_order,
    fit,
    run_epoch,
    step,
    train,
    train_epoch,
)
from minidist.glove.vectorised import sum_rows
from minidist.optim.adagrad import adagrad_rows, glove_c_update
from minidist.parallel.hogwild import HogwildRun

__all__ = [
    "ALPHA", "ETA", "GRAD_CLIP", "X_MAX", "GloVe", "Records", "adagrad_columns", "weighting",
    "SparseGradients", "autograd_loss", "batch_gradients", "gather_residuals", "loss",
    "row_gradients", "sum_rows", "adagrad_rows", "glove_c_update",
    "RECORD", "RecordFile", "RecordRun", "sgd_records", "to_records", "train_records",
    "write_records",
    "Strategy", "adagrad_step", "apply_gradients", "epoch_order", "fit", "run_epoch", "step",
    "train",
    "train_epoch",
    "Sharded", "shard", "sharded_step", "train_glove_sharded",
    "SparseDDP", "sparse_ddp_step", "train_glove_ddp",
    "HogwildRun", "HogwildWorker", "train_hogwild",
    "load_vectors", "save_vectors", "analogy_accuracy", "nearest_neighbours",
    "similarity_spearman",
]
