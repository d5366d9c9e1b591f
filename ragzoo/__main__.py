"""`python -m ragzoo ...`: the `ragzoo` command, for an environment whose scripts folder is not on PATH (a notebook
kernel, a venv used without activating it)."""

import sys

from ragzoo.cli import main

sys.exit(main())
