"""Word vectors in the GloVe text format: one ``word x1 ... xd`` line per word.

The format glove.c writes and other tools (gensim, spaCy) read. Numbers are
written with ``repr``, enough digits to read float64 back exactly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def save_vectors(path: str | Path, words: list[str], vectors: np.ndarray) -> None:
    """One line per word: ``word x1 x2 ... xd``."""
    if len(words) != len(vectors):
        raise ValueError(f"{len(words)} words but {len(vectors)} vectors")
    with open(path, "w", encoding="utf-8") as out:
        for word, vector in zip(words, vectors, strict=True):
            out.write(word + " " + " ".join(repr(float(x)) for x in vector) + "\n")


def load_vectors(path: str | Path) -> tuple[list[str], np.ndarray]:
    """Read a GloVe text file: the words in file order and a (V, d) float64 array."""
    words, rows = [], []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            fields = line.rstrip("\n").split(" ")
            if rows and len(fields) - 1 != len(rows[0]):
                raise ValueError(f"{path}:{number}: {len(fields) - 1} numbers, expected "
                                 f"{len(rows[0])}")
            words.append(fields[0])
            rows.append([float(x) for x in fields[1:]])
    return words, np.array(rows, dtype=np.float64).reshape(len(rows), -1)
