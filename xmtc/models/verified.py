"""Verification stamps: which model files this user's xmtc has already checked in full, keyed by file stat.

Why: loading checks every file of a model folder against the manifest's SHA-256 and checks the
weights' structure (offsets, bounds) before the C kernel may read them. That is reading and hashing
every byte: at 1M labels 10 s of a memory-mapped load, at 3M labels more than 20 s, which undoes what
memory-mapping buys (a server that answers at once, pages read only when a query touches them).
So the result of a full check is remembered, as git's index remembers that a file is unchanged.

A stamp is one small JSON file per model folder under the user's cache folder
(``$XMTC_CACHE_DIR``, else ``$XDG_CACHE_HOME/xmtc``, else ``~/.cache/xmtc``; sub-folder ``verified``),
holding for each file that passed: its SHA-256 and its stat (device, inode, size, modification and
status-change times in ns), plus the xmtc version that checked it. A file whose stat and manifest
checksum both match its stamp has the bytes that passed, unless they were changed without changing
any of those: writing to a file sets its status-change time (ctime), which no user-space call can set
back, and replacing it gives a new inode. What a stamp does not catch: bytes changed under the file
system (bit rot on the disk, a write to the raw device). ``xmtc verify MODEL_DIR`` checks every byte
whatever the stamps say; ``XMTC_VERIFY=full`` makes every load do so.

Who writes stamps: a load that checked every file in full (checksums and the stages' own checks), and
a save, for the files it has just written from a model in memory (checksummed at that moment). A save
sets the modification time of each file it stamps one second back, a value no later write produces, so
that a write within the same clock tick as the save, whose coarse timestamps could equal the save's own,
still changes the stat. A load stamps only files unchanged for two seconds, for the same reason.

The cache is the user's own: a stamp is trusted only from a folder and file owned by this user and
not writable by others, since whoever can forge a stamp could make a crafted file skip the checks.
A stamp that cannot be written (read-only home, another user's cache) is skipped silently; the next
load checks in full again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import time
from pathlib import Path

from .._version import __version__

log = logging.getLogger(__name__)

_KEEP = 512  # stamps kept; the oldest are pruned when more accumulate (test suites save thousands of models)
_SETTLE_NS = 2_000_000_000  # a file changed this recently is not stamped by a load (its ctime may not be final)


def full_checks_forced() -> bool:
    """``XMTC_VERIFY=full`` (or ``always``): ignore stamps, check every file at every load."""
    return os.environ.get("XMTC_VERIFY", "").strip().lower() in ("full", "always", "1", "yes")


def stamp_dir() -> Path:
    base = os.environ.get("XMTC_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = os.path.join(xdg, "xmtc") if xdg else os.path.join(os.path.expanduser("~"), ".cache", "xmtc")
    return Path(base) / "verified"


def file_key(path: Path) -> list[int]:
    st = os.stat(path)
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _stamp_path(folder: Path) -> Path:
    real = os.path.realpath(folder)
    return stamp_dir() / (hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:32] + ".json")


def _own(st: os.stat_result) -> bool:
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def read_stamp(folder: Path) -> dict[str, tuple[list[int], str]]:
    """``{file name: (stat key, sha256)}`` of the files of ``folder`` a previous full check passed; empty
    when there is no usable stamp (none, another xmtc version, not this user's, unreadable)."""
    if full_checks_forced():
        return {}
    path = _stamp_path(folder)
    try:
        with open(path, "rb") as fh:
            if not (_own(os.fstat(fh.fileno())) and _own(os.stat(path.parent))):
                return {}
            obj = json.loads(fh.read())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(obj, dict) or obj.get("xmtc_version") != __version__ \
            or obj.get("folder") != os.path.realpath(folder) or not isinstance(obj.get("files"), dict):
        return {}
    out = {}
    for fname, entry in obj["files"].items():
        if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], str) and isinstance(entry[0], list) \
                and len(entry[0]) == 5 and all(isinstance(v, int) for v in entry[0]):
            out[fname] = (entry[0], entry[1])
    return out


def matches(stamp: dict, fname: str, path: Path, sha256: str) -> bool:
    """Whether ``path`` (manifest name ``fname``, manifest checksum ``sha256``) is a file the stamp vouches for."""
    entry = stamp.get(fname)
    if entry is None or entry[1] != sha256:
        return False
    try:
        return file_key(path) == entry[0]
    except OSError:
        return False


def write_stamp(folder: Path, files: dict[str, str], *, fresh: bool = False) -> None:
    """Record that the files ``{name: sha256}`` of ``folder`` passed a full check (a load's), or were
    just written by a save (``fresh``: their modification times are set first, see the module notes).
    Best effort: a stamp that cannot be written is skipped."""
    if full_checks_forced() or not files:
        return
    try:
        entries = {}
        now = time.time_ns()
        for fname, sha in files.items():
            path = Path(folder) / fname
            if fresh:
                st = os.stat(path)
                os.utime(path, ns=(st.st_atime_ns, _past_mtime(now)))
            key = file_key(path)
            if not fresh and now - max(key[3], key[4]) < _SETTLE_NS:
                continue  # changed a moment ago: a write in the same clock tick could leave the same stat
            entries[fname] = [key, sha]
        if not entries:
            return
        where = stamp_dir()
        where.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not _own(os.stat(where)):
            return
        target = _stamp_path(folder)
        old = read_stamp(folder) if not fresh else {}
        merged = {f: [k, s] for f, (k, s) in old.items()}
        merged.update(entries)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"xmtc_version": __version__, "folder": os.path.realpath(folder), "files": merged}, fh)
        os.replace(tmp, target)
        _prune(where)
    except OSError as exc:
        log.debug("no verification stamp for %s: %s", folder, exc)


def forget(folder: Path) -> None:
    """Drop the stamp of ``folder`` (``xmtc verify`` before its full check)."""
    try:
        _stamp_path(folder).unlink()
    except OSError:
        pass


def _past_mtime(now_ns: int) -> int:
    """A modification time a later write cannot give the file: one second before ``now_ns`` (a write sets
    the current time; with a coarse clock that may be the save's own tick, never a second earlier)."""
    return now_ns - 1_000_000_000


def _prune(where: Path) -> None:
    try:
        stamps = [e for e in os.scandir(where) if e.name.endswith(".json")]
        if len(stamps) <= _KEEP:
            return
        stamps.sort(key=lambda e: e.stat().st_mtime_ns)
        for e in stamps[:len(stamps) - _KEEP // 2]:
            os.unlink(e.path)
    except OSError:
        pass
