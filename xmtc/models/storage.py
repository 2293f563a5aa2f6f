"""The on-disk model format: a folder with ``manifest.json`` plus safetensors/JSON files.

Why this shape: a model from a stranger must not be able to run code when loaded, so there is no
pickle anywhere — only safetensors (numeric arrays) and JSON. Every file is listed in the manifest
with its SHA-256, so truncation or bit rot is reported as such instead of surfacing later as a
shape error deep in prediction. Saving writes a sibling temporary folder and swaps it into
place in one step (:mod:`xmtc.models.swap`), so a save killed at any moment leaves the old model
or the new one at the target, never a mix and never nothing.
Arrays are written with a fixed layout, so the same model gives byte-identical files.

Loading trusts nothing in the folder: every file name in the manifest must be a plain relative path
inside the folder (no ``..``, no absolute path, no symlink anywhere on the way), every file is
checksummed, and a safetensors file's header (dtypes, shapes, offsets) is checked against the file
size and the layout the manifest declares before any array is built.

What is verified when: names, the manifest's agreement with itself and every safetensors header, at
every load. Checksums (every byte hashed) and the stages' structural checks of their arrays (the
weights' offsets and bounds), at the first load of a folder and whenever a file's stat (inode, size,
modification and change times) differs from a :mod:`verification stamp <xmtc.models.verified>` this
user's xmtc wrote after a full check or a save; a file the stamp vouches for is neither re-hashed
nor re-checked, so a memory-mapped model of millions of labels loads in a moment. ``xmtc verify``
checks every byte regardless (for bit rot under an unchanged stat), ``XMTC_VERIFY=full`` makes every
load do so.

The manifest must also agree with itself, checked when :class:`ModelReader` opens the folder, before
any stage reads anything; a manifest that contradicts itself (an entry renamed, dropped or added by
hand or by a faulty tool) is refused with one ModelFormatError line rather than half-loaded:

* ``files`` lists every file a stage reads, each with its SHA-256, and every listed file exists;
* every stage's ``file`` is listed, every stage's ``folder`` has listed files, and every listed file is
  read by a stage (as its ``file`` or inside its ``folder``); stage names are unique;
* ``arrays`` declares the arrays (name, dtype, shape) of every listed safetensors file and of nothing
  else, and a file's header must match its declaration when a stage reads it. The one exception is
  a model saved before the files in stage folders were declared, told apart by the absence of
  ``"arrays_complete": true`` (which every save now writes): there, a stage folder with no declared
  file at all may hold undeclared safetensors files (the encoder's weights); their header is still
  checked against the file, and their checksum verified.

Stages reach files only through :class:`ModelReader` (:meth:`~ModelReader.arrays`,
:meth:`~ModelReader.json`, :meth:`~ModelReader.subfolder`), which verify the checksum and the declared
layout of each file before handing it out; nothing else in a stage opens a model file by name.

Files in the folder that the manifest does not list: inside a stage folder they are refused, since
the library that loads that folder (a Hugging Face encoder) would pick them up unchecked; anywhere
else they are ignored with a warning (a README or an editor's backup beside the model), because
nothing can load a file that no manifest entry names.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from .._version import __version__
from ..errors import ModelFormatError
from . import swap, verified
from .array_files import array_layout, mmap_arrays, read_arrays, sha256_file, write_arrays
from .manifest_rules import MANIFEST, check_manifest, layout_difference, member_path, stage_folders, unlisted_files

log = logging.getLogger(__name__)

FORMAT_NAME = "xmtc-model"
FORMAT_VERSION = 1


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def check_target(target: str | os.PathLike) -> Path:
    """The folder a model will be saved to, or ModelFormatError if saving there would destroy
    something that is not an xmtc model (a file, a folder of other things). Called before training,
    so that a long fit does not end in a refusal."""
    target = Path(target)
    if str(target) in ("", "-"):
        raise ModelFormatError(f"{str(target)!r}: a model is a folder; give its path (it cannot go to stdout)")
    if target.is_symlink():  # save into what the link points at, keep the link
        target = Path(os.path.realpath(target))
    if swap.is_temp_name(target.name):
        raise ModelFormatError(f"{target}: this name is reserved for the temporary folders of a save")
    if os.path.lexists(target):
        if not target.is_dir():
            raise ModelFormatError(f"{target}: exists and is not a folder; refusing to overwrite it")
        if not (target / MANIFEST).is_file() and any(target.iterdir()):
            raise ModelFormatError(f"{target}: exists and is not an xmtc model folder; refusing to overwrite it")
    elif target.parent.exists() and not target.parent.is_dir():
        raise ModelFormatError(f"{target.parent}: not a folder")
    return target


class ModelWriter:
    """Collects a model's files in a temporary folder; ``commit`` swaps it into place atomically.

    ``stamp=True`` (a fitted model's own save): ``commit`` also writes a verification stamp, so the next
    load skips re-hashing and re-checking the files (:mod:`xmtc.models.verified`). Only for files written
    from a model in memory that passed its own checks: arrays written by hand must be checked at load."""

    _live: set[Path] = set()  # temporary folders of saves running in this process

    def __init__(self, target: str | os.PathLike, *, stamp: bool = False):
        self.stamp = bool(stamp)
        self.target = check_target(target)
        parent = self.target.parent.resolve()
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ModelFormatError(f"{parent}: cannot create the folder ({exc.strerror})") from None
        self.target = parent / self.target.name
        swap.recover(self.target, live=ModelWriter._live)
        self.tmp = swap.temp_name(self.target)
        try:
            self.tmp.mkdir()
        except OSError as exc:
            raise ModelFormatError(f"{parent}: cannot write a model here ({exc.strerror})") from None
        ModelWriter._live.add(self.tmp)
        self.files: dict[str, str] = {}
        self.layouts: dict[str, dict] = {}
        self.subfolders: list[str] = []

    def arrays(self, name: str, arrays: dict[str, np.ndarray]) -> str:
        fname = f"{name}.safetensors"
        write_arrays(self.tmp / fname, arrays)
        self.files[fname] = ""
        self.layouts[fname] = array_layout(self.tmp / fname)
        return fname

    def folder(self, name: str) -> Path:
        """A sub-folder for a stage that writes several files itself (a Hugging Face encoder); every file
        in it is checksummed into the manifest at commit."""
        path = self.tmp / name
        path.mkdir()
        self.subfolders.append(name)
        return path

    def json(self, name: str, obj: Any) -> str:
        fname = f"{name}.json"
        with open(self.tmp / fname, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        self.files[fname] = ""
        return fname

    def commit(self, method: str, params: dict, stages: list[dict], extra: dict | None = None) -> Path:
        for sub in self.subfolders:
            for path in sorted((self.tmp / sub).rglob("*")):
                if path.is_file():
                    rel = path.relative_to(self.tmp).as_posix()
                    self.files[rel] = ""
                    if rel.endswith(".safetensors"):  # a library's weights are declared like our own arrays
                        self.layouts[rel] = array_layout(path)
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "xmtc_version": __version__,
            "method": method,
            "params": params,
            "stages": stages,
            "files": {f: sha256_file(self.tmp / f) for f in sorted(self.files)},
            "arrays": self.layouts,
            "arrays_complete": True,  # every safetensors file is declared, stage folders included
        }
        if extra:
            manifest.update(extra)
        try:  # what the reader would refuse is refused here, at save, where the bug is
            check_manifest(self.tmp, manifest)
        except ModelFormatError:
            self.abort()
            raise
        with open(self.tmp / MANIFEST, "w", encoding="utf-8") as fh:
            json.dump(manifest, fh, ensure_ascii=False, indent=1, sort_keys=True)
            fh.write("\n")
        try:
            check_target(self.target)  # again: something may have appeared there while we trained
        except ModelFormatError:
            self.abort()
            raise
        swap.fsync_tree(self.tmp)
        old = swap.replace_dir(self.tmp, self.target)
        ModelWriter._live.discard(self.tmp)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        # the files were just written from the model in memory and checksummed: the next load of this
        # folder may skip re-hashing them while their stat is unchanged (see xmtc.models.verified)
        if self.stamp:
            verified.write_stamp(self.target, manifest["files"], fresh=True)
        return self.target

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
        ModelWriter._live.discard(self.tmp)


class Verified(dict):
    """The arrays, or the JSON object, of a file that a verification stamp vouches for
    (:meth:`ModelReader.trusted`): the same bytes passed a full check before, so a stage may skip its own
    structural checks of them (the weights' bounds, the label names' uniqueness)."""

    verified = True


class ModelReader:
    """Opens a model folder, checks format, version, file names and that the manifest agrees with itself and the
    folder (:func:`~xmtc.models.manifest_rules.check_manifest`), and hands out its files, each checked (checksum,
    declared arrays) the first time a stage asks for it."""

    def __init__(self, folder: str | os.PathLike, *, mmap: bool = True):
        self.folder = Path(folder)
        if swap.is_temp_name(self.folder.name):
            raise ModelFormatError(f"{self.folder}: a temporary folder of a save that was interrupted or is"
                                   " still running, not a model")
        if not os.path.lexists(self.folder):
            swap.recover(self.folder)  # a save killed between the fallback's two renames
        self.mmap = bool(mmap)  # default for stages that can use memory-mapped arrays (see arrays())
        if not self.folder.exists():
            raise ModelFormatError(f"{self.folder}: model folder not found")
        if not self.folder.is_dir():
            raise ModelFormatError(f"{self.folder}: not a folder (a model is a folder with {MANIFEST})")
        path = self.folder / MANIFEST
        if path.is_symlink() or not path.is_file():
            raise ModelFormatError(f"{path}: missing; {self.folder} is not an xmtc model folder")
        try:
            with open(path, "rb") as fh:
                self.manifest = json.loads(fh.read())
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise ModelFormatError(f"{path}: corrupt manifest ({exc})") from None
        except OSError as exc:
            raise ModelFormatError(f"{path}: cannot read ({exc.strerror})") from None
        m = self.manifest
        if not isinstance(m, dict) or m.get("format") != FORMAT_NAME:
            raise ModelFormatError(f"{path}: not an xmtc model manifest")
        version = m.get("format_version")
        if not isinstance(version, int) or isinstance(version, bool) or version > FORMAT_VERSION or version < 1:
            raise ModelFormatError(
                f"{path}: model format version {version!r} is not supported by xmtc {__version__}"
                f" (supports 1..{FORMAT_VERSION}); saved by xmtc {m.get('xmtc_version')!r}")
        for key in ("method", "params", "stages", "files"):
            if key not in m:
                raise ModelFormatError(f"{path}: manifest lacks '{key}'")
        if not isinstance(m["method"], str) or not isinstance(m["params"], dict):
            raise ModelFormatError(f"{path}: 'method' must be a string and 'params' an object")
        if not isinstance(m["stages"], list) or not all(
                isinstance(st, dict) and isinstance(st.get("name"), str) for st in m["stages"]):
            raise ModelFormatError(f"{path}: 'stages' must be a list of objects with a 'name'")
        files = m["files"]
        if not isinstance(files, dict) or not all(isinstance(v, str) and _SHA256.match(v) for v in files.values()):
            raise ModelFormatError(f"{path}: 'files' must map file names to SHA-256 hex digests")
        check_manifest(self.folder, m)
        inside, elsewhere = unlisted_files(self.folder, m)
        if inside:
            raise ModelFormatError(f"{self.folder / inside[0]}: not listed in the manifest; refusing to load the"
                                   f" stage folder it is in (its library would read it unchecked)")
        if elsewhere:
            log.warning("%s: ignoring %d file(s) the manifest does not list (%s); no stage reads them",
                        self.folder, len(elsewhere), ", ".join(elsewhere[:3]) + (", ..." if len(elsewhere) > 3 else ""))
        self._verified: set[str] = set()
        self._stages_read: set[str] = set()
        # files a previous full check passed, unchanged since (same stat and checksum): not re-hashed, and
        # their arrays come marked so that a stage may skip its structural checks (see xmtc.models.verified)
        self._stamp = verified.read_stamp(self.folder)
        self._trusted: set[str] = set()

    def _file(self, fname: Any) -> Path:
        """The one way to a model file: the path of a file the manifest lists, after checking its name,
        its checksum and, for a safetensors file, its header against the file and its declared arrays
        (once per reader). Every accessor below goes through here."""
        files = self.manifest["files"]
        if not isinstance(fname, str) or fname not in files:
            raise ModelFormatError(f"{self.folder / MANIFEST}: does not list file {fname!r}")
        path = member_path(self.folder, fname)
        if fname not in self._verified:
            if verified.matches(self._stamp, fname, path, files[fname]):
                self._trusted.add(fname)
            elif sha256_file(path) != files[fname]:
                raise ModelFormatError(f"{path}: checksum mismatch; the file is corrupt or was modified")
            if fname.endswith(".safetensors"):
                actual = array_layout(path)  # a header that lies about the file is refused here
                declared = self.manifest["arrays"].get(fname)
                if declared is not None and actual != declared:
                    raise ModelFormatError(f"{path}: {layout_difference(actual, declared)}")
            self._verified.add(fname)
        return path

    def arrays(self, fname: str, *, mmap: bool = False) -> dict[str, np.ndarray]:
        """The arrays of a listed safetensors file whose arrays the manifest declares (checksum and the
        declared names, dtypes and shapes verified first). With ``mmap=True`` (a stage that can work
        from read-only arrays asks for it) and the reader's ``mmap`` on, they are read-only views of a
        memory map of the file (see :func:`mmap_arrays`); otherwise copies."""
        if not isinstance(fname, str) or fname not in self.manifest["arrays"]:
            self._file(fname)  # the clearer error for a file that is not listed at all
            raise ModelFormatError(f"{self.folder / MANIFEST}: does not declare the arrays of {fname!r}")
        path = self._file(fname)
        arrays = mmap_arrays(path) if (mmap and self.mmap) else read_arrays(path)
        return Verified(arrays) if fname in self._trusted else arrays

    def check_files(self) -> int:
        """Check every file the manifest lists (checksum and declared arrays; a file a stamp vouches for is
        not re-hashed); returns their total size in bytes."""
        return sum(self._file(fname).stat().st_size for fname in self.manifest["files"])

    def trusted(self, fname: str) -> bool:
        """Whether ``fname`` was vouched for by a verification stamp (its bytes are those a full check
        passed, so a stage's own structural checks of it may be skipped)."""
        return fname in self._trusted

    def subfolder(self, name: str) -> Path:
        """A stage's sub-folder (absolute, so that no library reinterprets the path), after checking
        every file the manifest lists in it (checksums, declared arrays), and that it holds no file the
        manifest does not list (a library loading the folder would pick those up unchecked)."""
        if not isinstance(name, str) or name not in stage_folders(self.manifest):
            raise ModelFormatError(f"{self.folder / MANIFEST}: no stage reads folder {name!r}")
        listed = [f for f in self.manifest["files"] if f.startswith(name + "/")]
        for fname in listed:
            self._file(fname)
        root = self.folder / name
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(self.folder).as_posix()
            if path.is_symlink() or (not path.is_dir() and rel not in self.manifest["files"]):
                raise ModelFormatError(f"{path}: not listed in the manifest; refusing to load {root}")
        return root.absolute()

    def json(self, fname: str) -> Any:
        """The parsed content of a listed JSON file (checksum verified first)."""
        path = self._file(fname)
        try:
            with open(path, "rb") as fh:
                obj = json.loads(fh.read())
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise ModelFormatError(f"{path}: corrupt JSON ({exc})") from None
        return Verified(obj) if fname in self._trusted and isinstance(obj, dict) else obj

    def stage(self, name: str) -> dict:
        for st in self.manifest["stages"]:
            if st.get("name") == name:
                self._stages_read.add(name)
                return st
        raise ModelFormatError(f"{self.folder / MANIFEST}: no stage named {name!r}")

    def check_every_stage_read(self, method: str) -> None:
        """After a load: a stage no loader asked for is a manifest that contradicts its model (a renamed
        featurizer stage would otherwise leave a text model that expects precomputed features)."""
        unread = [st for st in self.manifest["stages"] if st["name"] not in self._stages_read]
        if unread:
            st = unread[0]
            raise ModelFormatError(f"{self.folder / MANIFEST}: stage {st['name']!r} (type {st.get('type')!r}) is"
                                   f" not one a {method} model reads")
        # the whole model loaded: every file read was checked in full (or vouched for), and every stage's
        # own checks passed; remember it for the next load of this folder
        files = self.manifest["files"]
        if self._verified - self._trusted:
            verified.write_stamp(self.folder, {f: files[f] for f in self._verified})

    def stage_value(self, name: str, key: str, kind: type | tuple = str) -> Any:
        """``stage(name)[key]``, checked to be of ``kind``; ModelFormatError naming the stage otherwise."""
        st = self.stage(name)
        value = st.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ModelFormatError(f"{self.folder / MANIFEST}: stage {name!r} needs '{key}' of type"
                                   f" {getattr(kind, '__name__', kind)}, got {value!r}")
        return value
