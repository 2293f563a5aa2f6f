"""Exception types shared by every layer.

All user-facing failures derive from :class:`XmtcError`, so the CLI can print a
single line (``xmtc: <message>``) instead of a traceback. Errors about input
files always name the file and, where it makes sense, the 1-based line.
"""

from __future__ import annotations

import os


class XmtcError(Exception):
    """Base class for every error xmtc raises on purpose."""


class DataFormatError(XmtcError, ValueError):
    """A data file (or in-memory input) is malformed.

    The message reads ``PATH:LINE: problem`` (``PATH: problem`` when no line
    applies), the same shape compilers use, so editors can jump to it; in-memory
    input reads ``input line N: problem``.
    """

    def __init__(self, path: str | os.PathLike | None, line: int | None, problem: str):
        self.path = None if path is None else os.fspath(path)
        self.line = line
        self.problem = problem
        if self.path is not None:
            where = self.path if line is None else f"{self.path}:{line}"
            message = f"{where}: {problem}"
        else:  # in-memory input: the line is the item's 1-based position
            message = problem if line is None else f"input line {line}: {problem}"
        super().__init__(message)


class ModelFormatError(XmtcError):
    """A saved model folder is missing, corrupt, or from an incompatible version."""


class ConfigError(XmtcError, ValueError):
    """An impossible or unknown configuration value."""


class SetupError(ConfigError):
    """A setting that cannot work whatever the data: an analyzer whose library is missing, a stop-word list
    that does not exist, a validation size that is no size. The message names the setting; ``xmtc train``
    does not blame the training file for it."""


class NotFittedError(XmtcError, RuntimeError):
    """A model was used before ``fit`` (or ``load``)."""
