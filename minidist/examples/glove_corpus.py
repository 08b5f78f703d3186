"""Steps 1 and 2 of ``examples.glove``: the corpus, then its vocabulary and co-occurrences.

The corpus is the synthetic language of ``--seed`` (written to a folder with
its analogy and similarity files), ``text8`` (downloaded once) or a text
file or folder of one's own. A corpus that cannot be had (offline, not
UTF-8) or that gives nothing to train (no word reaches ``--min-count``, no
two words share a window) is a usage error, before any training.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from minidist.data.cooccur import Cooccurrence, count_cooccurrences
from minidist.data.corpus import CorpusError, download_text8
from minidist.data.synthetic_language import generate_corpus
from minidist.data.vocab import build_vocab
from minidist.util.download import DownloadError


def prepare_corpus(corpus: str | None, seed: int, folder: str | os.PathLike
                   ) -> tuple[Any, Path | None, Path | None]:
    """The token source, and the analogy and similarity files that come with it (if any)."""
    if corpus is None or corpus == "synthetic":
        files = generate_corpus(seed=seed).save(folder)
        return files.corpus, files.analogies, files.similarity
    if corpus == "text8" and not os.path.exists(corpus):
        return download_text8(), None, None
    return corpus, None, None


def count_corpus(parser: argparse.ArgumentParser, args: argparse.Namespace, folder: str,
                 say: bool) -> tuple[Cooccurrence, Any, Any]:
    """The co-occurrences of ``--corpus`` (``say``: print their size), and its own
    evaluation files."""
    try:
        source, analogies, similarity = prepare_corpus(args.corpus, args.seed, folder)
        start = time.perf_counter()
        vocab = build_vocab(source, min_count=args.min_count)
    except (DownloadError, CorpusError) as err:  # offline, not UTF-8: in their words
        parser.error(str(err))
    if not len(vocab):
        parser.error(f"--min-count {args.min_count}: no word of the corpus occurs that "
                     "often; lower it, or check the corpus is not empty")
    counts = count_cooccurrences(source, vocab, window=args.window)
    if not counts.nnz:
        parser.error("no two words of the vocabulary share a window: nothing to train")
    if say:
        print(f"{len(vocab):,} words, {counts.nnz:,} non-zero co-occurrences "
              f"({time.perf_counter() - start:.1f} s)")
    return counts, analogies, similarity
