"""Scratch folders for property-based tests.

Hypothesis runs many examples inside one test call, and pytest's ``tmp_path`` is one folder per call, so each
example that needs a fresh folder makes its own with :func:`scratch_dir`. The folders are removed when the test
module ends (the conftest's autouse fixture calls :func:`remove_scratch`), not left in the system's temporary
folder: the fuzzers made ~17,000 of them, some 2 MB model copies, per few dozen suite runs.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

_MADE: list[str] = []


def scratch_dir(prefix: str) -> Path:
    """A new empty folder, removed at the end of the calling test module."""
    folder = tempfile.mkdtemp(prefix=prefix)
    _MADE.append(folder)
    return Path(folder)


def remove_scratch() -> int:
    """Remove every folder :func:`scratch_dir` made so far; how many."""
    n = len(_MADE)
    while _MADE:
        shutil.rmtree(_MADE.pop(), ignore_errors=True)
    return n
