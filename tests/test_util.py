"""minidist.util: the helpers each written once (the epoch shuffle, verified downloads)."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest

from minidist.util import epoch_order
from minidist.util.download import ChecksumError, DownloadError, cache_folder, fetch, verify

# ---------------------------------------------------------------- the epoch shuffle


def test_epoch_order_depends_only_on_seed_and_epoch():
    first = epoch_order(50, seed=3, epoch=2)
    np.testing.assert_array_equal(first, epoch_order(50, 3, 2))
    assert sorted(first) == list(range(50)) and first.dtype == np.int64
    assert not np.array_equal(first, epoch_order(50, 3, 3))
    assert not np.array_equal(first, epoch_order(50, 4, 2))
    np.testing.assert_array_equal(first, np.random.default_rng((3, 2)).permutation(50))
    np.testing.assert_array_equal(epoch_order(5, 3, 2, shuffle=False), np.arange(5))


def test_epoch_order_names_bad_arguments():
    with pytest.raises(ValueError, match="n must be >= 0"):
        epoch_order(-1, 0, 0)
    with pytest.raises(ValueError, match="seed and epoch must be >= 0, got 0 and -1"):
        epoch_order(4, 0, -1)


# ---------------------------------------------------------------- verified downloads


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_fetch_from_a_file_url_then_from_the_cache(tmp_path):
    source = tmp_path / "served.bin"
    source.write_bytes(b"weights" * 1000)
    target = tmp_path / "cache" / "file.bin"
    assert fetch(source.as_uri(), target, sha256(source.read_bytes())) == target
    assert target.read_bytes() == source.read_bytes()

    def must_not_open(url):
        raise AssertionError(f"opened {url} although the cached copy is verified")

    assert fetch("https://example.invalid/x", target, sha256(source.read_bytes()),
                 opener=must_not_open) == target


def test_fetch_tries_each_url_and_names_every_failure(tmp_path):
    data = b"the right bytes"
    served = {"https://a/x": b"the wrong bytes", "https://c/x": data}

    def opener(url):
        if url not in served:
            raise OSError("connection refused")
        return io.BytesIO(served[url])

    target = tmp_path / "x"
    fetch(["https://a/x", "https://b/x", "https://c/x"], target, sha256(data), opener)
    assert target.read_bytes() == data
    target.unlink()
    with pytest.raises(DownloadError) as error:
        fetch(["https://a/x", "https://b/x"], target, sha256(data), opener)
    message = str(error.value)
    assert "https://a/x: ChecksumError" in message and "https://b/x: OSError" in message
    assert f"copy x into {tmp_path} by hand" in message
    assert list(tmp_path.iterdir()) == []  # no half-written file under any name


def test_fetch_replaces_a_damaged_copy_and_unpacks(tmp_path):
    target = tmp_path / "member"
    target.write_bytes(b"damaged")

    def unpack(downloaded, out):
        out.write_bytes(downloaded.read_bytes().upper())

    fetch("https://x/archive", target, sha256(b"PAYLOAD"),
          opener=lambda url: io.BytesIO(b"payload"), unpack=unpack)
    assert target.read_bytes() == b"PAYLOAD"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["member"]


def test_verify_takes_md5_sha256_or_a_function(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    verify(path, "md5:" + hashlib.md5(b"abc").hexdigest())
    verify(path, hashlib.sha256(b"abc").hexdigest().upper())  # bare digest: SHA-256
    with pytest.raises(ChecksumError, match="sha256 ba7816bf.*expected 00"):
        verify(path, "sha256:00")

    def three_bytes(p):
        if p.stat().st_size != 3:
            raise ChecksumError("not 3 bytes")

    verify(path, three_bytes)
    with pytest.raises(ValueError, match="unknown hash 'sha1:ab'"):
        fetch("https://x/", tmp_path / "g", "sha1:ab", opener=lambda url: io.BytesIO(b""))


def test_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("MINIDIST_DATA", str(tmp_path))
    assert cache_folder("text8") == tmp_path / "text8"
    monkeypatch.delenv("MINIDIST_DATA")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_folder("mnist") == tmp_path / "home" / ".cache" / "minidist" / "mnist"
