"""``python -m xmtc ...``: the same command line as ``xmtc ...``."""

from .cli import entry

entry()
