"""How the grader reads a folder of submissions, and its command line's bad input: no
grading runs here (tests/test_course_kit.py grades a class)."""

from __future__ import annotations

import json

import pytest

from minidist.course import main
from minidist.course.submissions import collect, restore_locked_cells, safe_id

RELEASE = {"lab01_autograd": ["lab01_autograd.ipynb"]}
ANSWER = {"nbgrader": {"grade_id": "answer", "solution": True, "grade": False, "locked": False}}
NOTEBOOK = json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                       "cells": [{"cell_type": "code", "source": "", "metadata": ANSWER,
                                  "outputs": [], "execution_count": None}]})


def test_distinct_names_stay_distinct_ids():
    """李明 and 王芳 both became "__", "Jane Doe" and "Jane_Doe" both "Jane_Doe": the second
    of each pair was then dropped as a duplicate submission."""
    names = ["李明", "王芳", "Jane Doe", "Jane_Doe", "jane.doe", "o'neil"]
    ids = [safe_id(name) for name in names]
    assert len(set(ids)) == len(names)
    assert safe_id("Jane_Doe") == "Jane_Doe" and safe_id("Jane Doe").startswith("Jane_Doe-")
    assert all(c.isascii() and (c.isalnum() or c in "_.-") for i in ids for c in i)


def test_each_submission_keeps_the_name_it_was_submitted_as(tmp_path):
    """grades.csv had only the id ("Jane_Doe-cac7bbb6"), which no LMS knows."""
    (tmp_path / "Jane Doe" / "lab01_autograd").mkdir(parents=True)
    (tmp_path / "Jane Doe" / "lab01_autograd" / "lab01_autograd.ipynb").write_text(NOTEBOOK)
    (tmp_path / "李明_lab01_autograd.ipynb").write_text(NOTEBOOK)
    (tmp_path / "O Neil_lab99.ipynb").write_text(NOTEBOOK)
    names = {sub.student: sub.submitted_as for sub in collect(tmp_path, RELEASE)}
    assert names == {safe_id("Jane Doe"): "Jane Doe", safe_id("李明"): "李明",
                     safe_id("O Neil_lab99"): "O Neil_lab99"}


def _cell(grade_id: str, locked: bool, solution: bool = False) -> dict:
    return {"cell_type": "code", "source": grade_id, "outputs": [], "execution_count": None,
            "metadata": {"nbgrader": {"grade_id": grade_id, "locked": locked,
                                      "solution": solution, "grade": grade_id.startswith("t")}}}


def test_locked_cells_missing_are_put_back_where_they_were():
    """Setup and tests come back after the cell before them in the release (the first one
    first); a deleted answer does not (its task is lost: tests/test_grading_failures.py),
    but the row names it; the student's own cells stay where they are."""
    release = {"cells": [_cell("setup", True), {"cell_type": "markdown", "source": "# Task 1"},
                         _cell("answer1", False, True), _cell("test1", True),
                         _cell("answer2", False, True), _cell("test2", True)]}
    mine = {"cell_type": "code", "source": "print(1)", "metadata": {}, "outputs": []}
    notebook = {"cells": [_cell("answer1", False, True), mine, _cell("test2", True)]}
    said = restore_locked_cells(notebook, release)
    assert [c["source"] for c in notebook["cells"]] == \
        ["setup", "answer1", "test1", "print(1)", "test2"]
    assert [s.split(" was ")[0].split(" is ")[0] for s in said] == \
        ["the locked cell setup", "the locked cell test1", "the answer cell answer2"]
    assert said[-1].endswith("(was it deleted?): its task was graded without it")
    assert restore_locked_cells(notebook, release) == said[-1:]  # nothing more to put back
    another_lab = {"cells": [_cell("setup", True), _cell("answer9", False, True),
                             _cell("test9", True)]}
    assert restore_locked_cells(another_lab, release) == [] and len(another_lab["cells"]) == 3


def test_a_second_submission_is_one_note_on_the_graded_one(tmp_path):
    (tmp_path / "frank" / "lab01_autograd").mkdir(parents=True)
    (tmp_path / "frank" / "lab01_autograd" / "lab01_autograd.ipynb").write_text(NOTEBOOK)
    (tmp_path / "frank_lab01_autograd.ipynb").write_text(NOTEBOOK)
    subs = collect(tmp_path, RELEASE)
    assert [(s.student, s.lab) for s in subs] == [("frank", "lab01_autograd")]
    assert subs[0].notes == ["a second submission for this lab was ignored "
                             "(frank_lab01_autograd.ipynb; graded: "
                             "frank/lab01_autograd/lab01_autograd.ipynb)"]


def test_a_notebook_loose_in_a_students_folder_is_its_labs_or_a_row_saying_where_it_goes(
        tmp_path):
    """Named as a lab's only notebook, it is that lab's (it was refused); else the row says
    where it goes."""
    (tmp_path / "gus").mkdir()
    (tmp_path / "gus" / "lab01_autograd.ipynb").write_text(NOTEBOOK)
    (tmp_path / "gus" / "answers.ipynb").write_text(NOTEBOOK)
    subs = collect(tmp_path, RELEASE)
    assert [(s.student, s.lab) for s in subs] == [("gus", "?"), ("gus", "lab01_autograd")]
    assert "put it in gus/<lab>/" in subs[0].problem and subs[1].problem is None


def test_names_as_students_and_their_tools_make_them(tmp_path):
    """A download's "(1)", a resubmission's "-2", capitals, a renamed copy, an HTML export
    beside the notebook, an empty file and a zip: each was a zero to untangle by hand."""
    files = {"carol_lab01_autograd.ipynb": NOTEBOOK, "carol_lab01_autograd (1).ipynb": NOTEBOOK,
             "dan_lab01_autograd-1.ipynb": NOTEBOOK, "dan_lab01_autograd-2.ipynb": NOTEBOOK,
             "Bob_Lab01_Autograd.ipynb": NOTEBOOK, "dave_lab01_autograd.html": "<html>",
             "dave_lab01_autograd.ipynb": NOTEBOOK, "empty_lab01_autograd.ipynb": "",
             "erin_lab01_autograd.zip": "PK\x03\x04 and the rest"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "alice" / "lab01_autograd").mkdir(parents=True)
    (tmp_path / "alice" / "lab01_autograd" / "lab01_autograd-Copy1.ipynb").write_text(NOTEBOOK)
    subs = {s.student: s for s in collect(tmp_path, RELEASE)}
    graded = {student: [p.name for p in s.notebooks.values()] for student, s in subs.items()}
    assert graded == {"alice": ["lab01_autograd-Copy1.ipynb"], "Bob": ["Bob_Lab01_Autograd.ipynb"],
                      "carol": ["carol_lab01_autograd (1).ipynb"],
                      "dan": ["dan_lab01_autograd-2.ipynb"], "dave": ["dave_lab01_autograd.ipynb"],
                      "empty": ["empty_lab01_autograd.ipynb"], "erin": ["erin_lab01_autograd.zip"]}
    assert all(subs[s].problem is None for s in ("alice", "Bob", "carol", "dan", "dave"))
    assert subs["alice"].notes == ["lab01_autograd-Copy1.ipynb was graded as lab01_autograd.ipynb"]
    assert "ignored (dave_lab01_autograd.html; graded" in subs["dave"].notes[0]
    assert "ignored (dan_lab01_autograd-1.ipynb; graded" in subs["dan"].notes[0]
    assert subs["empty"].problem.endswith("is empty: submit the notebook saved with your answers")
    assert subs["erin"].problem.endswith("is a zip archive: submit the .ipynb notebook itself")


def test_edited_grading_metadata_is_a_sentence_not_a_crash(tmp_path):
    """A grade_id made a list crashed the run (unhashable), and the class's grades.csv
    was never written."""
    notebook = json.loads(NOTEBOOK)
    notebook["cells"][0]["metadata"]["nbgrader"]["grade_id"] = ["answer"]
    (tmp_path / "zed_lab01_autograd.ipynb").write_text(json.dumps(notebook))
    (sub,) = collect(tmp_path, RELEASE)
    assert "the grading metadata of cell 1 was edited" in sub.problem


def test_flat_files_beside_submitted_are_read_too(tmp_path):
    """grading/README: submitted/, a flat export, or both mixed (the flat files were once
    left out without a word when submitted/ was there)."""
    (tmp_path / "submitted" / "alice" / "lab01_autograd").mkdir(parents=True)
    (tmp_path / "submitted" / "alice" / "lab01_autograd" / "lab01_autograd.ipynb").write_text(
        NOTEBOOK)
    (tmp_path / "carol_lab01_autograd.ipynb").write_text(NOTEBOOK)
    (tmp_path / "bob_lab01_autograd.ipynb").write_text("{ broken")
    subs = {s.student: s for s in collect(tmp_path, RELEASE)}
    assert sorted(subs) == ["alice", "bob", "carol"]
    assert subs["carol"].problem is None and "not JSON" in subs["bob"].problem


def test_a_notebook_stripped_of_its_grading_metadata_says_so(tmp_path):
    """Saved by a tool that drops cell metadata, it once scored zero with no sentence."""
    stripped = json.loads(NOTEBOOK)
    stripped["cells"][0]["metadata"] = {}
    (tmp_path / "erin_lab01_autograd.ipynb").write_text(json.dumps(stripped))
    (sub,) = collect(tmp_path, RELEASE)
    assert "has no grading metadata" in sub.problem
    assert "submit the notebook released for this lab" in sub.problem


def test_the_graders_own_output_inside_the_folder_is_no_submission(tmp_path):
    (tmp_path / "dave_lab01_autograd.ipynb").write_text(NOTEBOOK)
    (tmp_path / "out" / "feedback" / "dave").mkdir(parents=True)
    subs = collect(tmp_path, RELEASE, skip=(tmp_path / "out",))
    assert [s.student for s in subs] == ["dave"]


@pytest.mark.parametrize("argv, message", [
    (["grade", "/no/such/folder"], "/no/such/folder: no such folder"),
    (["grade", ".", "--jobs", "0"], "argument --jobs: wants an integer >= 1, got '0'"),
    (["release", "lab1"], "unknown lab lab1 (labs: lab01_autograd"),
    (["make-class", "{tmp}/x", "--lab", "lab99"], "unknown lab lab99"),
    (["make-class", "{tmp}/file"], "'{tmp}/file' is a file, not a folder"),
    (["make-class", "/proc/x"], "cannot make '/proc/x'"),
    (["grade", ".", "--out", "{tmp}/file/out"], "cannot make '{tmp}/file/out'"),
    (["grade", ".", "--out", "{tmp}/file"], "'{tmp}/file' is a file, not a folder"),
])
def test_bad_input_is_a_usage_error(argv, message, capsys, tmp_path):
    """An --out under a file was found after the whole class was graded: grades.csv was
    never written; make-class into one gave a traceback."""
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit) as exit_:
        main([word.format(tmp=tmp_path) for word in argv])
    assert exit_.value.code == 2 and message.format(tmp=tmp_path) in capsys.readouterr().err


def test_the_graders_failure_on_one_submission_is_that_students_zero(tmp_path, monkeypatch):
    """grade_all mapped grade_one over the class unguarded: one exception ended the run
    after everyone was graded, and no grades.csv was written."""
    from minidist.course.grade import Grader, Release
    from minidist.course.submissions import Submission

    grader = object.__new__(Grader)  # no release built: grade_one is replaced below
    grader.release = Release(tmp_path, {}, {"lab01_autograd": 26.0}, {})
    pages = []
    monkeypatch.setattr(grader, "_write_problem_page", pages.append, raising=False)

    def grade_one(sub, hide):
        raise TypeError("unhashable type: 'list'")

    monkeypatch.setattr(grader, "grade_one", grade_one, raising=False)
    result = grader.guarded(Submission("zed", "lab01_autograd", notes=["a note"]), [])
    assert (result.student, result.score, result.max_score) == ("zed", 0.0, 26.0)
    assert result.problems == ["the grader failed on this submission (TypeError: unhashable "
                               "type: 'list'); the instructor will look at it", "a note"]
    assert pages == [result]
