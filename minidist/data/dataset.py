"""A labelled dataset, and how to split it into training and test parts.

Supervised learning starts from pairs (x_i, y_i): an input and the class it
belongs to. Here a dataset is nothing more than two numpy arrays of the same
length, ``x`` (one row per sample) and ``y`` (one integer label per sample),
plus the number of classes, so a model knows how many outputs it needs.

We judge a model on samples it never trained on, so a dataset is split in two.
The split here is *stratified*: each class is split on its own, so the test
part holds about ``test_fraction`` of every class, and a rare class cannot
vanish from one side by bad luck. It is *seeded*: the same seed always gives
the same split, on every machine and every rank, which matters when several
processes must agree on which samples are "train" without talking.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from minidist.backend import to_numpy, xp_of
from minidist.nn.functional import class_ids
from minidist.util.values import whole


@dataclass(frozen=True, eq=False)
class Dataset:
    """Inputs ``x`` (N rows) with integer labels ``y`` (N,) in ``0 .. num_classes-1``;
    ``x`` and ``y`` may be given as lists (they become numpy arrays)."""

    x: np.ndarray
    y: np.ndarray
    num_classes: int
    name: str = ""

    def __post_init__(self) -> None:
        for field in ("x", "y"):  # frozen: set as dataclasses do
            value = getattr(self, field)
            object.__setattr__(self, field, value if hasattr(value, "shape") else np.asarray(value))
        object.__setattr__(self, "num_classes", whole("Dataset: num_classes", self.num_classes,
                                                      least=1))
        if self.y.ndim != 1:
            raise ValueError(f"y must be one label per sample, got shape {self.y.shape}")
        if len(self.x) != len(self.y):
            raise ValueError(f"x has {len(self.x)} rows but y has {len(self.y)} labels")
        try:  # (a device's labels are read through to_numpy: one explicit copy)
            class_ids(to_numpy(self.y), self.num_classes)
        except (TypeError, ValueError) as error:  # 0.5 or 5 of 2 classes trained on quietly
            raise type(error)(f"Dataset: y, the labels of {self.num_classes} classes: "
                              f"{error}") from None

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int | slice | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The samples at ``index``: ``(x[index], y[index])``."""
        return self.x[index], self.y[index]

    def subset(self, indices: np.ndarray, name: str | None = None) -> Dataset:
        """A new dataset holding the samples at ``indices`` (a copy, in that order)."""
        indices = xp_of(self.x).asarray(to_numpy(indices), dtype=np.int64)  # where x is
        return Dataset(self.x[indices], self.y[indices], self.num_classes,
                       self.name if name is None else name)


def stratified_split(labels: np.ndarray, test_fraction: float,
                     seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``(train, test)`` that put ``round(test_fraction * n_c)`` of each class in test.

    Each class's indices are shuffled with one generator seeded by ``seed``,
    the first ones go to test, the rest to train; both index arrays come back
    sorted, so the parts keep the original order of the samples. The two
    parts are disjoint and together hold every index exactly once.

    Cost: O(N) time and memory for N labels (one shuffle per class).
    """
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"test_fraction must be in [0, 1], got {test_fraction}")
    labels = to_numpy(labels)  # the split is decided on the host (a device's, copied)
    rng = np.random.default_rng(whole("seed", seed))  # None would differ rank to rank
    train_parts, test_parts = [], []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        num_test = int(round(test_fraction * len(members)))
        test_parts.append(members[:num_test])
        train_parts.append(members[num_test:])
    empty = np.empty(0, dtype=np.int64)
    train = np.sort(np.concatenate([empty, *train_parts])).astype(np.int64)
    test = np.sort(np.concatenate([empty, *test_parts])).astype(np.int64)
    return train, test


def split_dataset(dataset: Dataset, test_fraction: float = 0.2,
                  seed: int = 0) -> tuple[Dataset, Dataset]:
    """``(train, test)`` parts of ``dataset`` from :func:`stratified_split`."""
    train, test = stratified_split(dataset.y, test_fraction, seed)
    return (dataset.subset(train, f"{dataset.name}-train"),
            dataset.subset(test, f"{dataset.name}-test"))


def standardize(train_set: Dataset, test_set: Dataset) -> tuple[Dataset, Dataset]:
    """x -> (x - mean) / (std + 0.01), with mean and std per feature from the training set.

    The test set uses the training set's statistics: it stands for data not
    seen yet. The 0.01 keeps always-blank pixels (std 0) at 0. A floating ``x``
    keeps its dtype (float32 stays float32, float64 float64); any other ``x``
    (integers) becomes float32. An empty training set has no statistics: refused.
    """
    if not len(train_set):
        raise ValueError("standardize: train_set is empty, so there is no mean or std "
                         "to scale by")
    mean, scale = train_set.x.mean(axis=0), train_set.x.std(axis=0) + 0.01

    def apply(dataset: Dataset) -> Dataset:
        dtype = dataset.x.dtype if np.issubdtype(dataset.x.dtype, np.floating) else np.float32
        return dataclasses.replace(dataset, x=((dataset.x - mean) / scale).astype(dtype))

    return apply(train_set), apply(test_set)
