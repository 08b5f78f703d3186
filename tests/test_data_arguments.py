"""Bad arguments to minidist.data are refused in one sentence naming them, and valid ones
keep their results: seeds, standardisation, vocabulary limits."""

from __future__ import annotations

import numpy as np
import pytest

from minidist.data import load_digits, split_dataset, stratified_split
from minidist.data.characters import CharacterText
from minidist.data.cooccur import zipf_cooccurrence
from minidist.data.dataset import Dataset
from minidist.data.synthetic_language import generate_corpus

LABELS = np.arange(100) % 2
SEEDED = {
    "stratified_split": lambda seed: stratified_split(LABELS, 0.2, seed=seed),
    "split_dataset": lambda seed: split_dataset(Dataset(np.zeros((100, 1)), LABELS, 2),
                                                seed=seed),
    "load_digits": lambda seed: load_digits(seed=seed),
    "generate_corpus": lambda seed: generate_corpus(seed=seed, num_tokens=100),
    "CharacterText.generate": lambda seed: CharacterText.generate(seed=seed, num_tokens=100),
    "zipf_cooccurrence": lambda seed: zipf_cooccurrence(10, 20, seed=seed),
}


@pytest.mark.parametrize("seed", [None, -1, 1.5, True, "0"])
@pytest.mark.parametrize("call", SEEDED.values(), ids=SEEDED.keys())
def test_a_seed_that_is_no_whole_number_is_refused(call, seed):
    """seed=None drew a new split (or corpus) every call, so ranks disagreed without a
    word; -1 and 1.5 failed in numpy's words, without naming the argument."""
    with pytest.raises(ValueError, match=r"seed must be an integer >= 0, got "):
        call(seed)


def test_the_same_seed_gives_the_same_split():
    first, again = stratified_split(LABELS, 0.2, seed=np.int64(3)), stratified_split(LABELS, 0.2, 3)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
