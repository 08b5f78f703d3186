"""Co-occurrence counts: the matrix GloVe factorises, counted as the reference does it.

``X[i, j]`` measures how often word ``j`` appears near word ``i``. The rules
are those of the reference implementation (``cooccur.c`` in Stanford's
GloVe), so that vectors trained here and there are comparable:

1. out-of-vocabulary tokens are dropped *before* windowing, so the words
   on either side of a rare word become neighbours;
2. a line is a document: no window crosses a line break;
3. a pair of words at distance ``k <= window`` adds ``1/k`` (``1`` without
   distance weighting): near words say more about each other than far ones;
4. the window is symmetric: the pair (earlier ``a``, later ``b``) adds to
   ``X[a, b]`` and to ``X[b, a]``. With ``symmetric=False`` only
   ``X[a, b]`` grows: row = the left word, column = the word after it.

**Memory.** X has V² cells, but almost all are zero, so it is kept sparse
(COO: ``row``, ``col``, ``val``). The corpus is read in chunks of about
``chunk_tokens`` in-vocabulary tokens. In a chunk, the pairs at distance
``k`` are two shifted views of the id array (``ids[:-k]``, ``ids[k:]``),
kept where both tokens share a document; each pair becomes one int64 key
``a * V + b``, and sorting the keys puts equal pairs side by side so their
weights add up (:func:`count_window_pairs`). A chunk's sorted counts are then
merged into the running total (``merge_counts``, ``sorted_counts.py``). The
last ``window`` tokens of a chunk are carried over as left context of the
next one, so a long line (text8 is one line of 17 M tokens) is counted
exactly. In symmetric mode each unordered pair is counted once, as
``min * V + max``, and mirrored only at the end: half the memory while
counting.

Cost: O(T·W log(T·W)) time for T tokens and window W; memory O(nnz of X)
plus O(chunk_tokens · W) for one chunk. Measured on one core: 17 M tokens
of the synthetic language (860 words, 0.47 M non-zeros) in 13 s, 0.26 GB;
17 M tokens of random Zipfian text over 71,000 words (83 M non-zeros, a
worst case: real text repeats its pairs far more) in a minute, peak
2.5 GB, about twice the 1.3 GB result.

The result saves to ``.npz`` with ``row``, ``col`` (int32 word ids, 0 = the
most frequent word), ``val`` (float64), ``words`` and ``counts`` (the
vocabulary in id order). From the command line::

    python -m minidist.data.cooccur CORPUS OUT.npz --min-count 5 --window 10

where CORPUS is a text file, a folder of them, ``text8`` or ``synthetic``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from minidist.data.corpus import CorpusError, CorpusSource, download_text8, iter_pieces
from minidist.data.sorted_counts import merge_counts, run_starts, sum_sorted_duplicates
from minidist.data.vocab import Vocabulary, build_vocab
from minidist.util.arguments import integer, output_file, path_or
from minidist.util.download import DownloadError
from minidist.util.values import whole

CHUNK_TOKENS = 1 << 20


@dataclass
class Cooccurrence:
    """A sparse co-occurrence matrix in COO form, with the vocabulary that names its ids."""

    row: np.ndarray  # int32 word ids
    col: np.ndarray  # int32 context-word ids
    val: np.ndarray  # float64 weighted counts X[row, col]
    words: np.ndarray  # unicode array, words[i] is the word of id i
    counts: np.ndarray  # int64 corpus frequency of each word

    @property
    def nnz(self) -> int:
        """The number of non-zero cells, the records GloVe trains on."""
        return len(self.val)

    @property
    def vocab(self) -> Vocabulary:
        return Vocabulary.from_counts(self.words.tolist(), self.counts)

    def to_dense(self) -> np.ndarray:
        """The full V x V matrix (small vocabularies only: V² floats)."""
        dense = np.zeros((len(self.words), len(self.words)))
        dense[self.row, self.col] = self.val
        return dense

    def save(self, path: str | os.PathLike) -> None:
        """Write the five arrays to an uncompressed ``.npz`` file."""
        np.savez(path, row=self.row, col=self.col, val=self.val,
                 words=np.asarray(self.words, dtype=str), counts=self.counts)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Cooccurrence:
        """Read a file written by :meth:`save` (no pickles are loaded)."""
        with np.load(path, allow_pickle=False) as data:
            return cls(data["row"].astype(np.int32), data["col"].astype(np.int32),
                       data["val"].astype(np.float64), data["words"],
                       data["counts"].astype(np.int64))


def load_cooccurrences(path: str | os.PathLike) -> Cooccurrence:
    """The :class:`Cooccurrence` saved in ``path``."""
    return Cooccurrence.load(path)


def iter_id_chunks(source: CorpusSource, vocab: Vocabulary,
                   chunk_tokens: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(ids, docs)`` arrays of about ``chunk_tokens`` in-vocabulary tokens each.

    ``ids[t]`` is the word id of the t-th kept token and ``docs[t]`` the
    number of its line, counted from the start of the corpus: two tokens
    may share a window only if their ``docs`` are equal.
    """
    tokens: list[str] = []
    piece_sizes, piece_docs = [], []
    doc = 0
    for piece in iter_pieces(source):
        tokens.extend(piece.tokens)
        piece_sizes.append(len(piece.tokens))
        piece_docs.append(doc)
        doc += piece.ends_line
        if len(tokens) >= chunk_tokens:
            yield vocab_ids_and_docs(tokens, piece_sizes, piece_docs, vocab)
            tokens, piece_sizes, piece_docs = [], [], []
    if tokens:
        yield vocab_ids_and_docs(tokens, piece_sizes, piece_docs, vocab)


def vocab_ids_and_docs(tokens: list[str], piece_sizes: list[int], piece_docs: list[int],
                       vocab: Vocabulary) -> tuple[np.ndarray, np.ndarray]:
    """Ids and document numbers of ``tokens``, out-of-vocabulary tokens dropped."""
    ids = np.fromiter(map(vocab.index.get, tokens, repeat(-1)), np.int64, len(tokens))
    docs = np.repeat(np.asarray(piece_docs, dtype=np.int64), piece_sizes)
    known = ids >= 0
    return ids[known], docs[known]


def count_window_pairs(ids: np.ndarray, docs: np.ndarray, first_new: int, window: int,
                       vocab_size: int, symmetric: bool,
                       distance_weighting: bool) -> tuple[np.ndarray, np.ndarray]:
    """Summed weights of the pairs of one chunk whose right word is at ``first_new`` or later.

    Tokens before ``first_new`` were carried over from the previous chunk:
    they serve as left context only, their own pairs are already counted.
    Each pair's distance k rides in the low bits of its key, so one plain
    sort of the keys (much faster than sorting keys *and* weights) brings
    equal (pair, k) together; their number times 1/k is their weight.
    Cost: O(n·W log(n·W)) for n tokens and window W.
    """
    distance_bits = window.bit_length()
    parts = [np.empty(0, ids.dtype)]  # a chunk of one token has no pair
    # the pairs at distance k: ids[t] and ids[t + k], for every k the chunk is long enough for
    for k in range(1, min(window, len(ids) - 1) + 1):
        start = max(first_new - k, 0)
        left, right = ids[start:len(ids) - k], ids[start + k:]
        same_doc = docs[start:len(ids) - k] == docs[start + k:]
        left, right = left[same_doc], right[same_doc]
        if symmetric:  # one key per unordered pair, mirrored at the end
            left, right = np.minimum(left, right), np.maximum(left, right)
        parts.append(((left * vocab_size + right) << distance_bits) | k)
    keys = np.concatenate(parts)
    del parts
    if len(keys) == 0:
        return keys, np.empty(0)
    keys.sort()
    starts = run_starts(keys)
    repeats = np.diff(starts, append=len(keys)).astype(np.float64)
    keys = keys[starts]
    distance = keys & ((1 << distance_bits) - 1)
    weights = repeats / distance if distance_weighting else repeats
    return sum_sorted_duplicates(keys >> distance_bits, weights)


def count_cooccurrences(source: CorpusSource, vocab: Vocabulary, window: int = 10,
                        symmetric: bool = True, distance_weighting: bool = True,
                        chunk_tokens: int = CHUNK_TOKENS) -> Cooccurrence:
    """The co-occurrence matrix of ``source`` over ``vocab``'s words (rules: module doc).

    ``source`` is a list of token lines or the path of a text file or folder.
    Entries come sorted by ``(row, col)``; when symmetric, the upper triangle
    (``row <= col``) comes so, followed by its mirror image ``(col, row)``.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    size = len(vocab)
    keys, vals = np.empty(0, np.int64), np.empty(0, np.float64)
    carried_ids, carried_docs = np.empty(0, np.int64), np.empty(0, np.int64)
    for ids, docs in iter_id_chunks(source, vocab, chunk_tokens):
        ids, docs = np.concatenate((carried_ids, ids)), np.concatenate((carried_docs, docs))
        chunk = count_window_pairs(ids, docs, len(carried_ids), window, size, symmetric,
                                   distance_weighting)
        keys, vals = merge_counts(keys, vals, *chunk)
        carried_ids, carried_docs = ids[-window:], docs[-window:]
    row, col = (keys // max(size, 1)).astype(np.int32), (keys % max(size, 1)).astype(np.int32)
    del keys
    if symmetric:
        row, col, vals = mirror(row, col, vals)
    return Cooccurrence(row, col, vals, np.asarray(vocab.words, dtype=str), vocab.counts.copy())


def zipf_cooccurrence(vocab_size: int, draws: int, seed: int = 0,
                      count_scale: float = 40.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random distinct (i, j) pairs with Zipfian word ids and counts spread around x_max:
    a stand-in for a corpus's co-occurrences in tests and benchmarks. ``(row, col, val)``."""
    rng = np.random.default_rng(whole("seed", seed))
    p = 1.0 / np.arange(1, vocab_size + 1)
    p /= p.sum()
    key = np.unique(rng.choice(vocab_size, draws, p=p) * vocab_size
                    + rng.choice(vocab_size, draws, p=p))
    val = rng.gamma(0.5, count_scale, len(key)) + 0.25
    return key // vocab_size, key % vocab_size, val


def mirror(row: np.ndarray, col: np.ndarray,
           vals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The full symmetric matrix from its upper triangle: the triangle, then its mirror image.

    A word next to itself adds to its diagonal cell from both sides, as in
    the reference, so diagonal values double (``vals`` is changed in place).
    The entries are not sorted again: GloVe shuffles them anyway, and a
    sort would need twice the memory of the result. Cost: O(nnz).
    """
    off = row != col
    vals[~off] *= 2
    return (np.concatenate((row, col[off])), np.concatenate((col, row[off])),
            np.concatenate((vals, vals[off])))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m minidist.data.cooccur CORPUS OUT.npz [options]``."""
    parser = argparse.ArgumentParser(
        prog="python -m minidist.data.cooccur",
        description="Count word co-occurrences (GloVe's rules) and save them as .npz.")
    parser.add_argument("corpus", type=path_or("text8", "synthetic"),
                        help="a UTF-8 text file or folder, 'text8' or 'synthetic'")
    parser.add_argument("out", type=output_file, help="the .npz file to write")
    parser.add_argument("--min-count", type=integer(1), default=5)
    parser.add_argument("--max-vocab", type=integer(1), default=None)
    parser.add_argument("--window", type=integer(1), default=10)
    parser.add_argument("--asymmetric", action="store_true",
                        help="count left contexts only (X[left word, right word])")
    parser.add_argument("--no-distance-weighting", action="store_true",
                        help="a pair adds 1 at any distance instead of 1/distance")
    parser.add_argument("--seed", type=integer(0), default=0, help="seed of the synthetic corpus")
    parser.add_argument("--num-tokens", type=integer(1), default=None,
                        help="size of the synthetic corpus (its default otherwise)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    source: CorpusSource = args.corpus
    try:
        if args.corpus == "synthetic":
            from minidist.data.synthetic_language import generate_corpus

            options = {} if args.num_tokens is None else {"num_tokens": args.num_tokens}
            source = generate_corpus(seed=args.seed, **options).lines
        elif args.corpus == "text8" and not os.path.exists("text8"):
            source = download_text8()
        vocab = build_vocab(source, min_count=args.min_count, max_size=args.max_vocab)
    except (DownloadError, CorpusError) as err:  # offline, not UTF-8: in their words
        parser.error(str(err))
    if not len(vocab):  # an empty .npz would only fail later, in a trainer
        parser.error(f"--min-count {args.min_count}: no word of the corpus occurs that often; "
                     "lower it, or check the corpus is not empty")
    counts = count_cooccurrences(source, vocab, window=args.window,
                                 symmetric=not args.asymmetric,
                                 distance_weighting=not args.no_distance_weighting)
    counts.save(args.out)
    print(f"{args.corpus}: {int(vocab.counts.sum()):,} tokens of {len(vocab):,} words, "
          f"{counts.nnz:,} non-zeros -> {args.out} ({time.perf_counter() - start:.1f} s)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
