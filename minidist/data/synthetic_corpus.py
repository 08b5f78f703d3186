"""The corpus a synthetic language writes (``synthetic_language``), and its three files:
the text, its analogy questions (Google format) and its similarity pairs."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple


class SyntheticFiles(NamedTuple):
    """Where :meth:`SyntheticCorpus.save` wrote the corpus and its two test files."""

    corpus: Path
    analogies: Path
    similarity: Path


@dataclass
class SyntheticCorpus:
    """Token lines of a synthetic language, with the relations planted in them."""

    lines: list[list[str]]
    analogies: dict[str, list[tuple[str, str, str, str]]]
    similarities: list[tuple[str, str, float]]
    seed: int
    pairs: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return sum(len(line) for line in self.lines)

    def write_text(self, path: str | os.PathLike) -> Path:
        """One sentence per line, tokens separated by spaces."""
        Path(path).write_text("".join(" ".join(line) + "\n" for line in self.lines),
                              encoding="utf-8")
        return Path(path)

    def write_analogies(self, path: str | os.PathLike) -> Path:
        """The analogy questions in the Google format."""
        text = "".join(f": {section}\n" + "".join(" ".join(q) + "\n" for q in questions)
                       for section, questions in self.analogies.items())
        Path(path).write_text(text, encoding="utf-8")
        return Path(path)

    def write_similarities(self, path: str | os.PathLike) -> Path:
        """``word1 word2 score`` lines, the score in [0, 10]."""
        text = "".join(f"{a} {b} {score:.2f}\n" for a, b, score in self.similarities)
        Path(path).write_text(text, encoding="utf-8")
        return Path(path)

    def save(self, directory: str | os.PathLike) -> SyntheticFiles:
        """Write ``corpus.txt``, ``analogies.txt`` and ``similarity.txt`` into ``directory``."""
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        return SyntheticFiles(self.write_text(folder / "corpus.txt"),
                              self.write_analogies(folder / "analogies.txt"),
                              self.write_similarities(folder / "similarity.txt"))
