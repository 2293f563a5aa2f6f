"""A model manifest that contradicts itself is refused, for every kind of model folder.

The manifest names each file a stage reads (``stages[].file`` / ``stages[].folder``), lists each
file with its SHA-256 (``files``) and declares each safetensors file's arrays (``arrays``). Renaming,
dropping or adding an entry of any of these by hand must end in one ModelFormatError line at
``xmtc.load`` (and exit 2 with one ``xmtc: error:`` line from the CLI), never in a model that loads
a file unverified or without its declared-shape check. Only the manifest is edited here: the files
keep their bytes, so a load that succeeds must predict exactly what the original predicts.
"""

from __future__ import annotations

import copy
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xmtc
from xmtc.cli import main
from xmtc.errors import ModelFormatError, XmtcError
from xmtc.models import XRLinear
from xmtc.models.storage import MANIFEST, ModelReader, ModelWriter

from scratch import scratch_dir

PROBE = ["oil prices rise", "wheat and corn exports", "bank interest rates"]
PROPERTY = settings(max_examples=50, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def xr_linear(tsv_sample, tmp_path_factory):
    texts, labels = tsv_sample("reuters21578-apte90", "train", 200)
    folder = tmp_path_factory.mktemp("xr") / "M"
    model = XRLinear(max_leaf_size=8).fit(texts, labels)
    model.save(folder)
    return folder, model.predict_topk(PROBE, 5)


@pytest.fixture(scope="module")
def lightxml(tsv_sample, tiny_bert, tmp_path_factory):
    """A tiny LightXML (the end-to-end methods share its loader: encoder folder, network, history)."""
    texts, labels = tsv_sample("reuters21578-apte90", "train", 150)
    root = tmp_path_factory.mktemp("lx")
    model = xmtc.LightXML(encoder=tiny_bert, n_threads=2, max_length=16, epochs=1, valid_size=0,
                          head_init="random", ranker=False, cluster_size=8, topk=4).fit(texts, labels,
                                                                                         progress=False)
    model.save(root / "M")
    return root / "M", xmtc.load(root / "M").predict_topk(PROBE, 5)


def _copy(folder: Path) -> Path:
    dst = scratch_dir("xmtc-manifest-") / "M"
    shutil.copytree(folder, dst)
    return dst


def _manifest(folder: Path) -> dict:
    return json.loads((folder / MANIFEST).read_text())


def _write(folder: Path, manifest: dict) -> None:
    (folder / MANIFEST).write_text(json.dumps(manifest))


def _renamed(name: str) -> str:
    head, _, tail = name.rpartition("/")
    return f"{head}/x-{tail}" if head else f"x-{name}"


# -- the fuzzer's edits, one at a time ------------------------------------------------------------------
def edits(m: dict):
    """``(what, edited manifest)`` for each single edit of the lists of files, stage files and declared
    arrays that leaves the manifest contradicting itself or the folder."""
    files, layouts = m["files"], m["arrays"]
    for f in sorted(files):
        e = copy.deepcopy(m)
        e["files"][_renamed(f)] = e["files"].pop(f)
        yield f"rename files key {f}", e
        e = copy.deepcopy(m)
        del e["files"][f]
        yield f"drop files entry {f}", e
    for i, stage in enumerate(m["stages"]):
        for key in ("file", "folder"):
            if key in stage:
                e = copy.deepcopy(m)
                e["stages"][i][key] = _renamed(stage[key])
                yield f"rename stage {stage['name']} {key}", e
        if "file" in stage:
            other = next((f for f in sorted(files) if f != stage["file"] and "/" not in f), None)
            if other is not None:  # another listed file: the stage's own is then read by no stage
                e = copy.deepcopy(m)
                e["stages"][i]["file"] = other
                yield f"point stage {stage['name']} at {other}", e
    for i, stage in enumerate(m["stages"]):  # a stage under a name no loader asks for is read by none
        e = copy.deepcopy(m)
        e["stages"][i]["name"] = "x-" + stage["name"]
        yield f"rename stage {stage['name']}", e
    for extra in ("extra.safetensors", "extra.json", "encoder/extra.json"):
        e = copy.deepcopy(m)
        e["files"][extra] = "0" * 64
        yield f"add files entry for missing {extra}", e
    for f in sorted(layouts):
        e = copy.deepcopy(m)
        e["arrays"][_renamed(f)] = e["arrays"].pop(f)
        yield f"rename declared-array key {f}", e
        e = copy.deepcopy(m)
        del e["arrays"][f]
        yield f"drop declared arrays of {f}", e
        key = min(layouts[f])
        dtype, shape = layouts[f][key]
        e = copy.deepcopy(m)
        e["arrays"][f][key + "_"] = e["arrays"][f].pop(key)
        yield f"rename declared array {f}:{key}", e
        e = copy.deepcopy(m)
        e["arrays"][f][key][1] = [shape[0] + 1, *shape[1:]] if shape else [1]
        yield f"change declared shape {f}:{key}", e
        e = copy.deepcopy(m)
        e["arrays"][f][key][0] = "F64" if dtype != "F64" else "F32"
        yield f"change declared dtype {f}:{key}", e
    e = copy.deepcopy(m)
    del e["arrays"]
    yield "drop arrays", e
    e = copy.deepcopy(m)
    e["stages"].append(copy.deepcopy(e["stages"][0]))
    yield "duplicate stage", e


def _refused(folder: Path) -> str:
    with pytest.raises(ModelFormatError) as info:
        xmtc.load(folder)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(str(folder)), msg
    return msg


def _cli_refuses(folder: Path, tmp_path: Path, capsys) -> None:
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(PROBE) + "\n")
    capsys.readouterr()
    assert main(["predict", str(folder), str(texts), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"xmtc: error: {folder}"), err
    assert "internal error" not in err


@pytest.mark.parametrize("method", ["xr_linear", "lightxml"])
def test_each_contradicting_edit_is_refused(method, request, tmp_path, capsys):
    base, _ = request.getfixturevalue(method)
    original = _manifest(base)
    folder = _copy(base)
    seen = 0
    for what, edited in edits(original):
        _write(folder, edited)
        try:
            xmtc.load(folder)
        except ModelFormatError as exc:
            assert "\n" not in str(exc) and str(exc).startswith(str(folder)), (what, str(exc))
        else:
            pytest.fail(f"{method}: the model loaded after this edit of its manifest: {what}")
        seen += 1
    assert seen > 20
    # the CLI: one `xmtc: error:` line and exit 2 for one edit of each kind
    kinds = {}
    for what, edited in edits(original):
        kinds.setdefault(" ".join(what.split(" ")[:2]), edited)
    for what, edited in kinds.items():
        _write(folder, edited)
        _cli_refuses(folder, tmp_path, capsys)
    _write(folder, original)
    xmtc.load(folder)  # the folder itself was fine all along


def test_messages_name_the_contradiction(xr_linear):
    base, _ = xr_linear
    m = _manifest(base)
    folder = _copy(base)
    cases = {
        "rename files key labels.json": "x-labels.json: missing (listed in the manifest)",
        "drop files entry labels.json": "stage 'labels' reads file 'labels.json', which 'files' does not list",
        "rename stage labels file": "stage 'labels' reads file 'x-labels.json', which 'files' does not list",
        "add files entry for missing extra.json": "extra.json: missing (listed in the manifest)",
        "rename declared-array key tree-0.safetensors": "declares the arrays of 'x-tree-0.safetensors', which"
                                                          " 'files' does not list",
        "drop declared arrays of tree-0.safetensors": "'arrays' does not declare the arrays of 'tree-0.safetensors'",
        "point stage labels at featurizer.safetensors": "'files' lists 'labels.json', which no stage reads",
        "duplicate stage": "two stages are named",
        "rename stage featurizer": "stage 'x-featurizer' (type 'tfidf') is not one a xr-linear model reads",
        "drop arrays": "manifest lacks 'arrays'",
    }
    edited = dict(edits(m))
    for what, expected in cases.items():
        _write(folder, edited[what])
        with pytest.raises(ModelFormatError) as info:
            xmtc.load(folder)
        assert expected in str(info.value), (what, str(info.value))
    # a declaration that disagrees with the file is refused when the stage reads it, naming the array
    for what, manifest in edited.items():
        if what.startswith("change declared shape tree-0.safetensors"):
            _write(folder, manifest)
            with pytest.raises(ModelFormatError, match=r"tree-0\.safetensors: array '.*' is .* but the manifest"
                                                       r" declares"):
                xmtc.load(folder)


# -- random edits -------------------------------------------------------------------------------------
CONTRADICTING = ["rename-file", "drop-file", "add-file", "rename-stage-file", "stage-other-file", "rename-decl",
                 "drop-decl", "rename-array", "shape", "dtype", "swap-sums", "stage-folder", "extra-decl"]
HARMLESS = ["consistent-rename", "benign"]


def _edit(m: dict, folder: Path, data, ops: list[str]) -> None:
    """One random edit of ``m`` (and, for a consistent rename, of the folder) in place."""
    files, layouts = m["files"], m["arrays"]
    op = data.draw(st.sampled_from(ops))
    names = sorted(files)
    f = data.draw(st.sampled_from(names))
    new = data.draw(st.sampled_from([_renamed(f), f + "x", "labels.json", "encoder/x.json", names[0]]))
    stages = [s for s in m["stages"] if "file" in s]
    if op == "rename-file" and new not in files:
        files[new] = files.pop(f)
    elif op == "drop-file":
        del files[f]
    elif op == "add-file":
        files[new] = data.draw(st.sampled_from(["0" * 64, files[f]]))
    elif op == "rename-stage-file" and stages:
        data.draw(st.sampled_from(stages))["file"] = new
    elif op == "stage-other-file" and stages:
        data.draw(st.sampled_from(stages))["file"] = f
    elif op in ("rename-decl", "drop-decl", "rename-array", "shape", "dtype") and layouts:
        g = data.draw(st.sampled_from(sorted(layouts)))
        if op == "rename-decl":
            layouts[data.draw(st.sampled_from([_renamed(g), new]))] = layouts.pop(g)
        elif op == "drop-decl":
            del layouts[g]
        elif layouts[g]:
            key = data.draw(st.sampled_from(sorted(layouts[g])))
            if op == "rename-array":
                layouts[g][key + "_"] = layouts[g].pop(key)
            elif op == "shape":
                shape = layouts[g][key][1]
                layouts[g][key][1] = data.draw(st.sampled_from([[*shape, 1], shape[:-1], [d + 1 for d in shape]]))
            else:
                layouts[g][key][0] = data.draw(st.sampled_from(["F32", "F64", "I32", "I64", "U8", "BOOL"]))
    elif op == "swap-sums" and len(names) > 1:
        g = data.draw(st.sampled_from([n for n in names if n != f]))
        files[f], files[g] = files[g], files[f]
    elif op == "consistent-rename" and "/" not in f and (folder / f).is_file():  # an earlier edit may list a ghost
        # the file, its listing, its declaration and its stage all renamed together: still one model
        target = "y-" + f
        (folder / f).rename(folder / target)
        files[target] = files.pop(f)
        if f in layouts:
            layouts[target] = layouts.pop(f)
        for s in stages:
            if s["file"] == f:
                s["file"] = target
    elif op == "benign":
        m["xmtc_version"] = "0.0.0+edited"
        m["files"] = dict(reversed(list(files.items())))
    elif op == "stage-folder":
        s = data.draw(st.sampled_from(m["stages"]))
        s["folder"] = data.draw(st.sampled_from(["encoder", "x", ""]))
    elif op == "extra-decl":
        layouts[new] = {"w": ["F32", [1]]}


def _random_edits(m: dict, folder: Path, data) -> None:
    """0-2 edits that may contradict, mixed with 0-2 that keep the model intact (so both outcomes occur)."""
    ops = [CONTRADICTING] * data.draw(st.integers(0, 2)) + [HARMLESS] * data.draw(st.integers(0, 2))
    for kinds in data.draw(st.permutations(ops)):
        _edit(m, folder, data, kinds)


def _load_same_or_refused(folder: Path, expected) -> str:
    try:
        model = xmtc.load(folder)
        idx, scores = model.predict_topk(PROBE, 5)
    except XmtcError as exc:
        assert isinstance(exc, ModelFormatError), repr(exc)
        assert "\n" not in str(exc) and str(exc).startswith(str(folder)), str(exc)
        return "refused"
    assert np.array_equal(idx, expected[0]) and np.array_equal(scores, expected[1])
    return "loaded"


@PROPERTY
@given(st.data())
def test_random_manifest_edits_load_identically_or_are_refused(xr_linear, data):
    base, expected = xr_linear
    folder = _copy(base)
    m = _manifest(base)
    _random_edits(m, folder, data)
    _write(folder, m)
    _load_same_or_refused(folder, expected)


@pytest.mark.slow
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.data())
def test_random_manifest_edits_of_a_neural_model(lightxml, data):
    base, expected = lightxml
    folder = _copy(base)
    m = _manifest(base)
    _random_edits(m, folder, data)
    _write(folder, m)
    _load_same_or_refused(folder, expected)


def test_consistent_rename_still_loads(xr_linear):
    """The checks are about agreement, not fixed names: rename a file everywhere and the model loads."""
    base, expected = xr_linear
    folder = _copy(base)
    m = _manifest(base)
    (folder / "tree-0.safetensors").rename(folder / "weights.safetensors")
    m["files"]["weights.safetensors"] = m["files"].pop("tree-0.safetensors")
    m["arrays"]["weights.safetensors"] = m["arrays"].pop("tree-0.safetensors")
    next(s for s in m["stages"] if s.get("file") == "tree-0.safetensors")["file"] = "weights.safetensors"
    _write(folder, m)
    assert _load_same_or_refused(folder, expected) == "loaded"


# -- files the manifest does not name --------------------------------------------------------------------
def test_unlisted_files_beside_the_model_are_ignored_with_a_warning(xr_linear, caplog):
    base, expected = xr_linear
    folder = _copy(base)
    (folder / "README.txt").write_text("notes")
    (folder / "old").mkdir()
    (folder / "old" / "tree-0.safetensors").write_bytes((folder / "tree-0.safetensors").read_bytes())
    with caplog.at_level(logging.WARNING, logger="xmtc.models.storage"):
        assert _load_same_or_refused(folder, expected) == "loaded"
    assert "ignoring 2 file(s) the manifest does not list" in caplog.text
    assert "README.txt" in caplog.text and "old/tree-0.safetensors" in caplog.text


def test_neural_model_declares_its_encoder_weights(lightxml, tmp_path, capsys):
    base, _ = lightxml
    m = _manifest(base)
    assert "encoder/model.safetensors" in m["arrays"]
    folder = _copy(base)
    (folder / "encoder" / "pytorch_model.bin").write_bytes(b"pickle would run code")
    with pytest.raises(ModelFormatError, match="pytorch_model.bin: not listed in the manifest"):
        xmtc.load(folder)
    _cli_refuses(folder, tmp_path, capsys)


def test_models_saved_before_encoder_weights_were_declared_still_load(lightxml):
    """Folders written before the files of stage folders were declared: the encoder's safetensors is
    undeclared (its header is still checked, its checksum verified); a partial declaration is not that."""
    base, expected = lightxml
    folder = _copy(base)
    m = _manifest(base)
    assert m.pop("arrays_complete") is True
    legacy = {f: v for f, v in m["arrays"].items() if not f.startswith("encoder/")}
    _write(folder, {**m, "arrays": legacy})
    assert _load_same_or_refused(folder, expected) == "loaded"
    _write(folder, {**m, "arrays": legacy, "arrays_complete": True})  # a save of today declares them all
    with pytest.raises(ModelFormatError, match="does not declare the arrays of 'encoder/model.safetensors'"):
        xmtc.load(folder)
    undeclared_top = {f: v for f, v in legacy.items() if f != "network.safetensors"}
    _write(folder, {**m, "arrays": undeclared_top})
    with pytest.raises(ModelFormatError, match="does not declare the arrays of 'network.safetensors'"):
        xmtc.load(folder)


def test_writer_refuses_a_manifest_the_reader_would_refuse(tmp_path):
    w = ModelWriter(tmp_path / "M")
    f = w.arrays("a", {"x": np.zeros(3, np.float32)})
    w.arrays("b", {"y": np.zeros(2, np.float32)})  # written, but no stage reads it
    with pytest.raises(ModelFormatError, match="'b.safetensors', which no stage reads"):
        w.commit("test", {}, [{"name": "a", "file": f}])
    assert list(tmp_path.iterdir()) == []
    w = ModelWriter(tmp_path / "M")
    with pytest.raises(ModelFormatError, match="reads file 'missing.json', which 'files' does not list"):
        w.commit("test", {}, [{"name": "a", "file": "missing.json"}])
    assert list(tmp_path.iterdir()) == []


def test_reader_accessors_refuse_what_the_manifest_does_not_declare(tmp_path):
    w = ModelWriter(tmp_path / "M")
    f = w.arrays("a", {"x": np.arange(3, dtype=np.float32)})
    j = w.json("meta", {"k": 1})
    w.commit("test", {}, [{"name": "a", "file": f}, {"name": "meta", "file": j}])
    r = ModelReader(tmp_path / "M")
    with pytest.raises(ModelFormatError, match="does not declare the arrays of 'meta.json'"):
        r.arrays("meta.json")
    with pytest.raises(ModelFormatError, match="does not list file 'nope.safetensors'"):
        r.arrays("nope.safetensors")
    with pytest.raises(ModelFormatError, match="no stage reads folder 'a.safetensors'"):
        r.subfolder("a.safetensors")
    np.testing.assert_array_equal(r.arrays(f)["x"], np.arange(3, dtype=np.float32))


@pytest.mark.parametrize("change", ["hidden_size", "model_type", "not json", "renamed weight"])
def test_an_encoder_folder_the_library_cannot_load_is_a_model_format_error(lightxml, change, tmp_path, capsys):
    """Checksums and declarations re-made to match, so only the encoder library notices: still one
    ModelFormatError line, and a weight the library would fill with random values is refused."""
    import hashlib

    from safetensors.numpy import load_file, save_file

    from xmtc.models.storage import array_layout

    base, _ = lightxml
    folder = _copy(base)
    m = _manifest(folder)
    changed = folder / "encoder" / ("model.safetensors" if change == "renamed weight" else "config.json")
    if change == "renamed weight":
        arrays = load_file(str(changed))
        key = min(arrays)
        arrays[key + "_renamed"] = arrays.pop(key)
        save_file(arrays, str(changed), metadata={"format": "pt"})
        m["arrays"]["encoder/model.safetensors"] = array_layout(changed)
    elif change == "not json":
        changed.write_text("{")
    else:
        cfg = json.loads(changed.read_text())
        cfg[change] = cfg[change] * 2 if change == "hidden_size" else "no-such-architecture"
        changed.write_text(json.dumps(cfg))
    m["files"][changed.relative_to(folder).as_posix()] = hashlib.sha256(changed.read_bytes()).hexdigest()
    _write(folder, m)
    msg = _refused(folder)
    assert "encoder" in msg
    if change == "renamed weight":
        assert "lacks weight" in msg
    _cli_refuses(folder, tmp_path, capsys)


def test_edited_stage_params_are_refused_before_they_allocate_or_crash(tsv_sample, tmp_path, capsys):
    """Values a fuzzer wrote into stage params: an n-gram order of 2**70 (which sized a set of array names
    by it) and a calibration whose params are a number (which ``xmtc info`` read with .get)."""
    from xmtc.commands.info import describe
    from xmtc.models.calibration import calibrate
    texts, labels = tsv_sample("reuters21578-apte90", "train", 300)
    model = XRLinear(max_leaf_size=8).fit(texts[:200], labels[:200])
    model.calibration_ = calibrate(model, texts[200:], labels[200:], k=5)
    base = tmp_path / "calibrated"
    model.save(base)
    capsys.readouterr()  # the fit's progress bars
    for stage, key, value, where in (("featurizer", "ngram_range", [1, 2**70], "cannot hold n-grams of orders"),
                                     ("calibration", "params", -1, None)):
        folder = _copy(base)
        m = _manifest(base)
        st = next(s for s in m["stages"] if s["name"] == stage)
        if key == "params":
            st["params"] = value
        else:
            st["params"][key] = value
        _write(folder, m)
        msg = _refused(folder)
        assert where is None or where in msg, msg
        if stage == "calibration":
            with pytest.raises(ModelFormatError, match="stage 'calibration': 'params' must be an object, got -1"):
                describe(str(folder))
            assert main(["info", str(folder)]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and err.startswith(f"xmtc: error: {folder}"), err
