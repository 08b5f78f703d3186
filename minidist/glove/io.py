"""Word vectors in the GloVe text format: one ``word x1 ... xd`` line per word.

The format glove.c writes and other tools (gensim, spaCy) read. Numbers are
written with ``repr``, enough digits to read float64 back exactly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def save_vectors(path: str | Path, words: list[str], vectors: np.ndarray) -> None:
    """One line per word: ``word x1 x2 ... xd``."""
    vectors = np.asarray(vectors)
    if vectors.ndim != 2 or len(words) != len(vectors):
        raise ValueError(f"{len(words)} words but vectors of shape {vectors.shape}: "
                         "want a (words, dimensions) matrix")
    spaced = next((w for w in words if not w or len(w.split()) != 1), None)
    if spaced is not None:  # its line could not be read back
        raise ValueError(f"the word {spaced!r} is empty or holds a space")
    with open(path, "w", encoding="utf-8") as out:
        for word, vector in zip(words, vectors, strict=True):
            out.write(word + " " + " ".join(repr(float(x)) for x in vector) + "\n")


def load_vectors(path: str | Path) -> tuple[list[str], np.ndarray]:
    """Read a GloVe text file: the words in file order and a (V, d) float64 array.

    Every line must be ``word x1 ... xd``, separated by single spaces (a trailing
    space is allowed), with the same d on every line; anything else, or an empty
    file, is a ValueError naming the file and the line.
    """
    words, rows = [], []
    try:
        with open(path, encoding="utf-8-sig") as lines:  # -sig: a leading BOM is dropped
            for number, line in enumerate(lines, 1):
                word, row = parse_line(line, f"{path}:{number}")
                if rows and len(row) != len(rows[0]):
                    raise ValueError(f"{path}:{number}: {len(row)} numbers, expected "
                                     f"{len(rows[0])} as on line 1")
                words.append(word)
                rows.append(row)
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text ({err.reason})") from None
    if not rows:
        raise ValueError(f"{path}: no vectors (the file is empty)")
    return words, np.array(rows, dtype=np.float64)


def parse_line(line: str, where: str) -> tuple[str, list[float]]:
    """``word x1 ... xd`` -> (word, [x1, ..., xd]); ``where`` (file:line) names a bad line."""
    if "\t" in line:
        raise ValueError(f"{where}: a tab; the GloVe text format separates with single spaces")
    word, *fields = line.rstrip("\r\n").rstrip(" ").split(" ")
    if not fields:
        raise ValueError(f"{where}: expected 'word x1 ... xd', got {line.rstrip()!r} "
                         "(no number)")
    row = []
    for text in fields:
        try:
            row.append(float(text))
        except ValueError:
            raise ValueError(f"{where}: {text!r} is not a number") from None
    return word, row
