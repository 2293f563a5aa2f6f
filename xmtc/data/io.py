"""File plumbing shared by the readers and writers: one-pass input, transparent gzip, format guessing,
atomic writes, and ``-`` for standard input and output.

Every input is opened exactly once (:class:`Source`) and read front to back. That is what makes
pipes work: ``cat data | xmtc train - ...``, ``xmtc predict M /dev/stdin`` or a shell's ``<(...)``
cannot be rewound, so guessing the format reads the first lines into a buffer that the reader then
consumes first, instead of sniffing the file and opening it again (which silently read nothing from
a pipe). Gzip is recognised by its magic bytes rather than the file name, so ``train.txt`` that is
really gzipped (or ``.gz`` that is not) still reads, from a file or a pipe alike.

Lines end at ``\n`` (a ``\r`` before it is dropped), and each line is decoded on its own, so a byte
that is not UTF-8 is reported on its exact line in one pass. A UTF-8 byte order mark before the first
line (files saved by Excel or Notepad) is dropped, for every text format and the label file alike.
Writers go through :func:`atomic_output`: a crash or a bad row half-way never leaves a truncated file
where a good one was; ``-`` writes to standard output.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import re
import stat
import sys
import tempfile
import zlib
from pathlib import Path
from typing import IO, Iterator

from ..errors import DataFormatError

FORMATS = ("tsv", "jsonl", "xc", "npz", "text")
STDIO = "-"
STDIN_NAME = "<stdin>"
_XC_HEADER = re.compile(r"^\s*\d+\s+\d+\s+\d+\s*$")
# a data line of the XC format: comma-separated label ids (maybe none), then feature:value pairs
_XC_ROW = re.compile(r"^\s*(\d+(,\d+)*)?(\s+\d+:\S+)+\s*$|^\s*\d+(,\d+)*\s*$")
_GZIP_MAGIC = b"\x1f\x8b"
_ZIP_MAGIC = b"PK\x03\x04"
_READ_ERRORS = (OSError, EOFError, zlib.error)


def is_stdio(path) -> bool:
    return not isinstance(path, Source) and os.fspath(path) == STDIO


def is_stream(path) -> bool:
    """True for input that can be read only once: ``-``, a pipe/FIFO, a character device (/dev/stdin)."""
    if isinstance(path, Source):
        return path.stream
    if is_stdio(path):
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


class _Prefixed(io.RawIOBase):
    """A raw stream that serves ``prefix`` first, then the rest of ``raw``: a peek that gives back."""

    def __init__(self, prefix: bytes, raw):
        super().__init__()
        self._prefix = prefix
        self._raw = raw

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if self._prefix:
            n = min(len(buf), len(self._prefix))
            buf[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        # read1: one underlying read, so data decoded before a gzip error is delivered, not dropped
        data = self._raw.read1(len(buf)) if hasattr(self._raw, "read1") else self._raw.read(len(buf))
        buf[:len(data)] = data
        return len(data)


def _read_exact(fh, n: int) -> bytes:
    """Up to ``n`` bytes, fewer only at the end of the stream (a pipe may deliver them one by one)."""
    out = b""
    while len(out) < n:
        chunk = fh.read(n - len(out))
        if not chunk:
            break
        out += chunk
    return out


class Source:
    """One input opened once: its name for messages, its (gunzipped) bytes, its lines.

    ``peek_lines`` reads lines ahead for format guessing; iterating then yields those lines first,
    so nothing is read twice and a pipe works like a file. ``os.fspath`` gives the name used in
    error messages (``<stdin>`` for ``-``).
    """

    def __init__(self, path):
        self.path = path
        self.name = STDIN_NAME if is_stdio(path) else os.fspath(path)
        self.stream = is_stream(path)
        if is_stdio(path):
            raw, self._own = sys.stdin.buffer, False
        else:
            p = Path(path)
            if not os.path.exists(p):
                # a title typed where a file goes: say how to give a text itself
                hint = (" (this names a file of texts; to give a text itself, pipe it in: echo 'TEXT' | xmtc"
                        " predict MODEL -)") if " " in p.name and not p.suffix else ""
                raise DataFormatError(p, None, f"file not found{hint}")
            if p.is_dir():
                raise DataFormatError(p, None, "is a folder, expected a data file")
            try:
                raw, self._own = open(p, "rb"), True
            except OSError as exc:
                raise DataFormatError(p, None, f"cannot open: {exc.strerror}") from None
        self._raw = raw
        self.lineno = 0
        self._ahead: list[tuple[int, str]] = []
        self._deferred: DataFormatError | None = None  # a read error met while peeking, raised in turn
        self._done = False
        try:
            magic = _read_exact(raw, 2)
            fh = io.BufferedReader(_Prefixed(magic, raw), 1 << 16)
            self.gzip = magic == _GZIP_MAGIC
            if self.gzip:
                fh = gzip.GzipFile(fileobj=fh, mode="rb")
            head = _read_exact(fh, 4)
        except _READ_ERRORS as exc:
            self.close()
            raise DataFormatError(self, None, f"cannot read: {exc}") from None
        self.head = head  # the first bytes of the (gunzipped) data: enough to spot a zip (npz)
        self._fh = io.BufferedReader(_Prefixed(head, fh), 1 << 16)

    def __fspath__(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name

    def __enter__(self) -> "Source":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._own:
            self._raw.close()
            self._own = False

    def read_bytes(self) -> bytes:
        """Everything (gunzipped) from here on; for binary formats (npz) that need the whole file."""
        try:
            return self._fh.read()
        except _READ_ERRORS as exc:
            raise DataFormatError(self, None, f"cannot read: {exc}") from None

    def _read_line(self) -> tuple[int, str] | None:
        if self._done:
            return None
        try:
            raw = self._fh.readline()
        except _READ_ERRORS as exc:  # truncated or corrupt gzip: the line where the data stops
            self._done = True
            raise DataFormatError(self, self.lineno + 1, f"cannot read: {exc}") from None
        if not raw:
            self._done = True
            return None
        self.lineno += 1
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self._done = True
            raise DataFormatError(self, self.lineno, f"not valid UTF-8 ({exc.reason})") from None
        if self.lineno == 1 and text.startswith("\ufeff"):  # a UTF-8 byte order mark (Excel, Notepad): no data
            text = text[1:]
        if text.endswith("\n"):
            text = text[:-1]
        if text.endswith("\r"):  # CRLF, or a last line cut after its CR
            text = text[:-1]
        return self.lineno, text

    def peek_lines(self, n: int) -> list[tuple[int, str]]:
        """The next ``n`` lines (fewer at the end, or before a line that cannot be read), without
        consuming them. A line that cannot be read is reported when iteration reaches it, so an
        earlier line's own problem (a blank line, a missing tab) is the one reported first."""
        while len(self._ahead) < n and self._deferred is None:
            try:
                line = self._read_line()
            except DataFormatError as exc:
                self._deferred = exc
                break
            if line is None:
                break
            self._ahead.append(line)
        return self._ahead[:n]

    def __iter__(self) -> Iterator[tuple[int, str]]:
        while self._ahead:
            yield self._ahead.pop(0)
        if self._deferred is not None:
            exc, self._deferred = self._deferred, None
            raise exc
        while True:
            line = self._read_line()
            if line is None:
                return
            yield line


@contextlib.contextmanager
def open_source(path) -> Iterator[Source]:
    """A :class:`Source` for ``path`` (used as is when it already is one; closed on exit otherwise)."""
    if isinstance(path, Source):
        yield path
        return
    src = Source(path)
    try:
        yield src
    finally:
        src.close()


def iter_lines(path) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its end-of-line) for every line; bad UTF-8 or gzip is an error."""
    with open_source(path) as src:
        yield from src


def format_from_name(path) -> str | None:
    """The format a file name implies (.npz, .jsonl), or None: the content must tell."""
    if is_stdio(path) or (isinstance(path, Source) and path.stream):
        return None  # /dev/fd/63 says nothing, and "-" even less
    name = Path(os.fspath(path)).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith(".npz"):
        return "npz"
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if name.endswith(".tsv"):
        return "tsv"
    return None


def guess_format(path, fmt: str | None = None) -> str:
    """The format of a data file: ``fmt`` if given, else from the name, else from its first bytes and lines.

    ``path`` may be an open :class:`Source`, whose first lines are then read ahead, not consumed.
    """
    if fmt is not None:
        if fmt not in FORMATS:
            raise DataFormatError(path, None, f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
        return fmt
    named = format_from_name(path)
    if named is not None:
        return named
    with open_source(path) as src:
        if src.head.startswith(_ZIP_MAGIC):
            return "npz"
        first = None
        n = 0
        while True:  # read two non-blank lines at most
            n += 1
            ahead = src.peek_lines(n)
            if len(ahead) < n:
                break
            line = ahead[-1][1]
            if not line.strip() and "\t" not in line:  # blank; a lone tab is a TSV line (no labels, no text)
                continue
            if first is not None:  # "N D L" was the first line: XC only if this line is an XC row
                return "xc" if _XC_ROW.match(line) else "text"
            if _XC_HEADER.match(line):
                first = line
                continue
            if line.lstrip(" ").startswith("{"):  # not after a tab: "<TAB>{text" is a TSV line without labels
                return "jsonl"
            return "tsv" if "\t" in line else "text"
    return "text" if first is None else "xc"


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, binary: bool = False) -> Iterator[IO]:
    """Write to a sibling temporary file (gzipped when ``path`` ends in .gz), rename on success.

    ``-`` writes to standard output (UTF-8 text, or bytes with ``binary``), which is left open.
    """
    if is_stdio(path):
        sys.stdout.flush()
        if binary:
            yield sys.stdout.buffer
            sys.stdout.buffer.flush()
        else:
            fh = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="\n", write_through=False)
            try:
                yield fh
                fh.flush()
            finally:
                fh.detach()  # leave stdout open
        return
    path = Path(path)
    if path.is_dir():
        raise DataFormatError(path, None, "is a folder; expected a file name to write")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise DataFormatError(path, None, f"cannot write: {exc.strerror}") from None
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
