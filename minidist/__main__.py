"""``python -m minidist ...``: the ``minidist`` command (``minidist/cli.py``), for an
environment whose scripts are not on PATH."""

from minidist.cli import main

raise SystemExit(main())
