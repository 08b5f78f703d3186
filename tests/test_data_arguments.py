"""Bad arguments to minidist.data are refused in one sentence naming them, and valid ones
keep their results: seeds, standardisation, vocabulary limits."""

from __future__ import annotations

import numpy as np
import pytest

from minidist.data import load_digits, split_dataset, standardize, stratified_split
from minidist.data.characters import CharacterText
from minidist.data.cooccur import zipf_cooccurrence
from minidist.data.dataset import Dataset
from minidist.data.synthetic_language import generate_corpus
from minidist.data.vocab import build_vocab

LABELS = np.arange(100) % 2
LINES = [["a", "rose", "is", "a", "rose"]]
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


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_standardize_keeps_the_floating_dtype_it_is_given(dtype):
    """float64 digits came back float32, rounded to its 7 digits without a word."""
    train, test = load_digits(dtype=dtype)
    mean, scale = train.x.mean(axis=0), train.x.std(axis=0) + 0.01
    for given, got in zip((train, test), standardize(train, test), strict=True):
        assert got.x.dtype == dtype
        np.testing.assert_array_equal(got.x, ((given.x - mean) / scale).astype(dtype))


def test_standardize_makes_integer_inputs_float32():
    pixels = Dataset(np.arange(12, dtype=np.uint8).reshape(6, 2), np.arange(6) % 2, 2)
    assert standardize(pixels, pixels)[1].x.dtype == np.float32


def test_standardize_refuses_an_empty_training_set():
    """It gave all-NaN inputs, with only numpy's RuntimeWarnings to say why."""
    train, test = load_digits(test_fraction=1.0)
    with pytest.raises(ValueError, match="standardize: train_set is empty"):
        standardize(train, test)


@pytest.mark.parametrize("options, word, least", [
    (dict(min_count=2.5), "min_count", 1), (dict(min_count="2"), "min_count", 1),
    (dict(min_count=0), "min_count", 1), (dict(min_count=True), "min_count", 1),
    (dict(max_size=2.5), "max_size", 0), (dict(max_size=-1), "max_size", 0),
    (dict(max_size="3"), "max_size", 0)])
def test_build_vocab_limits_are_whole_numbers(options, word, least):
    """min_count=2.5 was taken as it came; max_size=2.5 failed slicing a list, and
    min_count='2' comparing a str with an int."""
    with pytest.raises(ValueError, match=rf"{word} must be an integer >= {least}, got "):
        build_vocab(LINES, **options)


def test_build_vocab_keeps_its_words_for_whole_limits():
    assert build_vocab(LINES, min_count=np.int64(2), max_size=None).words == ["a", "rose"]
    assert build_vocab(LINES, min_count=1, max_size=np.int32(1)).words == ["a"]
    assert build_vocab(LINES, min_count=1, max_size=0).words == []
