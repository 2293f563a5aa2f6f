"""The rules a model folder's manifest obeys, checked before any stage reads a file (:mod:`xmtc.models.storage`'s
module doc says what they are and why): every name a plain relative path inside the folder with no symlink on the
way (:func:`member_path`); the manifest agreeing with itself -- files, stage files and folders, declared arrays
(:func:`check_manifest`); and what the folder holds beyond it (:func:`unlisted_files`). A manifest that breaks one
is refused with one ModelFormatError line naming ``folder/manifest.json`` and the first contradiction.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from ..errors import ModelFormatError
from .array_files import ST_DTYPES, is_count

MANIFEST = "manifest.json"


def member_path(folder: Path, fname: Any) -> Path:
    """The path of a file a manifest names, refusing anything that could lead outside ``folder``:
    absolute paths, ``..``, empty or odd components, and symlinks anywhere below ``folder``."""
    where = folder / MANIFEST
    if not isinstance(fname, str) or not fname or "\\" in fname or "\0" in fname or fname.startswith("/"):
        raise ModelFormatError(f"{where}: file name {fname!r} is not a relative path inside the model folder")
    parts = fname.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ModelFormatError(f"{where}: file name {fname!r} is not a relative path inside the model folder")
    path = folder
    for i, part in enumerate(parts):
        path = path / part
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise ModelFormatError(f"{path}: missing (listed in the manifest)") from None
        except OSError as exc:
            raise ModelFormatError(f"{path}: cannot read ({exc.strerror})") from None
        if stat.S_ISLNK(st.st_mode):
            raise ModelFormatError(f"{path}: is a symbolic link; a model folder must hold its files itself")
        last = i == len(parts) - 1
        if last and not stat.S_ISREG(st.st_mode):
            raise ModelFormatError(f"{path}: not a regular file (listed in the manifest)")
        if not last and not stat.S_ISDIR(st.st_mode):
            raise ModelFormatError(f"{path}: not a folder (the manifest lists {fname!r})")
    return path


def _is_layout(layout: Any) -> bool:
    """Whether ``layout`` is a well-formed declaration ``{array name: [dtype, shape]}``."""
    return isinstance(layout, dict) and all(
        isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) and v[0] in ST_DTYPES
        and isinstance(v[1], list)
        and all(is_count(d) for d in v[1]) for v in layout.values())


def layout_difference(actual: dict, declared: dict) -> str:
    """How a file's arrays differ from those the manifest declares, in a few words."""
    for key in sorted(set(actual) | set(declared)):
        if key not in declared:
            return f"it holds array {key!r}, which the manifest does not declare"
        if key not in actual:
            return f"it lacks array {key!r}, which the manifest declares"
        if actual[key] != declared[key]:
            return (f"array {key!r} is {actual[key][0]} {actual[key][1]} but the manifest declares"
                    f" {declared[key][0]} {declared[key][1]}")
    return "its arrays differ from those the manifest declares"


def stage_folders(manifest: dict) -> list[str]:
    """The sub-folders that stages of a (checked) manifest name as their ``folder``."""
    return [st["folder"] for st in manifest["stages"] if isinstance(st.get("folder"), str)]


def check_manifest(folder: Path, m: dict) -> None:
    """Refuse a manifest that contradicts itself or the folder (see the module docstring for the rules).

    ``m`` has passed the reader's checks of its top-level types. Raises ModelFormatError naming
    ``folder/manifest.json`` and the first contradiction found."""
    where = folder / MANIFEST
    files = m["files"]
    for fname in files:
        member_path(folder, fname)  # every name is checked before any file is opened
    if "arrays" not in m:
        raise ModelFormatError(f"{where}: manifest lacks 'arrays' (the declared layout of each safetensors file)")
    layouts = m["arrays"]
    if not isinstance(layouts, dict):
        raise ModelFormatError(f"{where}: 'arrays' must map file names to array layouts")
    complete = m.get("arrays_complete", False)
    if complete is not True and "arrays_complete" in m:
        raise ModelFormatError(f"{where}: 'arrays_complete' must be true when present, got {complete!r}")
    for fname, layout in layouts.items():
        if fname not in files:
            raise ModelFormatError(f"{where}: 'arrays' declares the arrays of {fname!r}, which 'files' does not list")
        if not fname.endswith(".safetensors"):
            raise ModelFormatError(f"{where}: 'arrays' declares arrays for {fname!r}, which is not a safetensors file")
        if not _is_layout(layout):
            raise ModelFormatError(f"{where}: the declared arrays of {fname!r} are malformed"
                                   " (expected {name: [dtype, shape]})")
    names: set[str] = set()
    read: set[str] = set()
    for st in m["stages"]:
        name = st["name"]
        if name in names:
            raise ModelFormatError(f"{where}: two stages are named {name!r}")
        names.add(name)
        if "file" in st:
            fname = st["file"]
            if not isinstance(fname, str) or fname not in files:
                raise ModelFormatError(f"{where}: stage {name!r} reads file {fname!r}, which 'files' does not list")
            read.add(fname)
        if "folder" in st:
            sub = st["folder"]
            inside = [f for f in files if f.startswith(sub + "/")] if isinstance(sub, str) else []
            if not inside:
                raise ModelFormatError(f"{where}: stage {name!r} reads folder {sub!r}, in which 'files' lists nothing")
            read.update(inside)
    unread = sorted(set(files) - read)
    if unread:
        raise ModelFormatError(f"{where}: 'files' lists {unread[0]!r}, which no stage reads")
    subs = stage_folders(m)
    for fname in sorted(files):
        if not fname.endswith(".safetensors") or fname in layouts:
            continue
        sub = next((s for s in subs if fname.startswith(s + "/")), None)
        legacy = not complete and sub is not None and not any(f.startswith(sub + "/") for f in layouts)
        if not legacy:
            raise ModelFormatError(f"{where}: 'arrays' does not declare the arrays of {fname!r}"
                                   " (every safetensors file must be declared)")


def unlisted_files(folder: Path, m: dict) -> tuple[list[str], list[str]]:
    """``(inside stage folders, elsewhere)``: what the folder holds beyond the manifest and its listed
    files (symlinks included; folders only when they are links)."""
    listed = set(m["files"])
    subs = stage_folders(m)
    inside, elsewhere = [], []
    for root, dirs, names in os.walk(folder):
        for entry in sorted(names) + sorted(d for d in dirs if os.path.islink(os.path.join(root, d))):
            rel = Path(root, entry).relative_to(folder).as_posix()
            if rel == MANIFEST or rel in listed:
                continue
            (inside if any(rel.startswith(s + "/") for s in subs) else elsewhere).append(rel)
    return inside, elsewhere
