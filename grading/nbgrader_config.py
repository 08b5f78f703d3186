"""nbgrader configuration of the course: the repository is the course directory.

    solutions/<lab>/*.ipynb   nbgrader's source (with solutions and hidden tests)
    labs/<lab>/*.ipynb        nbgrader's release (what students get)
    grading/gradebook.db      the gradebook of plain nbgrader commands (not committed)

Plain nbgrader works from the repository root with
``nbgrader generate_assignment lab01_autograd --config grading/nbgrader_config.py``,
but ``python -m minidist.course release|grade`` is the supported way: it
grades every student in isolation (see grading/README.md). Cell timeouts are
per lab, in ``minidist/course/settings.py``; plain nbgrader gets the largest.
"""

from pathlib import Path

from minidist.course.settings import DEFAULT_LIMITS, LAB_LIMITS

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)
root = Path(__file__).resolve().parents[1]

c.CourseDirectory.root = str(root)
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "labs"
c.CourseDirectory.submitted_directory = "grading/submitted"
c.CourseDirectory.autograded_directory = "grading/autograded"
c.CourseDirectory.feedback_directory = "grading/feedback"
c.CourseDirectory.db_url = f"sqlite:///{root / 'grading' / 'gradebook.db'}"
c.Execute.timeout = max(limits.cell_timeout_s for limits in [DEFAULT_LIMITS, *LAB_LIMITS.values()])
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbgrader.preprocessors.ClearHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
