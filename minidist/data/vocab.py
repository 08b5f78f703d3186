"""Vocabulary: which words a model learns, and the integer id of each.

A word-vector model keeps one row of parameters per word, so before
training we fix the list of words and number them. Following the
reference GloVe tools (``vocab_count.c``):

1. count every token of the corpus;
2. drop the words seen fewer than ``min_count`` times: a word seen twice
   gives too little evidence to place its vector, and rare words are most
   of the distinct words of any text (Zipf's law), so dropping them
   shrinks the tables a lot and the corpus only a little;
3. sort by frequency, most frequent first, ties in alphabetical order so
   that the numbering is the same on every machine and every run;
4. keep at most ``max_size`` words.

Word id 0 is then the most frequent word. Every later stage (co-occurrence
counts, the GloVe tables, the evaluation) speaks in these ids.

>>> vocab = build_vocab([["a", "rose", "is", "a", "rose"]], min_count=2)
>>> vocab.words, vocab.counts.tolist()
(['a', 'rose'], [2, 2])
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from minidist.data.corpus import CorpusSource, iter_pieces
from minidist.util.values import whole


@dataclass(frozen=True, eq=False)
class Vocabulary:
    """Words in id order (most frequent first), their counts, and word -> id."""

    words: list[str]
    counts: np.ndarray  # int64, counts[i] is how often words[i] occurs
    index: dict[str, int]

    @classmethod
    def from_counts(cls, words: Iterable[str], counts: Iterable[int]) -> Vocabulary:
        """A vocabulary from words already in id order and their counts."""
        words = [str(word) for word in words]
        counts = np.asarray(list(counts) if not isinstance(counts, np.ndarray) else counts,
                            dtype=np.int64)
        if len(words) != len(counts):
            raise ValueError(f"{len(words)} words but {len(counts)} counts")
        index = {word: i for i, word in enumerate(words)}
        if len(index) != len(words):
            raise ValueError("a vocabulary cannot hold the same word twice")
        return cls(words, counts, index)

    def __len__(self) -> int:
        return len(self.words)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Vocabulary) and self.words == other.words
                and np.array_equal(self.counts, other.counts))

    __hash__ = None  # mutable arrays inside: not hashable

    def __contains__(self, word: object) -> bool:
        return word in self.index

    def ids(self, tokens: Iterable[str]) -> np.ndarray:
        """The ids of the in-vocabulary ``tokens``, in order; unknown tokens are dropped."""
        found = (self.index.get(token, -1) for token in tokens)
        ids = np.fromiter(found, dtype=np.int64)
        return ids[ids >= 0].astype(np.int32)

    def save(self, path: str | os.PathLike) -> None:
        """Write ``word count`` lines, most frequent first (the reference's ``vocab.txt``)."""
        with open(path, "w", encoding="utf-8") as file:
            for word, count in zip(self.words, self.counts.tolist(), strict=True):
                file.write(f"{word} {count}\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocabulary:
        """Read a file written by :meth:`save` (or by the reference ``vocab_count``)."""
        words, counts = [], []
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if line.strip():
                word, count = line.rsplit(" ", 1)
                words.append(word)
                counts.append(int(count))
        return cls.from_counts(words, counts)


def count_tokens(source: CorpusSource) -> Counter[str]:
    """How often each token occurs in ``source`` (token lines, a file or a folder).

    Cost: one pass over the corpus, O(tokens) time, O(distinct words) memory.
    """
    counts: Counter[str] = Counter()
    for piece in iter_pieces(source):
        counts.update(piece.tokens)
    return counts


def build_vocab(source: CorpusSource, min_count: int = 5,
                max_size: int | None = None) -> Vocabulary:
    """The words of ``source`` seen at least ``min_count`` times, most frequent first.

    Ties are broken alphabetically; with ``max_size`` (None: no limit) only the
    first ``max_size`` words are kept. ``source`` is a list of token lines, or
    the path of a UTF-8 text file or folder (see :mod:`minidist.data.corpus`).

    Cost: O(tokens) to count, O(W log W) to sort the W distinct words.
    """
    min_count = whole("min_count", min_count, least=1)
    if max_size is not None:
        max_size = whole("max_size", max_size)
    counts = count_tokens(source)
    kept = [(word, count) for word, count in counts.items() if count >= min_count]
    kept.sort(key=lambda item: (-item[1], item[0]))
    if max_size is not None:
        kept = kept[:max_size]
    return Vocabulary.from_counts([word for word, _ in kept], [count for _, count in kept])
