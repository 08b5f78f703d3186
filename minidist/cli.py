"""The ``minidist`` command: one entry point for the course's tools.

    minidist course release|grade|...   the instructor's kit (see grading/README.md)
    minidist example NAME [ARGS...]      same as python -m minidist.examples.NAME
    minidist bench NAME [ARGS...]        same as python -m minidist.bench.NAME
    minidist mpirun -n P PROGRAM...      mpiexec -n P python -m mpi4py PROGRAM..., a killed
                                         rank ending the job at once, named (comm.transport.mpirun)
"""

from __future__ import annotations

import importlib.util
import pkgutil
import runpy
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "course":
        from minidist.course import main as course_main

        return course_main(rest) or 0
    if command == "mpirun":
        from minidist.comm.transport.mpirun import main as mpirun_main

        return mpirun_main(rest)
    if command in ("example", "bench") and rest:
        package = "examples" if command == "example" else "bench"
        if rest[0] in ("-h", "--help"):
            print(f"minidist {command} NAME [ARGS...]: python -m minidist.{package}.NAME; "
                  f"NAME is one of {', '.join(_modules(package))}")
            return 0
        module = f"minidist.{package}.{rest[0]}"
        if not rest[0].isidentifier() or importlib.util.find_spec(module) is None:
            print(f"minidist {command}: no {command} named {rest[0]!r}; there are "
                  f"{', '.join(_modules(package))}", file=sys.stderr)
            return 2
        sys.argv = [module, *rest[1:]]
        runpy.run_module(module, run_name="__main__")
        return 0
    print(f"minidist: unknown command {' '.join(argv)!r}\n{__doc__}", file=sys.stderr)
    return 2


def _modules(package: str) -> list[str]:
    """The modules of ``minidist.<package>`` that run as a program (not its helpers)."""
    found = importlib.util.find_spec(f"minidist.{package}").submodule_search_locations
    return sorted(m.name for m in pkgutil.iter_modules(found)
                  if '__name__ == "__main__"' in Path(found[0], f"{m.name}.py").read_text())


if __name__ == "__main__":
    sys.exit(main())
