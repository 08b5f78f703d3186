"""Lab 8's solution notebook run as a kernel runs it: the setup cell, answers, then the checks.

``python tests/lab08_cells.py FOLDER`` reads ``FOLDER/answers.json`` (grade id -> source),
runs the cells with those answers in this fresh process, and writes the checks that failed
to ``FOLDER/failed.json``. Task 4's ``check_zero_memory`` counts the memory of the process it
runs in; a notebook graded runs in a kernel of its own, and so does a fixture here, not in a
test session that holds whatever a thousand tests before it left.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from notebook_source import SOLUTIONS

from minidist.labkit import CheckFailed

SOLUTION = SOLUTIONS / "lab08_model_parallel" / "lab08_model_parallel.ipynb"
CELLS = json.loads(SOLUTION.read_text())["cells"]


def run_cells(answers: dict[str, str]) -> tuple[dict, dict[str, str]]:
    """The setup cell and ``answers`` (grade id -> source) executed as the notebook runs
    them, then every check cell of the solution, hidden tests included: the namespace and
    the checks that failed (grade id -> what the check said), in notebook order."""
    namespace: dict = {}
    failed = {}
    for cell in CELLS:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade_id") == "setup":
            exec("".join(cell["source"]), namespace)
        elif meta.get("solution"):
            exec(answers.get(meta["grade_id"], "".join(cell["source"])), namespace)
        elif meta.get("grade"):
            try:
                exec("".join(cell["source"]), namespace)
            except CheckFailed as failure:
                failed[meta["grade_id"]] = str(failure)
    return namespace, failed


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    failed = run_cells(json.loads((folder / "answers.json").read_text()))[1]
    (folder / "failed.json").write_text(json.dumps(failed))
