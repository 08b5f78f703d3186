"""GloVe's parallel strategies against one process, and the example end to end."""

from __future__ import annotations

import numpy as np
import pytest

import minidist as md
from minidist import glove
from minidist.data.cooccur import zipf_cooccurrence as random_cooccurrence


@pytest.fixture(scope="module")
def small():
    row, col, val = random_cooccurrence(40, 600, seed=1)
    return glove.Records.from_counts(row, col, val)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ranks, dim", [(2, 7), (3, 7), (4, 3)])
def test_sharded_dimensions_equal_one_process(small, ranks, dim):
    """Float64; only the dot products' summation order differs: rtol 1e-9 after 2 epochs.
    7 columns split unevenly over 2 and 3 ranks; 3 over 4 leave one rank no column."""
    start = glove.GloVe.create(40, dim, seed=4)
    expected = start.copy()
    costs = glove.train(expected, small, epochs=2, batch_size=100, seed=1)
    results = md.launch(glove.train_glove_sharded, world_size=ranks, backend="local",
                        timeout=50, args=(start, small, 2, 100, 1))
    model, sharded_costs = results[0]
    assert all(r[0] is None and r[1] == sharded_costs for r in results[1:])
    np.testing.assert_allclose(sharded_costs, costs, rtol=1e-12)
    for name, array in model.arrays().items():
        np.testing.assert_allclose(array, expected.arrays()[name], rtol=1e-9, atol=1e-13)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ranks", [2, 3])
def test_ddp_with_sparse_rows_equals_one_process_with_ranks_times_the_batch(small, ranks):
    """Float64; per-row sums are added in another order: rtol 1e-9 after 2 epochs."""
    start = glove.GloVe.create(40, 6, seed=8)
    expected = start.copy()
    costs = glove.train(expected, small, epochs=2, batch_size=ranks * 50, seed=3)
    results = md.launch(glove.train_glove_ddp, world_size=ranks, backend="local", timeout=50,
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


def tiny_corpus(path):
    """30 words, 300 lines of 12: a corpus that trains in well under a second."""
    rng = np.random.default_rng(0)
    path.write_text("".join(" ".join(f"w{i}" for i in rng.integers(0, 30, 12)) + "\n"
                            for _ in range(300)))
    return path


def test_example_gives_hogwild_the_run_timeout(monkeypatch):
    """Hogwild once ran under train_hogwild's default 300 s, the others under 3600 s."""
    from minidist.data.cooccur import Cooccurrence
    from minidist.examples import glove as example

    seen = {}

    def fake_hogwild(model, records, **options):
        seen.update(options)
        return glove.HogwildRun(costs=[1.0] * options["epochs"])

    monkeypatch.setattr(glove, "train_hogwild", fake_hogwild)
    row, col, val = random_cooccurrence(30, 200, seed=1)
    counts = Cooccurrence(row.astype(np.int32), col.astype(np.int32), val,
                          np.array([f"w{i}" for i in range(30)]), np.ones(30, np.int64))
    example.train_vectors(counts, "hogwild", dim=4, epochs=1, progress=False)
    assert seen.get("timeout", 300.0) >= 3600


@pytest.mark.parametrize("option, text, message", [
    ("--eval-analogies", ": s\na b c\n", "argument --eval-analogies: {path}:2: expected 4 words"),
    ("--eval-similarity", "a b 1\nc d high\n", "argument --eval-similarity: {path}:2: expected"),
    ("--eval-similarity", None, "argument --eval-similarity: no file or folder at '{path}'"),
])
def test_example_reads_evaluation_files_before_training(tmp_path, monkeypatch, capsys, option,
                                                        text, message):
    """A bad or missing file was once found after the whole training run, as a traceback."""
    from minidist.examples import glove as example

    def no_training(*args, **kwargs):
        raise AssertionError("trained before reading the evaluation files")

    monkeypatch.setattr(example, "train_vectors", no_training)
    path = tmp_path / "eval.txt"
    if text is not None:
        path.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        example.main(["--corpus", str(tiny_corpus(tmp_path / "c.txt")), "--min-count", "1",
                      "--no-progress", option, str(path)])
    assert exit_.value.code == 2
    assert message.format(path=path) in capsys.readouterr().err


def test_example_says_which_options_its_strategy_ignores(tmp_path, capsys):
    from minidist.examples import glove as example

    example.main(["--corpus", str(tiny_corpus(tmp_path / "c.txt")), "--min-count", "1",
                  "--no-progress", "--epochs", "1", "--dim", "4", "--strategy", "single",
                  "--threads", "2", "--ranks", "3"])
    out = capsys.readouterr().out
    assert "note: --threads is for --strategy records; single ignores it" in out
    assert "note: --ranks is for --strategy hogwild or sharded or ddp; single ignores it" in out


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_example_under_mpirun_trains_once_on_its_ranks(tmp_path):
    """Each rank once ran the whole example, nested mpiexec job and all: every line
    printed twice, --save written twice. Now the ranks are the job; rank 0 speaks."""
    from mpi_example import run_under_mpiexec

    from minidist.examples import glove as example

    corpus, saved = tiny_corpus(tmp_path / "c.txt"), tmp_path / "vectors.txt"
    options = ["--corpus", str(corpus), "--min-count", "1", "--epochs", "2", "--dim", "8",
               "--no-progress", "--strategy", "ddp"]
    job = run_under_mpiexec(2, "minidist.examples.glove", [*options, "--save", str(saved)],
                            timeout=120)
    assert job.returncode == 0, job.stdout + job.stderr
    out = job.stdout
    assert out.count("30 words, ") == 1 and out.count("vectors written to") == 1, out
    assert out.count("epoch   1  cost") == 1 and out.count("epoch   2  cost") == 1, out
    assert out.count("2 epochs in") == 1 and "strategy ddp on 2 ranks" in out, out
    # 2 ranks of 256 records each: the one-process run with batches of 512
    single = example.main([*options[:-2], "--strategy", "single", "--batch-size", "512"])
    costs = [float(line.split()[-1]) for line in out.splitlines() if line.startswith("epoch")]
    np.testing.assert_allclose(costs, single["costs"], atol=1e-5)
    words, vectors = glove.load_vectors(saved)
    assert words == single["words"] and vectors.shape == (30, 8)
