"""Kinds of command-line value, as argparse ``type``s: a value outside its range is
argparse's usage error naming the option (exit status 2), before anything runs,
in the examples (``examples/options.py``) and the benchmarks alike.

    parser.add_argument("--batch-size", type=integer(1), default=32)
    parser.add_argument("--lr", type=number(above=0))
    parser.add_argument("--sizes", type=listing(size), default="8,64K,64M")
    parser.add_argument("--plot", type=image_file)
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KI": 1 << 10, "KIB": 1 << 10,
         "M": 1 << 20, "MB": 1 << 20, "MI": 1 << 20, "MIB": 1 << 20,
         "G": 1 << 30, "GB": 1 << 30, "GI": 1 << 30, "GIB": 1 << 30}


def integer(least: int = 1) -> Callable[[str], int]:
    """An argparse ``type``: a whole number no smaller than ``least``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < least:
            raise argparse.ArgumentTypeError(f"wants an integer >= {least}, got {text!r}")
        return value
    return parse


def number(least: float | None = None, above: float | None = None,
           most: float | None = None) -> Callable[[str], float]:
    """An argparse ``type``: a finite number, ``>= least``, ``> above`` and ``<= most``
    (each bound if given)."""
    bounds = [f"{sign} {bound:g}" for sign, bound in ((">=", least), (">", above), ("<=", most))
              if bound is not None]

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or (least is not None and value < least) or \
                (above is not None and value <= above) or (most is not None and value > most):
            raise argparse.ArgumentTypeError(
                f"wants a finite number{' ' if bounds else ''}{' and '.join(bounds)}, "
                f"got {text!r}")
        return value
    return parse


def output_file(text: str) -> str:
    """An argparse ``type``: a file the run writes when it ends (a plot, vectors), checked
    before it starts: its folder is made if missing (as ``--checkpoint-dir`` is) and
    must be writable, so a long run never ends on a path it cannot write."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file's name")
    _writable_folder(path.parent, f"the folder of {text!r}")
    return text


def output_folder(text: str) -> Path:
    """An argparse ``type``: a folder the run writes into (grades, decks, a class),
    made if missing and checked writable before the run starts, as :func:`output_file`."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file, not a folder")
    _writable_folder(path, repr(text))
    return path


def _writable_folder(folder: Path, named: str) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise argparse.ArgumentTypeError(f"cannot make {named}: {err.strerror}") from None
    try:  # a file made there and gone (os.access says yes to root, even on a read-only place)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise argparse.ArgumentTypeError(f"cannot write into {named}: {err.strerror}") from None


IMAGE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg", ".webp", ".gif", ".tif", ".tiff",
                  ".eps", ".ps", ".svgz")  # what matplotlib's savefig writes by itself (its
# .pgf needs a TeX installation, found missing only when the run ends)


def image_file(text: str) -> str:
    """An argparse ``type``: an :func:`output_file` for a plot, whose suffix names a format
    matplotlib saves (``.png``, ``.pdf``, ``.svg``, ...)."""
    if Path(text).suffix.lower() not in IMAGE_SUFFIXES:
        raise argparse.ArgumentTypeError(f"{text!r}: name the plot's file with one of "
                                         f"{', '.join(IMAGE_SUFFIXES)}")
    return output_file(text)


def path_or(*words: str) -> Callable[[str], str]:
    """An argparse ``type``: one of ``words`` (``text8``, ``synthetic``), or a file or
    folder that exists."""
    def parse(text: str) -> str:
        if text not in words and not os.path.exists(text):
            also = f" (or one of {', '.join(words)})" if words else ""
            raise argparse.ArgumentTypeError(f"no file or folder at {text!r}{also}")
        return text
    return parse


def size(text: str) -> int:
    """A positive number of bytes, with an optional binary unit: ``8``, ``64K``, ``64KiB``,
    ``1M``, ``1Gi`` (K, M and G are 1024-based)."""
    digits = text.rstrip("aAbBgGiIkKmM")
    unit = UNITS.get(text[len(digits):].upper())
    if not digits.isdigit() or unit is None or int(digits) == 0:
        raise argparse.ArgumentTypeError(f"wants a positive size in bytes such as 8, 64K or "
                                         f"1M, got {text!r}")
    return int(digits) * unit


def listing(parse: Callable[[str], T]) -> Callable[[str], list[T]]:
    """An argparse ``type``: comma-separated values, each read by ``parse``."""
    def parse_all(text: str) -> list[T]:
        if not text.strip():
            raise argparse.ArgumentTypeError("wants at least one value")
        return [parse(item.strip()) for item in text.split(",")]
    return parse_all


def one_of(names: Iterable[str]) -> Callable[[str], str]:
    """An argparse ``type`` (for a ``listing``): one of ``names``."""
    allowed = tuple(names)

    def parse(text: str) -> str:
        if text not in allowed:
            raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(allowed)}")
        return text
    return parse


def parse_quick(parser: argparse.ArgumentParser, argv: list[str], **quick: object
                ) -> argparse.Namespace:
    """``parser.parse_args(argv)`` where ``--quick`` (a flag of ``parser``) makes ``quick``'s
    values the defaults: an option given on the command line still wins (it once was
    overwritten without a word)."""
    if parser.parse_known_args(argv)[0].quick:
        parser.set_defaults(**quick)
    return parser.parse_args(argv)
