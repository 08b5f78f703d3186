"""The 8x8 handwritten digits: a classification dataset that needs no network.

Every lab must run on a laptop on a train, so minidist ships one small real
dataset inside the package: the UCI "Optical Recognition of Handwritten
Digits" images (Alpaydin & Kaynak, 1998). 1,797 digits, about 180 of each
class 0..9, each an 8x8 image whose pixels count the ink in a 4x4 block of
a 32x32 scan, so they are integers 0..16.

The file ``files/digits.csv.gz`` (57 KB) has one row per image: 64 pixel
values, row by row, then the label. Where it comes from and its licence are
in ``files/DIGITS_LICENSE.txt``.

We scale the pixels to [0, 1] (divide by 16): inputs of order one keep the
first layer's pre-activations of order one too, so the usual initialisations
and learning rates work unchanged. A 64-128-10 MLP trains on it in seconds,
which is what a lab about *distributing* the training wants.
"""

from __future__ import annotations

from importlib import resources

import numpy as np

from minidist.data.dataset import Dataset, split_dataset

NUM_PIXELS = 64  # 8 x 8
MAX_PIXEL = 16  # each pixel counts the "on" pixels of a 4x4 block
NUM_CLASSES = 10


def read_digits_csv() -> tuple[np.ndarray, np.ndarray]:
    """The raw bundled data: pixels (1797, 64) uint8 in 0..16 and labels (1797,) int64."""
    source = resources.files("minidist.data") / "files" / "digits.csv.gz"
    with resources.as_file(source) as path:
        table = np.loadtxt(path, delimiter=",", dtype=np.int64)
    if table.ndim != 2 or table.shape[1] != NUM_PIXELS + 1:
        raise ValueError(f"{source}: expected 65 columns (64 pixels + label), got {table.shape}")
    return table[:, :NUM_PIXELS].astype(np.uint8), table[:, NUM_PIXELS]


def load_digits(test_fraction: float = 0.2, seed: int = 0,
                dtype: np.dtype | type = np.float32) -> tuple[Dataset, Dataset]:
    """The digits as ``(train, test)``: ``x`` is (N, 64) in [0, 1], ``y`` is int64 in 0..9.

    The split is stratified and fixed by ``seed`` (see
    :func:`minidist.data.dataset.stratified_split`): with the defaults, 1,438
    training and 359 test images. ``test_fraction=0`` puts everything in
    train and leaves test empty.

    Cost: parsing the 1,797 x 65 table, a few milliseconds.
    """
    pixels, labels = read_digits_csv()
    images = (pixels / MAX_PIXEL).astype(dtype)
    everything = Dataset(images, labels, NUM_CLASSES, "digits")
    return split_dataset(everything, test_fraction, seed)
