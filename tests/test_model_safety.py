"""Loading a model folder: mutated folders load correctly or stop with one line; nothing outside is read.

Mutations come in three depths: raw bytes of any file (the checksums must catch them), arrays
rewritten with other dtypes, shapes and values *and* re-checksummed (the shape/dtype checks must
catch them, or the model must still predict sane output), and manifest values replaced by random
JSON (re-checksummed too). A load either succeeds, and then predicts valid label ids with finite
scores (identical ones when only bytes that do not matter changed), or raises ModelFormatError whose
one-line message names the folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import load_file, save_file

import xmtc
from xmtc.errors import ModelFormatError, XmtcError
from xmtc.models import XRLinear
from xmtc.models.storage import MANIFEST, array_layout

from test_fuzz_readers import mutated
from scratch import scratch_dir

FUZZ = settings(max_examples=int(os.environ.get("XMTC_FUZZ_EXAMPLES", "30")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
PROBE = ["oil prices rise", "wheat and corn exports", "bank interest rates"]


@pytest.fixture(scope="module")
def model_folder(tsv_sample, tmp_path_factory):
    texts, labels = tsv_sample("reuters21578-apte90", "train", 200)
    folder = tmp_path_factory.mktemp("model") / "M"
    model = XRLinear(max_leaf_size=8).fit(texts, labels)
    model.save(folder)
    return folder, model.predict_topk(PROBE, 5), len(model.labels_)


def _copy(folder: Path) -> Path:
    dst = scratch_dir("xmtc-model-fuzz-") / "M"
    shutil.copytree(folder, dst)
    return dst


def _rehash(folder: Path, fname: str, relayout: bool = True) -> None:
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"][fname] = hashlib.sha256((folder / fname).read_bytes()).hexdigest()
    if relayout and fname.endswith(".safetensors"):
        manifest["arrays"][fname] = array_layout(folder / fname)
    (folder / MANIFEST).write_text(json.dumps(manifest))


def check_load(folder: Path, expected, n_labels: int, *, identical: bool = False) -> str:
    """Load and predict, or a one-line ModelFormatError naming the folder; returns what happened."""
    try:
        model = xmtc.load(folder)
        idx, scores = model.predict_topk(PROBE, 5)
    except XmtcError as exc:
        msg = str(exc)
        assert isinstance(exc, ModelFormatError), msg
        assert "\n" not in msg and msg.startswith(str(folder)), msg
        return "refused"
    if identical:
        assert np.array_equal(idx, expected[0]) and np.array_equal(scores, expected[1])
    assert idx.shape == (len(PROBE), 5) and np.all((idx >= -1) & (idx < n_labels))
    assert np.all(np.isfinite(scores[idx >= 0]))
    return "loaded"


def _files(folder: Path) -> list[str]:
    return sorted(json.loads((folder / MANIFEST).read_text())["files"]) + [MANIFEST]


@FUZZ
@given(st.data())
def test_mutated_bytes_are_refused_or_harmless(model_folder, data):
    base, expected, n_labels = model_folder
    folder = _copy(base)
    fname = data.draw(st.sampled_from(_files(folder)))
    raw = (folder / fname).read_bytes()
    new = data.draw(mutated(raw))
    (folder / fname).write_bytes(new)
    # a changed listed file must fail its checksum; a changed manifest may still be the same JSON
    outcome = check_load(folder, expected, n_labels, identical=True)
    if fname != MANIFEST and new != raw:
        assert outcome == "refused"


dtypes = st.sampled_from([np.float64, np.float16, np.int8, np.int32, np.int64, np.uint64, np.uint8, np.bool_])


@FUZZ
@given(st.data())
def test_rewritten_arrays_are_checked_before_use(model_folder, data):
    base, expected, n_labels = model_folder
    folder = _copy(base)
    fname = data.draw(st.sampled_from([f for f in _files(folder) if f.endswith(".safetensors")]))
    arrays = load_file(str(folder / fname))
    key = data.draw(st.sampled_from(sorted(arrays)))
    a = arrays[key]
    how = data.draw(st.sampled_from(["dtype", "shape", "drop", "nan", "negate", "huge", "zeros", "2d", "remove"]))
    if how == "dtype":
        a = a.astype(data.draw(dtypes))
    elif how == "shape":
        a = np.concatenate([a.ravel(), a.ravel()[:1]]) if a.size else np.zeros(1, a.dtype)
    elif how == "drop":
        a = a.ravel()[:-1]
    elif how == "nan" and a.dtype.kind == "f" and a.size:
        a = a.copy()
        a.ravel()[data.draw(st.integers(0, a.size - 1))] = np.nan
    elif how == "negate":
        a = -a if a.dtype.kind in "if" else a
    elif how == "huge" and a.size:
        a = a.copy()
        a.ravel()[data.draw(st.integers(0, a.size - 1))] = np.iinfo(a.dtype).max if a.dtype.kind in "iu" else 1e30
    elif how == "zeros":
        a = np.zeros_like(a)
    elif how == "2d":
        a = a.reshape(1, -1)
    if how == "remove":
        del arrays[key]
    else:
        arrays[key] = np.ascontiguousarray(a)
    save_file(arrays, str(folder / fname))
    _rehash(folder, fname, relayout=data.draw(st.booleans()))
    check_load(folder, expected, n_labels)


json_value = st.recursive(st.none() | st.booleans() | st.integers(-2**65, 2**65) | st.floats() | st.text(max_size=6),
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                      max_size=3), max_leaves=5)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


@FUZZ
@given(st.data(), json_value)
def test_manifest_values_replaced_by_random_json(model_folder, data, value):
    base, expected, n_labels = model_folder
    folder = _copy(base)
    manifest = json.loads((folder / MANIFEST).read_text())
    target = data.draw(st.sampled_from([p for p in _paths(manifest) if p]))
    node = manifest
    for k in target[:-1]:
        node = node[k]
    node[target[-1]] = value
    (folder / MANIFEST).write_text(json.dumps(manifest))
    check_load(folder, expected, n_labels)


# -- reading outside the folder ------------------------------------------------------------------------
def _rename_listed(folder: Path, old: str, new: str) -> None:
    m = json.loads((folder / MANIFEST).read_text())
    m["files"][new] = m["files"].pop(old)
    if old in m.get("arrays", {}):
        m["arrays"][new] = m["arrays"].pop(old)
    for stage in m["stages"]:
        if stage.get("file") == old:
            stage["file"] = new
    (folder / MANIFEST).write_text(json.dumps(m))


@pytest.mark.parametrize("name", ["../labels.json", "/tmp/labels.json", "sub/../../labels.json", "./labels.json",
                                  "a//labels.json", "labels.json\x00", "..\\labels.json"])
def test_manifest_naming_a_path_outside_is_refused(model_folder, name):
    base, expected, n_labels = model_folder
    folder = _copy(base)
    outside = folder.parent / "labels.json"
    shutil.copy(folder / "labels.json", outside)  # were it read, the checksum would even match
    shutil.copy(folder / "labels.json", "/tmp/labels.json") if name.startswith("/tmp") else None
    _rename_listed(folder, "labels.json", name)
    with pytest.raises(ModelFormatError, match="not a relative path inside the model folder"):
        xmtc.load(folder)


def test_symlinks_escaping_the_folder_are_refused(model_folder, tmp_path):
    base, expected, n_labels = model_folder
    folder = _copy(base)
    outside = tmp_path / "elsewhere.json"
    shutil.move(folder / "labels.json", outside)
    os.symlink(outside, folder / "labels.json")
    with pytest.raises(ModelFormatError, match="symbolic link"):
        xmtc.load(folder)
    folder = _copy(base)  # a listed file under a linked sub-folder
    (tmp_path / "sub").mkdir()
    shutil.move(folder / "labels.json", tmp_path / "sub" / "labels.json")
    os.symlink(tmp_path / "sub", folder / "sub")
    _rename_listed(folder, "labels.json", "sub/labels.json")
    with pytest.raises(ModelFormatError, match="symbolic link"):
        xmtc.load(folder)


def test_unlisted_files_in_a_stage_folder_are_refused(tmp_path):
    from xmtc.models.storage import ModelReader, ModelWriter

    w = ModelWriter(tmp_path / "M")
    (w.folder("encoder") / "config.json").write_text("{}")
    w.commit("test", {}, [{"name": "encoder", "folder": "encoder"}])
    assert ModelReader(tmp_path / "M").subfolder("encoder") == tmp_path / "M" / "encoder"
    (tmp_path / "M" / "encoder" / "pytorch_model.bin").write_bytes(b"pickle would run code")
    with pytest.raises(ModelFormatError, match="not listed in the manifest"):
        ModelReader(tmp_path / "M").subfolder("encoder")


def test_safetensors_header_lies_are_caught(tmp_path):
    path = tmp_path / "a.safetensors"
    save_file({"x": np.arange(6, dtype=np.float32)}, str(path))
    assert array_layout(path) == {"x": ["F32", [6]]}
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    for bad, problem in ((dict(header, x=dict(header["x"], shape=[7])), "declares shape"),
                         (dict(header, x=dict(header["x"], dtype="OBJ")), "malformed header"),
                         (dict(header, x=dict(header["x"], data_offsets=[0, 2**62])), "declares shape")):
        text = json.dumps(bad).encode()
        path.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + n:])
        with pytest.raises(ModelFormatError, match=problem):
            array_layout(path)
    path.write_bytes((2**40).to_bytes(8, "little") + raw[8:])
    with pytest.raises(ModelFormatError, match="header length"):
        array_layout(path)
    path.write_bytes(raw[:-4])
    with pytest.raises(ModelFormatError, match="truncated or padded"):
        array_layout(path)
