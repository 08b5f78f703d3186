"""Downloads into one cache by several callers at once (the ranks of one job), and the
temporary files a killed download leaves. No network: fake openers."""

from __future__ import annotations

import hashlib
import io
import os
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor

import pytest

from minidist.data import corpus as corpus_module
from minidist.data.corpus import download_text8
from minidist.util import download as download_module
from minidist.util.download import fetch

DATA = b"the bytes of one data file " * 4000


def overlapping_openers(data: bytes):
    """Two openers whose streams start together; the second yields its bytes only once
    ``first_done`` is set, so one caller finishes while the other is still writing."""
    both_writing = threading.Barrier(2, timeout=20)
    first_done = threading.Event()

    def opener(wait_for: threading.Event | None):
        class Stream(io.BytesIO):
            def read(self, *args):
                if self.tell() == 0:  # both have opened the file they write by now
                    both_writing.wait()
                    if wait_for is not None:
                        wait_for.wait(20)
                return super().read(*args)

        return lambda url: Stream(data)

    return opener(None), opener(first_done), first_done


def run_both(first, second, first_done):
    """Run ``first()`` and ``second()`` in two threads; both results, ``first``'s first."""
    def first_then_signal():
        try:
            return first()
        finally:
            first_done.set()

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(first_then_signal), pool.submit(second)]
        return [future.result(timeout=60) for future in futures]


@pytest.mark.timeout(120)
def test_two_callers_fetching_one_file_at_once_both_get_it(tmp_path):
    """Both streamed into NAME.download: the first to finish renamed it away, and the other
    failed with a DownloadError asking whether the network was up."""
    target, check = tmp_path / "f.bin", "sha256:" + hashlib.sha256(DATA).hexdigest()
    fast, slow, first_done = overlapping_openers(DATA)
    paths = run_both(lambda: fetch("https://a/f", target, check, fast),
                     lambda: fetch("https://a/f", target, check, slow), first_done)
    assert paths == [target, target] and target.read_bytes() == DATA
    assert os.listdir(tmp_path) == ["f.bin"]  # each removed its own temporary file


@pytest.mark.timeout(120)
def test_two_ranks_downloading_text8_at_once_both_get_it(tmp_path, monkeypatch):
    """``mpirun -n 2 ... examples.glove --corpus text8`` on a first run: every rank
    downloads text8 (unzipped into a .part file, its digest recorded) into one cache."""
    content = DATA[:5000]
    monkeypatch.setattr(corpus_module, "TEXT8_SIZE", len(content))
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("text8", content)
    fast, slow, first_done = overlapping_openers(zipped.getvalue())
    paths = run_both(lambda: download_text8(tmp_path, opener=fast),
                     lambda: download_text8(tmp_path, opener=slow), first_done)
    assert paths == [tmp_path / "text8"] * 2 and paths[0].read_bytes() == content
    assert sorted(os.listdir(tmp_path)) == ["text8", "text8.sha256"]
    assert (tmp_path / "text8.sha256").read_text() == hashlib.sha256(content).hexdigest() + "\n"


def test_a_killed_downloads_files_are_removed_a_live_ones_kept(tmp_path):
    target = tmp_path / "f.bin"
    killed = [tmp_path / "f.bin.123-00ff.download", tmp_path / "f.bin.123-00ff.part"]
    live = tmp_path / "f.bin.456-0a0b.download"
    for path in [*killed, live]:
        path.write_bytes(b"half a file")
    old = time.time() - download_module.STALE_AFTER_S - 60
    for path in killed:
        os.utime(path, (old, old))
    fetch("https://a/f", target, "sha256:" + hashlib.sha256(DATA).hexdigest(),
          lambda url: io.BytesIO(DATA))
    assert sorted(os.listdir(tmp_path)) == ["f.bin", live.name]
