"""A student's feedback page: nbgrader's feedback step, run in the grading process.

nbgrader's ``generate_feedback`` renders the notebook that autograde wrote
(scores in, hidden tests out) as HTML. Run through its API here rather than
as an nbgrader process of its own, it saves about 4 s a student of starting
nbgrader; it runs no student code. nbgrader's apps share logging and
configuration, so one student's feedback is written at a time (``lock``).
"""

from __future__ import annotations

import threading
from pathlib import Path

FEEDBACK_PREPROCESSORS = ["nbgrader.preprocessors.GetGrades",
                          "nbgrader.preprocessors.ClearHiddenTests",
                          "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor"]


def generate_feedback(course: Path, lab: str, student: str,
                      lock: threading.Lock) -> tuple[list[Path], str]:
    """The feedback pages of ``student``'s ``lab`` in the nbgrader course ``course``, and
    nbgrader's error and log when it wrote none."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    config = Config()
    config.CourseDirectory.root = str(course)
    config.GenerateFeedback.preprocessors = FEEDBACK_PREPROCESSORS
    with lock:
        api = NbGraderAPI(CourseDirectory(config=config), config=config)
        done = api.generate_feedback(lab, student, force=True)
    pages = list((course / "feedback" / student / lab).glob("*.html"))
    failed = not done["success"] or not pages
    return pages, (done.get("error", "") + done.get("log", "")) if failed else ""
