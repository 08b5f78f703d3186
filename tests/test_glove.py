"""GloVe: the vectorised trainer against a transliteration of glove.c's loop, against
autograd and against finite differences; loss decrease; the text format; the sharded and
sparse-DDP strategies against one process; the old module paths."""

from __future__ import annotations

import numpy as np
import pytest

import minidist as md
from minidist import glove
from minidist.data.cooccur import zipf_cooccurrence as random_cooccurrence


def reference_epoch(model: glove.GloVe, records: glove.Records, eta: float = 0.05) -> float:
    """The current glove.c's glove_thread, record by record, written plainly (float64)."""
    W, C, GW, GC = model.word, model.context, model.word_gradsq, model.context_gradsq
    d, cost = model.dim, 0.0
    for i, j, f, log_x in zip(records.row, records.col, records.weight, records.log_x,
                              strict=True):
        diff = W[i, :d] @ C[j, :d] + W[i, d] + C[j, d] - log_x
        fdiff = f * diff
        cost += 0.5 * fdiff * diff
        temp1 = np.clip(fdiff * C[j, :d], -100, 100) * eta
        temp2 = np.clip(fdiff * W[i, :d], -100, 100) * eta
        W[i, :d] -= temp1 / np.sqrt(GW[i, :d])
        C[j, :d] -= temp2 / np.sqrt(GC[j, :d])
        GW[i, :d] += temp1 * temp1
        GC[j, :d] += temp2 * temp2
        W[i, d] -= fdiff / np.sqrt(GW[i, d])  # the bias: its gradient itself, no eta
        C[j, d] -= fdiff / np.sqrt(GC[j, d])
        GW[i, d] += fdiff * fdiff
        GC[j, d] += fdiff * fdiff
    return cost / len(records)


def dense_gradients(model: glove.GloVe, grads: glove.SparseGradients):
    word, context = np.zeros_like(model.word), np.zeros_like(model.context)
    word[grads.words] = grads.word_grad
    context[grads.contexts] = grads.context_grad
    return word, context


@pytest.fixture(scope="module")
def small():
    row, col, val = random_cooccurrence(40, 600, seed=1)
    return glove.Records.from_counts(row, col, val)


def test_weighting_function():
    x = np.array([0.5, 10.0, 99.0, 100.0, 250.0])
    expected = [(0.5 / 100) ** 0.75, 0.1 ** 0.75, 0.99 ** 0.75, 1.0, 1.0]
    np.testing.assert_allclose(glove.weighting(x), expected, rtol=1e-15)
    np.testing.assert_allclose(glove.weighting(x, x_max=10, alpha=1.0), [0.05, 1, 1, 1, 1])


def test_init_matches_glove_c_ranges():
    model = glove.GloVe.create(500, 20, seed=3)
    assert model.word.shape == model.context.shape == (500, 21)
    assert np.abs(model.word).max() <= 0.5 / 20 and np.abs(model.context).max() <= 0.5 / 20
    assert np.all(model.word_gradsq == 1.0) and np.all(model.context_gradsq == 1.0)
    np.testing.assert_array_equal(model.vectors(), model.word[:, :20] + model.context[:, :20])


def test_batch_size_one_is_exactly_glove_c(small):
    model = glove.GloVe.create(40, 6, seed=0)
    expected = model.copy()
    cost = glove.train_epoch(model, small, np.random.default_rng(7), batch_size=1)
    expected_cost = reference_epoch(
        expected, small.take(np.random.default_rng(7).permutation(len(small))))
    assert cost == pytest.approx(expected_cost, rel=1e-12)
    for name, array in model.arrays().items():
        np.testing.assert_allclose(array, expected.arrays()[name], rtol=1e-12, atol=1e-15)


def test_batch_without_repeated_rows_equals_sequential_updates():
    rows, cols = np.arange(10), np.arange(10)[::-1].copy()  # no word or context repeats
    records = glove.Records.from_counts(rows, cols, np.linspace(1.0, 150.0, 10))
    model = glove.GloVe.create(10, 4, seed=1)
    expected = model.copy()
    glove.train_epoch(model, records, np.random.default_rng(0), batch_size=10)
    reference_epoch(expected, records)
    np.testing.assert_allclose(model.word, expected.word, rtol=1e-13, atol=1e-16)
    np.testing.assert_allclose(model.context_gradsq, expected.context_gradsq, rtol=1e-13)


def test_gradients_equal_autograd_on_a_batch_with_repeats(small):
    model = glove.GloVe.create(40, 5, seed=2)
    glove.train_epoch(model, small, np.random.default_rng(0), batch_size=64)  # not at init
    batch = small.take(np.random.default_rng(1).choice(len(small), 200, replace=False))
    assert len(np.unique(batch.row)) < len(batch)  # rows repeat: sums are exercised
    grads = glove.batch_gradients(model, batch)
    word = md.Tensor(model.word.copy(), requires_grad=True)
    context = md.Tensor(model.context.copy(), requires_grad=True)
    loss = glove.autograd_loss(word, context, batch)
    loss.backward()
    assert loss.item() == pytest.approx(grads.cost, rel=1e-12)
    dense_word, dense_context = dense_gradients(model, grads)
    np.testing.assert_allclose(dense_word, word.grad, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(dense_context, context.grad, rtol=1e-10, atol=1e-13)


def test_gradients_are_half_the_loss_derivative_by_finite_differences():
    row, col, val = random_cooccurrence(6, 30, seed=4)
    records = glove.Records.from_counts(row, col, val)
    model = glove.GloVe.create(6, 3, seed=5)
    model.word *= 20  # away from the tiny init so differences are well above rounding
    model.context *= 20
    dense_word, dense_context = dense_gradients(model, glove.batch_gradients(model, records))
    eps = 1e-6
    for table, analytic in ((model.word, dense_word), (model.context, dense_context)):
        numeric = np.zeros_like(table)
        for index in np.ndindex(table.shape):
            saved = table[index]
            table[index] = saved + eps
            plus = glove.loss(model, records)
            table[index] = saved - eps
            minus = glove.loss(model, records)
            table[index] = saved
            numeric[index] = (plus - minus) / (2 * eps)
        # glove.c differentiates J / 2: its gradient is half of dJ.
        np.testing.assert_allclose(analytic, numeric / 2, rtol=1e-6, atol=1e-8)


def test_autograd_path_first_steps_agree_with_vectorised_trainer(small):
    model = glove.GloVe.create(40, 5, seed=6)
    word = md.Tensor(model.word.copy(), requires_grad=True)
    context = md.Tensor(model.context.copy(), requires_grad=True)
    rates, clips = glove.adagrad_columns(5)
    optimizer = md.optim.AdaGrad([word, context], lr=rates, eps=0.0, initial_accumulator=1.0,
                                 convention="glove.c", clip=clips)
    for batch in list(small.batches(128, np.random.default_rng(3)))[:4]:
        grads = glove.batch_gradients(model, batch)
        glove.apply_gradients(model, grads)
        optimizer.zero_grad()
        loss = glove.autograd_loss(word, context, batch)
        loss.backward()
        optimizer.step()
        assert loss.item() == pytest.approx(grads.cost, rel=1e-10)
    np.testing.assert_allclose(word.numpy(), model.word, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(context.numpy(), model.context, rtol=1e-10, atol=1e-14)
    assert not np.allclose(model.word, glove.GloVe.create(40, 5, seed=6).word)  # it moved


def test_loss_decreases_every_epoch():
    """Batches of 64 records over 300 words. (With glove.c's bias rule, rate 1, a batch
    where a word occurs k times moves its bias by the sum of k gradients at once: batches
    of 512 here throw the biases far off in the first epoch.)"""
    row, col, val = random_cooccurrence(300, 6000, seed=8)
    records = glove.Records.from_counts(row, col, val)
    model = glove.GloVe.create(300, 16, seed=0)
    rng = np.random.default_rng(0)
    costs, losses = [], [glove.loss(model, records)]
    for _ in range(6):
        costs.append(glove.train_epoch(model, records, rng, batch_size=64))
        losses.append(glove.loss(model, records))
    assert all(b < a for a, b in zip(costs, costs[1:], strict=False)), costs
    assert all(b < a for a, b in zip(losses, losses[1:], strict=False)), losses
    assert losses[-1] < 0.5 * losses[0]


def test_sum_rows_matches_add_at():
    rng = np.random.default_rng(9)
    ids = rng.integers(0, 30, 500)
    grads = rng.standard_normal((500, 4))
    unique, sums = glove.sum_rows(ids, grads)
    expected = np.zeros((30, 4))
    np.add.at(expected, ids, grads)
    np.testing.assert_array_equal(unique, np.unique(ids))
    np.testing.assert_allclose(sums, expected[unique], rtol=1e-12, atol=1e-12)


def test_text_format_round_trip(tmp_path):
    words = ["the", "roi", "reine", "naïve"]
    vectors = np.random.default_rng(0).standard_normal((4, 7))
    path = tmp_path / "vectors.txt"
    glove.save_vectors(path, words, vectors)
    first = path.read_text(encoding="utf-8").splitlines()[0].split(" ")
    assert first[0] == "the" and len(first) == 8
    loaded_words, loaded = glove.load_vectors(path)
    assert loaded_words == words
    np.testing.assert_array_equal(loaded, vectors)  # repr() writes float64 exactly


def test_text_format_rejects_ragged_lines(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("a 1.0 2.0\nb 3.0\n", encoding="utf-8")
    with pytest.raises(ValueError, match="bad.txt:2"):
        glove.load_vectors(path)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="lengths 2, 2 and 1; they must be equal"):
        glove.Records.from_counts([0, 1], [1, 0], [2.0])
    with pytest.raises(ValueError, match="every count must be > 0"):
        glove.Records.from_counts([0, 1], [1, 0], [2.0, 0.0])
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        next(glove.Records.from_counts([0], [1], [2.0]).batches(0))
    with pytest.raises(ValueError, match="dim >= 1"):
        glove.GloVe.create(10, 0)
    with pytest.raises(ValueError, match="convention must be one of"):
        md.optim.AdaGrad([md.Tensor(np.ones(2), requires_grad=True)], convention="glove")
    with pytest.raises(ValueError, match="convention must be one of"):
        md.optim.adagrad_rows(np.ones((2, 2)), np.ones((2, 2)), [0], np.ones((1, 2)),
                              convention="torch")


def test_one_adagrad_rule_for_the_optimiser_and_the_rows():
    """``md.optim.AdaGrad`` in glove.c's convention, on whole tables, takes the steps that
    ``adagrad_rows`` takes on the rows a batch touched (the other rows' gradient is 0)."""
    rng = np.random.default_rng(3)
    table = md.Tensor(rng.standard_normal((8, 3)), requires_grad=True)
    rows_table, rows_gradsq = table.numpy().copy(), np.ones((8, 3))
    optimizer = md.optim.AdaGrad([table], lr=0.1, eps=0.0, initial_accumulator=1.0,
                                 convention="glove.c")
    for rows in ([1, 5, 2], [0, 1]):
        grad = rng.standard_normal((len(rows), 3))
        table.grad = np.zeros((8, 3))
        table.grad[rows] = grad
        optimizer.step()
        md.optim.adagrad_rows(rows_table, rows_gradsq, np.array(rows), grad, 0.1)
    np.testing.assert_array_equal(table.numpy(), rows_table)
    np.testing.assert_array_equal(optimizer.state[id(table)]["sum"], rows_gradsq)


def test_old_module_paths_still_import():
    import minidist.models.glove as old_glove
    import minidist.parallel as parallel
    from minidist.models.glove_eval import analogy_accuracy
    from minidist.parallel.hogwild import train_hogwild

    assert old_glove is glove and analogy_accuracy is glove.analogy_accuracy
    assert train_hogwild is glove.train_hogwild
    assert parallel.train_glove_ddp is glove.train_glove_ddp
    assert parallel.glove_sharded.train_glove_sharded is glove.train_glove_sharded


@pytest.mark.parametrize("text, message", [
    ("", "bad.txt: no vectors (the file is empty)"),
    ("a\t1.0\t2.0\n", "bad.txt:1: a tab"),
    ("a 1.0 2.0\nb\n", "bad.txt:2: expected 'word x1 ... xd'"),
    ("a 1.0 2.0\n\n", "bad.txt:2: expected 'word x1 ... xd'"),
    ("a 1.0 2.0\nb 3.0 x\n", "bad.txt:2: 'x' is not a number"),
    ("a 1.0 2.0\nb 1.0 2.0 3.0\n", "bad.txt:2: 3 numbers, expected 2"),
])
def test_text_format_rejects_malformed_files_naming_the_line(tmp_path, text, message):
    """Each was once read as something else (tab-separated: one word per line, no numbers),
    or failed with a bare float() error naming neither file nor line."""
    path = tmp_path / "bad.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as error:
        glove.load_vectors(path)
    assert message in str(error.value)


def test_text_format_takes_a_trailing_space_and_crlf(tmp_path):
    path = tmp_path / "ok.txt"
    path.write_bytes(b"a 1.0 2.0 \r\nb 3.0 4.0\r\n")
    words, vectors = glove.load_vectors(path)
    assert words == ["a", "b"]
    np.testing.assert_array_equal(vectors, [[1.0, 2.0], [3.0, 4.0]])


def test_records_refuse_ids_outside_the_vocabulary_and_counts_not_finite():
    """A negative id once trained the last row (and sum_rows dropped id -1); a NaN count
    passed the `<= 0` check and trained NaNs; an id past the model, an IndexError."""
    with pytest.raises(ValueError, match="row holds the word id -1; ids must be >= 0"):
        glove.Records.from_counts([0, -1], [1, 0], [3.0, 3.0])
    with pytest.raises(ValueError, match="col holds the word id 5; ids must be >= 0 and < 3"):
        glove.Records.from_counts([0, 1], [1, 5], [3.0, 3.0], vocab_size=3)
    for bad in (np.nan, np.inf):
        with pytest.raises(ValueError, match="every count must be finite"):
            glove.Records.from_counts([0, 1], [1, 0], [3.0, bad])
    with pytest.raises(ValueError, match="word ids are integers"):
        glove.Records.from_counts([0.5], [1.0], [3.0])
    beyond = glove.Records.from_counts([0, 1, 5], [1, 0, 2], [3.0, 3.0, 2.0])
    with pytest.raises(ValueError, match="row holds the word id 5; ids must be >= 0 and < 3"):
        glove.train(glove.GloVe.create(3, 4), beyond, 1)
