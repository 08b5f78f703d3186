"""Registers one pytest marker per graded lab task (the grade ids of solutions/*/*.ipynb),
and keeps hypothesis off the wall clock.

No test may depend on the machine's speed (README, Testing): hypothesis
would fail an example that runs past its 200 ms deadline, or data that is
slow to generate, on a busy machine. Neither is a bug, so this profile turns
both off for every property test, including ones written later.
"""

import json
from pathlib import Path

from hypothesis import HealthCheck, settings

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"

settings.register_profile("any_machine_speed", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("any_machine_speed")


def pytest_configure(config):
    for notebook in sorted(SOLUTIONS.glob("*/*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("grade") and not meta.get("solution"):
                config.addinivalue_line("markers", f"{meta['grade_id']}: {notebook.stem} task")
