"""What a Dataset is built from: labels as its docstring promises them (integers in
0..num_classes-1, one per row), given as arrays or lists (test_data.py tests the rest)."""

from __future__ import annotations

import numpy as np
import pytest

from minidist import backend
from minidist.data import DataLoader, Dataset, split_dataset

X = np.arange(8.0).reshape(4, 2)


def test_labels_and_inputs_given_as_lists_become_arrays():
    """A list of labels failed with "'list' object has no attribute 'ndim'"."""
    data = Dataset(X.tolist(), [0, 1, 1, 0], 2)
    assert isinstance(data.x, np.ndarray) and isinstance(data.y, np.ndarray)
    np.testing.assert_array_equal(data.y, [0, 1, 1, 0])
    xs, ys = next(iter(DataLoader(data, batch_size=4, shuffle=False)))
    np.testing.assert_array_equal(xs, X)
    np.testing.assert_array_equal(ys, [0, 1, 1, 0])


@pytest.mark.parametrize("labels, error, message", [
    (np.array([0, 5, 1, 0]), ValueError, r"y, the labels of 2 classes: .*\[0, 2\), .*max 5"),
    (np.array([0, -1, 1, 0]), ValueError, r"y, the labels of 2 classes: .*\[0, 2\), got min -1"),
    (np.array([0.5, 1.0, 0.0, 1.0]), TypeError, r"y, the labels of 2 classes: .*dtype float64"),
    ([0.0, 1.0, 1.0, 0.0], TypeError, r"y, the labels .*integer class ids, got dtype float64"),
    (np.array([True, False, True, False]), TypeError, r"y, the labels .*got dtype bool")])
def test_labels_outside_the_classes_or_not_integers_are_refused(labels, error, message):
    """They were taken as they were: 5 of 2 classes, or 0.5, trained on quietly."""
    with pytest.raises(error, match=rf"Dataset: {message}"):
        Dataset(X, labels, 2)


@pytest.mark.parametrize("num_classes", [0, -1, 2.0, True])
def test_a_number_of_classes_that_is_not_a_whole_number_above_0_is_refused(num_classes):
    with pytest.raises(ValueError, match=r"Dataset: num_classes must be an integer >= 1"):
        Dataset(X, np.zeros(4, np.int64), num_classes)


def test_empty_and_split_datasets_still_build():
    empty = Dataset(np.zeros((0, 2)), np.zeros(0, np.int64), np.int64(3))
    assert len(empty) == 0 and type(empty.num_classes) is int
    train, test = split_dataset(Dataset(X, np.array([0, 1, 0, 1]), 2), 0.5)
    assert (len(train), len(test)) == (2, 2)


def test_labels_on_a_device_are_checked_too(strict):
    with pytest.raises(ValueError, match=r"Dataset: y, the labels of 2 classes"):
        Dataset(strict.asarray(X), strict.asarray([0, 1, 2, 0]), 2)
    data = Dataset(strict.asarray(X), strict.asarray([0, 1, 1, 0]), 2)
    assert backend.on_device(data.y)
