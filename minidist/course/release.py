"""Release: turn the source notebooks in ``solutions/`` into the student notebooks in ``labs/``.

nbgrader's ``generate_assignment`` does the work: it deletes what lies between
``### BEGIN SOLUTION`` / ``### END SOLUTION`` (leaving ``# YOUR CODE HERE``),
deletes hidden tests, clears outputs, locks the test cells and records every
graded cell (with its hidden tests) in a gradebook. We run it in a scratch
course directory, so the repository never holds a gradebook, then normalise
the notebooks (cell ids, key order) so that releasing twice gives the same
bytes and ``labs/`` can be checked against a fresh release.

Cost: one nbgrader run per lab, forked from a process that imported nbgrader
once (``nbgrader_fork.py``), about a second each.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from minidist.course.isolation import run_nbgrader_isolated
from minidist.course.nbgrader_fork import ForkServer
from minidist.course.settings import known_labs
from minidist.util.mpiexec import ONE_THREAD


def nbgrader_env(home: Path | None = None) -> dict[str, str]:
    """The environment of an nbgrader subprocess: the venv's bin/ first (nbgrader runs alembic)."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(ONE_THREAD)
    if home is not None:
        env["HOME"] = str(home)
    return env


def build_course(root: Path, labs: list[str], course: Path,
                 server: ForkServer | None = None) -> None:
    """Make ``course`` an nbgrader course holding ``labs``: source/, release/, gradebook.db.
    Each lab's ``nbgrader generate_assignment`` is a run of ``server`` (one of its own when
    none is given)."""
    own = server is None
    server = server or ForkServer()
    try:
        for lab in labs:
            shutil.copytree(root / "solutions" / lab, course / "source" / lab,
                            ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
            argv = ["generate_assignment", lab, "--force", f"--CourseDirectory.root={course}",
                    f"--CourseDirectory.db_url=sqlite:///{course / 'gradebook.db'}"]
            returncode, log = run_nbgrader_isolated(server, argv, course, nbgrader_env(course),
                                                    timeout=300)
            if returncode != 0:
                raise RuntimeError(f"nbgrader generate_assignment {lab} failed:\n{log}")
    finally:
        if own:
            server.close()


def normalise_notebook(path: Path) -> None:
    """Rewrite a notebook deterministically: no outputs, stable cell ids, sorted keys."""
    notebook = json.loads(path.read_text())
    for index, cell in enumerate(notebook["cells"]):
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        cell["id"] = grade_id or f"cell-{index:03d}"
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    path.write_text(json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


def release(root: Path, labs: list[str] | None = None, dest: Path | None = None) -> list[Path]:
    """Regenerate ``dest`` (default ``root/labs``) from ``root/solutions``; list the notebooks."""
    labs = labs or known_labs(root)
    dest = dest or root / "labs"
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="minidist-release-") as scratch:
        course = Path(scratch)
        build_course(root, labs, course)
        for lab in labs:
            shutil.rmtree(dest / lab, ignore_errors=True)
            shutil.copytree(course / "release" / lab, dest / lab)
            for notebook in sorted((dest / lab).glob("*.ipynb")):
                normalise_notebook(notebook)
                written.append(notebook)
    return written
