"""A synthetic class: mixed submissions for timing and testing the grader.

    python -m minidist.course make-class /tmp/class --students 30 [--lab lab01_autograd]
    python -m minidist.course grade /tmp/class

For each lab, students cycle through kinds of work a real class hands in:
correct (the solution), blank (the release untouched), one task left undone
(the solution with one answer cell reverted to the release's stub),
hanging (an infinite loop in the first answer cell), and broken (not JSON).
Files are written flat, as ``<student>_<lab>.ipynb``.
"""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path

from minidist.course.release import release
from minidist.course.settings import known_labs

KINDS = ("correct", "blank", "undone", "hanging", "correct", "undone", "broken")


def _answer_cells(notebook: dict) -> list[int]:
    return [i for i, c in enumerate(notebook["cells"])
            if c.get("metadata", {}).get("nbgrader", {}).get("solution")]


def variant(kind: str, solution: dict, blank: dict, n: int) -> dict | None:
    """The notebook a student of this ``kind`` hands in (None: not a notebook)."""
    answers = _answer_cells(solution)
    if kind == "correct":
        return solution
    if kind == "blank":
        return blank
    if kind == "broken":
        return None
    notebook = copy.deepcopy(solution)
    if kind == "undone":
        cell = answers[n % len(answers)]
        notebook["cells"][cell]["source"] = blank["cells"][cell]["source"]
    else:  # hanging
        notebook["cells"][answers[0]]["source"] = "while True:\n    pass\n"
    return notebook


def make_class(root: Path, folder: Path, students: int = 30,
               labs: list[str] | None = None) -> list[Path]:
    """Write ``students`` submissions per lab (all labs, or ``labs``) into ``folder``;
    returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as scratch:
        labs = labs or known_labs(root)
        release(root, labs, dest=Path(scratch))
        for lab in labs:
            name = next((root / "solutions" / lab).glob("*.ipynb")).name
            solution = json.loads((root / "solutions" / lab / name).read_text())
            blank = json.loads((Path(scratch) / lab / name).read_text())
            for n in range(students):
                kind = KINDS[n % len(KINDS)]
                path = folder / f"student{n:02d}-{kind}_{lab}.ipynb"
                notebook = variant(kind, solution, blank, n)
                path.write_text("{ this is not a notebook" if notebook is None
                                else json.dumps(notebook, indent=1))
                written.append(path)
    return written
