"""The feedback exporter: nbconvert's HTML, with its templates compiled once per process."""

from __future__ import annotations

import nbformat
from nbconvert.exporters import HTMLExporter

from minidist.course.feedback import COMPILED, FeedbackExporter


def test_the_page_is_nbconverts_and_the_templates_compile_once():
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Lab"),
                                               nbformat.v4.new_code_cell("1 + 1")])
    expected, _ = HTMLExporter().from_notebook_node(notebook)
    first, _ = FeedbackExporter().from_notebook_node(notebook)
    compiled = COMPILED.compilations
    again, _ = FeedbackExporter().from_notebook_node(notebook)  # a new environment
    assert first == again == expected
    assert compiled > 0 and COMPILED.compilations == compiled  # none the second time
