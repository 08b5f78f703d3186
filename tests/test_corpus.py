"""Corpora, vocabulary, the text8 download (faked, never the network) and the synthetic language."""

from __future__ import annotations

import io
import urllib.error
import zipfile
from collections import Counter

import numpy as np
import pytest

from minidist.data import corpus as corpus_module
from minidist.data.cooccur import count_cooccurrences
from minidist.data.corpus import (
    TokenPiece,
    download_text8,
    iter_file_pieces,
    iter_pieces,
    read_lines,
)
from minidist.data.synthetic_language import FAMILIES, generate_corpus
from minidist.data.vocab import Vocabulary, build_vocab
from minidist.models.glove_eval import analogy_accuracy, read_analogies, read_similarities
from minidist.util.download import DownloadError, file_digest

# ---------------------------------------------------------------- reading text


@pytest.mark.parametrize("max_chars", [1, 2, 5, 16, 1 << 20])
def test_file_pieces_rebuild_the_lines_whatever_the_piece_size(tmp_path, max_chars):
    text = "the  cat sat\n\non thé mat \nlongwordwithoutspaces x\nlast line no newline"
    path = tmp_path / "text.txt"
    path.write_text(text, encoding="utf-8")
    pieces = list(iter_file_pieces(path, max_chars))
    assert all(isinstance(piece, TokenPiece) for piece in pieces)
    assert list(read_lines(path)) == [line.split() for line in text.splitlines() if line.split()]
    lines, line = [], []
    for piece in pieces:
        line += piece.tokens
        if piece.ends_line:
            lines.append(line)
            line = []
    assert lines == [line.split() for line in text.splitlines()]
    assert line == [], "the last line ends with the file"


def test_folder_files_sorted_recursively_hidden_skipped(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "2.txt").write_text("two\n")
    (tmp_path / "a.txt").write_text("one")
    (tmp_path / ".hidden").write_text("secret\n")
    (tmp_path / "c.txt").write_text("three four\n")
    assert list(read_lines(tmp_path)) == [["one"], ["two"], ["three", "four"]]


def test_missing_corpus_and_untokenised_lines_are_refused(tmp_path):
    with pytest.raises(FileNotFoundError):
        list(iter_pieces(tmp_path / "nothing"))
    with pytest.raises(TypeError, match="token lists"):
        list(iter_pieces(["a line of text"]))


def test_a_file_that_is_not_utf8_is_a_value_error_naming_it_and_its_byte(tmp_path):
    """It once raised a bare UnicodeDecodeError that named neither the file nor where."""
    path = tmp_path / "latin1.txt"
    path.write_bytes("fine words\ncaf\u00e9\n".encode("utf-8") + b"na\xefve x\n")
    for max_chars in (3, 1 << 20):
        with pytest.raises(ValueError, match=r"latin1\.txt: not UTF-8 text \(.* at byte 19\)"):
            list(iter_file_pieces(path, max_chars))
    with pytest.raises(corpus_module.CorpusError, match="latin1.txt"):
        build_vocab(tmp_path, min_count=1)  # a folder holding it


# ---------------------------------------------------------------- vocabulary


def test_a_byte_order_mark_is_not_part_of_the_first_word(tmp_path):
    """A file saved by Notepad began with U+FEFF: the vocabulary held 'the' and '\ufeffthe'."""
    path = tmp_path / "bom.txt"
    path.write_bytes("the cat\nthe dog\n".encode("utf-8-sig"))
    words = [t for piece in iter_file_pieces(path) for t in piece.tokens]
    assert words == ["the", "cat", "the", "dog"]


def test_vocabulary_order_min_count_and_max_size():
    lines = [["b", "a", "c", "a", "d"], ["c", "b", "e", "a", "b", "c"], ["d", "z"]]
    counts = Counter(token for line in lines for token in line)  # a3 b3 c3 d2 e1 z1
    vocab = build_vocab(lines, min_count=2)
    assert vocab.words == ["a", "b", "c", "d"]  # by count, ties alphabetical
    assert vocab.counts.tolist() == [counts[w] for w in vocab.words]
    assert vocab.index == {"a": 0, "b": 1, "c": 2, "d": 3}
    assert build_vocab(lines, min_count=1).words == ["a", "b", "c", "d", "e", "z"]
    assert build_vocab(lines, min_count=1, max_size=2).words == ["a", "b"]
    assert build_vocab(lines, min_count=4).words == []
    np.testing.assert_array_equal(vocab.ids(["z", "d", "a", "q"]), [3, 0])


def test_vocabulary_save_load_and_file_source(tmp_path):
    lines = [["x", "y", "y"], ["z", "y", "x", "x", "x"]]
    (tmp_path / "corpus.txt").write_text("x y y\nz y x x x\n")
    vocab = build_vocab(lines, min_count=1)
    assert build_vocab(tmp_path / "corpus.txt", min_count=1) == vocab
    vocab.save(tmp_path / "vocab.txt")
    assert (tmp_path / "vocab.txt").read_text() == "x 4\ny 3\nz 1\n"
    assert Vocabulary.load(tmp_path / "vocab.txt") == vocab
    with pytest.raises(ValueError):
        build_vocab(lines, min_count=0)


# ---------------------------------------------------------------- text8, faked


@pytest.fixture
def small_text8(monkeypatch):
    """text8 shrunk to 1000 bytes, zipped in memory, and an opener that counts its calls."""
    monkeypatch.setattr(corpus_module, "TEXT8_SIZE", 1000)
    content = (b"anarchism originated as a term " * 40)[:1000]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("text8", content)
    calls = []

    def opener(url):
        calls.append(url)
        return io.BytesIO(buffer.getvalue())

    return content, opener, calls, buffer.getvalue()


def test_text8_download_caches_and_records_a_checksum(tmp_path, small_text8):
    content, opener, calls, _ = small_text8
    path = download_text8(tmp_path, opener=opener)
    assert path == tmp_path / "text8" and path.read_bytes() == content
    assert (tmp_path / "text8.sha256").read_text().strip() == file_digest(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["text8", "text8.sha256"]
    assert download_text8(tmp_path, opener=opener) == path
    assert len(calls) == 1, "a verified cached copy is not downloaded again"
    path.write_bytes(content[::-1])  # same size, other bytes: the recorded digest catches it
    download_text8(tmp_path, opener=opener)
    assert len(calls) == 2 and path.read_bytes() == content


def test_text8_through_a_file_url(tmp_path, small_text8):
    _, _, _, zipped = small_text8
    (tmp_path / "mirror").mkdir()
    (tmp_path / "mirror" / "text8.zip").write_bytes(zipped)
    url = (tmp_path / "mirror" / "text8.zip").as_uri()
    path = download_text8(tmp_path / "cache", url=url)
    assert list(read_lines(path))[0][:3] == ["anarchism", "originated", "as"]


def test_text8_wrong_size_or_no_network_leaves_nothing(tmp_path, small_text8, monkeypatch):
    _, opener, _, _ = small_text8
    monkeypatch.setattr(corpus_module, "TEXT8_SIZE", 999)
    with pytest.raises(DownloadError, match="999"):
        download_text8(tmp_path, opener=opener)
    assert list(tmp_path.iterdir()) == []

    def offline(url):
        raise urllib.error.URLError("no network")

    with pytest.raises(DownloadError, match="by hand"):
        download_text8(tmp_path, opener=offline)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- synthetic language


def test_synthetic_corpus_is_deterministic_by_seed():
    first = generate_corpus(seed=3, num_tokens=30_000)
    again = generate_corpus(seed=3, num_tokens=30_000)
    other = generate_corpus(seed=4, num_tokens=30_000)
    assert first.lines == again.lines and first.similarities == again.similarities
    assert first.lines != other.lines
    assert abs(first.num_tokens - 30_000) < 0.05 * 30_000
    assert all(line for line in first.lines)


def test_synthetic_words_do_not_collide():
    words = [w for _, m0, m1, pairs in FAMILIES
             for w in (m0 + " " + m1).split() + pairs.replace(":", " ").split()]
    assert len(words) == len(set(words))


def test_synthetic_files_parse_and_cover_the_vocabulary(tmp_path):
    corpus = generate_corpus(seed=0, num_tokens=200_000)
    files = corpus.save(tmp_path)
    assert list(read_lines(files.corpus)) == corpus.lines
    sections = read_analogies(files.analogies)
    assert sections == corpus.analogies
    assert {"capital-common-countries", "family", "gram8-plural"} <= set(sections)
    for name, questions in sections.items():
        pairs = len(corpus.pairs[name])
        assert len(questions) == pairs * (pairs - 1)
    vocab = build_vocab(corpus.lines, min_count=5)
    similarities = read_similarities(files.similarity)
    assert len(similarities) == 200
    assert all(a in vocab and b in vocab and 0 <= s <= 10 for a, b, s in similarities)
    report = analogy_accuracy(np.eye(len(vocab)), vocab.words, files.analogies)
    assert report.coverage == 1.0


def test_synthetic_markers_sit_around_their_forms():
    """Each form meets its own side's markers 4 times as often as the other side's (purity 0.8)."""
    corpus = generate_corpus(seed=0, num_tokens=200_000)
    vocab = build_vocab(corpus.lines, min_count=5)
    counts = count_cooccurrences(corpus.lines, vocab, window=10).to_dense()
    for name, markers0, markers1, _ in FAMILIES:
        sides = [[vocab.index[m] for m in markers.split()] for markers in (markers0, markers1)]
        own = other = 0.0
        for pair in corpus.pairs[name]:
            for form, word in enumerate(pair):
                near_own = counts[vocab.index[word], sides[form]].sum()
                near_other = counts[vocab.index[word], sides[1 - form]].sum()
                assert near_own > near_other, (word, near_own, near_other)
                own, other = own + near_own, other + near_other
        assert 3 < own / other < 5, name


@pytest.mark.timeout(60)
def test_synthetic_analogies_are_answerable_from_the_counts(tmp_path):
    """A rank-50 factorisation of log(1 + X) already answers the planted analogies.

    (GloVe's own accuracy on this corpus is tested with the trainer.)
    """
    corpus = generate_corpus(seed=0, num_tokens=1_000_000)
    vocab = build_vocab(corpus.lines, min_count=5)
    logs = np.log1p(count_cooccurrences(corpus.lines, vocab, window=10).to_dense())
    left, singular, _ = np.linalg.svd(logs)
    vectors = left[:, :50] * np.sqrt(singular[:50])
    report = analogy_accuracy(vectors, vocab.words, corpus.write_analogies(tmp_path / "a.txt"))
    assert report.coverage == 1.0
    assert report.accuracy >= 0.9, str(report)
