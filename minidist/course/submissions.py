"""Finding submissions: nbgrader's ``submitted/`` tree, or a flat export from an LMS.

Two layouts are accepted, mixed if need be:

- ``<folder>/<student>/<lab>/<notebook>.ipynb`` (nbgrader's ``submitted/``; a
  course folder that contains ``submitted/`` works too);
- ``<folder>/<student>_<lab>.ipynb`` (one file per student and lab).

Nothing here runs student code. A file that cannot be graded (not JSON, no
cells, no cell with nbgrader's metadata, named for no known lab) becomes a
``Submission`` with a ``problem``, which scores zero with that sentence in the
summary instead of stopping the run. A locked cell (the lab's setup, a task's
test) missing from a notebook is put back from the release before grading
(``restore_locked_cells``), and the student's row says so: deleting a cell
nbgrader marks undeletable (another editor allows it) loses nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

MAX_NOTEBOOK_BYTES = 50 << 20


@dataclass
class Submission:
    """One student's work for one lab: notebook name -> file, or the reason it cannot run."""

    student: str
    lab: str
    notebooks: dict[str, Path] = field(default_factory=dict)
    problem: str | None = None
    notes: list[str] = field(default_factory=list)  # reported with its grade (a duplicate)
    submitted_as: str = ""  # the student's name as the submission spells it ("Jane Doe")


def safe_id(name: str) -> str:
    """A student id nbgrader and file systems accept: letters, digits, ``_ - .``; a name
    with other characters (spaces, 李明) gets 8 hex digits of its hash, so that two
    names never become one id ("Jane Doe" and "Jane_Doe", 李明 and 王芳 once did)."""
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip(".")
    if readable == name and name:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:8]
    return f"{readable.strip('_') or 'student'}-{digest}"


def notebook_problem(path: Path) -> str | None:
    """Why ``path`` is not a gradable notebook, in one sentence, or None."""
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        return (f"{path.name} is larger than {MAX_NOTEBOOK_BYTES >> 20} MB (saved outputs, "
                "most likely): clear all outputs, save, and submit it again")
    if size == 0:
        return f"{path.name} is empty: submit the notebook saved with your answers"
    data = path.read_bytes()
    if data.startswith(b"PK\x03\x04"):
        return f"{path.name} is a zip archive: submit the .ipynb notebook itself"
    try:
        notebook = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        return f"{path.name} is not a notebook (not JSON: {error})"
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        return f"{path.name} is not a notebook (no list of cells)"
    if notebook.get("nbformat") != 4:
        return f"{path.name} is not an nbformat 4 notebook"
    if not any(isinstance(cell, dict) and isinstance(cell.get("metadata"), dict)
               and cell["metadata"].get("nbgrader") for cell in notebook["cells"]):
        return (f"{path.name} has no grading metadata (the nbgrader data hidden in its cells "
                "was removed, as a tool that strips metadata does), so nothing in it can be "
                "graded: submit the notebook released for this lab with your answers filled in")
    edited = next((i for i, cell in enumerate(notebook["cells"], 1)
                   if not isinstance(_nbgrader(cell).get("grade_id", ""), str)), None)
    if edited is not None:
        return (f"{path.name}: the grading metadata of cell {edited} was edited (its grade_id "
                "is no name), so it cannot be graded: submit the notebook released for this "
                "lab with your answers filled in")
    return None


def _nbgrader(cell: object) -> dict:
    metadata = cell.get("metadata") if isinstance(cell, dict) else None
    nbgrader = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    return nbgrader if isinstance(nbgrader, dict) else {}


def _grade_id(cell: object) -> str | None:
    return _nbgrader(cell).get("grade_id")


def restore_locked_cells(notebook: dict, release: dict) -> list[str]:
    """Put each locked cell of ``release`` (setup, tests) that ``notebook`` lacks back into
    it, after the cell present that comes before it in the release (else first); the
    sentences saying which, for the student's row, and which answer cells are missing (the
    student's own work: not put back, the task graded without it, as the row then says
    instead of only the check's failure). A notebook with none of the release's
    answers and tests is another lab's (nbgrader's failure names it; every lab has a
    "setup"): nothing is put back."""
    present = {_grade_id(cell) for cell in notebook["cells"]} - {None}
    labs_own = {_grade_id(cell) for cell in release["cells"]
                if _nbgrader(cell).get("grade") or _nbgrader(cell).get("solution")} - {None}
    if not present & labs_own:
        return []
    restored, after = [], None  # the grade id of the last release cell found in the notebook
    for cell in release["cells"]:
        grade_id = _grade_id(cell)
        if grade_id is None:
            continue
        nbgrader = _nbgrader(cell)
        if grade_id not in present and nbgrader.get("locked") and not nbgrader.get("solution"):
            where = next(i + 1 for i, c in enumerate(notebook["cells"])
                         if _grade_id(c) == after) if after is not None else 0
            notebook["cells"].insert(where, json.loads(json.dumps(cell)))
            present.add(grade_id)
            restored.append(f"the locked cell {grade_id} was missing from the notebook: it "
                            "was put back from the release and graded")
        elif grade_id not in present and nbgrader.get("solution"):
            restored.append(f"the answer cell {grade_id} is missing from the notebook (was it "
                            "deleted?): its task was graded without it")
        if grade_id in present:
            after = grade_id
    return restored


# what a download or a resubmission adds to a name: "name (1)", Canvas's "name-1",
# Jupyter's "name-Copy1"
RESUBMITTED = re.compile(r"(?: ?\((\d+)\)|-(\d+)|-Copy(\d*))$", re.IGNORECASE)


def _split_flat_name(stem: str, labs: list[str]) -> tuple[str, str] | None:
    """(student, lab) of ``<student>_<lab>``, the lab matched whatever its case and with a
    download's or resubmission's suffix after it."""
    bare = RESUBMITTED.sub("", stem)
    for lab in sorted(labs, key=len, reverse=True):
        if bare.lower().endswith("_" + lab.lower()) and len(bare) > len(lab) + 1:
            return bare[: -len(lab) - 1], lab
    return None


def _newest_first(path: Path) -> tuple:
    """Sort key: a name's copies together, the highest resubmission number first, a
    notebook (.ipynb) before anything else of the same name (an HTML export beside it)."""
    found = RESUBMITTED.search(path.stem)
    number = int(next(filter(None, found.groups()), 0)) if found else -1  # "-Copy": 0
    return RESUBMITTED.sub("", path.stem).lower(), -number, path.suffix != ".ipynb", path.name


def _flat(path: Path, release: dict[str, list[str]]) -> Submission:
    parts = _split_flat_name(path.stem, list(release))
    if parts is None:
        return Submission(safe_id(path.stem), "?", problem=f"{path.name} is named for no "
                          f"known lab (expected <student>_<lab>.ipynb, labs: {', '.join(release)})",
                          submitted_as=path.stem)
    student, lab = parts
    found = _flat_parts(path, student, lab, release)
    found.submitted_as = student
    return found


def _flat_parts(path: Path, student: str, lab: str, release: dict[str, list[str]]) -> Submission:
    """The submission of ``<student>_<lab>.<suffix>``, its name split already."""
    if path.suffix != ".ipynb":
        return Submission(safe_id(student), lab, {release[lab][0]: path},
                          problem=notebook_problem(path) or f"{path.name} is no notebook "
                          "(.ipynb): submit the notebook itself")
    if len(release[lab]) != 1:
        return Submission(safe_id(student), lab, problem=f"{lab} has several notebooks: "
                          "submit it as <student>/<lab>/<notebook>.ipynb")
    return Submission(safe_id(student), lab, {release[lab][0]: path})


def _nested(student_dir: Path, release: dict[str, list[str]]) -> list[Submission]:
    found = [_loose(student_dir, path, release) for path in sorted(student_dir.glob("*.ipynb"))]
    for lab_dir in sorted(p for p in student_dir.iterdir() if p.is_dir()):
        student, lab = safe_id(student_dir.name), lab_dir.name
        if lab not in release:
            found.append(Submission(student, "?", problem=f"folder {lab_dir.name} is named for "
                                    "no known lab"))
            continue
        notebooks = {p.name: p for p in lab_dir.glob("*.ipynb") if p.name in release[lab]}
        others = sorted(p.name for p in lab_dir.glob("*.ipynb") if p.name not in release[lab])
        missing = sorted(set(release[lab]) - set(notebooks))
        notes = []
        if len(release[lab]) == 1 and missing and len(others) == 1:  # renamed: graded
            notebooks = {missing[0]: lab_dir / others[0]}
            notes, missing = [f"{others[0]} was graded as {missing[0]}"], []
        problem = f"missing notebook {', '.join(missing)}" + (
            f" (found {', '.join(others)}: name it as released)" if others else "") \
            if missing else None
        found.append(Submission(student, lab, notebooks, problem, notes))
    return found


def _loose(student_dir: Path, path: Path, release: dict[str, list[str]]) -> Submission:
    """A notebook right in a student's folder: the lab whose only notebook it is by name,
    else a sentence saying where it belongs."""
    student = safe_id(student_dir.name)
    labs = [lab for lab, names in release.items() if names == [path.name]]
    if len(labs) == 1:
        return Submission(student, labs[0], {path.name: path})
    return Submission(student, "?", problem=f"{student_dir.name}/{path.name} is not in a "
                      f"lab's folder: put it in {student_dir.name}/<lab>/")


def collect(folder: Path, release: dict[str, list[str]],
            skip: tuple[Path, ...] = ()) -> list[Submission]:
    """Every submission under ``folder``; ``release`` maps each lab to its notebook names.
    ``skip``: folders that are not submissions (the grader's output, put inside)."""
    entries = sorted(folder.iterdir(), key=_newest_first)
    if (folder / "submitted").is_dir():  # nbgrader's layout, and flat files beside it
        entries = sorted((folder / "submitted").iterdir()) + [e for e in entries if e.is_file()]
    found: list[Submission] = []
    skipped = {path.resolve() for path in skip}
    for entry in entries:
        if entry.name.startswith(".") or entry.resolve() in skipped:
            continue
        subs = _nested(entry, release) if entry.is_dir() else [_flat(entry, release)]
        for sub in subs:
            sub.submitted_as = sub.submitted_as or entry.name  # a folder: the student's name
        found.extend(subs)
    first: dict[tuple[str, str], Submission] = {}
    kept = []
    for sub in found:
        if sub.problem is None:
            sub.problem = next(filter(None, map(notebook_problem, sub.notebooks.values())), None)
        graded = first.setdefault((sub.student, sub.lab), sub)
        if sub.lab != "?" and graded is not sub:  # one grade per student and lab
            graded.notes.append(f"a second submission for this lab was ignored "
                                f"({_names(sub, folder)}; graded: {_names(graded, folder)})")
        else:
            kept.append(sub)
    return kept


def _names(sub: Submission, folder: Path) -> str:
    """The submission's notebooks, as paths within the submissions ``folder``."""
    return ", ".join(str(path.relative_to(folder)) for path in sub.notebooks.values()) \
        or "no notebook"
