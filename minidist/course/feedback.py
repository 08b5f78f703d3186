"""A student's feedback page: nbgrader's feedback step, run in the grading process.

nbgrader's ``generate_feedback`` renders the notebook that autograde wrote
(scores in, hidden tests out) as HTML. Run through its API here rather than
as an nbgrader process of its own, it saves the start of an nbgrader
process per student; it runs no student code. nbgrader's apps share logging
and configuration, so one student's feedback is written at a time
(``lock``). Its exporter makes a new Jinja environment for each student,
which would compile the same templates again each time: ``FeedbackExporter``
gives every environment one cache of compiled templates (``COMPILED``).
"""

from __future__ import annotations

import threading
from pathlib import Path

import jinja2
from nbconvert.exporters import HTMLExporter

FEEDBACK_PREPROCESSORS = ["nbgrader.preprocessors.GetGrades",
                          "nbgrader.preprocessors.ClearHiddenTests",
                          "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor"]


class CompiledTemplates(jinja2.BytecodeCache):
    """Jinja's compiled templates, kept in memory for the life of the process (keyed by
    the template's name and a checksum of its source, so an edited template compiles
    again)."""

    def __init__(self) -> None:
        self.kept: dict[str, bytes] = {}
        self.compilations = 0  # templates compiled (Jinja stores each one it compiles)

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        if bucket.key in self.kept:
            bucket.bytecode_from_string(self.kept[bucket.key])

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        self.kept[bucket.key] = bucket.bytecode_to_string()
        self.compilations += 1


COMPILED = CompiledTemplates()


class FeedbackExporter(HTMLExporter):
    """nbgrader's feedback exporter (HTML), its templates compiled once per process."""

    def _create_environment(self) -> jinja2.Environment:
        environment = super()._create_environment()
        environment.bytecode_cache = COMPILED
        return environment


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
    config.GenerateFeedback.exporter_class = FeedbackExporter
    with lock:
        api = NbGraderAPI(CourseDirectory(config=config), config=config)
        done = api.generate_feedback(lab, student, force=True)
    pages = list((course / "feedback" / student / lab).glob("*.html"))
    failed = not done["success"] or not pages
    return pages, (done.get("error", "") + done.get("log", "")) if failed else ""
