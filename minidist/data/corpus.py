"""Text corpora for word vectors: token lines from files, folders or memory; text8.

A corpus, for GloVe, is a sequence of *documents*, each a sequence of
tokens. As in the reference GloVe tools, a token is a run of characters
between whitespace (no lower-casing, no punctuation rules: prepare the text
first if you want them), and **a line is a document**: the co-occurrence
window never reaches across a line break.

Three kinds of source are accepted wherever a corpus is expected
(:data:`CorpusSource`):

- a list (or any iterable) of token lines, e.g. ``[["the", "cat"], ...]``;
- the path of a UTF-8 text file;
- the path of a folder: its files in sorted order, sub-folders included,
  hidden files (names starting with ``.``) skipped.

Files are read in *pieces* of at most ``max_chars`` characters, never a
whole line at once: text8, the standard 100 MB Wikipedia sample, is one
single line of 17 M tokens, and 17 M Python strings would take over a
gigabyte. Each piece says whether it ends its line (:class:`TokenPiece`);
a token cut by a piece boundary is carried over whole to the next piece.

text8 itself is fetched by :func:`download_text8` on a machine with a
network, once, into the cache folder (``$MINIDIST_DATA/text8`` or
``~/.cache/minidist/text8``), verified and written atomically, as MNIST is
(:func:`minidist.util.download.fetch`). Tests never download: they pass a
fake opener.
"""

from __future__ import annotations

import codecs
import os
import shutil
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple, TextIO

from minidist.util.download import (
    ChecksumError,
    Opener,
    cache_folder,
    fetch,
    file_digest,
    temporary_path,
    urlopen_with_timeout,
)

CorpusSource = str | os.PathLike | Iterable[list[str]]

TEXT8_URL = "http://mattmahoney.net/dc/text8.zip"
TEXT8_SIZE = 100_000_000  # bytes of the unzipped file, as published with it
# No SHA-256 of text8 is published with it: the first download records the
# digest of the file it verified by size, and later loads check against it.
TEXT8_SHA256_FILE = "text8.sha256"
MAX_PIECE_CHARS = 1 << 20


class CorpusError(ValueError):
    """A corpus file that cannot be read as UTF-8 text; the message names it and the byte."""


class TokenPiece(NamedTuple):
    """Consecutive tokens of one line; ``ends_line`` is False when the line goes on."""

    tokens: list[str]
    ends_line: bool


def corpus_files(path: str | os.PathLike) -> list[Path]:
    """``[path]`` for a file; for a folder, its non-hidden files, recursively, sorted."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"no corpus file or folder at {path}")
    files = [file for file in sorted(path.rglob("*"))
             if file.is_file() and not any(part.startswith(".")
                                           for part in file.relative_to(path).parts)]
    if not files:
        raise FileNotFoundError(f"the corpus folder {path} holds no files")
    return files


def iter_file_pieces(path: str | os.PathLike,
                     max_chars: int = MAX_PIECE_CHARS) -> Iterator[TokenPiece]:
    """The tokens of a UTF-8 text file, at most ``max_chars`` characters per piece.

    Cost: one sequential read of the file; memory O(max_chars). A file that is not
    UTF-8 raises :class:`CorpusError` (a ValueError) naming it and its first bad byte.
    """
    with open(path, encoding="utf-8-sig") as file:  # -sig: a leading BOM is no character
        carried, ends_line = "", True  # carried: the start of a token cut by the last read
        while text := _read_line(file, path, max_chars):
            ends_line = text.endswith("\n")
            tokens = (carried + text).split()
            carried = ""
            if not ends_line and not text[-1].isspace() and tokens:
                carried = tokens.pop()  # may go on in the next read
            yield TokenPiece(tokens, ends_line)
        if not ends_line:  # the file's last line has no newline
            yield TokenPiece([carried] if carried else [], True)


def _read_line(file: TextIO, path: str | os.PathLike, max_chars: int) -> str:
    """``file.readline(max_chars)``; a decoding error becomes a CorpusError naming the file."""
    try:
        return file.readline(max_chars)
    except UnicodeDecodeError as err:
        raise CorpusError(f"{path}: not UTF-8 text ({err.reason} at byte "
                          f"{first_bad_byte(path)}); convert it to UTF-8 first") from None


def first_bad_byte(path: str | os.PathLike) -> int:
    """The offset of the first byte of ``path`` that is not valid UTF-8 (-1: none).
    Read again from the start, only once a read has failed."""
    decoder, offset = codecs.getincrementaldecoder("utf-8")(), 0  # offset: bytes fed
    with open(path, "rb") as file:
        while True:
            block = file.read(1 << 20)
            pending = len(decoder.getstate()[0])  # an unfinished character carried over
            try:
                decoder.decode(block, final=not block)
            except UnicodeDecodeError as err:  # err.start counts from the carried bytes
                return offset - pending + err.start
            if not block:
                return -1
            offset += len(block)


def iter_pieces(source: CorpusSource, max_chars: int = MAX_PIECE_CHARS) -> Iterator[TokenPiece]:
    """The pieces of any corpus source: token lines, a text file or a folder of them.

    A file's last line ends with the file, newline or not: no window spans two files.
    """
    if isinstance(source, (str, os.PathLike)):
        for file in corpus_files(source):
            yield from iter_file_pieces(file, max_chars)
    else:
        for line in source:
            if isinstance(line, str):
                raise TypeError("a corpus given in memory is a list of token lists, "
                                "not a list of strings: split each line first")
            yield TokenPiece(list(line), True)


def read_lines(source: CorpusSource) -> Iterator[list[str]]:
    """The token lines of a source, each line whole (fine unless lines are huge)."""
    line: list[str] = []
    for piece in iter_pieces(source):
        line.extend(piece.tokens)
        if piece.ends_line:
            if line:
                yield line
            line = []


def verify_text8(path: Path) -> None:
    """Raise :class:`ChecksumError` unless ``path`` has text8's size (and recorded digest)."""
    size = path.stat().st_size
    if size != TEXT8_SIZE:
        raise ChecksumError(f"{path}: {size} bytes, text8 has {TEXT8_SIZE}")
    record = path.with_name(TEXT8_SHA256_FILE)
    if record.exists():
        expected, found = record.read_text().strip(), file_digest(path)
        if found != expected:
            raise ChecksumError(f"{path}: SHA-256 {found}, recorded {expected} in {record} "
                                "(delete that file to accept another copy)")


def unzip_text8(zipped: Path, out: Path) -> None:
    """Write the ``text8`` member of the zip ``zipped`` to ``out``."""
    try:
        with zipfile.ZipFile(zipped) as archive, archive.open("text8") as member, \
                open(out, "wb") as file:
            shutil.copyfileobj(member, file)
    except (zipfile.BadZipFile, KeyError) as error:
        raise ChecksumError(f"not a zip holding text8: {type(error).__name__}: {error}") from None


def download_text8(cache_dir: str | os.PathLike | None = None, url: str = TEXT8_URL,
                   opener: Opener = urlopen_with_timeout) -> Path:
    """The path of the unzipped text8 file, downloading it first if it is not cached.

    ``cache_dir`` defaults to ``$MINIDIST_DATA/text8`` (else
    ``~/.cache/minidist/text8``). The zip's ``text8`` member must be exactly
    100,000,000 bytes before it is kept (atomically); its SHA-256 is then
    recorded next to it in ``text8.sha256`` and checked on every later call.
    ``opener`` maps a URL to a binary stream (tests pass a fake).

    Cost: a 31 MB download and a 100 MB write, once.
    """
    folder = Path(cache_dir) if cache_dir is not None else cache_folder("text8")
    target = fetch(url, folder / "text8", verify_text8, opener, unpack=unzip_text8)
    record = folder / TEXT8_SHA256_FILE
    if not record.exists():  # another rank may be writing it too: each its own file
        partial = temporary_path(record, ".part")
        try:
            partial.write_text(file_digest(target) + "\n")
            os.replace(partial, record)
        finally:
            partial.unlink(missing_ok=True)
    return target
