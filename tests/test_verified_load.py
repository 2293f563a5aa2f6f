"""Verification stamps (xmtc.models.verified): a load skips re-hashing and re-checking only files whose stat
and checksum match a stamp this user's xmtc wrote; a corrupted file is still caught, by the load when the
stat shows the write and by ``xmtc verify`` / ``XMTC_VERIFY=full`` when it does not."""

from __future__ import annotations

import json
import os
import shutil
import time

import numpy as np
import pytest
import scipy.sparse as sp

import xmtc.linear.beam_arrays as beam_arrays
import xmtc.models.storage as storage
from xmtc import XRLinear, load
from xmtc.cli import main as cli_main
from xmtc.data.labels import LabelVocab
from xmtc.errors import ModelFormatError
from xmtc.models import verified


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XMTC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("XMTC_VERIFY", raising=False)
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    n, d, L = 300, 60, 40
    Y = (rng.random((n, L)) < 0.06).astype(np.float32)
    Y[np.arange(n), rng.integers(0, L, n)] = 1.0
    X = sp.csr_matrix((Y @ (rng.random((L, d)) < 0.2) + (rng.random((n, d)) < 0.05)).astype(np.float32))
    return XRLinear(n_threads=1, max_leaf_size=8, branching=4).fit(X, sp.csr_matrix(Y), progress=False), X


class Counts:
    def __init__(self, monkeypatch):
        self.sha, self.walk = [], 0
        sha, walk = storage.sha256_file, beam_arrays._check_level

        def counted_sha(path):
            self.sha.append(os.path.basename(path))
            return sha(path)

        def counted_walk(*a, **k):
            self.walk += 1
            return walk(*a, **k)

        monkeypatch.setattr(storage, "sha256_file", counted_sha)
        monkeypatch.setattr(beam_arrays, "_check_level", counted_walk)


def _flip_weight(path):
    """Change one weight's bytes in place (same size, same inode): a bit flip in the data, not the header."""
    with open(path, "r+b") as fh:
        fh.seek(-1, os.SEEK_END)
        b = fh.read(1)
        fh.seek(-1, os.SEEK_END)
        fh.write(bytes([b[0] ^ 0x01]))


def test_a_saved_model_loads_without_rehashing_and_predicts_the_same(fitted, tmp_path, monkeypatch):
    model, X = fitted
    path = tmp_path / "m"
    model.save(path)
    counts = Counts(monkeypatch)
    fast = load(path)
    assert counts.sha == [] and counts.walk == 0  # the save's stamp vouches for every file
    monkeypatch.setenv("XMTC_VERIFY", "full")
    full = load(path)
    assert "tree-0.safetensors" in counts.sha and counts.walk > 0
    for a, b in zip(fast.predict_topk(X, k=5), full.predict_topk(X, k=5)):
        np.testing.assert_array_equal(a, b)


def test_a_file_written_after_the_stamp_is_caught(fitted, tmp_path):
    model, _ = fitted
    path = tmp_path / "m"
    model.save(path)
    load(path)
    _flip_weight(path / "tree-0.safetensors")  # at once: within the save's clock tick, the mtime still differs
    with pytest.raises(ModelFormatError, match="tree-0.safetensors: checksum mismatch"):
        load(path)


def test_a_write_that_restores_the_modification_time_is_caught(fitted, tmp_path):
    model, _ = fitted
    path = tmp_path / "m"
    model.save(path)
    arr = path / "tree-0.safetensors"
    before = os.stat(arr)
    time.sleep(0.05)  # past the save's clock tick: the write's ctime differs from the stamp's
    _flip_weight(arr)
    os.utime(arr, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(ModelFormatError, match="checksum mismatch"):
        load(path)


def test_a_copied_model_is_checked_in_full_then_stamped(fitted, tmp_path, monkeypatch):
    model, _ = fitted
    model.save(tmp_path / "m")
    shutil.copytree(tmp_path / "m", tmp_path / "copy")  # new inodes: the stamp of "m" does not apply
    monkeypatch.setattr(verified, "_SETTLE_NS", 0)
    counts = Counts(monkeypatch)
    load(tmp_path / "copy")
    assert "tree-0.safetensors" in counts.sha and counts.walk > 0
    counts.sha.clear()
    counts.walk = 0
    load(tmp_path / "copy")
    assert counts.sha == [] and counts.walk == 0


def test_a_load_does_not_stamp_a_file_changed_a_moment_ago(fitted, tmp_path, monkeypatch):
    model, _ = fitted
    model.save(tmp_path / "m")
    shutil.copytree(tmp_path / "m", tmp_path / "copy")
    load(tmp_path / "copy")  # just copied: a write in the same clock tick could leave the same stat
    counts = Counts(monkeypatch)
    load(tmp_path / "copy")
    assert "tree-0.safetensors" in counts.sha


def _forge_stamp(folder):
    """What bit rot looks like to a stamp: the bytes changed, the stat did not (rewrite the stamp to match)."""
    stamp = next(verified.stamp_dir().glob("*.json"))
    obj = json.loads(stamp.read_text())
    for fname, (key, sha) in obj["files"].items():
        obj["files"][fname] = [verified.file_key(folder / fname), sha]
    stamp.write_text(json.dumps(obj))


def test_verify_and_full_checks_catch_what_the_stat_does_not_show(fitted, tmp_path, monkeypatch, capsys):
    model, _ = fitted
    path = tmp_path / "m"
    model.save(path)
    monkeypatch.setattr(verified, "_SETTLE_NS", 0)  # verify's load stamps the folder at once
    assert cli_main(["verify", str(path)]) == 0
    assert "OK" in capsys.readouterr().out
    _flip_weight(path / "tree-0.safetensors")
    _forge_stamp(path)
    load(path)  # the documented limit: a change under an unchanged stat is not seen by a plain load
    assert cli_main(["verify", str(path)]) != 0
    assert "checksum mismatch" in capsys.readouterr().err
    monkeypatch.setenv("XMTC_VERIFY", "full")
    with pytest.raises(ModelFormatError, match="checksum mismatch"):
        load(path)


def test_a_stamp_is_only_trusted_from_this_xmtc_and_this_user(fitted, tmp_path, monkeypatch, cache):
    model, _ = fitted
    path = tmp_path / "m"
    model.save(path)
    stamp = next((cache / "verified").glob("*.json"))
    assert verified.read_stamp(path)
    obj = json.loads(stamp.read_text())
    stamp.write_text(json.dumps({**obj, "xmtc_version": "0.0.0"}))
    assert verified.read_stamp(path) == {}
    stamp.write_text(json.dumps(obj))
    os.chmod(stamp, 0o666)  # writable by others: anyone could have forged it
    assert verified.read_stamp(path) == {}


def test_label_names_from_a_stamped_file_skip_the_uniqueness_check_only_there():
    with pytest.raises(ModelFormatError, match="appears twice"):
        LabelVocab.from_json({"names": ["a", "b", "a"]})
    vocab = LabelVocab.from_json(storage.Verified({"names": ["a", "b", "c"]}))
    assert vocab._index is None and vocab.index["c"] == 2  # the dict is built on first use


def test_files_written_by_hand_are_not_stamped(tmp_path):
    writer = storage.ModelWriter(tmp_path / "M")  # not a fitted model's save: its arrays are checked at load
    writer.arrays("a", {"x": np.arange(3.0)})
    writer.commit("test", {}, [{"name": "a", "file": "a.safetensors"}])
    assert verified.read_stamp(tmp_path / "M") == {}
