"""Datasets and mini-batches: what the models of this course learn from.

- :mod:`~minidist.data.dataset`: a labelled :class:`Dataset` and a seeded,
  stratified train/test split.
- :mod:`~minidist.data.digits`: the 8x8 digits bundled with the package,
  so every lab runs without a network.
- :mod:`~minidist.data.idx` and :mod:`~minidist.data.mnist`: MNIST from
  its IDX files, with a verified, cached download.
- :mod:`~minidist.data.batching`: seeded shuffling into mini-batches, epoch
  after epoch (:class:`DataLoader`), with the order chosen by a sampler;
  :mod:`~minidist.data.distributed`: each rank's shard of an epoch.
- GloVe's data: :mod:`~minidist.data.corpus` (text files, text8),
  :mod:`~minidist.data.synthetic_language` (the default corpus, with planted
  analogies), :mod:`~minidist.data.vocab`, and :mod:`~minidist.data.cooccur`
  (co-occurrence counts; import it from there: it also runs as ``python -m``).

>>> from minidist.data import load_dataset, DataLoader
>>> train, test = load_dataset("digits")
>>> for x_batch, y_batch in DataLoader(train, batch_size=64, seed=0):
...     pass
"""

from __future__ import annotations

from collections.abc import Callable

from minidist.data.batching import BatchSampler, DataLoader, Sampler, iterate_batches
from minidist.data.corpus import download_text8, iter_pieces, read_lines
from minidist.data.dataset import Dataset, split_dataset, standardize, stratified_split
from minidist.data.digits import load_digits
from minidist.data.distributed import DistributedSampler
from minidist.data.idx import IDXFormatError, read_idx, write_idx
from minidist.data.mnist import default_cache_dir, download_mnist, load_mnist
from minidist.data.synthetic_language import SyntheticCorpus, generate_corpus
from minidist.data.vocab import Vocabulary, build_vocab
from minidist.util.download import ChecksumError, DownloadError

LOADERS: dict[str, Callable[..., tuple[Dataset, Dataset]]] = {
    "digits": load_digits,
    "mnist": load_mnist,
}


def load_dataset(name: str = "digits", **options) -> tuple[Dataset, Dataset]:
    """``(train, test)`` of the dataset called ``name``; ``options`` go to its loader.

    ``"digits"`` → :func:`load_digits` (bundled, no network),
    ``"mnist"`` → :func:`load_mnist` (local files or ``download=True``).
    """
    if name not in LOADERS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {sorted(LOADERS)}")
    return LOADERS[name](**options)


__all__ = [
    "BatchSampler",
    "ChecksumError",
    "DataLoader",
    "Dataset",
    "DistributedSampler",
    "DownloadError",
    "IDXFormatError",
    "LOADERS",
    "Sampler",
    "SyntheticCorpus",
    "Vocabulary",
    "build_vocab",
    "default_cache_dir",
    "download_mnist",
    "download_text8",
    "generate_corpus",
    "iter_pieces",
    "iterate_batches",
    "load_dataset",
    "load_digits",
    "load_mnist",
    "read_idx",
    "read_lines",
    "split_dataset",
    "standardize",
    "stratified_split",
    "write_idx",
]
