"""A character-level text task, offline and seeded: predict each next character.

The text is the synthetic language of ``synthetic_language.py`` (its
sentences carry topics and relations, so the next character is partly
predictable beyond spelling), one sentence per line. ``CharacterText``
maps its characters to ids and cuts random windows of ``context + 1``
characters: the first ``context`` are the input, the last ``context``
(shifted by one) the targets. Cost: O(text) once, O(batch · context) a batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minidist.data.synthetic_language import generate_corpus
from minidist.util.values import whole


@dataclass
class CharacterText:
    """The text as ids over its ``alphabet`` (sorted characters)."""

    alphabet: str
    ids: np.ndarray

    @classmethod
    def generate(cls, seed: int = 0, num_tokens: int = 20_000) -> CharacterText:
        lines = generate_corpus(seed=seed, num_tokens=num_tokens).lines
        text = "\n".join(" ".join(line) for line in lines)
        alphabet = "".join(sorted(set(text)))
        lookup = {ch: i for i, ch in enumerate(alphabet)}
        return cls(alphabet, np.array([lookup[ch] for ch in text], dtype=np.int64))

    def batch(self, rng: np.random.Generator, size: int,
              context: int) -> tuple[np.ndarray, np.ndarray]:
        """``size`` random windows: inputs (size, context) and next characters (size, context)."""
        size, context = whole("size", size), whole("context", context, least=1)
        if len(self.ids) <= context:
            raise ValueError(f"the text has {len(self.ids)} characters, fewer than a window "
                             f"of {context + 1}")
        starts = rng.integers(0, len(self.ids) - context, size)
        windows = self.ids[starts[:, None] + np.arange(context + 1)]
        return windows[:, :-1], windows[:, 1:]
