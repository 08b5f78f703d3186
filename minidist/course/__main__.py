"""``python -m minidist.course``: see :mod:`minidist.course`."""

import sys

from minidist.course import main

sys.exit(main())
