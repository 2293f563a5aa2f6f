"""File plumbing shared by the readers and writers: transparent gzip, format guessing, atomic writes.

Gzip is recognised by its magic bytes rather than the file name, so ``train.txt`` that is really
gzipped (or ``.gz`` that is not) still reads. Writers go through :func:`atomic_output`: a crash or a
bad row half-way never leaves a truncated file where a good one was.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import re
import tempfile
from pathlib import Path
from typing import IO, Iterator

from ..errors import DataFormatError

FORMATS = ("tsv", "jsonl", "xc", "npz", "text")
_XC_HEADER = re.compile(r"^\s*\d+\s+\d+\s+\d+\s*$")
# a data line of the XC format: comma-separated label ids (maybe none), then feature:value pairs
_XC_ROW = re.compile(r"^\s*(\d+(,\d+)*)?(\s+\d+:\S+)+\s*$|^\s*\d+(,\d+)*\s*$")


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def open_text(path: str | os.PathLike, errors: str = "strict") -> IO[str]:
    """Open a UTF-8 text file for reading, gunzipping when it is gzip; errors name the file."""
    path = Path(path)
    if not path.exists():
        raise DataFormatError(path, None, "file not found")
    if path.is_dir():
        raise DataFormatError(path, None, "is a folder, expected a data file")
    raw = gzip.open(path, "rb") if _is_gzip(path) else open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8", errors=errors, newline="")


def _first_bad_utf8_line(path) -> tuple[int, str] | None:
    """(line number, reason) of the first line that is not valid UTF-8, or None if none is found.

    The strict decoder works on whole chunks, so its error can surface several lines before the
    offending one is reached; this second pass finds the exact line (same line splitting).
    """
    try:
        with open_text(path, errors="surrogateescape") as fh:
            for lineno, line in enumerate(fh, 1):
                try:
                    line.encode("utf-8")
                except UnicodeEncodeError:  # only escaped undecodable bytes are unencodable
                    try:
                        line.encode("utf-8", "surrogateescape").decode("utf-8")
                    except UnicodeDecodeError as exc:
                        return lineno, exc.reason
                    return lineno, "invalid byte sequence"
    except (OSError, EOFError):
        pass
    return None


def iter_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its end-of-line) for every line; bad UTF-8 or gzip is an error."""
    lineno = 0
    try:
        with open_text(path) as fh:
            for lineno, line in enumerate(fh, 1):
                yield lineno, line.rstrip("\r\n")
    except UnicodeDecodeError as exc:
        line, reason = _first_bad_utf8_line(path) or (lineno + 1, exc.reason)
        raise DataFormatError(path, line, f"not valid UTF-8 ({reason})") from None
    except EOFError as exc:  # truncated gzip stream: the line where the data stops
        raise DataFormatError(path, lineno + 1, f"cannot read: {exc}") from None
    except OSError as exc:  # corrupt gzip stream
        raise DataFormatError(path, lineno + 1 if lineno else None, f"cannot read: {exc}") from None


def guess_format(path: str | os.PathLike, fmt: str | None = None) -> str:
    """The format of a data file: ``fmt`` if given, else from the name, else from the first line."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise DataFormatError(path, None, f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
        return fmt
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith(".npz"):
        return "npz"
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    with contextlib.closing(iter_lines(path)) as lines:  # read two lines at most, close the file now
        first = None
        for _, line in lines:
            if not line.strip():
                continue
            if first is not None:  # "N D L" was the first line: XC only if this line is an XC row
                return "xc" if _XC_ROW.match(line) else "text"
            if _XC_HEADER.match(line):
                first = line
                continue
            if line.lstrip().startswith("{"):
                return "jsonl"
            return "tsv" if "\t" in line else "text"
    return "text" if first is None else "xc"


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, binary: bool = False) -> Iterator[IO]:
    """Write to a sibling temporary file (gzipped when ``path`` ends in .gz), rename on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
    try:
        with open(tmp, "wb") as out:
            if path.name.endswith(".gz"):
                # mtime=0 and no file name in the header (the temporary name is random): the same
                # data gives byte-identical files
                raw = gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0)
            else:
                raw = out
            with raw:
                if binary:
                    yield raw
                else:
                    fh = io.TextIOWrapper(raw, encoding="utf-8", newline="\n")
                    yield fh
                    fh.flush()
                    fh.detach()  # leave closing to ``raw``
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
