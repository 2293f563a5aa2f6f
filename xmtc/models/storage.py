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

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
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

    def arrays(self, fname: str) -> dict[str, np.ndarray]:
        return _read_arrays(self._file(fname))

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
