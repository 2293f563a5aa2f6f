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
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shutil
import stat
import struct
from pathlib import Path
from typing import Any

import numpy as np

from .._version import __version__
from ..errors import ModelFormatError
from . import swap

log = logging.getLogger(__name__)

FORMAT_NAME = "xmtc-model"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    from safetensors.numpy import save_file

    clean = {}
    for key, arr in arrays.items():
        arr = np.asarray(arr)
        if arr.dtype == object or arr.dtype.kind in "USV":
            raise TypeError(f"array {key!r} has dtype {arr.dtype}; only numeric arrays are stored")
        clean[key] = np.ascontiguousarray(arr)
    save_file(clean, str(path))


def _read_arrays(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    array_layout(path)  # a clear error for a bad header before safetensors sees it
    try:
        return load_file(str(path))
    except Exception as exc:  # safetensors raises its own error types for corrupt headers/data
        raise ModelFormatError(f"{path}: cannot read arrays ({exc})") from None


# safetensors dtype names -> numpy dtypes (little-endian, as the format prescribes)
_ST_DTYPES = {"BOOL": "|b1", "U8": "|u1", "I8": "|i1", "U16": "<u2", "I16": "<i2", "F16": "<f2", "BF16": "<u2",
              "U32": "<u4", "I32": "<i4", "F32": "<f4", "U64": "<u8", "I64": "<i8", "F64": "<f8"}
_MAX_HEADER = 100 << 20


def _header(path: Path) -> tuple[int, dict[str, tuple[str, list, int, int]]]:
    """``(data start, {key: (dtype, shape, begin, end)})`` from a safetensors file's header, after
    checking that the header is well formed and that every array's bytes lie inside the file, back to
    back, without gaps (offsets are relative to the data start)."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise ModelFormatError(f"{path}: truncated safetensors file ({size} bytes)")
        n = struct.unpack("<Q", head)[0]
        if n > min(size - 8, _MAX_HEADER):
            raise ModelFormatError(f"{path}: safetensors header length {n} does not fit the {size}-byte file")
        raw = fh.read(n)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ModelFormatError(f"{path}: corrupt safetensors header ({exc})") from None
    if not isinstance(header, dict):
        raise ModelFormatError(f"{path}: corrupt safetensors header (not an object)")
    entries, spans = {}, []
    for key, info in header.items():
        if key == "__metadata__":
            continue
        ok = (isinstance(info, dict) and info.get("dtype") in _ST_DTYPES and isinstance(info.get("shape"), list)
              and all(_is_count(d) for d in info["shape"]) and isinstance(info.get("data_offsets"), list)
              and len(info["data_offsets"]) == 2 and all(_is_count(d) for d in info["data_offsets"]))
        if not ok:
            raise ModelFormatError(f"{path}: array {key!r} has a malformed header entry")
        begin, end = info["data_offsets"]
        nbytes = np.dtype(_ST_DTYPES[info["dtype"]]).itemsize * math.prod(info["shape"])  # Python ints: no wrap
        if end - begin != nbytes:
            raise ModelFormatError(f"{path}: array {key!r} declares shape {info['shape']} of {info['dtype']}"
                                   f" ({nbytes} bytes) but spans {end - begin} bytes")
        entries[key] = (info["dtype"], info["shape"], begin, end)
        spans.append((begin, end))
    spans.sort()
    pos = 0
    for begin, end in spans:
        if begin != pos:
            raise ModelFormatError(f"{path}: array data overlaps or leaves gaps (offset {begin}, expected {pos})")
        pos = end
    if pos != size - 8 - n:
        raise ModelFormatError(f"{path}: arrays hold {pos} bytes but the file has {size - 8 - n} after the header"
                               " (truncated or padded)")
    return 8 + n, entries


def array_layout(path: Path) -> dict[str, list]:
    """``{key: [dtype, shape]}`` from a safetensors file's checked header (see :func:`_header`)."""
    return {key: [dtype, shape] for key, (dtype, shape, _, _) in _header(path)[1].items()}


def _mmap_arrays(path: Path) -> dict[str, np.ndarray]:
    """The arrays of a safetensors file as read-only views of one memory map of the file.

    Why: a model's weights then cost page cache, not private memory: pages are read when a
    prediction touches them and the kernel may drop them again under pressure, so a model larger
    than RAM still predicts, and processes serving the same model share one copy. The layout is
    safetensors' own (8-byte little-endian header length, JSON header of dtype / shape /
    data_offsets, then the data), checked by :func:`_header`, because ``safe_open`` hands out
    copies. Bytes are the same as :func:`_read_arrays` returns; only the memory behind them differs.
    """
    base, entries = _header(path)
    data = np.memmap(path, dtype=np.uint8, mode="r") if path.stat().st_size > base else np.zeros(0, np.uint8)
    return {key: data[base + begin:base + end].view(np.dtype(_ST_DTYPES[dtype])).reshape(shape)
            for key, (dtype, shape, begin, end) in entries.items()}

def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


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
    """Collects a model's files in a temporary folder; ``commit`` swaps it into place atomically."""

    _live: set[Path] = set()  # temporary folders of saves running in this process

    def __init__(self, target: str | os.PathLike):
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
        _write_arrays(self.tmp / fname, arrays)
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
                    self.files[path.relative_to(self.tmp).as_posix()] = ""
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "xmtc_version": __version__,
            "method": method,
            "params": params,
            "stages": stages,
            "files": {f: _sha256(self.tmp / f) for f in sorted(self.files)},
            "arrays": self.layouts,
        }
        if extra:
            manifest.update(extra)
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
        return self.target

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
        ModelWriter._live.discard(self.tmp)


class ModelReader:
    """Opens a model folder, checks format, version, file names and checksums, and hands out its files."""

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
        for fname in files:
            member_path(self.folder, fname)  # every name is checked before any file is opened
        layouts = m.get("arrays", {})
        if not isinstance(layouts, dict) or not all(isinstance(v, dict) for v in layouts.values()):
            raise ModelFormatError(f"{path}: 'arrays' must map file names to array layouts")
        self._verified: set[str] = set()

    def _file(self, fname: Any) -> Path:
        files = self.manifest["files"]
        if not isinstance(fname, str) or fname not in files:
            raise ModelFormatError(f"{self.folder / MANIFEST}: does not list file {fname!r}")
        path = member_path(self.folder, fname)
        if fname not in self._verified:
            if _sha256(path) != files[fname]:
                raise ModelFormatError(f"{path}: checksum mismatch; the file is corrupt or was modified")
            self._verified.add(fname)
        return path

    def arrays(self, fname: str, *, mmap: bool = False) -> dict[str, np.ndarray]:
        """The arrays of a listed safetensors file (checksum and the manifest's declared dtypes and
        shapes verified first). With ``mmap=True`` (a stage that can work from read-only arrays asks for
        it) and the reader's ``mmap`` on, they are read-only views of a memory map of the file (see
        :func:`_mmap_arrays`); otherwise copies."""
        path = self._file(fname)
        declared = self.manifest.get("arrays", {}).get(fname)
        if declared is not None and array_layout(path) != declared:
            raise ModelFormatError(f"{path}: its arrays' dtypes or shapes differ from those the manifest declares")
        return _mmap_arrays(path) if (mmap and self.mmap) else _read_arrays(path)

    def subfolder(self, name: str) -> Path:
        """A stage's sub-folder, after checking every file the manifest lists in it, and that it holds
        no file the manifest does not list (a library loading the folder would pick those up unchecked)."""
        listed = [f for f in self.manifest["files"] if isinstance(name, str) and f.startswith(name + "/")]
        if not listed:
            raise ModelFormatError(f"{self.folder / MANIFEST}: lists no files in {name!r}")
        for fname in listed:
            self._file(fname)
        root = self.folder / name
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(self.folder).as_posix()
            if path.is_symlink() or (not path.is_dir() and rel not in self.manifest["files"]):
                raise ModelFormatError(f"{path}: not listed in the manifest; refusing to load {root}")
        return root

    def json(self, fname: str) -> Any:
        path = self._file(fname)
        try:
            with open(path, "rb") as fh:
                return json.loads(fh.read())
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise ModelFormatError(f"{path}: corrupt JSON ({exc})") from None

    def stage(self, name: str) -> dict:
        for st in self.manifest["stages"]:
            if st.get("name") == name:
                return st
        raise ModelFormatError(f"{self.folder / MANIFEST}: no stage named {name!r}")

    def stage_value(self, name: str, key: str, kind: type | tuple = str) -> Any:
        """``stage(name)[key]``, checked to be of ``kind``; ModelFormatError naming the stage otherwise."""
        st = self.stage(name)
        value = st.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ModelFormatError(f"{self.folder / MANIFEST}: stage {name!r} needs '{key}' of type"
                                   f" {getattr(kind, '__name__', kind)}, got {value!r}")
        return value
