"""Replacing a folder atomically, and cleaning up after saves that were killed half-way.

Why this exists: a model folder ``M`` is written beside itself (``.M.tmp-...``) and then moved into
place. Moving a folder over an existing one cannot be done with rename(2) alone (it refuses a
non-empty target), and the classic dance ``rename(M, backup); rename(tmp, M)`` leaves a moment in
which ``M`` does not exist: a process killed there (SIGKILL, OOM killer, a cluster's pre-emption)
loses the user's model. We use Linux's ``renameat2(RENAME_EXCHANGE)`` instead, which swaps the two
names in one step: at every instant ``M`` is either the complete old folder or the complete new one.
The old folder then sits under the temporary name and is deleted; if the process dies before that,
the next save to ``M`` removes it (it is named after the host and process that made it, so a folder
of a save still running is left alone).

Choices, and the alternatives we rejected:

* ``M`` as a symlink to a versioned folder, swapped with ``rename(2)`` of a new symlink, is also
  atomic and portable, but ``M`` stops being a plain folder: ``cp -r M elsewhere`` copies a dangling
  link and ``rsync`` needs ``-L``. Users copy models around, so ``M`` stays a real folder.
* Where ``renameat2`` is missing (not Linux, an old kernel, or a file system without
  ``RENAME_EXCHANGE``) we fall back to the two renames, with the backup named ``.M.old-...``. A
  process killed between them leaves ``M`` missing; the next save, and a load of ``M``, recover by
  renaming the backup back (:func:`recover`), so the old model is not lost, only briefly hidden.

Durability: files and folders are fsynced before the swap and the parent after it, so a power cut
also leaves the old or the new model rather than a folder of empty files.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import re
import shutil
import socket
import uuid
from pathlib import Path

log = logging.getLogger(__name__)

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
# the temporary folders a save makes beside its target: ".M.tmp-HOST-PID-RANDOM" holds the new
# model being written (and, after the exchange, the old one being deleted); ".M.old-HOST-PID-RANDOM"
# is the fallback's backup of the old model between its two renames
_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old)-(?P<host>[A-Za-z0-9_.-]*)-(?P<pid>\d+)-[0-9a-f]{8}$")

# tests set this to False to exercise the portable fallback
USE_EXCHANGE = True


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())[:40]


def temp_name(target: Path, kind: str = "tmp") -> Path:
    """A fresh sibling name for ``target`` that records which host and process owns it."""
    return target.with_name(f".{target.name}.{kind}-{_host()}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def is_temp_name(name: str) -> bool:
    """True for the name of a save's temporary folder (never a model a user named)."""
    return _TEMP.match(name) is not None


def _renameat2(src: Path, dst: Path, flags: int) -> bool:
    """renameat2(2); False when the platform or the file system does not offer it (caller falls back)."""
    if not USE_EXCHANGE:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    if fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(src), None, str(dst))


def fsync_tree(path: Path) -> None:
    """fsync every file and folder under ``path`` (and ``path`` itself)."""
    for root, _dirs, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(root))


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on folders; nothing more we can do
        pass
    finally:
        os.close(fd)


def replace_dir(new: Path, target: Path) -> Path | None:
    """Put the folder ``new`` at ``target`` so that ``target`` is never missing nor a mix.

    Returns the path that now holds the previous folder (for the caller to delete), or None when
    ``target`` did not exist.
    """
    if not os.path.lexists(target):
        try:
            if _renameat2(new, target, _RENAME_NOREPLACE):
                fsync_dir(target.parent)
                return None
        except FileExistsError:  # someone created it meanwhile: exchange with theirs below
            pass
        else:
            if not os.path.lexists(target):
                os.rename(new, target)  # rename(2) onto a missing name is atomic
                fsync_dir(target.parent)
                return None
    if _renameat2(new, target, _RENAME_EXCHANGE):
        fsync_dir(target.parent)
        return new
    # portable fallback: two renames, with a window that recover() repairs
    backup = temp_name(target, "old")
    os.rename(target, backup)
    os.rename(new, target)
    fsync_dir(target.parent)
    return backup


def _owner_alive(host: str, pid: int) -> bool | None:
    """Is the process that made a temporary folder still running? None when it ran on another host."""
    if host != _host():
        return None
    if pid == os.getpid():
        return False  # an earlier process with our pid (pid reuse); our own live temporaries are skipped
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover(target: Path, *, live: set[Path] = frozenset()) -> list[str]:
    """Restore or remove what killed saves to ``target`` left behind; returns notes of what was done.

    * ``target`` missing and a fallback backup ``.M.old-...`` of a dead process present: the backup
      is renamed back to ``target`` (the save died between its two renames).
    * every other temporary folder of a dead process is deleted;
    * those of a live process, or of another host (a shared file system), are only reported.
    """
    notes: list[str] = []
    parent = target.parent
    try:
        entries = sorted(os.listdir(parent))
    except OSError:
        return notes
    stale: list[tuple[str, Path]] = []
    for entry in entries:
        m = _TEMP.match(entry)
        if m is None or m["name"] != target.name:
            continue
        path = parent / entry
        if path in live or not path.is_dir() or path.is_symlink():
            continue
        alive = _owner_alive(m["host"], int(m["pid"]))
        if alive is None:
            notes.append(f"left {path} alone: a save from host {m['host']!r} made it")
        elif not alive:
            stale.append((m["kind"], path))
    if not os.path.lexists(target):
        backups = [p for kind, p in stale if kind == "old" and (p / "manifest.json").is_file()]
        if backups:
            newest = max(backups, key=lambda p: p.stat().st_mtime)
            os.rename(newest, target)
            fsync_dir(parent)
            stale = [(k, p) for k, p in stale if p != newest]
            notes.append(f"restored {target} from {newest.name}, left by a save that was killed")
    for _kind, path in stale:
        shutil.rmtree(path, ignore_errors=True)
        notes.append(f"removed {path.name}, left by a save that was killed")
    for note in notes:
        log.warning("%s", note)
    return notes
