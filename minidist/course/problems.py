"""What went wrong with a submission, in the sentences its student reads.

``grade`` turns what an nbgrader run left, its log and the autograded
notebook, into the problems of the student's row (``grades.csv``) and, where
no feedback page could be written, of their problem page:

- ``failed_cells``: each graded cell that failed, and each cell that was
  stopped at the time limit or whose kernel died, named so that the student
  finds it (a cell without a grade id by the graded cell before it and its
  first line);
- ``nbgrader_failure``: why nbgrader wrote no graded notebook, for the
  failures it has (grading metadata that is not this lab's, which is also
  what another lab's notebook gives; a file that is not a valid notebook; no
  notebook), else the log's most informative line, never its closing
  "Please see the above traceback";
- ``environment_failure``: the kernel could not start, or died in the lab's
  own cells before any cell a student writes had run. Then the grading
  environment failed (a lab's limits too low for the kernel itself), not the
  student's work: the sentence says so, with the limits and where they are set.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from minidist.course.settings import LabLimits

STOPPED = ("CellTimeoutError", "DeadKernelError")  # the grader stopped the cell, or lost it
KERNEL_NOT_STARTED = ("Kernel died before replying to kernel_info", "Kernel didn't respond in")
METADATA = ("does not exist in the database", "the nbgrader metadata may be corrupted",
            "Duplicate grade id", "does not have a grade_id", "grade_id is empty",
            "does not have points", "SchemaTooOldError", "SchemaTooNewError")
NOT_A_NOTEBOOK = ("NotebookValidationError", "NotJSONError", "does not appear to be JSON")
NO_NOTEBOOK = ("No notebooks were matched", "No notebooks found", "No submitted file")
BOILERPLATE = ("Please see the", "There was an error processing", "Traceback (most recent")
EXCEPTION = re.compile(r"^\s*(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.+)$")
UNKNOWN_CELL = re.compile(r"Cell '([^']+)' does not exist in the database")
DUPLICATE = re.compile(r"Duplicate grade id: (\S+)")


def _code_cells(autograded: Path) -> list[dict]:
    return [cell for path in sorted(autograded.glob("*.ipynb"))
            for cell in json.loads(path.read_text()).get("cells", [])
            if cell.get("cell_type") == "code"]


def _nbgrader(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _errors(cell: dict) -> list[dict]:
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def cell_name(cells: list[dict], index: int) -> str:
    """The cell's grade id, or, for a cell without one (an explore cell, a cell the student
    added), the graded cell before it and its first line: what a student can find."""
    grade_id = _nbgrader(cells[index]).get("grade_id")
    if grade_id:
        return grade_id
    source = "".join(cells[index].get("source", ""))
    first = next((line.strip() for line in source.splitlines() if line.strip()), "")
    begins = f', "{first[:60]}{"…" if len(first) > 60 else ""}"' if first else ""
    before = next((_nbgrader(c)["grade_id"] for c in reversed(cells[:index])
                   if _nbgrader(c).get("grade_id")), None)
    return f"the cell after {before}{begins}" if before else f"code cell {index + 1}{begins}"


def failed_cells(autograded: Path) -> list[str]:
    """'cell: Error: message' for each graded cell that failed and each cell stopped or lost."""
    cells, lines = _code_cells(autograded), []
    for index, cell in enumerate(cells):
        errors = _errors(cell)
        if errors and (_nbgrader(cell).get("grade")
                       or any(o.get("ename") in STOPPED for o in errors)):
            evalue = str(errors[-1].get("evalue", "")).strip().splitlines()
            lines.append(f"{cell_name(cells, index)}: {errors[-1].get('ename')}: "
                         f"{evalue[0][:200] if evalue else ''}".rstrip(": "))
    return lines


def _written_by_students(cell: dict) -> bool:
    """An answer cell, or a cell the release does not have (the student added it)."""
    meta = _nbgrader(cell)
    return bool(meta.get("solution")) or not meta.get("locked")


def _died_before_student_code(autograded: Path) -> bool:
    for cell in _code_cells(autograded):
        if any(o.get("ename") == "DeadKernelError" for o in _errors(cell)):
            return not _written_by_students(cell)
        if _written_by_students(cell):
            return False
    return False


def environment_failure(log: str, autograded: Path, lab: str, limits: LabLimits) -> str | None:
    """The sentence for a kernel that could not start, or that died in the lab's own cells
    before any cell a student writes had run; None when the student's code ran."""
    if any(sign in log for sign in KERNEL_NOT_STARTED):
        what = "could not start"
    elif _died_before_student_code(autograded):
        what = "died in the lab's own setup, before any of your code ran,"
    else:
        return None
    return (f"not graded: the grader's kernel {what} under this lab's limits (memory "
            f"{limits.memory_mb} MB, CPU {limits.cpu_s} s, {limits.processes} processes: "
            f"LAB_LIMITS[{lab!r}] in minidist/course/settings.py). The grading environment "
            "failed, not your work: it must be graded again once the limits are raised")


def _exceptions(log: str) -> list[tuple[str, str]]:
    """(name, message) of each exception line in ``log`` (a traceback's last line)."""
    return [(m.group(1), m.group(2).strip()) for m in map(EXCEPTION.match, log.splitlines())
            if m and not any(b in m.group(2) for b in BOILERPLATE)]


def _validation_detail(log: str) -> str:
    """What nbformat found wrong, and in which cell: "'source' is a required property, in
    cell 4"."""
    found = [message for name, message in _exceptions(log) if name in NOT_A_NOTEBOOK]
    cell = re.search(r"On instance\['cells'\]\[(\d+)\]", log)
    where = f", in cell {int(cell.group(1)) + 1}" if cell else ""
    return f"{found[-1][:150]}{where}" if found else ""


def nbgrader_failure(log: str, lab: str) -> str:
    """The sentence for an autograde run that produced no graded notebook."""
    remedy = f"submit the notebook released for {lab} with your answers filled in"
    if any(sign in log for sign in METADATA):
        unknown, copied = UNKNOWN_CELL.findall(log), DUPLICATE.search(log)
        why = (f": its cells {', '.join(unknown[:3])} are not {lab}'s (another lab's notebook?)"
               if unknown else f": two cells have the grade id {copied.group(1)} (a graded "
               "cell copied?)" if copied else "")
        return (f"this notebook's grading metadata (the nbgrader data hidden in its cells) "
                f"does not match {lab}'s{why}. It could not be graded: {remedy}")
    if any(sign in log for sign in NOT_A_NOTEBOOK):
        detail = _validation_detail(log)
        return (f"this file is not a valid Jupyter notebook{f' ({detail})' if detail else ''}"
                f". It could not be graded: {remedy}")
    if any(sign in log for sign in NO_NOTEBOOK):
        return f"no notebook was found to grade: {remedy}"
    if "DeadKernelError" in log or "Kernel died" in log:
        return "the kernel died (os._exit, a crash, or the memory/CPU limit): scored zero"
    if "UnresponsiveKernelError" in log:
        return "the kernel stopped answering and could not be interrupted: scored zero"
    exceptions = _exceptions(log)
    errors = [line.split("ERROR]", 1)[1].strip() for line in log.splitlines()
              if "ERROR]" in line and not any(b in line for b in BOILERPLATE)]
    said = (": ".join(exceptions[-1]) if exceptions else errors[-1] if errors
            else "its log names no error")
    return f"nbgrader could not grade it: {said[:200]}"
