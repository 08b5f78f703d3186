"""What a grading run hands back: ``grades.csv`` and the table ``grade`` prints.

A :class:`GradeResult` is one student's score on one lab and what went wrong
(``grade.py`` fills it); ``student`` is the id nbgrader and the feedback
folders use, ``submitted_as`` the name as the submission spelled it.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class GradeResult:
    """One row of ``grades.csv``: a student's score on a lab and what went wrong."""

    student: str
    lab: str
    score: float
    max_score: float
    problems: list[str] = field(default_factory=list)
    task_scores: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    submitted_as: str = ""  # the name as submitted, for the LMS ("Jane Doe" of Jane_Doe-cac7bbb6)


def write_csv(out: Path, results: list[GradeResult]) -> Path:
    """``out/grades.csv``: a row per submission, by student and lab."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "grades.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", "submitted_as", "lab", "score", "max_score", "problems"])
        for r in sorted(results, key=lambda r: (r.student, r.lab)):
            writer.writerow([r.student, r.submitted_as, r.lab, f"{r.score:g}",
                             f"{r.max_score:g}", " | ".join(r.problems)])
    return path


def summary_table(results: list[GradeResult]) -> str:
    """The table ``grade`` prints: student, lab, score, max, problems (the first, and a count)."""
    rows = [("student", "lab", "score", "max", "problems")]
    for r in sorted(results, key=lambda r: (r.student, r.lab)):
        problems = r.problems[0][:90] if r.problems else ""
        if len(r.problems) > 1:
            problems += f" (+{len(r.problems) - 1} more)"
        rows.append((r.student, r.lab, f"{r.score:g}", f"{r.max_score:g}", problems))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths, strict=True))
                     + "  " + row[4] for row in rows)
