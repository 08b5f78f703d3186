"""Checks of the values a library call is given: a bad one is a ``ValueError`` that names
the argument and what it got, before anything runs (``util/arguments.py`` does the same for
command lines).

    world_size = whole("world_size", world_size, least=1)
    delay = finite("delay", delay, least=0.0)
    eta = positive("eta", eta)
"""

from __future__ import annotations

import math
from numbers import Integral, Real


def whole(name: str, value: object, least: int = 0) -> int:
    """``value`` as an int, when it is an integer (not a bool) no smaller than ``least``."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    return int(value)


def finite(name: str, value: object, least: float = 0.0) -> float:
    """``value`` as a float, when it is a finite real number no smaller than ``least``."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) \
            or value < least:
        raise ValueError(f"{name} must be a finite number >= {least:g}, got {value!r}")
    return float(value)


def positive(name: str, value: object) -> float:
    """``value`` as a float, when it is a finite real number > 0 (not a bool)."""
    try:
        number = finite(name, value)
    except ValueError:
        number = 0.0
    if number <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return number
