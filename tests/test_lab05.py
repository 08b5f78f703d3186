"""Lab 5's checks, run on the library's reference code, one pytest marker per task.

``pytest -m lab05_adagrad`` runs the check that grades Task 3 against the
library's ``adagrad_step``; the notebook and the library are held to the same
checks. Each check also rejects known-wrong answers with the sentence a
student would read, and a blocked library answer scores nothing.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

from minidist import comm, glove
from minidist.autograd import Tensor
from minidist.comm import allreduce
from minidist.glove import sharded_step, train_hogwild
from minidist.labkit import BlockedError, CheckFailed
from minidist.labkit.lab05 import (
    WRONG_ADAGRAD,
    check_adagrad,
    check_hogwild,
    check_loss_gradients,
    check_sharded_dots,
    check_weighting,
    glove_c_rows,
    half_loss,
    random_batch,
    random_tables,
)

SOLUTION = Path(__file__).parents[1] / "solutions" / "lab05_glove" / "lab05_glove.ipynb"


def library_loss(word, context, batch):
    """``batch_gradients`` (sparse rows) spread into arrays of the tables' shape."""
    model = glove.GloVe(word, context, np.ones_like(word), np.ones_like(context))
    grads = glove.batch_gradients(model, batch)
    word_grad, context_grad = np.zeros_like(word), np.zeros_like(context)
    word_grad[grads.words] = grads.word_grad
    context_grad[grads.contexts] = grads.context_grad
    return grads.cost, word_grad, context_grad


def autograd_loss(word, context, batch):
    """The library's autograd path: ``autograd_loss`` and ``backward``."""
    w, c = Tensor(word.copy(), requires_grad=True), Tensor(context.copy(), requires_grad=True)
    cost = glove.autograd_loss(w, c, batch)
    cost.backward()
    return float(cost.data), w.grad, c.grad


def library_hogwild(model, records, workers, epochs, batch_size, seed):
    sequential, hogwild = model.copy(), model.copy()
    glove.train(sequential, records, epochs, batch_size, seed=seed)
    train_hogwild(hogwild, records, workers=workers, epochs=epochs, batch_size=batch_size,
                  seed=seed, timeout=60)
    return sequential, hogwild


@pytest.mark.lab05_weighting
def test_weighting():
    # by hand: (1/100)^0.75 = 0.0316..., (10/100)^0.75 = 0.1778..., capped at 1 from x_max on
    np.testing.assert_allclose(glove.weighting(np.array([1.0, 10.0, 100.0, 400.0])),
                               [0.01 ** 0.75, 0.1 ** 0.75, 1.0, 1.0], rtol=1e-12)
    check_weighting(glove.weighting, [0.5, 1.0, 10.0, 99.0, 100.0, 250.0], block=())
    check_weighting(glove.weighting, [[2.0, 5.0], [10.0, 20.0]], x_max=10.0, block=())
    check_weighting(glove.weighting, [0.25, 3.0, 8.0, 8.001], x_max=8.0, alpha=0.5, block=())


def test_weighting_rejects_no_cap_a_flat_answer_and_the_library():
    with pytest.raises(CheckFailed, match=r"differs at \[5\]: got 1.98.*expected 1"):
        check_weighting(lambda x, x_max=100.0, alpha=0.75: (x / x_max) ** alpha,
                        [0.5, 1.0, 10.0, 99.0, 100.0, 250.0])
    with pytest.raises(CheckFailed, match=r"x has shape \(2, 2\), your answer \(4,\)"):
        check_weighting(lambda x, **options: glove.weighting(x, **options).ravel(),
                        [[2.0, 5.0], [10.0, 20.0]], x_max=10.0, block=())
    with pytest.raises(BlockedError, match="write your own weighting"):
        check_weighting(lambda x, **options: glove.weighting(x, **options), [1.0, 200.0])


@pytest.mark.lab05_loss_gradients
@pytest.mark.parametrize("vocab_size, dim, batch_size", [(5, 3, 8), (3, 1, 12), (12, 6, 5)])
def test_loss_gradients(vocab_size, dim, batch_size):
    check_loss_gradients(library_loss, vocab_size, dim, batch_size, seed=dim, block=())
    check_loss_gradients(autograd_loss, vocab_size, dim, batch_size, seed=dim, block=())


def test_reference_cost_is_half_the_papers_loss():
    word, context = random_tables(6, 3, seed=1)
    batch = random_batch(6, 10, seed=2)
    model = glove.GloVe(word, context, np.ones_like(word), np.ones_like(context))
    assert half_loss(word, context, batch) == pytest.approx(glove.loss(model, batch) / 2,
                                                            rel=1e-12)


def test_loss_gradients_rejects_dropped_repeats_the_papers_factor_and_the_library():
    def overwrite(word, context, batch):
        cost, word_grad, context_grad = library_loss(word, context, batch)
        w, c = word[batch.row], context[batch.col]
        diff = (w[:, :-1] * c[:, :-1]).sum(axis=1) + w[:, -1] + c[:, -1] - batch.log_x
        c[:, -1] = 1.0
        word_grad = np.zeros_like(word)
        word_grad[batch.row] += (batch.weight * diff)[:, None] * c  # repeats keep one
        return cost, word_grad, context_grad

    with pytest.raises(CheckFailed, match="only rows of words that occur in several records"):
        check_loss_gradients(overwrite, 5, 3, 8, block=())

    def twice(word, context, batch):  # the gradient of J, not of J / 2
        cost, word_grad, context_grad = library_loss(word, context, batch)
        return cost, 2 * word_grad, 2 * context_grad

    with pytest.raises(CheckFailed, match="the word table's gradient: differs.* gradient of J;"):
        check_loss_gradients(twice, 5, 3, 8, block=())

    def swapped(word, context, batch):  # each gradient added at the other table's ids
        w, c = word[batch.row], context[batch.col]
        diff = np.einsum("bk,bk->b", w[:, :-1], c[:, :-1]) + w[:, -1] + c[:, -1] - batch.log_x
        fdiff = batch.weight * diff
        c[:, -1], w[:, -1] = 1.0, 1.0
        word_grad, context_grad = np.zeros_like(word), np.zeros_like(context)
        np.add.at(word_grad, batch.col, fdiff[:, None] * c)
        np.add.at(context_grad, batch.row, fdiff[:, None] * w)
        return 0.5 * float(fdiff @ diff), word_grad, context_grad

    with pytest.raises(CheckFailed, match="no record of the batch has id .* get zero"):
        check_loss_gradients(swapped, 12, 6, 5, block=())
    with pytest.raises(BlockedError, match="write your own batch_gradients"):
        check_loss_gradients(library_loss, 5, 3, 8)
    with pytest.raises(BlockedError, match="write your own autograd_loss"):
        check_loss_gradients(autograd_loss, 5, 3, 8)


@pytest.mark.lab05_adagrad
@pytest.mark.parametrize("vocab_size, dim, steps, eta", [(6, 3, 3, 0.05), (10, 5, 5, 0.2)])
def test_adagrad(vocab_size, dim, steps, eta):
    check_adagrad(glove.adagrad_step, vocab_size, dim, steps, eta, block=())


def test_adagrad_matches_the_current_glove_c_by_hand():
    # one row [w, w, b], G = 1. Vector: 1 - 0.05 * 4 / 1 = 0.8, G = 1 + (0.05 * 4)^2 = 1.04;
    # 2 - 0.05 * 100 (400 clipped) = -3, G = 26. Bias, rate 1: 3 - 4 = -1, G = 1 + 16 = 17
    table, gradsq = np.array([[1.0, 2.0, 3.0]]), np.ones((1, 3))
    glove.adagrad_step(table, gradsq, np.array([0]), np.array([[4.0, 400.0, 4.0]]))
    np.testing.assert_allclose(table, [[0.8, -3.0, -1.0]])
    np.testing.assert_allclose(gradsq, [[1.04, 26.0, 17.0]])


def test_adagrad_rejects_each_wrong_rule_in_a_sentence():
    def rule(**options):
        return lambda table, gradsq, rows, grad, eta=0.05: glove_c_rows(
            table, gradsq, rows, grad, eta, **options)

    def not_in_place(table, gradsq, rows, grad, eta=0.05):
        table = table.copy()
        glove.adagrad_step(table, gradsq.copy(), rows, grad, eta)

    def forgets_g(table, gradsq, rows, grad, eta=0.05):
        sums = gradsq[rows]  # a copy: adding to it leaves gradsq as it was
        glove_c_rows(table, np.ones_like(gradsq), rows, grad, eta)
        sums += 1.0

    def every_row(table, gradsq, rows, grad, eta=0.05):
        dense = np.zeros_like(table)
        dense[rows] = grad
        glove_c_rows(table, gradsq, slice(None), dense, eta)

    for options, hint in WRONG_ADAGRAD.values():
        with pytest.raises(CheckFailed, match=r"step 1 .*differs.* -- " + re.escape(hint)):
            check_adagrad(rule(**options), 6, 3, 3)
    with pytest.raises(CheckFailed, match=r"step 1 .* left the table unchanged"):
        check_adagrad(not_in_place, 6, 3, 3, block=())
    with pytest.raises(CheckFailed, match=r"step 1 .* left gradsq unchanged"):
        check_adagrad(forgets_g, 6, 3, 3, block=())
    with pytest.raises(CheckFailed, match=r"step 1 .* changed rows not in rows.*O\(rows d\)"):
        check_adagrad(every_row, 6, 3, 3, block=())
    with pytest.raises(BlockedError, match="write your own adagrad_step"):
        check_adagrad(glove.adagrad_step, 6, 3, 3)


def sharded_dots(c, word_cols, context_cols, row, col, algorithm="ring", check=True):
    """Steps 2 and 3 of the library's ``sharded_step``."""
    partial = np.einsum("bk,bk->b", word_cols[row], context_cols[col])
    return allreduce(partial, c, algorithm=algorithm, check=check)


@pytest.mark.timeout(60)
@pytest.mark.lab05_sharded_dots
@pytest.mark.parametrize("world_size, dim", [(1, 4), (2, 6), (3, 7), (4, 3), (5, 16)])
def test_sharded_dots(world_size, dim):
    check_sharded_dots(sharded_dots, world_size, 9, dim, 11, seed=dim, block=())
    check_sharded_dots(lambda *a: sharded_dots(*a, algorithm="tree", check=False), world_size,
                       9, dim, 11, seed=dim, block=())


@pytest.mark.timeout(60)
def test_sharded_dots_rejects_one_allreduce_per_record_and_the_library():
    def per_record(c, word_cols, context_cols, row, col):
        return np.array([allreduce(np.array([word_cols[i] @ context_cols[j]]), c)[0]
                         for i, j in zip(row, col, strict=True)])

    with pytest.raises(CheckFailed, match=r"one comm.allreduce of the B = 10 partial dot"):
        check_sharded_dots(per_record, 2, 9, 6, 10)

    def via_sharded_step(c, word_cols, context_cols, row, col):
        local = glove.GloVe.create(9, word_cols.shape[1])
        sharded_step(c, local, glove.Records.from_counts(row, col, np.ones(len(row))))
        return np.zeros(len(row))

    with pytest.raises(BlockedError, match="write your own sharded_step"):
        check_sharded_dots(via_sharded_step, 2, 9, 6, 10)


@pytest.mark.timeout(120)
@pytest.mark.lab05_hogwild
@pytest.mark.parametrize("workers", [1, 2])
def test_hogwild(workers):
    check_hogwild(library_hogwild, workers, vocab_size=300, dim=8, nnz=6000, epochs=1,
                  batch_size=32)


@pytest.mark.timeout(60)
def test_hogwild_rejects_a_copy_of_the_sequential_run_and_training_the_given_model():
    def copied(model, records, workers, epochs, batch_size, seed):
        sequential = model.copy()
        glove.train(sequential, records, epochs, batch_size, seed=seed)
        return sequential, sequential.copy()

    with pytest.raises(CheckFailed, match="equals the sequential one bit for bit"):
        check_hogwild(copied, 2, vocab_size=100, dim=4, nnz=1000, epochs=1, batch_size=64)

    def in_place(model, records, workers, epochs, batch_size, seed):
        glove.train(model, records, epochs, batch_size, seed=seed)
        return model, model

    with pytest.raises(CheckFailed, match="the model you were given changed"):
        check_hogwild(in_place, 2, vocab_size=100, dim=4, nnz=1000, epochs=1, batch_size=64)



def solution_cells() -> str:
    """The source of the solution notebook's answer cells, solution markers dropped."""
    cells = json.loads(SOLUTION.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells
                     if c.get("metadata", {}).get("nbgrader", {}).get("solution"))


def body(function: ast.FunctionDef) -> str:
    """A function's body, without its docstring, as an AST dump."""
    statements = function.body
    if isinstance(statements[0], ast.Expr) and isinstance(statements[0].value, ast.Constant):
        statements = statements[1:]
    return ast.dump(ast.Module(statements, []))


def test_the_solutions_are_the_library_code():
    """Task 1 is the library's ``weighting`` line for line; Task 3's steps are
    ``adagrad_step``'s bit for bit (gradients beyond 100 included); Task 2's phases give
    the library's cost bit for bit and its gradients (repeated rows are summed in another order)."""
    source = solution_cells()
    answers = {"np": np, "comm": comm, "glove": glove, "train_hogwild": train_hogwild}
    exec(source, answers)  # the course's own notebook
    solution = {f.name: f for f in ast.parse(source).body if isinstance(f, ast.FunctionDef)}
    library = ast.parse(textwrap.dedent(inspect.getsource(glove.weighting))).body[0]
    assert body(library) == body(solution["weighting"])

    rng = np.random.default_rng(5)
    table, gradsq = rng.standard_normal((2, 9, 4))
    gradsq = 1.0 + gradsq**2
    mine, mine_sq = table.copy(), gradsq.copy()
    for _ in range(4):
        rows = rng.choice(9, 5, replace=False)
        grad = 200 * rng.standard_normal((5, 4))
        answers["adagrad_step"](mine, mine_sq, rows, grad, 0.1)
        glove.adagrad_step(table, gradsq, rows, grad, 0.1)
    np.testing.assert_array_equal(mine, table)
    np.testing.assert_array_equal(mine_sq, gradsq)

    word, context = random_tables(7, 4, seed=3)
    batch = random_batch(7, 20, seed=4)
    cost, word_grad, context_grad = answers["loss_and_gradients"](word, context, batch)
    expected = library_loss(word, context, batch)
    assert cost == expected[0]
    np.testing.assert_allclose(word_grad, expected[1], rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(context_grad, expected[2], rtol=1e-14, atol=1e-15)
