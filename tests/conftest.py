"""Registers one pytest marker per graded lab task (the grade ids of solutions/*/*.ipynb)."""

import json
from pathlib import Path

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"


def pytest_configure(config):
    for notebook in sorted(SOLUTIONS.glob("*/*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("grade") and not meta.get("solution"):
                config.addinivalue_line("markers", f"{meta['grade_id']}: {notebook.stem} task")
