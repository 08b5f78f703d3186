"""``python -m minidist.course.nbgrader_cli ARGS``: nbgrader's command line, started faster.

Where ``rfc3987-syntax`` is installed (jupyter-events asks for it), jsonschema
imports it at start for one optional string format, "iri", that neither
nbformat's schemas nor nbgrader's use; that import builds a parser from a
grammar, about 2 s of every process that imports nbformat. Grading a class
starts two such processes a notebook (autograde, feedback) and one a lab (the
release). Marked absent here, the import fails at once and jsonschema goes
on without that one format; nothing else changes.
"""

import runpy
import sys

if __name__ == "__main__":
    sys.modules["rfc3987_syntax"] = None  # `import rfc3987_syntax` now raises ImportError
    runpy.run_module("nbgrader", run_name="__main__", alter_sys=True)
