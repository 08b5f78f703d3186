"""The decks in a real browser: headless Chromium opens each deck, finds as many slides as its
source has, shows each one (a screenshot, none blank, the right one visible), logs no console
error; the PDFs have a page per slide. Skipped where no Chromium is installed."""

from __future__ import annotations

import io
import re

import browser
import numpy as np
import pytest
from test_slides import build

pytestmark = pytest.mark.skipif(
    browser.find_chromium() is None,
    reason="no Chromium on PATH to open the decks (Debian: apt-get install chromium)")


@pytest.fixture(scope="module")
def decks(tmp_path_factory):
    pytest.importorskip("websocket", reason="websocket-client drives Chromium's DevTools")
    out = tmp_path_factory.mktemp("slides")
    return build.build(out, pdf=True), out


def _ink(png: bytes) -> float:
    """The share of pixels that differ from the slide's background colour."""
    from matplotlib.image import imread

    pixels = imread(io.BytesIO(png))[..., :3]
    background = pixels[2, 2]
    return float(np.mean(np.abs(pixels - background).sum(axis=-1) > 0.1))


def test_every_slide_shows_in_chromium(decks):
    built, out = decks
    shots = out / "screenshots"
    shots.mkdir()
    with browser.Browser() as page:
        for deck in built:
            page.open(deck.html_path.as_uri())
            count = page.evaluate("document.querySelectorAll('.slide').length")
            assert count == len(deck.slides), deck.html_path.name
            for number in range(1, count + 1):
                page.evaluate(f"show({number - 1})")
                assert page.evaluate("document.querySelector('.slide.current').id") \
                    == f"s{number}"
                png = page.screenshot()
                (shots / f"{deck.html_path.stem}_{number:02d}.png").write_bytes(png)
                assert _ink(png) > 0.005, f"{deck.html_path.name} slide {number} is blank"
            assert page.evaluate("document.getElementById('counter').textContent") \
                == f"{count} / {count}"
        assert page.errors == []


def test_pdfs_have_a_page_per_slide(decks):
    built, _ = decks
    for deck in built:
        pages = re.findall(rb"/Type\s*/Page[^s]", deck.pdf_path.read_bytes())
        assert len(pages) == len(deck.slides), deck.pdf_path.name
