"""What the fork server of ``nbgrader_fork.py`` imports once, for every nbgrader run it forks.

Where ``rfc3987-syntax`` is installed (jupyter-events asks for it), jsonschema
imports it for one optional string format, "iri", that neither nbformat's
schemas nor nbgrader's use; that import builds a parser from a grammar, about
2 s. Marked absent first, the import fails at once and jsonschema goes on
without that one format; nothing else changes.
"""

import sys

sys.modules["rfc3987_syntax"] = None

import alembic  # noqa: E402,F401  (nbgrader upgrades a gradebook's schema with it)
import nbgrader.apps.nbgraderapp  # noqa: E402,F401
import nbgrader.preprocessors  # noqa: E402,F401

import minidist.course.trusted  # noqa: E402,F401  (the autograde step grading names)
