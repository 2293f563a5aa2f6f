"""``python -m xmtc ...``: the same command line as ``xmtc ...``."""

import sys

from .cli import main

sys.exit(main())
