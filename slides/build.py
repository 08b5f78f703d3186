"""Build the lecture decks: slides/src/*.md -> build/slides/*.html (self-contained) and PDFs.

    python slides/build.py                 # every deck, its figures, PDFs if Chromium is here
    python slides/build.py --decks 3 7     # some decks; --no-pdf; --out DIR

A deck is one Markdown file. Slides are separated by a line ``---``; a line
``Note:`` starts the slide's speaker notes (shown with the N key). The
Markdown is a small subset, enough for lectures: headings, paragraphs,
lists (nested by two spaces), fenced code, pipe tables, ``**bold**``,
``*italic*``, `` `code` ``, links, and images: ``![caption](fig:NAME)`` draws
figure NAME of ``slides/figures.py`` by running minidist now;
``![caption](file.png)`` embeds a file next to the deck.

Each HTML deck carries its styles, its viewer (slides/theme/deck.html) and
its images (as data: URLs): one file, opened offline. A figure that cannot be
drawn (its part of the library has not landed, or it raised) never fails the
build: its slide shows "figure pending" and the build lists it. PDFs come from
headless Chromium's print-to-pdf, one page per slide; without a Chromium the
build says so and skips them.
"""

from __future__ import annotations

import argparse
import base64
import html
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "src"
THEME = HERE / "theme" / "deck.html"
OUT = HERE.parent / "build" / "slides"
CHROMIUMS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
sys.path.insert(0, str(HERE))  # the modules beside this one, however it was started or loaded

from deck_markdown import inline, render  # noqa: E402


@dataclass
class Slide:
    body: list[str]  # Markdown lines
    notes: list[str] = field(default_factory=list)


def split_slides(text: str) -> list[Slide]:
    """The slides of a deck's Markdown: blocks between ``---`` lines, notes after ``Note:``."""
    slides, lines, fenced = [], [], False
    for line in text.splitlines() + ["---"]:
        if line.startswith("```"):
            fenced = not fenced
        if line.strip() == "---" and not fenced:
            if any(s.strip() for s in lines):
                slides.append(_with_notes(lines))
            lines = []
        else:
            lines.append(line)
    return slides


def _with_notes(lines: list[str]) -> Slide:
    for i, line in enumerate(lines):
        if line.startswith("Note:"):
            return Slide(lines[:i], [line[len("Note:"):]] + lines[i + 1:])
    return Slide(lines)


# ---- figures ----

class Figures:
    """Draws each named figure once per build into ``folder``; remembers what is pending."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.done, self.pending = folder, {}, {}
        folder.mkdir(parents=True, exist_ok=True)
        try:
            import figures
            self.known = figures.FIGURES
        except Exception as err:  # the library itself is missing or broken
            self.known, self.import_error = {}, f"{type(err).__name__}: {err}"
        else:
            self.import_error = None

    def html(self, name: str, caption: str) -> str:
        if name not in self.done and name not in self.pending:
            self._draw(name)
        if name in self.pending:
            return (f"<figure class='pending'><div>figure pending: <b>{html.escape(name)}</b>"
                    f"<br><small>{html.escape(self.pending[name])}</small></div>"
                    f"<figcaption>{inline(caption)}</figcaption></figure>")
        return f"<figure>{self.done[name]}<figcaption>{inline(caption)}</figcaption></figure>"

    def _draw(self, name: str) -> None:
        if name not in self.known:
            self.pending[name] = self.import_error or "not drawn by slides/figures.py yet"
            return
        path, start = self.folder / f"{name}.png", time.perf_counter()
        try:
            fragment = self.known[name](path)
        except Exception as err:  # a part of the library that has not landed, or a bug
            self.pending[name] = f"{type(err).__name__}: {err}".splitlines()[0][:300]
            print(f"  figure pending: {name} ({self.pending[name]})")
            return
        if isinstance(fragment, str):  # a table: kept beside the pictures too
            path.with_suffix(".html").write_text(fragment, encoding="utf-8")
        self.done[name] = fragment if isinstance(fragment, str) else _img(path, name)
        print(f"  figure {name} ({time.perf_counter() - start:.1f} s)")


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{data}'>"


# ---- decks ----

@dataclass
class Deck:
    source: Path
    title: str
    slides: list[Slide]
    html_path: Path
    pdf_path: Path | None = None
    figures: list[str] = field(default_factory=list)


def build_deck(source: Path, out: Path, figures: Figures) -> Deck:
    slides = split_slides(source.read_text(encoding="utf-8"))
    title = next((line[2:] for line in slides[0].body if line.startswith("# ")), source.stem)
    used: list[str] = []

    def image(caption: str, target: str) -> str:
        if target.startswith("fig:"):
            used.append(target[4:])
            return figures.html(target[4:], caption)
        return f"<figure>{_img(source.parent / target, caption)}" \
               f"<figcaption>{inline(caption)}</figcaption></figure>"

    sections = []
    for number, slide in enumerate(slides, 1):
        notes = render(slide.notes, image) if slide.notes else ""
        sections.append(f"<section class='slide' id='s{number}'>{render(slide.body, image)}"
                        f"<aside class='notes'>{notes}</aside></section>")
    page = THEME.read_text(encoding="utf-8").replace("{{title}}", html.escape(title))
    page = page.replace("{{slides}}", "\n".join(sections))
    path = out / f"{source.stem}.html"
    path.write_text(page, encoding="utf-8")
    return Deck(source, title, slides, path, figures=used)


def find_chromium() -> str | None:
    return next((p for p in map(shutil.which, CHROMIUMS) if p), None)


def print_pdf(chromium: str, deck: Deck) -> Path:
    """One page per slide, by headless Chromium's print-to-pdf of the deck's print layout."""
    pdf = deck.html_path.with_suffix(".pdf")
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", "--no-pdf-header-footer", f"--print-to-pdf={pdf}",
                    deck.html_path.as_uri()], check=True, capture_output=True, timeout=120)
    return pdf


def build(out: Path = OUT, decks: list[str] | None = None, pdf: bool = True) -> list[Deck]:
    """Build the decks whose file names start with one of ``decks`` (all by default)."""
    sources = sorted(p for p in SOURCES.glob("*.md")
                     if decks is None or any(p.name.startswith(d.zfill(2)) for d in decks))
    out.mkdir(parents=True, exist_ok=True)
    figures = Figures(out / "figures")
    built = []
    for source in sources:
        print(f"{source.name}:")
        built.append(build_deck(source, out, figures))
    chromium = find_chromium() if pdf else None
    for deck in built:
        if chromium:
            deck.pdf_path = print_pdf(chromium, deck)
        print(f"{deck.html_path.name}: {len(deck.slides)} slides, figures "
              f"{', '.join(deck.figures) or 'none'}"
              + (f"; {deck.pdf_path.name}" if deck.pdf_path else ""))
    if pdf and not chromium:
        print("PDFs skipped: no Chromium on PATH (Debian: apt-get install chromium)")
    if figures.pending:
        print("figures pending: " + "; ".join(f"{k} ({v})" for k, v in figures.pending.items()))
    return built


def main(argv: list[str] | None = None) -> int:
    from minidist.util.arguments import output_folder

    numbers = sorted(p.name[:2] for p in SOURCES.glob("*.md"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=output_folder, default=OUT)
    parser.add_argument("--decks", nargs="*", help=f"deck numbers (default: all; the decks: "
                                                    f"{' '.join(numbers)})")
    parser.add_argument("--no-pdf", action="store_true", help="HTML only")
    args = parser.parse_args(argv)
    unknown = [d for d in args.decks or [] if d.zfill(2) not in numbers]
    if unknown or args.decks == []:  # once: nothing built, and exit 0
        parser.error(f"--decks {' '.join(unknown) or 'needs a deck number'}: no such deck "
                     f"(the decks: {' '.join(numbers)})" if unknown else
                     f"--decks needs deck numbers (the decks: {' '.join(numbers)})")
    build(args.out, args.decks, pdf=not args.no_pdf)
    return 0


if __name__ == "__main__":
    sys.exit(main())
