"""The on-disk model format: a folder with ``manifest.json`` plus safetensors/JSON files.

Why this shape: a model from a stranger must not be able to run code when loaded, so there is no
pickle anywhere — only safetensors (numeric arrays) and JSON. Every file is listed in the manifest
with its SHA-256, so truncation or bit rot is reported as such instead of surfacing later as a
shape error deep in prediction. Saving writes a sibling temporary folder and renames it into
place, so an interrupted save never leaves a half-written model where a good one was.
Arrays are written with a fixed layout, so the same model gives byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .._version import __version__
from ..errors import ModelFormatError

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

    try:
        return load_file(str(path))
    except Exception as exc:  # safetensors raises its own error types for corrupt headers/data
        raise ModelFormatError(f"{path}: cannot read arrays ({exc})") from None


# safetensors dtype names -> numpy (little-endian, as the format prescribes)
_ST_DTYPES = {"BOOL": "|b1", "U8": "|u1", "I8": "|i1", "U16": "<u2", "I16": "<i2", "F16": "<f2", "U32": "<u4",
              "I32": "<i4", "F32": "<f4", "U64": "<u8", "I64": "<i8", "F64": "<f8"}


def _mmap_arrays(path: Path) -> dict[str, np.ndarray]:
    """The arrays of a safetensors file as read-only views of one memory map of the file.

    Why: a model's weights then cost page cache, not private memory: pages are read when a
    prediction touches them and the kernel may drop them again under pressure, so a model larger
    than RAM still predicts, and processes serving the same model share one copy. The layout is
    safetensors' own (8-byte little-endian header length, JSON header of dtype / shape /
    data_offsets, then the data), parsed and bounds-checked here because ``safe_open`` hands out
    copies. Bytes are the same as :func:`_read_arrays` returns; only the memory behind them differs.
    """
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise ModelFormatError(f"{path}: cannot read arrays (file shorter than the 8-byte header length)")
        n = int.from_bytes(head, "little")
        if n > size - 8 or n > 100 << 20:
            raise ModelFormatError(f"{path}: cannot read arrays (header length {n} exceeds the file)")
        try:
            header = json.loads(fh.read(n).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelFormatError(f"{path}: cannot read arrays (corrupt header: {exc})") from None
    if not isinstance(header, dict):
        raise ModelFormatError(f"{path}: cannot read arrays (header is not a JSON object)")
    base = 8 + n
    data = np.memmap(path, dtype=np.uint8, mode="r") if size > base else np.zeros(0, dtype=np.uint8)
    out: dict[str, np.ndarray] = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        try:
            dtype = np.dtype(_ST_DTYPES[info["dtype"]])
            shape = tuple(int(x) for x in info["shape"])
            start, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise ModelFormatError(f"{path}: cannot read arrays (bad header entry for {key!r})") from None
        count = math.prod(shape)  # Python ints: a crafted shape cannot wrap around
        if min(shape, default=0) < 0 or start < 0 or end < start or base + end > size \
                or end - start != count * dtype.itemsize:
            raise ModelFormatError(f"{path}: cannot read arrays ({key!r}: offsets {start}..{end} do not hold"
                                   f" {info.get('dtype')} {list(shape)} inside the file)")
        out[key] = data[base + start:base + end].view(dtype).reshape(shape)
    return out


class ModelWriter:
    """Collects a model's files in a temporary folder; ``commit`` moves it into place atomically."""

    def __init__(self, target: str | os.PathLike):
        self.target = Path(target)
        parent = self.target.resolve().parent
        parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.tmp-", dir=parent))
        self.files: dict[str, str] = {}
        self.subfolders: list[str] = []

    def arrays(self, name: str, arrays: dict[str, np.ndarray]) -> str:
        fname = f"{name}.safetensors"
        _write_arrays(self.tmp / fname, arrays)
        self.files[fname] = ""
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
        }
        if extra:
            manifest.update(extra)
        with open(self.tmp / MANIFEST, "w", encoding="utf-8") as fh:
            json.dump(manifest, fh, ensure_ascii=False, indent=1, sort_keys=True)
            fh.write("\n")
        backup = None
        if self.target.exists():
            if not (self.target / MANIFEST).is_file() and any(self.target.iterdir()):
                self.abort()
                raise ModelFormatError(f"{self.target}: exists and is not an xmtc model folder;"
                                       " refusing to overwrite it")
            backup = self.target.with_name(f".{self.target.name}.old-{os.getpid()}")
            os.replace(self.target, backup)
        os.replace(self.tmp, self.target)
        if backup is not None:
            shutil.rmtree(backup, ignore_errors=True)
        return self.target

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


class ModelReader:
    """Opens a model folder, checks format, version and checksums, and hands out its files."""

    def __init__(self, folder: str | os.PathLike, *, mmap: bool = True):
        self.folder = Path(folder)
        self.mmap = bool(mmap)  # default for stages that can use memory-mapped arrays (see arrays())
        if not self.folder.exists():
            raise ModelFormatError(f"{self.folder}: model folder not found")
        if not self.folder.is_dir():
            raise ModelFormatError(f"{self.folder}: not a folder (a model is a folder with {MANIFEST})")
        path = self.folder / MANIFEST
        if not path.is_file():
            raise ModelFormatError(f"{path}: missing; {self.folder} is not an xmtc model folder")
        try:
            with open(path, encoding="utf-8") as fh:
                self.manifest = json.load(fh)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ModelFormatError(f"{path}: corrupt manifest ({exc})") from None
        m = self.manifest
        if not isinstance(m, dict) or m.get("format") != FORMAT_NAME:
            raise ModelFormatError(f"{path}: not an xmtc model manifest")
        version = m.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
            raise ModelFormatError(
                f"{path}: model format version {version!r} is not supported by xmtc {__version__}"
                f" (supports 1..{FORMAT_VERSION}); saved by xmtc {m.get('xmtc_version')!r}")
        for key in ("method", "params", "stages", "files"):
            if key not in m:
                raise ModelFormatError(f"{path}: manifest lacks '{key}'")
        self._verified: set[str] = set()

    def _file(self, fname: str) -> Path:
        files = self.manifest["files"]
        if fname not in files:
            raise ModelFormatError(f"{self.folder / MANIFEST}: does not list file {fname!r}")
        path = self.folder / fname
        if not path.is_file():
            raise ModelFormatError(f"{path}: missing (listed in the manifest)")
        if fname not in self._verified:
            if _sha256(path) != files[fname]:
                raise ModelFormatError(f"{path}: checksum mismatch; the file is corrupt or was modified")
            self._verified.add(fname)
        return path

    def arrays(self, fname: str, *, mmap: bool = False) -> dict[str, np.ndarray]:
        """The arrays of a listed safetensors file (checksum verified first). With ``mmap=True`` (a
        stage that can work from read-only arrays asks for it) and the reader's ``mmap`` on, they are
        read-only views of a memory map of the file (see :func:`_mmap_arrays`); otherwise copies."""
        path = self._file(fname)
        return _mmap_arrays(path) if (mmap and self.mmap) else _read_arrays(path)

    def subfolder(self, name: str) -> Path:
        """A stage's sub-folder, after checking every file the manifest lists in it."""
        listed = [f for f in self.manifest["files"] if f.startswith(name + "/")]
        if not listed:
            raise ModelFormatError(f"{self.folder / MANIFEST}: lists no files in {name!r}")
        for fname in listed:
            self._file(fname)
        return self.folder / name

    def json(self, fname: str) -> Any:
        path = self._file(fname)
        try:
            with open(path, encoding="utf-8") as fh:
                return json.load(fh)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ModelFormatError(f"{path}: corrupt JSON ({exc})") from None

    def stage(self, name: str) -> dict:
        for st in self.manifest["stages"]:
            if st.get("name") == name:
                return st
        raise ModelFormatError(f"{self.folder / MANIFEST}: no stage named {name!r}")
