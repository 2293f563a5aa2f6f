import json

import numpy as np
import pytest

from xmtc.errors import ModelFormatError
from xmtc.models.storage import MANIFEST, ModelReader, ModelWriter


def _save(path, value=1.0):
    w = ModelWriter(path)
    f = w.arrays("a", {"x": np.arange(4, dtype=np.float32) * value})
    j = w.json("meta", {"k": "v"})
    return w.commit("test-method", {"p": 1}, [{"name": "a", "file": f}, {"name": "meta", "file": j}])


def test_round_trip_and_identical_bytes(tmp_path):
    _save(tmp_path / "m1")
    _save(tmp_path / "m2")
    r = ModelReader(tmp_path / "m1")
    assert r.manifest["method"] == "test-method"
    np.testing.assert_array_equal(r.arrays(r.stage("a")["file"])["x"], np.arange(4, dtype=np.float32))
    assert r.json("meta.json") == {"k": "v"}
    for name in ("a.safetensors", "meta.json", MANIFEST):
        assert (tmp_path / "m1" / name).read_bytes() == (tmp_path / "m2" / name).read_bytes()


def test_overwrite_is_atomic_and_leaves_no_temporaries(tmp_path):
    _save(tmp_path / "m")
    _save(tmp_path / "m", value=2.0)
    r = ModelReader(tmp_path / "m")
    assert r.arrays("a.safetensors")["x"][1] == 2.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_failed_save_keeps_old_model(tmp_path):
    _save(tmp_path / "m")
    w = ModelWriter(tmp_path / "m")
    with pytest.raises(TypeError):
        w.arrays("bad", {"s": np.array(["text"])})
    w.abort()
    assert ModelReader(tmp_path / "m").arrays("a.safetensors")["x"][1] == 1.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_refuses_to_overwrite_foreign_folder(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "thesis.txt").write_text("precious")
    with pytest.raises(ModelFormatError, match="not an xmtc model folder"):
        _save(tmp_path / "docs")
    assert (tmp_path / "docs" / "thesis.txt").read_text() == "precious"


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(ModelFormatError, match="model folder not found"):
        ModelReader(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelFormatError, match="manifest.json: missing"):
        ModelReader(tmp_path / "empty")
    path = _save(tmp_path / "m")
    arr = path / "a.safetensors"
    data = bytearray(arr.read_bytes())
    data[-1] ^= 0xFF
    arr.write_bytes(bytes(data))
    with pytest.raises(ModelFormatError, match="a.safetensors: checksum mismatch"):
        ModelReader(path).arrays("a.safetensors")
    (path / "meta.json").unlink()
    with pytest.raises(ModelFormatError, match="meta.json: missing"):
        ModelReader(path).json("meta.json")
    man = json.loads((path / MANIFEST).read_text())
    man["format_version"] = 99
    (path / MANIFEST).write_text(json.dumps(man))
    with pytest.raises(ModelFormatError, match="format version 99 is not supported"):
        ModelReader(path)
    (path / MANIFEST).write_text("{not json")
    with pytest.raises(ModelFormatError, match="corrupt manifest"):
        ModelReader(path)
