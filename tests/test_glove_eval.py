"""Evaluation of word vectors on hand-made vectors whose answers are known."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from minidist.glove import load_vectors
from minidist.glove.evaluate import (
    analogy_accuracy,
    answer_analogies,
    average_ranks,
    nearest_neighbours,
    read_analogies,
    read_similarities,
    similarity_spearman,
    spearman,
    unit_rows,
)


def planted_vectors(rng: np.random.Generator):
    """Words ``concept_form`` with vector = concept one-hot + form offset + small noise."""
    concepts, forms = ["paris", "rome", "tokyo", "lima"], ["city", "land"]
    words, rows = [], []
    for (c, concept), (f, form) in itertools.product(enumerate(concepts), enumerate(forms)):
        vector = np.zeros(8)
        vector[c], vector[4 + f] = 1.0, 0.8
        words.append(f"{concept}_{form}")
        rows.append(vector + 0.01 * rng.standard_normal(8))
    return words, np.array(rows)


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_nearest_neighbours_order_and_self_excluded():
    vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.7, 0.7], [-1.0, 0.0]])
    words = ["a", "b", "c", "d", "e"]
    found = nearest_neighbours(vectors, words, "a", k=3)
    assert [w for w, _ in found] == ["b", "d", "c"]
    assert found[0][1] == pytest.approx(0.9 / np.hypot(0.9, 0.1))
    assert len(nearest_neighbours(vectors, words, "a")) == 4
    with pytest.raises(KeyError):
        nearest_neighbours(vectors, words, "zzz")


def test_planted_analogies_all_correct_with_sections_and_coverage(tmp_path):
    words, vectors = planted_vectors(np.random.default_rng(0))
    path = write(tmp_path / "questions.txt",
                 ": capital-common-countries\n"
                 "Paris_City Paris_Land Rome_City Rome_Land\n"   # case-insensitive match
                 "rome_city rome_land tokyo_city tokyo_land\n"
                 "lima_land lima_city paris_land paris_city\n"
                 "rome_city rome_land oslo_city oslo_land\n"     # oslo unknown: skipped
                 ": gram-demo\n"
                 "paris_city rome_city paris_land rome_land\n"
                 "tokyo_land lima_land tokyo_city lima_city\n")
    report = analogy_accuracy(vectors, words, path)
    sections = {s.name: s for s in report.sections}
    assert sections["capital-common-countries"].correct == 3
    assert sections["capital-common-countries"].asked == 3
    assert sections["capital-common-countries"].total == 4
    assert (report.semantic.asked, report.syntactic.asked) == (3, 2)
    assert report.accuracy == 1.0 and report.coverage == pytest.approx(5 / 6)
    assert "gram-demo" in str(report)
    strict = analogy_accuracy(vectors, words, path, case_insensitive=False)
    assert strict.overall.asked == 4


def test_question_words_are_never_the_answer():
    # b - a + c lands exactly on b (a == c), but b is a question word: the next best wins.
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [0.1, 0.9], [-1.0, 0.0]])
    answer = answer_analogies(unit_rows(vectors), np.array([[0, 1, 0]]))
    assert answer.tolist() == [2]


def test_other_spellings_of_a_word_are_never_candidates():
    """Case-insensitive, only the spelling each lower-cased word's row is (its lowest id)
    can answer, as in gensim: 'Greece', lying on b = 'greece', is no answer, and 'iraq',
    another spelling of the answer 'Iraq', does not make the question wrong."""
    e = np.eye(4)
    questions = {"capital": [("Athens", "Greece", "Baghdad", "Iraq")]}
    words = ["greece", "athens", "iraq", "baghdad", "Greece", "Iraq"]
    vectors = np.array([e[1], e[0], e[2] + 0.1 * e[1] + e[3], e[2], e[1] + 0.01 * e[3],
                        e[2] - 0.5 * e[3]])
    assert analogy_accuracy(vectors, words, questions).overall.correct == 1
    words = ["greece", "athens", "Iraq", "baghdad", "iraq"]  # 'iraq' the nearest, not chosen
    vectors = np.array([e[1], e[0], e[2] + e[1] + e[3], e[2], e[2] + e[1]])
    assert analogy_accuracy(vectors, words, questions).overall.correct == 1
    strict = {"capital": [("athens", "greece", "baghdad", "Iraq")]}
    assert analogy_accuracy(vectors, words, strict, case_insensitive=False).overall.correct == 0


def test_answers_equal_a_question_by_question_loop():
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((30, 6))
    questions = rng.integers(0, 30, (50, 3))
    unit = unit_rows(vectors)
    expected = []
    for a, b, c in questions:
        target = unit[b] - unit[a] + unit[c]
        scores = [(-np.inf if w in (a, b, c) else float(unit[w] @ target)) for w in range(30)]
        expected.append(int(np.argmax(scores)))
    assert answer_analogies(unit, questions, batch_size=7).tolist() == expected


def test_analogy_file_errors(tmp_path):
    with pytest.raises(ValueError, match=":2"):
        read_analogies(write(tmp_path / "bad.txt", ": s\na b c\n"))
    with pytest.raises(ValueError, match="section"):
        read_analogies(write(tmp_path / "nosection.txt", "a b c d\n"))


def test_average_ranks_and_spearman_against_formulas():
    np.testing.assert_array_equal(average_ranks(np.array([10, 30, 20, 20])), [1, 4, 2.5, 2.5])
    rng = np.random.default_rng(2)
    x, y = rng.random(40), rng.random(40)
    d = average_ranks(x) - average_ranks(y)
    assert spearman(x, y) == pytest.approx(1 - 6 * np.sum(d * d) / (40 * (40 ** 2 - 1)))
    assert spearman(x, np.exp(3 * x)) == pytest.approx(1.0)  # any increasing map
    assert spearman(x, -x) == pytest.approx(-1.0)
    # with ties: Pearson correlation of the average ranks
    a, b = np.array([1, 2, 2, 3, 5.0]), np.array([2, 1, 4, 4, 9.0])
    assert spearman(a, b) == pytest.approx(np.corrcoef(average_ranks(a), average_ranks(b))[0, 1])


def test_similarity_spearman_with_coverage(tmp_path):
    angles = np.array([0.0, 0.2, 0.5, 0.9, 1.4])
    vectors = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    words = ["w0", "w1", "w2", "w3", "w4"]
    # cosine with w0 falls as the angle grows: scores that fall too give rho = 1
    path = write(tmp_path / "sim.txt", "# word1 word2 score\nW0 w1 9.0\nw0 w2 7.5\n"
                 "w0\tw3 3\nw0 w4 1.0\nw0 unknown 5\n\n")
    report = similarity_spearman(vectors, words, path)
    assert report.rho == pytest.approx(1.0)
    assert (report.used, report.total) == (4, 5) and report.coverage == 0.8
    reversed_scores = write(tmp_path / "rev.txt", "w0 w1 1\nw0 w2 2\nw0 w3 3\nw0 w4 4\n")
    assert similarity_spearman(vectors, words, reversed_scores).rho == pytest.approx(-1.0)
    with pytest.raises(ValueError, match=":1"):
        similarity_spearman(vectors, words, write(tmp_path / "bad.txt", "w0 w1 high\n"))


@pytest.mark.parametrize("vectors, words", [
    (np.ones((4, 3)), ["a", "b", "c", "d", "e"]),    # a word without a vector
    (np.ones((10, 3)), ["a", "b", "c", "d", "e"]),   # vectors without words
    (np.ones(5), ["a", "b", "c", "d", "e"]),         # not a matrix
])
def test_vectors_must_be_a_matrix_with_a_row_per_word(tmp_path, vectors, words):
    """A mismatch once scored the wrong words without a word said."""
    analogies = write(tmp_path / "an.txt", ": s\na b c d\nb c d e\n")
    similarity = write(tmp_path / "sim.txt", "a b 1\nc d 2\nd e 3\n")
    for evaluate in (lambda: analogy_accuracy(vectors, words, analogies),
                     lambda: similarity_spearman(vectors, words, similarity),
                     lambda: nearest_neighbours(vectors, words, "a")):
        with pytest.raises(ValueError, match="vectors"):
            evaluate()


def test_evaluation_files_already_read_and_files_not_utf8(tmp_path):
    words, vectors = planted_vectors(np.random.default_rng(0))
    path = write(tmp_path / "q.txt", ": s\nparis_city paris_land rome_city rome_land\n")
    read = read_analogies(path)
    assert analogy_accuracy(vectors, words, read).accuracy == 1.0
    pairs = [("paris_city", "paris_land", 2.0), ("paris_city", "rome_land", 1.0),
             ("paris_city", "rome_city", 1.5)]
    assert similarity_spearman(vectors, words, pairs).used == 3
    (tmp_path / "bad.txt").write_bytes(b": s\n\xff\n")
    with pytest.raises(ValueError, match=r"bad\.txt: not UTF-8 text"):
        read_analogies(tmp_path / "bad.txt")


def test_a_utf8_bom_is_no_part_of_the_first_word(tmp_path):
    """Windows editors start UTF-8 files with a BOM; the readers drop it, as the corpus
    reader does ('\\ufeffking' was a word, and an analogy file failed on its first line)."""
    def bom(name, text):
        (tmp_path / name).write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
        return tmp_path / name

    words, _ = load_vectors(bom("v.txt", "king 1 2\nqueen 3 4\n"))
    assert words == ["king", "queen"]
    assert read_analogies(bom("q.txt", ": capital\nathens greece baghdad iraq\n")) == {
        "capital": [("athens", "greece", "baghdad", "iraq")]}
    assert read_similarities(bom("s.txt", "king queen 8.5\n"))[0] == ("king", "queen", 8.5)
    (tmp_path / "bad.txt").write_bytes(b"\xef\xbb\xbf: s\n\xff\n")  # counted from the BOM
    with pytest.raises(ValueError, match=r"bad\.txt: not UTF-8 text \(.* at byte 7\)"):
        read_analogies(tmp_path / "bad.txt")
