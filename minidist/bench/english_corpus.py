"""An English corpus built offline, from text that package registries carry.

    pip download --no-deps gensim -d wheels/                 # its test data: Wikipedia, news
    apt-get install dict-gcide fortunes python3.11-doc       # optional: ~7 M more tokens
    python -m minidist.bench.english_corpus english.txt --gensim-wheel wheels/gensim-*.whl

Sources, each used when present: gensim's wheel (read as a zip, not
installed): the first Wikipedia articles of an English dump (markup
stripped), the Lee news corpus and 500 stemmed Wikipedia articles; Debian's
GCIDE dictionary (Webster's 1913 and additions), the fortunes, and the
sources of Python's documentation. Every paragraph or entry becomes a line
(a document), lower case, words of letters and digits. With all of them:
8.1 M tokens, what ``minidist.bench.glove --corpus`` measured in the README.
"""

from __future__ import annotations

import argparse
import bz2
import glob
import gzip
import html
import os
import re
import zipfile
from collections.abc import Iterator
from typing import TextIO

from minidist.util.arguments import output_file

WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
TEST_DATA = "gensim/test/test_data/"
WIKI = TEST_DATA + "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
GCIDE = "/usr/share/dictd/gcide.dict.dz"
FORTUNES = "/usr/share/games/fortunes/*"
PYTHON_DOCS = "/usr/share/doc/python3*/html/_sources/**/*.txt"


def write_lines(texts: Iterator[str], out: TextIO) -> int:
    """Each text's words, lower case, on one line (texts of 3 words or fewer dropped)."""
    tokens = 0
    for text in texts:
        words = WORD.findall(text.lower())
        if len(words) > 3:
            out.write(" ".join(words) + "\n")
            tokens += len(words)
    return tokens


def wikipedia(xml: str) -> Iterator[str]:
    """The paragraphs of a MediaWiki dump's articles, without templates, links or tags."""
    for article in re.finditer(r"<text[^>]*>(.*?)</text>", xml, re.S):
        text = re.sub(r"&lt;ref.*?&lt;/ref&gt;|&lt;.*?&gt;", " ", article.group(1), flags=re.S)
        for _ in range(3):  # nested templates, innermost first
            text = re.sub(r"\{\{[^{}]*\}\}", " ", text)
        text = re.sub(r"\[\[(?:[^|\]]*\|)?([^\]]*)\]\]", r"\1", text)
        yield from re.sub(r"&[a-z]+;", " ", text).split("\n\n")


GENSIM_MEMBERS = (WIKI, TEST_DATA + "lee_background.cor", TEST_DATA + "head500.noblanks.cor")


def check_wheel(wheel: str) -> None:
    """A ValueError naming what is wrong unless ``wheel`` is a zip holding the test data
    read here (checked before anything is written)."""
    if not os.path.isfile(wheel):
        raise ValueError(f"--gensim-wheel {wheel}: no file there (pip download --no-deps "
                         "gensim -d wheels/)")
    if not zipfile.is_zipfile(wheel):
        raise ValueError(f"--gensim-wheel {wheel}: not a zip file, so not a wheel")
    with zipfile.ZipFile(wheel) as archive:
        missing = sorted(set(GENSIM_MEMBERS) - set(archive.namelist()))
    if missing:
        raise ValueError(f"--gensim-wheel {wheel}: holds no {missing[0]} (is it gensim's?)")


def gensim_texts(wheel: str) -> Iterator[str]:
    with zipfile.ZipFile(wheel) as archive:
        yield from wikipedia(bz2.decompress(archive.read(WIKI)).decode("utf-8", "ignore"))
        for name in GENSIM_MEMBERS[1:]:
            yield from archive.read(name).decode("utf-8", "ignore").splitlines()


def debian_texts() -> Iterator[str]:
    for path in glob.glob(GCIDE):
        with gzip.open(path, "rt", encoding="utf-8", errors="ignore") as entries:
            yield from html.unescape(re.sub(r"<[^>]*>", " ", entries.read())).split("\n\n")
    for path in sorted(glob.glob(FORTUNES)):
        if not path.endswith((".dat", ".u8")):
            with open(path, encoding="utf-8", errors="ignore") as fortunes:
                yield from fortunes.read().split("\n%\n")
    pages = {os.path.realpath(p) for p in glob.glob(PYTHON_DOCS, recursive=True)}  # links
    for path in sorted(pages):
        with open(path, encoding="utf-8", errors="ignore") as page:
            yield from page.read().split("\n\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=output_file,
                        help="the text file to write, a document per line")
    parser.add_argument("--gensim-wheel", help="a gensim wheel (pip download --no-deps gensim)")
    args = parser.parse_args(argv)
    if args.gensim_wheel:
        try:
            check_wheel(args.gensim_wheel)
        except (ValueError, zipfile.BadZipFile) as err:
            parser.error(str(err))
    partial = args.out + ".part"  # OUT appears whole, or not at all
    try:
        with open(partial, "w", encoding="utf-8") as out:
            tokens = write_lines(gensim_texts(args.gensim_wheel), out) if args.gensim_wheel else 0
            tokens += write_lines(debian_texts(), out)
        if tokens:  # an empty corpus would only fail later, in a trainer
            os.replace(partial, args.out)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    if not tokens:
        parser.error("no source of text found: pass --gensim-wheel (pip download --no-deps "
                     "gensim) or install the Debian packages the module docstring names")
    print(f"{args.out}: {tokens:,} tokens")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
