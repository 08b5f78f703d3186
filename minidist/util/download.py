"""Downloading a data file once, verified: the one way minidist fetches data (MNIST, text8).

    path = fetch(["https://mirror-a/x.gz", "https://mirror-b/x.gz"],
                 cache_folder("mnist") / "x.gz", "md5:f68b3c2dcbeaaa9fbdd348bbdeb94873")

1. A file already at the target that passes the check is used as it is; a
   damaged one is removed.
2. Otherwise each URL in turn is streamed to a file of this call's own,
   ``NAME.<pid>-<random>.download``; ``unpack``, if given, makes the file to
   keep from it (text8: one member of a zip) as ``NAME.<pid>-<random>.part``;
   that file is checked, then renamed to ``NAME``. The rename is atomic, so
   the cache never holds a half-written file under the real name, even if
   the process is killed mid-download; and processes that fetch one file at
   once (the ranks of one job) each write their own copy, the last rename
   replacing a verified file with an identical one. A call removes its own
   temporary files, and those nobody has written for STALE_AFTER_S (left by
   a killed process: a live download writes at least every
   DOWNLOAD_TIMEOUT_S).
3. A URL that fails (a network error, a wrong checksum) moves on to the
   next; when all fail, :class:`DownloadError` names each URL and what went
   wrong there, and the folder to copy the file into by hand.

The check is a known hash, ``"sha256:<hex>"`` or ``"md5:<hex>"`` (pooch's
spelling; a bare digest is SHA-256), or, for a file published without one,
a function that raises :class:`ChecksumError` (text8 checks its size).
Tests never touch the network: they pass ``file://`` URLs or a fake ``opener``.
"""

from __future__ import annotations

import glob
import hashlib
import os
import secrets
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

DOWNLOAD_TIMEOUT_S = 60
STALE_AFTER_S = 3600  # a temporary file untouched this long belongs to no live download
TEMPORARY_SUFFIXES = (".download", ".part")

Opener = Callable[[str], BinaryIO]
Check = str | Callable[[Path], None]


class ChecksumError(ValueError):
    """A file that is not the one expected (its hash, or its size, is wrong)."""


class DownloadError(RuntimeError):
    """No URL could deliver a file: names each URL and what went wrong there."""


def cache_folder(name: str) -> Path:
    """``$MINIDIST_DATA/name`` if ``MINIDIST_DATA`` is set, else ``~/.cache/minidist/name``."""
    root = os.environ.get("MINIDIST_DATA")
    base = Path(root) if root else Path.home() / ".cache" / "minidist"
    return base.expanduser() / name


def file_digest(path: str | os.PathLike, algorithm: str = "sha256",
                chunk_size: int = 1 << 20) -> str:
    """The hex digest of a file, read in chunks (constant memory)."""
    digest = hashlib.new(algorithm, usedforsecurity=False)
    with open(path, "rb") as file:
        while chunk := file.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def known_hash(check: str) -> tuple[str, str]:
    """``"md5:ab12..."`` -> ``("md5", "ab12...")``; a bare digest is SHA-256."""
    algorithm, _, expected = check.rpartition(":")
    algorithm = algorithm or "sha256"
    if algorithm not in ("sha256", "md5") or not expected:
        raise ValueError(f"unknown hash {check!r}: write 'sha256:<hex>' or 'md5:<hex>'")
    return algorithm, expected.lower()


def verify(path: Path, check: Check) -> None:
    """Raise :class:`ChecksumError` unless ``path`` passes ``check`` (a known hash or a test)."""
    if callable(check):
        check(path)
        return
    algorithm, expected = known_hash(check)
    found = file_digest(path, algorithm)
    if found != expected:
        raise ChecksumError(f"{path}: {algorithm} {found}, expected {expected} "
                            "(an incomplete download, or a different file)")


def urlopen_with_timeout(url: str) -> BinaryIO:
    """Open ``url`` for reading, giving up after DOWNLOAD_TIMEOUT_S seconds of silence."""
    import urllib.request  # imported here: it pulls in http and ssl, needed only to download

    return urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S)


def fetch(urls: str | Sequence[str], target: str | os.PathLike, check: Check,
          opener: Opener = urlopen_with_timeout,
          unpack: Callable[[Path, Path], None] | None = None) -> Path:
    """``target``, verified by ``check``: the cached copy, else downloaded from ``urls``.

    ``urls`` are tried in order (one URL may be given as a string); ``opener``
    maps a URL to a readable binary stream (``urllib.request.urlopen`` by
    default); ``unpack(downloaded, out)`` writes the file to keep from what
    was downloaded (raising :class:`ChecksumError` if it cannot). Cost: one
    download and one read of the file to check it.
    """
    if not callable(check):
        known_hash(check)  # a malformed hash is the caller's error, not a failed download
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:                                                            # 1. the cached copy
        verify(target, check)
        return target
    except FileNotFoundError:
        pass  # not cached (or removed, as damaged, by another process meanwhile)
    except ChecksumError:
        target.unlink(missing_ok=True)  # a stale or damaged copy: fetch it again
    remove_stale_temporaries(target)
    downloaded = temporary_path(target, ".download")
    partial = temporary_path(target, ".part") if unpack else downloaded
    failures = []
    for url in [urls] if isinstance(urls, str) else urls:           # 2. each URL in turn
        try:
            with opener(url) as response, open(downloaded, "wb") as file:
                shutil.copyfileobj(response, file)
            if unpack is not None:
                unpack(downloaded, partial)
            verify(partial, check)
            os.replace(partial, target)  # atomic: the real name appears complete or not at all
            return target
        except (OSError, ChecksumError) as error:  # URLError and timeouts are OSErrors
            failures.append(f"  {url}: {type(error).__name__}: {error}")
        finally:
            downloaded.unlink(missing_ok=True)
            partial.unlink(missing_ok=True)
    raise DownloadError(f"could not download {target.name} (is the network up?):\n"  # 3.
                        + "\n".join(failures)
                        + f"\nor copy {target.name} into {target.parent} by hand")


def temporary_path(target: Path, suffix: str) -> Path:
    """A name beside ``target`` that no other process or thread uses:
    ``NAME.<pid>-<random><suffix>`` (suffix one of TEMPORARY_SUFFIXES)."""
    return target.with_name(f"{target.name}.{os.getpid()}-{secrets.token_hex(8)}{suffix}")


def remove_stale_temporaries(target: Path) -> None:
    """Remove the temporary files of ``target`` that nobody has written for STALE_AFTER_S:
    those of a killed download (another live download's are newer, and are kept)."""
    for suffix in TEMPORARY_SUFFIXES:
        for path in target.parent.glob(f"{glob.escape(target.name)}.*-*{suffix}"):
            try:
                if time.time() - path.stat().st_mtime > STALE_AFTER_S:
                    path.unlink()
            except FileNotFoundError:
                pass  # removed meanwhile by another process
