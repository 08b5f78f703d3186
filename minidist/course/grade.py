"""Grade: autograde every submission in a folder, each student in isolation.

    python -m minidist.course grade SUBMISSIONS [--out grading/out] [--jobs 2]

The release gradebook (graded cells, points, hidden tests) is built once from
``solutions/`` in a private scratch folder. Then, for every submission:

1. a private course folder (0700) receives a copy of that gradebook and this
   student's notebook only, with any locked cell it lacks (setup, a test) put
   back from the release (``submissions.restore_locked_cells``);
2. ``nbgrader autograde`` runs there, in its own process group, under the
   lab's wall-clock limit (``settings.LAB_LIMITS``); nbgrader restores the
   locked test cells from the gradebook and starts the kernel through
   ``sandbox.py`` (limits, own uid, course hidden: see ``isolation.py``);
3. every process left behind is killed, the scores are read from the private
   gradebook, nbgrader's feedback step writes the HTML feedback (hidden tests
   removed; in this process, ``feedback.py``), and the private folder is
   deleted.

Whatever a notebook does (loop, crash its kernel, delete test cells, not be a
notebook at all) ends as a score and a sentence in its own row (``problems.py``
words them), and a student whose run left no feedback page gets a problem page
with that sentence. A kernel that could not even start under the lab's limits
is reported as the grading environment's failure, not the student's.
Cost: about 3 s plus the notebook's own run time per student; ``--jobs``
students at a time.
"""

from __future__ import annotations

import contextlib
import html
import json
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from minidist.course import isolation
from minidist.course.feedback import generate_feedback
from minidist.course.nbgrader_fork import ForkServer
from minidist.course.problems import environment_failure, failed_cells, nbgrader_failure
from minidist.course.release import build_course, nbgrader_env
from minidist.course.report import GradeResult, write_csv
from minidist.course.settings import known_labs, limits_for
from minidist.course.submissions import Submission, collect, restore_locked_cells

FEEDBACK_CONFIG = """c = get_config()  # noqa
c.Execute.timeout = {timeout}
c.Execute.error_on_timeout = {{"ename": "CellTimeoutError", "evalue": {reason!r},
                               "traceback": ["CellTimeoutError: " + {reason!r}]}}
c.Autograde.autograde_preprocessors = [
    "minidist.course.trusted.TrustedExecute", "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor", "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades", "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata"]
c.TrustedExecute.checks_file = {checks!r}
c.TrustedExecute.shutdown_kernel = "immediate"  # killed at the end: nothing in it is kept
c.KernelManager.transport = "ipc"  # unix sockets: they reach a kernel in its own network namespace
c.KernelManager.ip = {ipc!r}
"""


@dataclass
class Release:
    """The graded labs as nbgrader sees them, built once per grading run."""

    course: Path
    notebooks: dict[str, list[str]]
    max_scores: dict[str, float]
    checks: dict[str, dict[str, dict]]  # lab -> grade_id -> locked cell the grader runs itself


def source_notebooks(root: Path) -> dict[str, list[str]]:
    """Each lab's notebook names, as the release will have them (those of ``solutions/``)."""
    return {lab: sorted(p.name for p in (root / "solutions" / lab).glob("*.ipynb"))
            for lab in known_labs(root)}


def build_release(root: Path, scratch: Path, labs: list[str], server: ForkServer) -> Release:
    """generate_assignment for ``labs`` into ``scratch``; read points and the locked cells
    the grader runs itself (``trusted.py``) from its gradebook."""
    from nbgrader.api import Gradebook

    build_course(root, labs, scratch, server)
    notebooks = {lab: sorted(p.name for p in (scratch / "release" / lab).glob("*.ipynb"))
                 for lab in labs}
    checks: dict[str, dict[str, dict]] = {}
    with Gradebook(f"sqlite:///{scratch / 'gradebook.db'}") as gradebook:
        max_scores = {lab: float(gradebook.find_assignment(lab).max_score) for lab in labs}
        for lab in (lab for lab in labs if limits_for(lab).trusted_checks):
            for notebook in gradebook.find_assignment(lab).notebooks:
                tests = {cell.name for cell in notebook.grade_cells}
                answers = {cell.name for cell in notebook.solution_cells}
                checks[lab] = {cell.name: {"source": cell.source, "test": cell.name in tests}
                               for cell in notebook.source_cells if cell.locked
                               and cell.cell_type == "code" and cell.name not in answers}
    return Release(scratch, notebooks, max_scores, checks)


class Grader:
    """Grades submissions of the labs in ``root/solutions`` into ``out``."""

    def __init__(self, root: Path, out: Path, cell_timeout: int | None = None):
        self.root, self.out, self.cell_timeout = root, out, cell_timeout
        self._scratch = Path(tempfile.mkdtemp(prefix="minidist-release-"))
        self._uids: set[int] = set()
        self._lock = threading.Lock()
        self._feedback_lock = threading.Lock()  # one student's feedback at a time
        self._nbgrader = ForkServer()  # forks each student's nbgrader run (nbgrader_fork.py)

    def close(self) -> None:
        self._nbgrader.close()
        shutil.rmtree(self._scratch, ignore_errors=True)

    def grade_all(self, folder: Path, jobs: int = 2) -> list[GradeResult]:
        submissions = collect(folder, source_notebooks(self.root), skip=(self.out,))
        # this run's pages only: a page left by an earlier run into the same folder would
        # contradict the grades (a student's old 26/26 beside a new problem page)
        shutil.rmtree(self.out / "feedback", ignore_errors=True)
        labs = sorted({s.lab for s in submissions if s.lab != "?"})
        # only the labs handed in; the fork server that will grade them builds the release
        self.release = build_release(self.root, self._scratch, labs, self._nbgrader)
        hide = [self.root / name for name in ("solutions", "grading", "tests", ".git")]
        hide += [folder.resolve(), self.out.resolve()]
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(lambda s: self.guarded(s, hide), submissions))
        for sub, result in zip(submissions, results, strict=True):
            result.submitted_as = sub.submitted_as
        write_csv(self.out, results)
        return results

    def guarded(self, sub: Submission, hide: list[Path]) -> GradeResult:
        """``grade_one``, its failure one student's zero with a sentence: a notebook no
        check foresaw once ended the run, and the class's grades.csv with it."""
        try:
            return self.grade_one(sub, hide)
        except Exception as error:  # the grader's own failure, on this submission only
            result = GradeResult(sub.student, sub.lab, 0.0,
                                 self.release.max_scores.get(sub.lab, 0.0),
                                 [f"the grader failed on this submission ({type(error).__name__}"
                                  f": {error}); the instructor will look at it", *sub.notes])
            with contextlib.suppress(Exception):
                self._write_problem_page(result)
            return result

    def grade_one(self, sub: Submission, hide: list[Path]) -> GradeResult:
        started = time.perf_counter()
        max_score = self.release.max_scores.get(sub.lab, 0.0)
        if sub.problem is not None:
            result = GradeResult(sub.student, sub.lab, 0.0, max_score, [sub.problem, *sub.notes])
            self._write_problem_page(result)
            return result
        private = Path(tempfile.mkdtemp(prefix="minidist-grade-"))  # 0700
        try:
            result = self._autograde(sub, private, hide, max_score)
        finally:
            shutil.rmtree(private, ignore_errors=True)
        result.problems += sub.notes
        if not any((self.out / "feedback" / sub.student / sub.lab).glob("*.html")):
            self._write_problem_page(result)  # the student's only page: it says what failed
        result.seconds = time.perf_counter() - started
        return result

    def _autograde(self, sub: Submission, private: Path, hide: list[Path],
                   max_score: float) -> GradeResult:
        limits = limits_for(sub.lab)
        timeout = self.cell_timeout or limits.cell_timeout_s
        course = private / "course"
        submitted = course / "submitted" / sub.student / sub.lab
        submitted.mkdir(parents=True)
        shutil.copyfile(self.release.course / "gradebook.db", course / "gradebook.db")
        restored = []
        for name, path in sub.notebooks.items():
            notebook = json.loads(path.read_bytes())
            release = json.loads((self.release.course / "release" / sub.lab / name).read_text())
            restored += restore_locked_cells(notebook, release)
            (submitted / name).write_text(json.dumps(notebook))
        reason = f"the cell ran longer than {timeout} s, the time limit of a cell, and was stopped"
        isolation.write_kernel_spec(private / "jupyter")
        with self._lock:
            uid = isolation.pick_uid(self._uids) if isolation.running_as_root() else None
        workdir = isolation.make_workdir(uid)
        checks = private / "checks.json"
        checks.write_text(json.dumps(self.release.checks))
        (course / "nbgrader_config.py").write_text(FEEDBACK_CONFIG.format(
            timeout=timeout, reason=reason, checks=str(checks), ipc=str(workdir / "kernel")))
        env = nbgrader_env(private / "home")
        env.update(JUPYTER_PATH=str(private / "jupyter"),
                   JUPYTER_RUNTIME_DIR=str(private / "runtime"),
                   MINIDIST_SANDBOX=isolation.sandbox_settings(
                       workdir, private / "staging", uid, hide, limits.memory_mb, limits.cpu_s,
                       limits.processes))
        (private / "home").mkdir()
        (private / "staging").mkdir()
        argv = ["autograde", sub.lab, "--force", f"--student={sub.student}",
                f"--CourseDirectory.root={course}"]
        try:
            returncode, log = isolation.run_nbgrader_isolated(
                self._nbgrader, argv, course, env, limits.notebook_timeout_s)
        finally:
            if uid is not None:
                isolation.kill_user(uid)
                isolation.remove_left_files(uid)
                with self._lock:
                    self._uids.discard(uid)
            shutil.rmtree(workdir, ignore_errors=True)
        if "sandbox: could not hide" in log:  # the kernel ran, but without the mount namespace
            print(f"warning: the sandbox of {sub.student} could not hide the course "
                  "(see grading/README.md)", file=sys.stderr)
        result = GradeResult(sub.student, sub.lab, 0.0, max_score, restored)
        autograded = course / "autograded" / sub.student / sub.lab
        environment = environment_failure(log, autograded, sub.lab, limits)
        if returncode is None:
            result.problems.append(f"grading stopped at the {limits.notebook_timeout_s} s "
                                   "limit for the whole notebook: scored zero")
        elif environment is not None:  # not the student's doing: the instructor must know
            result.problems.append(environment)
            print(f"warning: {sub.student}'s {sub.lab} was {environment}", file=sys.stderr)
        elif not any(autograded.glob("*.ipynb")):
            result.problems.append(nbgrader_failure(log, sub.lab))
        else:
            self._read_scores(course, result)
            result.problems.extend(failed_cells(autograded))
            self._write_feedback(course, sub, result)
        return result

    def _read_scores(self, course: Path, result: GradeResult) -> None:
        """Scores from the private gradebook, which the sandboxed kernel could not reach."""
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
            submission = gradebook.find_submission(result.lab, result.student)
            result.score = float(submission.score)
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    result.task_scores[grade.name] = float(grade.score)

    def _write_feedback(self, course: Path, sub: Submission, result: GradeResult) -> None:
        pages, log = generate_feedback(course, sub.lab, sub.student, self._feedback_lock)
        if log or not pages:
            result.problems.append("feedback could not be written: " + log[-200:])
        dest = self.out / "feedback" / sub.student / sub.lab
        dest.mkdir(parents=True, exist_ok=True)
        for page in pages:
            shutil.copyfile(page, dest / page.name)

    def _write_problem_page(self, result: GradeResult) -> None:
        dest = self.out / "feedback" / result.student / result.lab.replace("?", "unknown_lab")
        dest.mkdir(parents=True, exist_ok=True)
        items = "".join(f"<li>{html.escape(p)}</li>" for p in result.problems)
        (dest / "problem.html").write_text(
            f"<html><body><h1>{html.escape(result.lab)}: {result.score:g} / "
            f"{result.max_score:g}</h1><ul>{items}</ul></body></html>\n")

def grade(root: Path, folder: Path, out: Path, jobs: int = 2,
          cell_timeout: int | None = None) -> list[GradeResult]:
    """Grade every submission in ``folder``; write ``out/grades.csv`` and ``out/feedback/``."""
    grader = Grader(root, out, cell_timeout)
    try:
        return grader.grade_all(folder, jobs)
    finally:
        grader.close()
