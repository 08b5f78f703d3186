"""The lecture decks: `make slides` builds seven self-contained HTML decks from slides/src,
with the slide counts of their sources and every figure drawn or named pending."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPEC = importlib.util.spec_from_file_location("slides_build", ROOT / "slides" / "build.py")
build = sys.modules["slides_build"] = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(build)

SLIDE = re.compile(r"<section class='slide'")


@pytest.fixture(scope="module")
def decks(tmp_path_factory):
    out = tmp_path_factory.mktemp("slides")
    return build.build(out, pdf=False), out


def test_seven_decks_with_their_sources_slide_counts(decks):
    built, out = decks
    assert [d.source.name[:2] for d in built] == ["01", "02", "03", "04", "05", "06", "07"]
    for deck in built:
        page = deck.html_path.read_text(encoding="utf-8")
        source = build.split_slides(deck.source.read_text(encoding="utf-8"))
        assert len(SLIDE.findall(page)) == len(source) == len(deck.slides) >= 6, deck.source
        assert page.count("<h1>") == 1 and "<h2>Lab" in page.split("<section")[-1], (
            f"{deck.source.name}: one title slide, and the last slide names its lab")
        assert "<pre><code>" in page.split("<section")[-1], f"{deck.source.name}: commands"


def test_decks_are_self_contained(decks):
    built, _ = decks
    for deck in built:
        page = deck.html_path.read_text(encoding="utf-8")
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", page), deck.source.name
        assert "<script>" in page and "{{" not in page, deck.source.name


def test_every_figure_is_drawn_or_named_pending(decks):
    built, out = decks
    for deck in built:
        page = deck.html_path.read_text(encoding="utf-8")
        assert deck.figures, f"{deck.source.name} draws no figure"
        assert page.count("<figure") == len(deck.figures), deck.source.name
        for name in deck.figures:
            drawn = any((out / "figures" / f"{name}{ext}").exists() for ext in (".png", ".html"))
            assert drawn or f"figure pending: <b>{name}</b>" in page, name


def test_a_missing_or_failing_figure_is_pending_not_fatal(tmp_path, capsys):
    source = tmp_path / "09_test.md"
    source.write_text("# A deck\n\n![never written](fig:not_written)\n---\n## Two\n\n"
                      "![raises](fig:raises)\n\nNote: say this\n", encoding="utf-8")
    figures = build.Figures(tmp_path / "figures")
    figures.known = {"raises": lambda path: 1 / 0}
    deck = build.build_deck(source, tmp_path, figures)
    page = deck.html_path.read_text(encoding="utf-8")
    assert len(deck.slides) == 2 and deck.figures == ["not_written", "raises"]
    assert "figure pending: <b>not_written</b>" in page
    assert "figure pending: <b>raises</b>" in page and "ZeroDivisionError" in page
    assert "<aside class='notes'><p>say this</p></aside>" in page
    assert "figure pending: raises" in capsys.readouterr().out


@pytest.mark.parametrize("argv, said", [
    (["--decks", "9"], "--decks 9: no such deck (the decks: 01 02 03 04 05 06 07)"),
    (["--decks", "3", "abc"], "--decks abc: no such deck"),
    (["--decks"], "--decks needs deck numbers"),
    (["--out", "{tmp}/file/out"], "cannot make '{tmp}/file/out'"),
])
def test_a_deck_that_is_not_there_is_a_usage_error(tmp_path, capsys, argv, said):
    """`--decks 9` built nothing and exited 0; an --out under a file gave a traceback."""
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit) as ended:
        build.main([*(word.format(tmp=tmp_path) for word in argv), "--no-pdf"])
    assert ended.value.code == 2 and said.format(tmp=tmp_path) in capsys.readouterr().err


def test_markdown_subset():
    html = build.render(["- a", "  - b", "  continued", "- c", "", "| x | y |", "|---|---|",
                         "| `1` | **2** |", "", "```", "a < b", "```"], lambda c, t: "")
    assert "<ul><li>a<ul><li>b continued</li></ul></li><li>c</li></ul>" in html
    assert "<td><code>1</code></td><td><strong>2</strong></td>" in html
    assert "<pre><code>a &lt; b</code></pre>" in html
