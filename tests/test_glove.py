"""GloVe model: the vectorised trainer against a transliteration of glove.c's loop,
against autograd and against finite differences; loss decrease; the text format."""

from __future__ import annotations

import numpy as np
import pytest

import minidist as md
from minidist.data.cooccur import zipf_cooccurrence as random_cooccurrence
from minidist.models import glove


def reference_epoch(model: glove.GloVe, records: glove.Records, eta: float = 0.05) -> float:
    """glove.c's glove_thread, record by record, written plainly (float64)."""
    W, C, GW, GC = model.word, model.context, model.word_gradsq, model.context_gradsq
    d, cost = model.dim, 0.0
    for i, j, f, log_x in zip(records.row, records.col, records.weight, records.log_x,
                              strict=True):
        diff = W[i, :d] @ C[j, :d] + W[i, d] + C[j, d] - log_x
        cost += 0.5 * f * diff * diff
        fdiff = eta * f * diff
        temp1, temp2 = fdiff * C[j, :d], fdiff * W[i, :d]
        W[i, :d] -= temp1 / np.sqrt(GW[i, :d])
        C[j, :d] -= temp2 / np.sqrt(GC[j, :d])
        GW[i, :d] += temp1 * temp1
        GC[j, :d] += temp2 * temp2
        W[i, d] -= fdiff / np.sqrt(GW[i, d])
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
    optimizer = glove.ReferenceAdaGrad([word, context], lr=glove.ETA)
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
    row, col, val = random_cooccurrence(300, 6000, seed=8)
    records = glove.Records.from_counts(row, col, val)
    model = glove.GloVe.create(300, 16, seed=0)
    rng = np.random.default_rng(0)
    costs, losses = [], [glove.loss(model, records)]
    for _ in range(8):
        costs.append(glove.train_epoch(model, records, rng, batch_size=512))
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


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ranks", [2, 3])
def test_sharded_dimensions_equal_one_process(small, ranks):
    """Float64; only the dot products' summation order differs: rtol 1e-9 after 2 epochs."""
    from minidist.parallel.glove_sharded import train_glove_sharded

    start = glove.GloVe.create(40, 7, seed=4)  # 7 columns: uneven over 2 and 3 ranks
    expected = start.copy()
    costs = glove.train(expected, small, epochs=2, batch_size=100, seed=1)
    results = md.launch(train_glove_sharded, world_size=ranks, backend="local", timeout=50,
                        args=(start, small, 2, 100, 1))
    model, sharded_costs = results[0]
    assert all(r[0] is None and r[1] == sharded_costs for r in results[1:])
    np.testing.assert_allclose(sharded_costs, costs, rtol=1e-12)
    for name, array in model.arrays().items():
        np.testing.assert_allclose(array, expected.arrays()[name], rtol=1e-9, atol=1e-13)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ranks", [2, 3])
def test_ddp_with_sparse_rows_equals_one_process_with_ranks_times_the_batch(small, ranks):
    """Float64; per-row sums are added in another order: rtol 1e-9 after 2 epochs."""
    from minidist.parallel.glove_ddp import train_glove_ddp

    start = glove.GloVe.create(40, 6, seed=8)
    expected = start.copy()
    costs = glove.train(expected, small, epochs=2, batch_size=ranks * 50, seed=3)
    results = md.launch(train_glove_ddp, world_size=ranks, backend="local", timeout=50,
                        args=(start, small, 2, 50, 3))
    model, ddp_costs = results[0]
    assert all(r[0] is None and r[1] == ddp_costs for r in results[1:])
    np.testing.assert_allclose(ddp_costs, costs, rtol=1e-12)
    for name, array in model.arrays().items():
        np.testing.assert_allclose(array, expected.arrays()[name], rtol=1e-9, atol=1e-13)
    np.testing.assert_array_equal(start.word, glove.GloVe.create(40, 6, seed=8).word)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_example_reaches_90_percent_analogies_on_the_default_corpus(tmp_path, capsys):
    """The default run: synthetic corpus, d=50, 10 epochs; >= 90% of the planted analogies."""
    from minidist.examples import glove as example

    saved = tmp_path / "vectors.txt"
    result = example.main(["--no-progress", "--save", str(saved)])
    assert result["seconds"] < 60, f"training took {result['seconds']:.1f} s"
    assert result["analogies"].coverage == 1.0
    assert result["analogies"].accuracy >= 0.90, str(result["analogies"])
    assert result["similarity"].rho > 0.3
    costs = result["costs"]
    assert len(costs) == 10 and all(b < a for a, b in zip(costs, costs[1:], strict=False))
    words, vectors = glove.load_vectors(saved)
    assert words == result["words"]
    np.testing.assert_array_equal(vectors, result["model"].vectors())
    out = capsys.readouterr().out
    assert "analogy accuracy" in out and "paris:" in out


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("strategy", ["sharded", "ddp"])
def test_example_runs_the_mpi_strategies(strategy):
    """Under mpiexec, 2 ranks, 2 epochs: the single-process run's costs and vectors."""
    from minidist.data.cooccur import Cooccurrence
    from minidist.examples.glove import train_vectors

    row, col, val = random_cooccurrence(300, 5000, seed=12)
    counts = Cooccurrence(row.astype(np.int32), col.astype(np.int32), val,
                          np.array([f"w{i}" for i in range(300)]), np.ones(300, np.int64))
    options = dict(dim=8, epochs=2, progress=False)
    single, single_costs, _ = train_vectors(counts, "single", batch_size=1024, **options)
    model, costs, _ = train_vectors(counts, strategy, ranks=2,
                                    batch_size=512 if strategy == "ddp" else 1024, **options)
    np.testing.assert_allclose(costs, single_costs, rtol=1e-9)
    np.testing.assert_allclose(model.vectors(), single.vectors(), rtol=1e-7, atol=1e-10)


@pytest.mark.timeout(120)
def test_example_reads_a_text_file_and_external_evaluation_files(tmp_path):
    from minidist.data.synthetic_language import generate_corpus
    from minidist.examples import glove as example

    files = generate_corpus(seed=1, num_tokens=100_000).save(tmp_path)
    result = example.main(["--no-progress", "--corpus", str(files.corpus), "--epochs", "3",
                           "--dim", "16", "--window", "5", "--min-count", "2",
                           "--eval-analogies", str(files.analogies),
                           "--eval-similarity", str(files.similarity)])
    assert result["model"].dim == 16 and len(result["costs"]) == 3
    assert result["costs"][-1] < result["costs"][0]
    assert result["analogies"].coverage > 0.9 and result["similarity"].used > 0
