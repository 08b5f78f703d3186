"""Co-occurrence counting: equal to a brute-force count of glove's cooccur.c rules.

The brute force below is a direct transcription of the reference loop: drop
out-of-vocabulary tokens, then for every token look back ``window`` tokens
in the same line and add 1/distance to (left, right) and, when symmetric,
to (right, left).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from minidist.data.cooccur import Cooccurrence, count_cooccurrences, load_cooccurrences, main
from minidist.data.vocab import build_vocab


def brute_force(lines, vocab, window, symmetric=True, distance_weighting=True):
    counts = defaultdict(float)
    for line in lines:
        ids = [vocab.index[token] for token in line if token in vocab.index]
        for right in range(len(ids)):
            for left in range(max(0, right - window), right):
                weight = 1.0 / (right - left) if distance_weighting else 1.0
                counts[ids[left], ids[right]] += weight
                if symmetric:
                    counts[ids[right], ids[left]] += weight
    return counts


def as_dict(result: Cooccurrence) -> dict[tuple[int, int], float]:
    entries = zip(result.row, result.col, result.val, strict=True)
    return {(int(i), int(j)): float(v) for i, j, v in entries}


def assert_matches(result: Cooccurrence, expected: dict) -> None:
    found = as_dict(result)
    assert set(found) == set(expected)
    for key, value in expected.items():
        assert found[key] == pytest.approx(value, rel=1e-12)


def zipf_lines(rng: random.Random, num_lines: int, max_len: int, vocab_size: int):
    """Lines of Zipf-distributed words w0, w1, ... (some rare enough to fall below min_count)."""
    return [[f"w{min(int(rng.paretovariate(1.0)), vocab_size)}"
             for _ in range(rng.randint(0, max_len))] for _ in range(num_lines)]


def test_hand_counted_example():
    lines = [["a", "b", "c", "a"], ["c", "b"]]
    vocab = build_vocab(lines, min_count=1)  # a:2, b:2, c:2 -> ids a=0, b=1, c=2
    counts = count_cooccurrences(lines, vocab, window=2).to_dense()
    expected = np.zeros((3, 3))
    # line 1: (a,b)@1 (b,c)@1 (c,a)@1 (a,c)@2 (b,a)@2; line 2: (c,b)@1
    for left, right, weight in [(0, 1, 1), (1, 2, 1), (2, 0, 1), (0, 2, .5), (1, 0, .5), (2, 1, 1)]:
        expected[left, right] += weight
        expected[right, left] += weight
    np.testing.assert_allclose(counts, expected)


def test_unknown_words_are_dropped_before_windowing():
    lines = [["a", "zz", "zz", "b"]] + [["a", "b"]] * 2
    vocab = build_vocab(lines, min_count=3)  # zz occurs twice: out of vocabulary
    assert "zz" not in vocab
    counts = count_cooccurrences(lines, vocab, window=1)
    a, b = vocab.index["a"], vocab.index["b"]
    assert as_dict(counts) == {(a, b): 3.0, (b, a): 3.0}  # a and b became neighbours


def test_a_line_ends_the_window():
    lines = [["a"], ["b"]]
    counts = count_cooccurrences(lines, build_vocab(lines, min_count=1), window=10)
    assert counts.nnz == 0


def test_a_word_next_to_itself_counts_twice_when_symmetric():
    lines = [["a", "a"]]
    vocab = build_vocab(lines, min_count=1)
    assert as_dict(count_cooccurrences(lines, vocab, window=1)) == {(0, 0): 2.0}
    assert as_dict(count_cooccurrences(lines, vocab, window=1, symmetric=False)) == {(0, 0): 1.0}


@pytest.mark.parametrize("seed", range(12))
def test_equals_brute_force_on_random_texts(seed):
    rng = random.Random(seed)
    lines = zipf_lines(rng, rng.randint(1, 25), 40, rng.randint(2, 40))
    window, min_count = rng.randint(1, 7), rng.randint(1, 4)
    symmetric, weighting = seed % 2 == 0, seed % 3 != 0
    vocab = build_vocab(lines, min_count=min_count)
    result = count_cooccurrences(lines, vocab, window=window, symmetric=symmetric,
                                 distance_weighting=weighting, chunk_tokens=rng.randint(1, 60))
    assert_matches(result, brute_force(lines, vocab, window, symmetric, weighting))
    keys = result.row.astype(np.int64) * len(vocab) + result.col
    if symmetric:  # the upper triangle sorted, then its mirror image
        upper = int(np.sum(result.row <= result.col))
        assert np.all(result.row[:upper] <= result.col[:upper])
        keys = keys[:upper]
        np.testing.assert_array_equal(result.row[upper:], result.col[:upper][result.row[:upper]
                                                                           != result.col[:upper]])
    assert np.all(np.diff(keys) > 0), "entries must come sorted by (row, col), no duplicates"


@pytest.mark.parametrize("tokens", [1, 2, 3, 5])
@pytest.mark.parametrize("window", [2, 4, 7, 10, 11])
def test_a_window_longer_than_the_text(tokens, window):
    """A chunk with fewer words than the window (a small corpus and glove's default window
    10) once crashed when the window was between one and two chunk lengths."""
    lines = [[f"w{t}" for t in range(tokens)], ["w0"]]
    vocab = build_vocab(lines, min_count=1)
    assert_matches(count_cooccurrences(lines, vocab, window=window),
                   brute_force(lines, vocab, window))


def test_chunks_and_pieces_do_not_change_the_counts(tmp_path):
    """One long line (text8 is one line) read from a file, counted chunk by chunk."""
    rng = random.Random(7)
    line = [token for part in zipf_lines(rng, 60, 50, 80) for token in part]
    path = tmp_path / "one_line.txt"
    path.write_text(" ".join(line))  # no final newline either
    vocab = build_vocab([line], min_count=2)
    expected = brute_force([line], vocab, window=10)
    for chunk_tokens in (3, 97, 1 << 20):
        assert_matches(count_cooccurrences(path, vocab, window=10, chunk_tokens=chunk_tokens),
                       expected)


def test_folder_of_files_is_one_document_per_line(tmp_path):
    (tmp_path / "b.txt").write_text("x y\nz x y")
    (tmp_path / "a.txt").write_text("y z x\n\nx x\n")
    lines = [["y", "z", "x"], [], ["x", "x"], ["x", "y"], ["z", "x", "y"]]
    vocab = build_vocab(lines, min_count=1)
    assert build_vocab(tmp_path, min_count=1) == vocab
    assert_matches(count_cooccurrences(tmp_path, vocab, window=3),
                   brute_force(lines, vocab, window=3))


def test_npz_round_trip_and_format(tmp_path):
    lines = zipf_lines(random.Random(3), 30, 30, 25)
    counts = count_cooccurrences(lines, build_vocab(lines, min_count=2), window=5)
    path = tmp_path / "counts.npz"
    counts.save(path)
    with np.load(path, allow_pickle=False) as raw:
        assert sorted(raw.files) == ["col", "counts", "row", "val", "words"]
        assert raw["row"].dtype == np.int32 and raw["col"].dtype == np.int32
        assert raw["val"].dtype == np.float64 and raw["counts"].dtype == np.int64
        assert raw["words"].dtype.kind == "U"
    loaded = load_cooccurrences(path)
    for name in ("row", "col", "val", "words", "counts"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(counts, name))
    assert loaded.vocab.words == list(counts.words)
    assert np.all(np.diff(loaded.counts) <= 0), "id 0 is the most frequent word"


def test_cli_on_a_text_file(tmp_path):
    lines = zipf_lines(random.Random(5), 40, 30, 30)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(" ".join(line) + "\n" for line in lines))
    out = tmp_path / "out.npz"
    assert main([str(corpus), str(out), "--min-count", "2", "--window", "4"]) == 0
    vocab = build_vocab(lines, min_count=2)
    assert_matches(load_cooccurrences(out), brute_force(lines, vocab, window=4))
    main([str(corpus), str(tmp_path / "left.npz"), "--min-count", "2", "--window", "4",
          "--asymmetric", "--no-distance-weighting"])
    assert_matches(load_cooccurrences(tmp_path / "left.npz"),
                   brute_force(lines, vocab, 4, symmetric=False, distance_weighting=False))


@pytest.mark.timeout(120)
def test_cli_as_a_module_with_the_synthetic_corpus(tmp_path):
    out = tmp_path / "synthetic.npz"
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "minidist.data.cooccur", "synthetic", str(out),
                           "--num-tokens", "50000", "--window", "5"],
                          capture_output=True, text=True, timeout=100, env=env,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert "non-zeros" in done.stderr and "Warning" not in done.stderr
    from minidist.data.synthetic_language import generate_corpus

    lines = generate_corpus(seed=0, num_tokens=50_000).lines
    expected = count_cooccurrences(lines, build_vocab(lines, min_count=5), window=5)
    loaded = load_cooccurrences(out)
    np.testing.assert_array_equal(loaded.words, expected.words)
    np.testing.assert_array_equal(loaded.row, expected.row)
    np.testing.assert_allclose(loaded.val, expected.val, rtol=1e-12)


def test_bad_window_is_refused():
    with pytest.raises(ValueError, match="window"):
        count_cooccurrences([["a"]], build_vocab([["a"]], min_count=1), window=0)



@pytest.mark.parametrize("options, text, message", [
    (["--window", "0"], "a b\n", "argument --window: wants an integer >= 1, got '0'"),
    (["--min-count", "0"], "a b\n", "argument --min-count: wants an integer >= 1, got '0'"),
    (["--max-vocab", "0"], "a b\n", "argument --max-vocab: wants an integer >= 1, got '0'"),
    ([], "", "--min-count 5: no word of the corpus occurs that often"),
    (["--min-count", "3"], "a b a b\n", "--min-count 3: no word of the corpus occurs that"),
    (["--min-count", "1"], b"ok\n\xff\n", "corpus.txt: not UTF-8 text (invalid start byte at "
                                          "byte 3)"),
])
def test_cli_refuses_what_it_cannot_count_and_writes_nothing(tmp_path, capsys, options, text,
                                                            message):
    """An empty corpus or vocabulary once left an empty .npz and exit status 0; a file not
    UTF-8, a traceback; --window 0, a traceback after reading the corpus."""
    corpus, out = tmp_path / "corpus.txt", tmp_path / "out.npz"
    if isinstance(text, bytes):
        corpus.write_bytes(text)
    else:
        corpus.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        main([str(corpus), str(out), *options])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
