"""Judging word vectors: nearest neighbours, analogies, similarity rank correlation.

A loss going down says the model fits the co-occurrence counts; whether the
vectors are *useful* is measured, as in the GloVe paper, by three tests
that work on any word -> vector matrix (row i is the vector of ``words[i]``):

- **Nearest neighbours**: the words of highest cosine similarity to a
  word. A quick look: neighbours of "paris" should be other capitals.
- **Analogies** (Mikolov et al. 2013), "a is to b as c is to ?": the answer
  is the word whose unit vector is closest to ``b - a + c`` by cosine, the
  three question words excluded (*3CosAdd*). Questions come in the Google
  format: ``: section`` lines, then ``a b c d`` lines. Sections whose name
  starts with ``gram`` are *syntactic* (plural, past tense...), the others
  *semantic* (capitals, family). A question with a word missing from the
  vocabulary cannot be asked: it is skipped and counted out of the
  *coverage*; accuracy is over the questions asked.
- **Similarity**: people (or, for a synthetic corpus, its construction)
  scored word pairs; the Spearman rank correlation between those scores
  and the cosines says whether the vectors order pairs the same way.
  Ties get the average of their ranks.

Words are matched case-insensitively by default (the Google file writes
"Athens Greece", text8 writes "athens"); the most frequent (lowest id)
spelling wins, and is the only one an analogy may answer, as in gensim:
"Greece" is no answer when "greece" is a question word, and "iraq" does
not beat "Iraq" when "Iraq" is the word's row.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from minidist.data.corpus import first_bad_byte

Question = tuple[str, str, str, str]  # a is to b as c is to d

def checked_vectors(vectors: np.ndarray, words: Sequence[str]) -> np.ndarray:
    """``vectors`` as float64, after checking it is a (V, d) matrix with a row per word
    (a mismatch would silently score the wrong words)."""
    vectors = np.asarray(vectors, dtype=np.float64)
    if vectors.ndim != 2:
        raise ValueError(f"vectors must be a (words, dimensions) matrix, got shape "
                         f"{vectors.shape}")
    if len(vectors) != len(words):
        raise ValueError(f"{len(vectors)} vectors but {len(words)} words: row i is the "
                         "vector of words[i]")
    return vectors


def read_text(path: str | os.PathLike) -> str:
    """A UTF-8 file's text, without a leading BOM; a decoding error names the file and
    its first bad byte (counted with the BOM, as the corpus reader counts)."""
    try:
        return Path(path).read_text(encoding="utf-8-sig")  # -sig: a leading BOM is dropped
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text ({err.reason} at byte "
                         f"{first_bad_byte(path)})") from None


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Each row divided by its length (zero rows stay zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


def word_index(words: Sequence[str], case_insensitive: bool = True) -> dict[str, int]:
    """word -> row; lower-cased keys when ``case_insensitive`` (the lowest id wins)."""
    index: dict[str, int] = {}
    for i, word in enumerate(words):
        index.setdefault(str(word).lower() if case_insensitive else str(word), i)
    return index


def nearest_neighbours(vectors: np.ndarray, words: Sequence[str], query: str,
                       k: int = 10) -> list[tuple[str, float]]:
    """The ``k`` words of highest cosine similarity to ``query`` (itself excluded).

    Cost: O(V·d) for V words of dimension d.
    """
    vectors = checked_vectors(vectors, words)
    index = word_index(words, case_insensitive=False)
    if query not in index:
        raise KeyError(f"{query!r} is not in the vocabulary")
    unit = unit_rows(vectors)
    scores = unit @ unit[index[query]]
    scores[index[query]] = -np.inf
    best = np.argsort(-scores, kind="stable")[:min(k, len(scores) - 1)]
    return [(str(words[i]), float(scores[i])) for i in best]


def read_analogies(path: str | os.PathLike) -> dict[str, list[Question]]:
    """The sections of a Google-format analogy file, each a list of ``(a, b, c, d)``."""
    sections: dict[str, list[Question]] = {}
    current = None
    for number, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith(":"):
            current = line[1:].strip()
            sections.setdefault(current, [])
            continue
        question = line.split()
        if len(question) != 4 or current is None:
            raise ValueError(f"{path}:{number}: expected 4 words after a ': section' line, "
                             f"got {line!r}")
        sections[current].append((question[0], question[1], question[2], question[3]))
    return sections


@dataclass
class AnalogyScore:
    """Correct answers out of the questions asked, out of all the questions of a section."""

    name: str
    correct: int = 0
    asked: int = 0
    total: int = 0

    @property
    def accuracy(self) -> float:
        return self.correct / self.asked if self.asked else 0.0

    @property
    def coverage(self) -> float:
        return self.asked / self.total if self.total else 0.0

    def add(self, other: AnalogyScore) -> None:
        self.correct += other.correct
        self.asked += other.asked
        self.total += other.total


@dataclass
class AnalogyReport:
    """Per-section scores and the semantic, syntactic and overall totals."""

    sections: list[AnalogyScore]
    semantic: AnalogyScore = field(default_factory=lambda: AnalogyScore("semantic"))
    syntactic: AnalogyScore = field(default_factory=lambda: AnalogyScore("syntactic"))
    overall: AnalogyScore = field(default_factory=lambda: AnalogyScore("overall"))

    def __post_init__(self) -> None:
        for section in self.sections:
            kind = self.syntactic if section.name.startswith("gram") else self.semantic
            kind.add(section)
            self.overall.add(section)

    @property
    def accuracy(self) -> float:
        return self.overall.accuracy

    @property
    def coverage(self) -> float:
        return self.overall.coverage

    def __str__(self) -> str:
        rows = [f"{'section':<28} {'accuracy':>8} {'correct':>8} {'asked':>7} {'total':>7}"]
        for score in [*self.sections, self.semantic, self.syntactic, self.overall]:
            rows.append(f"{score.name:<28} {100 * score.accuracy:7.1f}% {score.correct:8d} "
                        f"{score.asked:7d} {score.total:7d}")
        return "\n".join(rows)


def answer_analogies(unit: np.ndarray, questions: np.ndarray,
                     batch_size: int = 1024) -> np.ndarray:
    """The 3CosAdd answer (a row id) to each question ``(a, b, c)`` of id triples.

    Cost: O(Q·V·d) for Q questions, in batches of ``batch_size`` (memory O(batch·V)).
    """
    answers = np.empty(len(questions), dtype=np.int64)
    for start in range(0, len(questions), batch_size):
        a, b, c = questions[start:start + batch_size].T
        scores = (unit[b] - unit[a] + unit[c]) @ unit.T
        rows = np.arange(len(a))
        for excluded in (a, b, c):  # the answer may not be a question word
            scores[rows, excluded] = -np.inf
        answers[start:start + batch_size] = np.argmax(scores, axis=1)
    return answers


def analogy_accuracy(vectors: np.ndarray, words: Sequence[str],
                     analogy_file: str | os.PathLike | Mapping[str, list[Question]],
                     case_insensitive: bool = True) -> AnalogyReport:
    """3CosAdd accuracy on a Google-format analogy file, per section and in total.

    ``analogy_file`` may also be its sections, already read (``read_analogies``).
    The candidates are the rows ``word_index`` chose, one per (lower-cased) word."""
    index = word_index(words, case_insensitive)
    chosen = np.fromiter(index.values(), dtype=np.int64, count=len(index))  # increasing
    unit = unit_rows(checked_vectors(vectors, words))[chosen]
    index = {word: row for row, word in enumerate(index)}  # rows of ``unit``
    sections = (analogy_file if isinstance(analogy_file, Mapping)
                else read_analogies(analogy_file))
    scores = []
    for name, questions in sections.items():
        score = AnalogyScore(name, total=len(questions))
        keyed = [[w.lower() for w in q] if case_insensitive else list(q) for q in questions]
        ids = np.array([[index[w] for w in q] for q in keyed if all(w in index for w in q)],
                       dtype=np.int64).reshape(-1, 4)
        score.asked = len(ids)
        if len(ids):
            score.correct = int(np.sum(answer_analogies(unit, ids[:, :3]) == ids[:, 3]))
        scores.append(score)
    return AnalogyReport(scores)


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``values``; tied values share the mean of their ranks."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    first_rank = np.cumsum(counts) - counts + 1
    return (first_rank + (counts - 1) / 2.0)[inverse]


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation: the Pearson correlation of the average ranks."""
    rx, ry = average_ranks(np.asarray(x)), average_ranks(np.asarray(y))
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = np.sqrt(np.sum(rx * rx) * np.sum(ry * ry))
    return float(np.sum(rx * ry) / denominator) if denominator > 0 else float("nan")


@dataclass
class SimilarityReport:
    """Spearman's rho over the pairs whose two words are known, and how many those are."""

    rho: float
    used: int
    total: int

    @property
    def coverage(self) -> float:
        return self.used / self.total if self.total else 0.0

    def __str__(self) -> str:
        return f"Spearman rho {self.rho:.3f} on {self.used}/{self.total} pairs"


def read_similarities(path: str | os.PathLike) -> list[tuple[str, str, float]]:
    """``(word1, word2, score)`` from ``word1 word2 score`` lines (``#`` starts a comment)."""
    pairs = []
    for number, line in enumerate(read_text(path).splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        try:
            pairs.append((fields[0], fields[1], float(fields[2])))
        except (IndexError, ValueError):
            raise ValueError(f"{path}:{number}: expected 'word1 word2 score', "
                             f"got {line!r}") from None
    return pairs


def similarity_spearman(vectors: np.ndarray, words: Sequence[str],
                        sim_file: str | os.PathLike | list[tuple[str, str, float]],
                        case_insensitive: bool = True) -> SimilarityReport:
    """Spearman correlation between a file's scores and the cosines of the word pairs.

    ``sim_file`` may also be its pairs, already read (``read_similarities``)."""
    unit = unit_rows(checked_vectors(vectors, words))
    index = word_index(words, case_insensitive)
    pairs = sim_file if isinstance(sim_file, list) else read_similarities(sim_file)
    known = [(index[a], index[b], score) for a, b, score in
             (((a.lower(), b.lower(), s) if case_insensitive else (a, b, s))
              for a, b, s in pairs) if a in index and b in index]
    if len(known) < 2:
        return SimilarityReport(float("nan"), len(known), len(pairs))
    a, b, human = (np.array(column) for column in zip(*known, strict=True))
    cosines = np.sum(unit[a.astype(np.int64)] * unit[b.astype(np.int64)], axis=1)
    return SimilarityReport(spearman(cosines, human), len(known), len(pairs))
