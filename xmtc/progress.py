"""Progress bars that cost nothing when they are off, and log lines that do not run through them.

tqdm.auto pulls in asyncio (~18 ms and a few MB on first import); a fit on a small data set with
``progress=False`` should not pay that, so the bar library is imported only when a bar is shown.

A bar and the log share stderr: a log line written while a bar is drawn would land in the middle of
the bar's line. :class:`BarAwareHandler` (the CLI's log handler) writes through ``tqdm.write`` while
a bar is open, which clears the bar, prints the line and draws the bar again below it.
"""

from __future__ import annotations

import logging
import sys


class _Silent:
    """The part of tqdm's interface xmtc uses, doing nothing."""

    def update(self, n=1):
        pass

    def set_postfix(self, *args, **kwargs):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Shared(_Silent):
    """A bar that several workers advance (the trees of one fit, fitted side by side): a worker's own ``close``
    leaves it open for the others; its owner closes it."""

    def __init__(self, bar):
        self.bar = bar

    def update(self, n=1):
        self.bar.update(n)

    def set_postfix(self, *args, **kwargs):
        self.bar.set_postfix(*args, **kwargs)


_TERMINALS_ONLY = False  # set by the command line: no bars where stderr is a file or a pipe


def bars_on_terminals_only() -> None:
    """Draw bars only where stderr is a terminal (the ``xmtc`` command): a bar redrawn with carriage returns
    turns a log file or a CI log into one line per redraw. The library keeps drawing them (a notebook's
    stderr is no terminal, and its bars are widgets)."""
    global _TERMINALS_ONLY
    _TERMINALS_ONLY = True


def progress_bar(enabled, **kwargs):
    """A tqdm bar (``kwargs`` go to tqdm) when ``enabled`` is true, else a do-nothing stand-in; ``enabled`` may be
    an open bar instead, which the caller then advances without closing it (``kwargs`` are ignored)."""
    if hasattr(enabled, "update"):
        return _Shared(enabled)
    if not enabled or (_TERMINALS_ONLY and not _is_terminal(sys.stderr)):
        return _Silent()
    from tqdm.auto import tqdm

    return tqdm(dynamic_ncols=True, **kwargs)


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class BarAwareHandler(logging.StreamHandler):
    """A stream handler that writes above the open progress bars instead of into them."""

    def emit(self, record: logging.LogRecord) -> None:
        if "tqdm" not in sys.modules:  # no bar was ever shown
            return super().emit(record)
        from tqdm.auto import tqdm

        if not getattr(tqdm, "_instances", None):
            return super().emit(record)
        try:
            tqdm.write(self.format(record), file=self.stream)
            self.flush()
        except Exception:  # as StreamHandler.emit: a broken stream must not end the program
            self.handleError(record)
