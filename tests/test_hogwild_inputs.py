"""run_hogwild's arguments, refused by name before any worker starts: a bool was one
worker, a negative epoch count an empty run, a misnamed written array a KeyError after the
whole run, a string of workers a comparison error."""

from __future__ import annotations

import numpy as np
import pytest

from minidist.parallel.hogwild import run_hogwild


def never_run(shared, rank, workers, sync):
    raise AssertionError("no worker may start")


@pytest.mark.parametrize("options, said", [
    (dict(workers=True), r"workers must be an integer >= 1, got True"),
    (dict(workers="2"), r"workers must be an integer >= 1, got '2'"),
    (dict(workers=0), r"workers must be an integer >= 1, got 0"),
    (dict(epochs=-1), r"epochs must be an integer >= 0, got -1"),
    (dict(epochs=1.5), r"epochs must be an integer >= 0, got 1.5"),
    (dict(written=["v"]), r"written must name arrays of \['w'\], got \['v'\]"),
    (dict(written="w"), r"written must name arrays of \['w'\], got 'w'"),
    (dict(timeout=float("nan")), r"timeout must be a finite number >= 0, got nan"),
    (dict(arrays=[np.zeros(3)]), r"arrays must be a dict of name -> numpy array, got list"),
])
def test_bad_arguments_are_named_before_any_worker_starts(options, said):
    call = {**dict(arrays={"w": np.zeros(4)}, workers=2, epochs=1, written=["w"]), **options}
    with pytest.raises((ValueError, TypeError), match=said):
        run_hogwild(never_run, **call)
