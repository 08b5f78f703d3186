"""When grading goes wrong, the student's row and page say why, and lose only what failed.

A small class of Lab 1 is graded once (``graded``): the solution, whose task
scores are every other row's reference, and one submission for each failure
a tester met: a cell that prints without end (the whole notebook once scored
zero in three runs of five), a cell that loops deaf to the interrupt, a
looping cell the student added (once named "None"), another lab's notebook,
a file nbformat rejects, and a notebook stripped of its nbgrader metadata
(these three once scored zero with no page, or no sentence), and one whose
locked cells were deleted (put back, each with a sentence). A lab whose
memory limit is too low for the kernel itself is the environment's failure,
not the student's (``test_a_kernel_that_cannot_start_is_the_environments_failure``).
The sentences themselves are ``minidist/course/problems.py``'s, tested here
on nbgrader's logs and notebooks without grading.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from redteam.make_class import filled

from minidist.course import grade as grading
from minidist.course.problems import environment_failure, failed_cells, nbgrader_failure
from minidist.course.sandbox import CUT, MAX_OUTPUT, capped
from minidist.course.settings import course_root, limits_for

ROOT = course_root()
LAB = "lab01_autograd"
CELL_TIMEOUT = 30  # Lab 1's longest honest cell (training) takes ~10 s, more when loaded
CLASS_TIMEOUT = 900
needs_nbgrader = pytest.mark.skipif(shutil.which("alembic") is None and not (
    Path(os.sys.executable).parent / "alembic").exists(), reason="nbgrader is not installed")


def solved(lab: str) -> dict:
    """The lab's release with the solution's answers, without its explore part (no points)."""
    released = json.loads((ROOT / "labs" / lab / f"{lab}.ipynb").read_text())
    solution = json.loads((ROOT / "solutions" / lab / f"{lab}.ipynb").read_text())
    notebook = filled(released, solution)
    cells = notebook["cells"]
    last = max(i for i, cell in enumerate(cells) if cell.get("metadata", {}).get(
        "nbgrader", {}).get("grade"))
    notebook["cells"] = [c for i, c in enumerate(cells) if i <= last or c["cell_type"] != "code"]
    return notebook


def edited(notebook: dict, grade_id: str, before: str) -> dict:
    """``notebook`` with ``before`` put at the top of the cell ``grade_id``."""
    notebook = copy.deepcopy(notebook)
    cell = next(c for c in notebook["cells"] if c.get("id") == grade_id)
    cell["source"] = before + "".join(cell["source"])
    return notebook


def class_of_failures() -> dict[str, dict]:
    """Each student's notebook, by name."""
    solution = solved(LAB)
    added = copy.deepcopy(solution)
    after = next(i for i, c in enumerate(added["cells"]) if c.get("id") == "lab01_backward_matmul")
    added["cells"].insert(after + 1, {"cell_type": "code", "execution_count": None,
                                      "metadata": {}, "outputs": [],
                                      "source": "# try it out\nwhile True:\n    pass\n"})
    invalid = copy.deepcopy(solution)
    del invalid["cells"][3]["source"]
    deleted = copy.deepcopy(solution)  # locked cells (another editor lets them go) and an answer
    gone = {"setup", "lab01_unbroadcast", "answer_backward_relu", "lab01_backward_relu"}
    deleted["cells"] = [c for c in deleted["cells"] if c.get("id") not in gone]
    stripped = copy.deepcopy(solution)
    for cell in stripped["cells"]:
        cell["metadata"].pop("nbgrader", None)
    return {
        "solution": solution,
        "floods": edited(solution, "answer_backward_relu",
                         'while True:\n    print("x" * 10_000)\n'),
        "is_deaf": edited(solution, "answer_adam", "import signal, time\n"
                          "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                          "while True:\n    time.sleep(0.1)\n"),
        "adds_a_loop": added,
        "another_lab": solved("lab02_messages"),
        "invalid": invalid,
        "stripped": stripped,
        "deletes_cells": deleted,
    }


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade the class once; returns {student: GradeResult} and the output folder."""
    folder, out = tmp_path_factory.mktemp("submissions"), tmp_path_factory.mktemp("grades")
    for student, notebook in class_of_failures().items():
        (folder / f"{student}_{LAB}.ipynb").write_text(json.dumps(notebook))
    results = grading.grade(ROOT, folder, out, jobs=2, cell_timeout=CELL_TIMEOUT)
    return {r.student: r for r in results}, out


def lost(graded, student: str) -> set[str]:
    """The tasks ``student`` scored less on than the solution."""
    results, _ = graded
    reference = results["solution"].task_scores
    assert reference and results["solution"].score == results["solution"].max_score
    assert results[student].task_scores.keys() == reference.keys(), results[student].problems
    return {task for task, score in results[student].task_scores.items()
            if score < reference[task]}


@needs_nbgrader
@pytest.mark.timeout(CLASS_TIMEOUT)
def test_a_cell_that_prints_without_end_loses_its_own_task(graded):
    """Its output is cut in the kernel (sandbox.py), so nothing stalls; once, a backlog after
    the interrupt outlasted nbclient's wait and nbgrader dropped the whole notebook."""
    results, out = graded
    assert lost(graded, "floods") == {"lab01_backward_relu"}, results["floods"].problems
    stopped = (f"answer_backward_relu: CellTimeoutError: the cell ran longer than "
               f"{CELL_TIMEOUT} s, the time limit of a cell, and was stopped")
    assert stopped in results["floods"].problems
    page = (out / "feedback" / "floods" / LAB / f"{LAB}.html").read_text()
    assert "the time limit of a cell" in page
    assert f"it printed more than {MAX_OUTPUT:,} characters" in page  # CUT, as HTML
    assert len(page) < 3 * MAX_OUTPUT


@needs_nbgrader
@pytest.mark.timeout(CLASS_TIMEOUT)
def test_a_cell_deaf_to_the_interrupt_loses_its_own_task(graded):
    """Its kernel never goes idle: it is restarted, where nbclient's wait for the cell's last
    output used to raise and lose the whole notebook."""
    assert lost(graded, "is_deaf") == {"lab01_adam"}, graded[0]["is_deaf"].problems


@needs_nbgrader
@pytest.mark.timeout(CLASS_TIMEOUT)
def test_a_cell_without_grade_id_is_named_by_where_it_is(graded):
    results, _ = graded
    assert lost(graded, "adds_a_loop") == set()
    assert results["adds_a_loop"].problems == [
        'the cell after lab01_backward_matmul, "# try it out": CellTimeoutError: the cell ran '
        f"longer than {CELL_TIMEOUT} s, the time limit of a cell, and was stopped"]


@needs_nbgrader
@pytest.mark.timeout(CLASS_TIMEOUT)
def test_deleted_locked_cells_are_put_back_and_only_a_deleted_answer_loses(graded):
    """The row names the deleted answer. Once a deleted test cell lost its task with no
    sentence, and a deleted setup cell
    nearly every task; nbgrader's own restoring failed the whole notebook when the answer
    before the test was gone too."""
    results, _ = graded
    assert lost(graded, "deletes_cells") == {"lab01_backward_relu"}
    put_back = [f"the locked cell {cell} was missing from the notebook: it was put back from "
                "the release and graded"
                for cell in ("setup", "lab01_unbroadcast", "lab01_backward_relu")]
    put_back.insert(2, "the answer cell answer_backward_relu is missing from the notebook (was "
                       "it deleted?): its task was graded without it")
    assert results["deletes_cells"].problems == [*put_back, (
        "lab01_backward_relu: CheckFailed: Task 5, ReLU backward: your code raised NameError: "
        "name 'ReLU' is not defined")]


@needs_nbgrader
@pytest.mark.timeout(CLASS_TIMEOUT)
@pytest.mark.parametrize("student, sentence", [
    ("another_lab", f"does not match {LAB}'s: its cells answer_ring_shift, lab02_ring_shift"),
    ("invalid", "not a valid Jupyter notebook ('source' is a required property, in cell 4)"),
    ("stripped", "has no grading metadata"),
])
def test_a_notebook_that_cannot_be_graded_says_why_on_its_page(graded, student, sentence):
    results, out = graded
    (problem,) = results[student].problems
    assert sentence in problem and "submit the notebook released for" in problem
    assert results[student].score == 0
    page = (out / "feedback" / student / LAB / "problem.html").read_text()
    assert sentence.replace("'", "&#x27;") in page


@needs_nbgrader
@pytest.mark.timeout(300)
def test_a_kernel_that_cannot_start_is_the_environments_failure(tmp_path, monkeypatch, capsys):
    """A memory limit too low for the kernel to start is not the student's kernel dying."""
    too_low = dataclasses.replace(limits_for(LAB), memory_mb=100)
    monkeypatch.setattr(grading, "limits_for", lambda lab: too_low)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / f"solution_{LAB}.ipynb").write_text(json.dumps(solved(LAB)))
    (result,) = grading.grade(ROOT, tmp_path / "in", tmp_path / "out", jobs=1)
    (problem,) = result.problems
    assert problem.startswith("not graded: the grader's kernel could not start")
    assert "memory 100 MB" in problem and f"LAB_LIMITS['{LAB}'] in minidist/course/settings.py" \
        in problem and "not your work" in problem
    assert (tmp_path / "out" / "feedback" / "solution" / LAB / "problem.html").exists()
    assert "solution's lab01_autograd was not graded" in capsys.readouterr().err


# ---- the sentences, from nbgrader's logs and autograded notebooks ---------------------------

def notebook(tmp_path: Path, *cells: tuple[dict, list[str], str]) -> Path:
    """An autograded notebook of code cells: (nbgrader metadata, error names, source)."""
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / f"{LAB}.ipynb").write_text(json.dumps({"cells": [
        {"cell_type": "code", "metadata": {"nbgrader": meta} if meta else {}, "source": source,
         "outputs": [{"output_type": "error", "ename": e, "evalue": f"{e} here"} for e in errors]}
        for meta, errors, source in cells]}))
    return tmp_path


SETUP = {"grade_id": "setup", "locked": True}
ANSWER = {"grade_id": "answer_x", "solution": True, "locked": False}
CHECK = {"grade_id": "lab01_x", "grade": True, "locked": True, "points": 1}


def test_a_kernel_lost_before_any_student_cell_ran_is_the_environments_failure(tmp_path):
    limits = limits_for(LAB)
    setup_died = notebook(tmp_path / "a", (SETUP, ["DeadKernelError"], ""), (ANSWER, [], ""),
                          (CHECK, ["DeadKernelError"], ""))
    assert "died in the lab's own setup, before any of your code ran" in environment_failure(
        "", setup_died, LAB, limits)
    student_first = notebook(tmp_path / "b", ({}, [], "import os"),
                             (SETUP, ["DeadKernelError"], ""), (ANSWER, [], ""))
    answer_died = notebook(tmp_path / "c", (SETUP, [], ""), (ANSWER, ["DeadKernelError"], ""))
    for autograded in (student_first, answer_died, tmp_path / "none"):
        assert environment_failure("", autograded, LAB, limits) is None
    started_not = "RuntimeError: Kernel died before replying to kernel_info"
    assert "could not start" in environment_failure(started_not, tmp_path / "none", LAB, limits)


def test_a_cell_is_named_by_its_grade_id_or_where_it_is(tmp_path):
    autograded = notebook(tmp_path, ({}, ["CellTimeoutError"], "\n  while True:  \n"),
                          (CHECK, ["CheckFailed"], ""), ({}, ["DeadKernelError"], ""),
                          ({}, ["NameError"], "x"),  # an ungraded cell's own error: not listed
                          ({}, ["CellTimeoutError"], "y" * 70))
    assert failed_cells(autograded) == [
        'code cell 1, "while True:": CellTimeoutError: CellTimeoutError here',
        "lab01_x: CheckFailed: CheckFailed here",
        "the cell after lab01_x: DeadKernelError: DeadKernelError here",
        f'the cell after lab01_x, "{"y" * 60}…": CellTimeoutError: CellTimeoutError here']


@pytest.mark.parametrize("log, sentence", [
    ("[AutogradeApp | ERROR] Notebook failed to validate; the nbgrader metadata may be "
     "corrupted.\n    jsonschema.exceptions.ValidationError: Duplicate grade id: lab01_adam\n",
     "two cells have the grade id lab01_adam (a graded cell copied?)"),
    ("    nbformat.reader.NotJSONError: Notebook does not appear to be JSON: '{ oops'\n",
     "this file is not a valid Jupyter notebook (Notebook does not appear to be JSON"),
    ("[AutogradeApp | ERROR] No notebooks were matched by '/c/submitted/bob/lab01_autograd'\n",
     "no notebook was found to grade: submit the notebook released for lab01_autograd"),
    ("    sqlite3.OperationalError: database is locked\n[AutogradeApp | ERROR] There was an "
     "error processing assignment 'lab01_autograd' for student 'bob'\n[AutogradeApp | ERROR] "
     "Please see the the above traceback for details on the specific errors on the above "
     "failures.\n", "nbgrader could not grade it: OperationalError: database is locked"),
    ("[AutogradeApp | ERROR] Something unforeseen\n[AutogradeApp | ERROR] Please see the the "
     "above traceback\n", "nbgrader could not grade it: Something unforeseen"),
])
def test_nbgraders_failure_is_named_not_its_closing_line(log, sentence):
    assert sentence in nbgrader_failure(log, LAB)


def test_what_a_cell_prints_is_cut_once_per_cell():
    written: list[str] = []
    cell = ["a"]
    write = capped(written.append, lambda: cell[0])
    for _ in range(3):
        write("x" * (MAX_OUTPUT // 2 + 1))
    assert written[-1] == CUT and len("".join(written)) == MAX_OUTPUT + len(CUT)
    cell[0] = "b"  # the next cell has its own budget
    write("y")
    assert written[-1] == "y"


KEPT_BY_IPYTHON = """
import sys
from IPython.core.interactiveshell import InteractiveShell
from minidist.course import sandbox
shell = InteractiveShell.instance()
if sys.argv[1] == "sandboxed":
    sandbox.load_ipython_extension(shell)
shell.run_cell("print('x' * 1000)")
shell.run_cell("import sys; sys.stderr.write('y' * 1000)")
print(sum(len(text) for outputs in shell.history_manager.outputs.values() for output in outputs
          if output.output_type.endswith("_stream") for text in output.bundle["stream"]),
      file=sys.__stdout__)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kernel, kept", [("plain", 2001), ("sandboxed", 0)])
def test_the_sandboxed_kernel_keeps_no_history_of_what_cells_print(kernel, kept):
    """IPython (9) keeps what a cell prints as output history through its private ``_tee``,
    which the sandbox turns off: a cell printing without end would grow it to the kernel's
    memory limit. Should an IPython release capture it otherwise, the plain kernel's line
    still shows the history kept and the sandboxed one fails here, not in a student's run."""
    run = subprocess.run([sys.executable, "-c", KEPT_BY_IPYTHON, kernel], capture_output=True,
                         text=True, timeout=100, env={**os.environ, "IPYTHONDIR": os.devnull})
    assert run.returncode == 0, run.stderr
    assert int(run.stdout.split()[-1]) == kept
