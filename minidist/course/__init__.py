"""The course kit: release the labs, grade a class, in one command each.

    python -m minidist.course release            # solutions/ -> labs/, with nbgrader
    python -m minidist.course grade FOLDER       # autograde every student, isolated; grades.csv
    python -m minidist.course make-class FOLDER  # a synthetic class of mixed submissions (timing)

How the pieces fit: ``settings.py`` holds each lab's limits (cell timeout,
memory, CPU); ``release.py`` runs nbgrader's ``generate_assignment`` and
normalises its output so releases are reproducible; ``submissions.py`` finds
the notebooks to grade; ``grade.py`` autogrades each student in a private
course folder; ``isolation.py`` and ``sandbox.py`` keep student code away
from the course, the gradebook and other students. See grading/README.md for
the instructor's workflow.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from minidist.course.settings import course_root
from minidist.util.arguments import integer, output_folder


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m minidist.course`` (and of ``minidist course``)."""
    parser = argparse.ArgumentParser(prog="minidist course", description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=course_root(), help="course repository")
    commands = parser.add_subparsers(dest="command", required=True)
    release_cmd = commands.add_parser("release", help="regenerate labs/ from solutions/")
    release_cmd.add_argument("labs", nargs="*", help="only these labs (default: all)")
    grade_cmd = commands.add_parser("grade", help="autograde a folder of submissions")
    grade_cmd.add_argument("folder", type=Path, help="submitted/<student>/<lab>/ or flat files")
    grade_cmd.add_argument("--out", type=output_folder, default=None,
                           help="default: grading/out")
    grade_cmd.add_argument("--jobs", type=integer(1), default=2, help="students graded at a time")
    grade_cmd.add_argument("--cell-timeout", type=integer(1), default=None,
                           help="override the per-lab cell timeout (seconds)")
    class_cmd = commands.add_parser("make-class", help="write a synthetic class to grade")
    class_cmd.add_argument("folder", type=output_folder, help="where to write the notebooks")
    class_cmd.add_argument("--students", type=integer(1), default=30,
                           help="students in the class (default 30)")
    class_cmd.add_argument("--lab", action="append", help="only this lab (repeatable)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if not (root / "solutions").is_dir():
        parser.error(f"--root {args.root}: not the course's folder (it holds no solutions/)")
    known = sorted(p.name for p in (root / "solutions").glob("lab*") if p.is_dir())
    unknown = [lab for lab in (getattr(args, "labs", None) or getattr(args, "lab", None) or [])
               if lab not in known]
    if unknown:
        parser.error(f"unknown lab {', '.join(unknown)} (labs: {', '.join(known)})")
    if args.command == "grade" and not args.folder.is_dir():
        parser.error(f"{args.folder}: no such folder (grade takes the folder of submissions)")

    if args.command == "release":
        from minidist.course.release import release

        for notebook in release(root, args.labs or None):
            print(f"released {notebook.relative_to(root)}")
    elif args.command == "grade":
        # jsonschema's optional "iri" format, which no schema of the kit uses, costs a
        # 2 s import: skipped here as in the fork server (nbgrader_preload.py)
        sys.modules.setdefault("rfc3987_syntax", None)
        from minidist.course.grade import grade
        from minidist.course.report import summary_table

        out = (args.out or root / "grading" / "out").resolve()
        started = time.perf_counter()
        results = grade(root, args.folder.resolve(), out, args.jobs, args.cell_timeout)
        print(summary_table(results))
        print(f"\n{len(results)} submissions graded in {time.perf_counter() - started:.1f} s; "
              f"grades in {out / 'grades.csv'}, feedback in {out / 'feedback'}")
    else:
        from minidist.course.classroom import make_class

        for path in make_class(root, args.folder, args.students, args.lab):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
