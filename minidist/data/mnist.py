"""MNIST: 70,000 handwritten digits, 28x28, read from local IDX files or downloaded once.

MNIST (LeCun, Cortes, Burges) is the classic benchmark of the first
distributed-training papers: 60,000 training and 10,000 test images in four
IDX files (see :mod:`minidist.data.idx`). It is too big to ship inside the
package (11 MB compressed), so:

- :func:`load_mnist` reads the four files from a folder: the cache folder
  by default, which is ``$MINIDIST_DATA/mnist`` when that variable is set,
  else ``~/.cache/minidist/mnist``.
- :func:`download_mnist` fills the cache on a machine with a network.

A download can be cut short or corrupted, and a mirror can serve something
else, so each file is checked against its published MD5 sum before it is
used (:func:`minidist.util.download.fetch`: verified, written atomically).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from minidist.data.dataset import Dataset
from minidist.data.idx import read_idx
from minidist.util.download import Opener, cache_folder, fetch, urlopen_with_timeout

# The four files, each with the MD5 sum of its .gz as published with MNIST.
MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
MNIST_MD5 = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}
# Tried in order until one serves a file with the right checksum.
MNIST_MIRRORS = [
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
]
NUM_CLASSES = 10
MAX_PIXEL = 255


def default_cache_dir() -> Path:
    """``$MINIDIST_DATA/mnist`` if ``MINIDIST_DATA`` is set, else ``~/.cache/minidist/mnist``."""
    return cache_folder("mnist")


def download_mnist(cache_dir: str | os.PathLike | None = None,
                   mirrors: list[str] | None = None,
                   opener: Opener = urlopen_with_timeout) -> Path:
    """Make sure the four MNIST ``.gz`` files are in ``cache_dir``; return that folder.

    A file already there with the right checksum is kept; otherwise each
    mirror (``MNIST_MIRRORS`` unless given) is tried in turn, and when all
    fail, ``DownloadError`` says what each mirror did. ``opener`` maps a URL
    to a readable binary stream (``urllib.request.urlopen`` by default).
    """
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    for filename, md5 in MNIST_MD5.items():
        urls = [mirror.rstrip("/") + "/" + filename
                for mirror in (mirrors if mirrors is not None else MNIST_MIRRORS)]
        fetch(urls, folder / filename, f"md5:{md5}", opener)
    return folder


def find_mnist_file(folder: Path, stem: str) -> Path | None:
    """``folder/stem.gz`` or ``folder/stem``, whichever exists first, else None."""
    for candidate in (folder / f"{stem}.gz", folder / stem):
        if candidate.exists():
            return candidate
    return None


def read_mnist_part(images_path: Path, labels_path: Path, name: str, flatten: bool,
                    dtype: np.dtype | type) -> Dataset:
    """One half of MNIST: images scaled to [0, 1] and int64 labels, checked to match."""
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.ndim != 3 or images.dtype != np.uint8:
        raise ValueError(f"{images_path}: expected uint8 images of shape (N, rows, cols), "
                         f"got {images.dtype} {images.shape}")
    if labels.ndim != 1 or len(labels) != len(images):
        raise ValueError(f"{labels_path}: expected {len(images)} labels for {images_path}, "
                         f"got shape {labels.shape}")
    x = (images / MAX_PIXEL).astype(dtype)
    if flatten:
        x = x.reshape(len(x), -1)
    return Dataset(x, labels.astype(np.int64), NUM_CLASSES, name)


def load_mnist(path: str | os.PathLike | None = None, download: bool = False,
               flatten: bool = True, dtype: np.dtype | type = np.float32
               ) -> tuple[Dataset, Dataset]:
    """MNIST as ``(train, test)``: ``x`` in [0, 1], (N, 784) or (N, 28, 28); ``y`` int64.

    Reads the four IDX files (``.gz`` or not) from ``path``, the cache folder
    by default. With ``download=True`` missing files are fetched first
    (:func:`download_mnist`); without it, missing files raise
    ``FileNotFoundError`` saying how to get them.

    Cost: decompressing 11 MB and converting 55 M pixels, about a second.
    """
    folder = Path(path) if path is not None else default_cache_dir()
    found = {part: find_mnist_file(folder, stem) for part, stem in MNIST_FILES.items()}
    if None in found.values() and download:
        download_mnist(folder)
        found = {part: find_mnist_file(folder, stem) for part, stem in MNIST_FILES.items()}
    missing = [MNIST_FILES[part] + "[.gz]" for part, file in found.items() if file is None]
    if missing:
        raise FileNotFoundError(
            f"MNIST files missing from {folder}: {', '.join(missing)}. Get them with "
            "minidist.data.download_mnist() or load_mnist(download=True) on a machine with a "
            "network, copy them there by hand, or set MINIDIST_DATA to the folder holding "
            "mnist/. The bundled load_digits() needs no download.")
    train = read_mnist_part(found["train_images"], found["train_labels"], "mnist-train",
                            flatten, dtype)
    test = read_mnist_part(found["test_images"], found["test_labels"], "mnist-test",
                           flatten, dtype)
    return train, test
