"""Safetensors files as xmtc's model folders hold them: written with a fixed layout (the same arrays give the
same bytes), read whole or memory-mapped, and their header checked against the file before any array is
built (dtypes, shapes and offsets that fit the file, nothing overlapping, nothing past its end), so a
truncated or crafted file is one clear error, not a crash inside numpy. SHA-256 of any file, for the
manifest's checksums. :mod:`xmtc.models.storage` builds the model folder on these."""

from __future__ import annotations

import hashlib
import json
import math
import struct
from pathlib import Path

import numpy as np

from ..errors import ModelFormatError


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    from safetensors.numpy import save_file

    clean = {}
    for key, arr in arrays.items():
        arr = np.asarray(arr)
        if arr.dtype == object or arr.dtype.kind in "USV":
            raise TypeError(f"array {key!r} has dtype {arr.dtype}; only numeric arrays are stored")
        clean[key] = np.ascontiguousarray(arr)
    save_file(clean, str(path))


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    array_layout(path)  # a clear error for a bad header before safetensors sees it
    try:
        return load_file(str(path))
    except Exception as exc:  # safetensors raises its own error types for corrupt headers/data
        raise ModelFormatError(f"{path}: cannot read arrays ({exc})") from None


# safetensors dtype names -> numpy dtypes (little-endian, as the format prescribes)
ST_DTYPES = {"BOOL": "|b1", "U8": "|u1", "I8": "|i1", "U16": "<u2", "I16": "<i2", "F16": "<f2", "BF16": "<u2",
              "U32": "<u4", "I32": "<i4", "F32": "<f4", "U64": "<u8", "I64": "<i8", "F64": "<f8"}
_MAX_HEADER = 100 << 20


def safetensors_header(path: Path) -> tuple[int, dict[str, tuple[str, list, int, int]]]:
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
        ok = (isinstance(info, dict) and info.get("dtype") in ST_DTYPES and isinstance(info.get("shape"), list)
              and all(is_count(d) for d in info["shape"]) and isinstance(info.get("data_offsets"), list)
              and len(info["data_offsets"]) == 2 and all(is_count(d) for d in info["data_offsets"]))
        if not ok:
            raise ModelFormatError(f"{path}: array {key!r} has a malformed header entry")
        begin, end = info["data_offsets"]
        nbytes = np.dtype(ST_DTYPES[info["dtype"]]).itemsize * math.prod(info["shape"])  # Python ints: no wrap
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
    """``{key: [dtype, shape]}`` from a safetensors file's checked header (see :func:`safetensors_header`)."""
    return {key: [dtype, shape] for key, (dtype, shape, _, _) in safetensors_header(path)[1].items()}


def mmap_arrays(path: Path) -> dict[str, np.ndarray]:
    """The arrays of a safetensors file as read-only views of one memory map of the file.

    Why: a model's weights then cost page cache, not private memory: pages are read when a
    prediction touches them and the kernel may drop them again under pressure, so a model larger
    than RAM still predicts, and processes serving the same model share one copy. The layout is
    safetensors' own (8-byte little-endian header length, JSON header of dtype / shape /
    data_offsets, then the data), checked by :func:`safetensors_header`, because ``safe_open`` hands out
    copies. Bytes are the same as :func:`read_arrays` returns; only the memory behind them differs.
    """
    base, entries = safetensors_header(path)
    data = np.memmap(path, dtype=np.uint8, mode="r") if path.stat().st_size > base else np.zeros(0, np.uint8)
    return {key: data[base + begin:base + end].view(np.dtype(ST_DTYPES[dtype])).reshape(shape)
            for key, (dtype, shape, begin, end) in entries.items()}

def is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
