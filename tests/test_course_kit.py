"""The course kit, proved with real nbgrader: release, isolation, and every lab's grades.

One class of submissions is graded once per session (``graded_class``): each
lab's solution, its untouched release, the wrong answers in
``tests/fixtures/labNN/`` and a set of hostile notebooks built from the first
lab. Every test then reads its row. Later labs plug in by adding
``solutions/<lab>/`` and ``tests/fixtures/labNN/expected_losses.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from minidist.course.grade import grade
from minidist.course.release import release
from minidist.course.settings import course_root, known_labs

ROOT = course_root()
LABS = known_labs(ROOT)
FIXTURES = Path(__file__).parent / "fixtures"
TOKEN = "minidist-left-behind-7f3a"
CELL_TIMEOUT = 30  # no cell of a lab takes 3 s here, nor 10 s on a machine kept busy
# Grading the class (~70 notebooks, two at a time) takes minutes, 3-4 times as long while
# other work keeps the cores busy; each notebook is bounded by its lab's limits, so this
# only stops a hang.
CLASS_TIMEOUT = 3600
pytestmark = pytest.mark.skipif(shutil.which("alembic") is None and not (
    Path(os.sys.executable).parent / "alembic").exists(), reason="nbgrader is not installed")


def notebooks(folder: Path) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(folder.glob("*.ipynb"))}


def student_copy(released: dict, solution: dict, edits: dict[str, str] | None = None) -> dict:
    """The release with every answer cell filled from the solution; ``edits`` replace cells."""
    filled = json.loads(json.dumps(released))
    answers = {c["metadata"]["nbgrader"]["grade_id"]: c for c in solution["cells"]
               if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    for cell in filled["cells"]:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            source = "".join(answers[grade_id]["source"])
            cell["source"] = "\n".join(line for line in source.split("\n")
                                       if "### BEGIN SOLUTION" not in line
                                       and "### END SOLUTION" not in line)
    for grade_id, source in (edits or {}).items():
        cell = next(c for c in filled["cells"] if c["id"] == grade_id)
        cell["source"] = source
    return filled


def answer_ids(notebook: dict) -> list[str]:
    return [c["id"] for c in notebook["cells"]
            if c.get("metadata", {}).get("nbgrader", {}).get("solution")]


def hostile_notebooks(lab: str, released: dict, solution: dict, folder: Path) -> dict[str, dict]:
    """Full answers plus attacks in the last answer cell: the snooper also leaves a process."""
    last = answer_ids(released)[-1]
    full = "".join(student_copy(released, solution)["cells"][
        [c["id"] for c in released["cells"]].index(last)]["source"])
    snoop = (f"import glob, os\nleaks = []\n"
             f"for path in [{str(ROOT / 'solutions')!r}, {str(ROOT / 'tests')!r}, "
             f"{str(folder)!r}, *glob.glob('/tmp/minidist-*/**/gradebook.db', recursive=True)]:\n"
             "    try:\n"
             "        if os.listdir(path) if os.path.isdir(path) else open(path).read(1):\n"
             "            leaks.append(path)\n    except OSError:\n        pass\n"
             "assert not leaks, f'the sandbox could read {leaks}'\n")
    spawn = ("import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', "
             f"'import time; time.sleep(600)', {TOKEN!r}], start_new_session=True)\n")
    tests = [c for c in released["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade")]
    tampered = student_copy(released, solution, {tests[0]["id"]: "print('all good')"})
    tampered["cells"] = [c for c in tampered["cells"] if c["id"] != tests[-1]["id"]]
    return {
        "snooper": student_copy(released, solution, {last: snoop + spawn + full}),
        "exiter": student_copy(released, solution, {last: "import os\nos._exit(3)\n"}),
        "looper": student_copy(released, solution, {last: "while True:\n    pass\n" + full}),
        "tamperer": tampered,
    }


@pytest.fixture(scope="session")
def graded_class(tmp_path_factory):
    """Grade one mixed class of every lab; returns {(student, lab): GradeResult} and paths."""
    folder = tmp_path_factory.mktemp("submissions")
    out = tmp_path_factory.mktemp("grades")
    fresh = tmp_path_factory.mktemp("release")
    release(ROOT, dest=fresh)
    expected = {}
    for lab in LABS:
        (name, released), = notebooks(fresh / lab).items()
        solution = notebooks(ROOT / "solutions" / lab)[name]
        (folder / f"solution_{lab}.ipynb").write_text(json.dumps(solution))
        nested = folder / "blank" / lab
        nested.mkdir(parents=True)
        (nested / name).write_text(json.dumps(released))
        fixtures = FIXTURES / lab.split("_")[0]  # tests/fixtures/lab01 for lab01_autograd
        losses = fixtures / "expected_losses.json"
        for fixture, lost in (json.loads(losses.read_text()) if losses.exists() else {}).items():
            shutil.copyfile(fixtures / f"{fixture}.ipynb", folder / f"{fixture}_{lab}.ipynb")
            expected[(fixture, lab)] = lost
    lab, (name, released) = LABS[0], next(iter(notebooks(fresh / LABS[0]).items()))
    hostile = hostile_notebooks(lab, released, notebooks(ROOT / "solutions" / lab)[name], folder)
    for student, notebook in hostile.items():
        (folder / f"{student}_{lab}.ipynb").write_text(json.dumps(notebook))
    (folder / f"garbage_{lab}.ipynb").write_text("this is not JSON")
    (folder / f"cellless_{lab}.ipynb").write_text(json.dumps({"nbformat": 4, "metadata": {}}))
    (folder / "mystery_lab99_nothing.ipynb").write_text(json.dumps(released))
    results = grade(ROOT, folder, out, jobs=2, cell_timeout=CELL_TIMEOUT)
    deleted = [c["id"] for c in released["cells"] if c["metadata"].get("nbgrader", {}).get("grade")]
    return {(r.student, r.lab): r for r in results}, out, expected, deleted[-1]


@pytest.mark.timeout(CLASS_TIMEOUT)
@pytest.mark.parametrize("lab", LABS)
def test_solution_scores_full_marks(graded_class, lab):
    results, out, *_ = graded_class
    result = results[("solution", lab)]
    assert result.max_score > 0
    assert result.score == result.max_score, result.problems
    assert (out / "feedback" / "solution" / lab).glob("*.html")


@pytest.mark.timeout(CLASS_TIMEOUT)
@pytest.mark.parametrize("lab", LABS)
def test_untouched_release_scores_zero(graded_class, lab):
    result = graded_class[0][("blank", lab)]
    assert result.score == 0 and result.task_scores and not any(result.task_scores.values())
    assert all("not done yet" in p for p in result.problems), result.problems


@pytest.mark.timeout(CLASS_TIMEOUT)
def test_wrong_answers_lose_exactly_their_tasks(graded_class):
    results, _, expected, _ = graded_class
    assert expected, "every lab needs wrong submissions in tests/fixtures/labNN/"
    for lab in LABS:
        assert sum(1 for (_, fixture_lab) in expected if fixture_lab == lab) >= 2, lab
    for (fixture, lab), lost in expected.items():
        result = results[(fixture, lab)]
        assert 0 < result.score < result.max_score, (fixture, result.problems)
        assert result.score == result.max_score - sum(lost.values()), (fixture, result.problems)
        assert {t for t, s in result.task_scores.items() if s == 0} == set(lost), fixture


@pytest.mark.timeout(CLASS_TIMEOUT)
def test_hostile_notebooks_only_hurt_themselves(graded_class):
    results, out, _, deleted_test = graded_class
    lab = LABS[0]
    full = results[("solution", lab)].max_score
    looper = results[("looper", lab)]
    assert looper.score < full and any("CellTimeoutError" in p for p in looper.problems)
    feedback = next((out / "feedback" / "looper" / lab).glob("*.html")).read_text()
    assert f"longer than {CELL_TIMEOUT} s" in feedback
    exiter = results[("exiter", lab)]
    assert exiter.score == 0 and "kernel died" in exiter.problems[0]
    tamperer = results[("tamperer", lab)]
    # the edited check was restored from the gradebook and passed; the deleted one scores zero
    assert [t for t, s in tamperer.task_scores.items() if s == 0] == [deleted_test]
    assert 0 < tamperer.score < full
    for name in ("garbage", "cellless"):
        result = results[(name, lab)]
        assert result.score == 0 and "not a notebook" in result.problems[0]
    assert "named for no known lab" in results[("mystery_lab99_nothing", "?")].problems[0]
    assert next((out / "feedback" / "garbage" / lab).glob("*.html"))


@pytest.mark.timeout(CLASS_TIMEOUT)
def test_nothing_is_left_running(graded_class):
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                assert TOKEN not in (entry / "cmdline").read_text(errors="replace")
            except OSError:
                pass


@pytest.mark.timeout(CLASS_TIMEOUT)
@pytest.mark.skipif(os.geteuid() != 0, reason="file-system isolation needs root (see README)")
def test_sandbox_cannot_read_the_course(graded_class):
    result = graded_class[0][("snooper", LABS[0])]
    assert result.score == result.max_score, result.problems


@pytest.mark.timeout(CLASS_TIMEOUT)
def test_grades_csv_has_every_submission(graded_class):
    results, out, *_ = graded_class
    rows = (out / "grades.csv").read_text().strip().splitlines()
    assert rows[0] == "student,lab,score,max_score,problems" and len(rows) == len(results) + 1


@pytest.mark.timeout(600)
def test_labs_folder_is_a_fresh_release(tmp_path):
    release(ROOT, dest=tmp_path)
    for lab in LABS:
        for name in notebooks(tmp_path / lab):
            committed = ROOT / "labs" / lab / name
            assert committed.exists(), f"labs/{lab}/{name} missing: run the release"
            assert committed.read_text() == (tmp_path / lab / name).read_text(), (
                f"labs/{lab}/{name} is out of date: python -m minidist.course release")


@pytest.mark.parametrize("lab", LABS)
def test_solution_notebooks_are_clean_and_well_formed(lab):
    import nbformat

    for path in sorted((ROOT / "solutions" / lab).glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
        meta = [c.metadata["nbgrader"] for c in notebook.cells if "nbgrader" in c.metadata]
        ids = [m["grade_id"] for m in meta]
        assert len(ids) == len(set(ids)), "grade ids must be unique"
        tests = [m for m in meta if m["grade"] and not m["solution"]]
        assert tests and all(m["locked"] and m["points"] > 0 for m in tests)
        assert all(m["grade_id"].startswith(f"{lab.split('_')[0]}_") for m in tests)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, "commit without outputs"
        released = json.loads((ROOT / "labs" / lab / path.name).read_text())
        text = json.dumps(released)
        assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text
        assert "grader's cases" not in text  # hidden tests are gone from the release


def test_what_students_import_leaves_the_grader_out():
    """The library and every lab helper import without the grading machinery (course/)."""
    code = ("import importlib, pkgutil, sys, minidist, minidist.labkit\n"
            "for name in minidist.__all__: getattr(minidist, name)\n"
            "for module in pkgutil.iter_modules(minidist.labkit.__path__):\n"
            "    importlib.import_module('minidist.labkit.' + module.name)\n"
            "print(sorted(m for m in sys.modules if m.startswith('minidist.course')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
