"""VectorIndex: exact search, the usearch HNSW backend, add/remove, model-folder storage."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from xmtc.errors import ConfigError, DataFormatError, ModelFormatError
from xmtc.index import ann
from xmtc.index.ann import VectorIndex
from xmtc.models.storage import ModelReader, ModelWriter

needs_usearch = pytest.mark.skipif(ann._usearch() is None, reason="usearch not installed (xmtc[ann])")
BACKENDS = ["exact", pytest.param("usearch", marks=needs_usearch)]


def clustered(n=4000, d=48, n_queries=200, seed=0):
    """L2-normalised vectors around 40 centres, and queries near data points."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((40, d)).astype(np.float32)
    v = centres[rng.integers(0, 40, n)] + rng.standard_normal((n, d)).astype(np.float32) * 0.7
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    q = v[rng.choice(n, n_queries, replace=False)] + rng.standard_normal((n_queries, d)).astype(np.float32) * 0.1
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return v, q


def brute(v, ids, q, k):
    scores = q.astype(np.float64) @ v.astype(np.float64).T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return ids[order], np.take_along_axis(scores, order, 1)


def recall(found, truth):
    return np.mean([len(set(f.tolist()) & set(t.tolist())) / len(t) for f, t in zip(found, truth)])


# -- exact search -----------------------------------------------------------------------------------------

def test_exact_hand_computed():
    v = np.array([[1, 0], [0, 1], [0.6, 0.8]], np.float32)
    ids, scores = VectorIndex(backend="exact").build(v, ids=[10, 20, 30]).search(np.array([[1, 0], [0, 1]]), k=2)
    assert ids.dtype == np.int32 and scores.dtype == np.float32
    assert ids.tolist() == [[10, 30], [20, 30]]
    np.testing.assert_allclose(scores, [[1.0, 0.6], [1.0, 0.8]], rtol=1e-6)


def test_exact_matches_brute_force_reference():
    rng = np.random.default_rng(1)
    v = rng.standard_normal((1500, 24)).astype(np.float32)
    q = rng.standard_normal((300, 24)).astype(np.float32)
    ids = rng.permutation(10_000)[:1500]
    found, scores = VectorIndex(backend="exact").build(v, ids).search(q, k=7)
    want_ids, want_scores = brute(v, ids, q, 7)
    np.testing.assert_array_equal(found, want_ids)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-4, atol=1e-4)


def test_exact_blocks_of_queries(monkeypatch):
    v, q = clustered(n=500, n_queries=50)
    whole = VectorIndex(backend="exact").build(v).search(q, 5)
    monkeypatch.setattr(ann, "_BLOCK", 500 * 7)  # 7 queries a block, the last one short
    blocked = VectorIndex(backend="exact").build(v).search(q, 5)
    np.testing.assert_array_equal(whole[0], blocked[0])
    np.testing.assert_allclose(whole[1], blocked[1], rtol=1e-6)  # BLAS may round a block differently


def test_cosine_normalises():
    v = np.array([[10, 0], [0, 0.5]], np.float32)
    ids, scores = VectorIndex(metric="cos", backend="exact").build(v).search(np.array([[0, 3.0]]), k=2)
    assert ids.tolist() == [[1, 0]]
    np.testing.assert_allclose(scores, [[1.0, 0.0]], atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_padding_when_k_exceeds_size(backend):
    v, q = clustered(n=5, n_queries=3)
    index = VectorIndex(backend=backend, n_threads=1).build(v)
    ids, scores = index.search(q, k=8)
    assert ids.shape == scores.shape == (3, 8)
    assert (ids[:, 5:] == -1).all() and np.isneginf(scores[:, 5:]).all()
    assert sorted(ids[0, :5].tolist()) == [0, 1, 2, 3, 4]
    one_ids, _ = index.search(q[0], k=8)  # one 1-d query: still a row
    np.testing.assert_array_equal(one_ids, ids[:1])


# -- the HNSW backend -------------------------------------------------------------------------------------

@needs_usearch
def test_hnsw_recall_and_ef():
    """Recall@10 against exact search: high with a wide search, clearly lower with ef = k on a sparse graph,
    so an index that returns wrong ids, or that ignores ef_search, fails."""
    v, q = clustered()
    truth = VectorIndex(backend="exact").build(v).search(q, 10)[0]
    index = VectorIndex(backend="usearch", M=4, ef_construction=32, ef_search=256, n_threads=1).build(v)
    assert index.kind == "usearch" and len(index) == len(v)
    wide = recall(index.search(q, 10)[0], truth)
    index.ef_search = 10
    narrow = recall(index.search(q, 10)[0], truth)
    assert wide >= 0.95, wide
    assert narrow < wide - 0.1, (narrow, wide)
    scores = index.search(q, 10)[1]
    ids = index.search(q, 10)[0]
    np.testing.assert_allclose(scores, np.einsum("qd,qkd->qk", q, v[ids]), atol=1e-5)  # true inner products


@needs_usearch
def test_auto_picks_exact_below_the_crossover_and_grows_into_hnsw():
    v, q = clustered(n=600)
    index = VectorIndex(exact_below=500, n_threads=1).build(v[:300])
    assert index.kind == "exact"
    index.add(v[300:])
    assert index.kind == "usearch" and len(index) == 600
    assert (index.search(v[450], 1)[0] == 450).all()


def test_auto_without_usearch_falls_back_to_exact(monkeypatch, caplog):
    monkeypatch.setattr(ann, "_usearch", lambda: None)
    monkeypatch.setattr(ann, "_warned", False)
    v, _ = clustered(n=300)
    with caplog.at_level(logging.WARNING, logger="xmtc.index.ann"):
        index = VectorIndex(exact_below=100).build(v)
    assert index.kind == "exact"
    assert len(caplog.records) == 1 and "pip install 'xmtc[ann]'" in caplog.records[0].getMessage()
    with pytest.raises(ConfigError, match=r"pip install 'xmtc\[ann\]'"):
        VectorIndex(backend="usearch")


def test_config_errors():
    with pytest.raises(ConfigError, match="backend"):
        VectorIndex(backend="faiss")
    with pytest.raises(ConfigError, match="metric"):
        VectorIndex(metric="l2")
    index = VectorIndex(backend="exact").build(np.eye(3, dtype=np.float32))
    with pytest.raises(DataFormatError, match="shape"):
        index.search(np.zeros((2, 4), np.float32), 2)
    with pytest.raises(DataFormatError, match="not already"):
        index.add(np.eye(3, dtype=np.float32)[:1], ids=[2])
    with pytest.raises(ConfigError, match="k must"):
        index.search(np.eye(3, dtype=np.float32), 0)


# -- add / remove -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_add_and_remove(backend):
    v, q = clustered(n=1000)
    index = VectorIndex(backend=backend, n_threads=1).build(v[:900])
    gone = [3, 17, 500, 899]
    assert index.remove(gone + [5000]) == 4 and len(index) == 896
    ids, _ = index.search(np.concatenate([q, v[gone]]), k=50)
    assert not np.isin(ids, gone).any()
    assert not np.isin(index.search(v[:1], k=1000)[0], gone).any()  # every vector: still none of them
    index.add(v[900:], ids=np.arange(2000, 2100))
    assert len(index) == 996
    np.testing.assert_array_equal(index.search(v[900:], 1)[0][:, 0], np.arange(2000, 2100))
    index.add(v[17:18], ids=[17])  # a removed id can come back
    assert index.search(v[17], 1)[0][0, 0] == 17
    index.add(v[:2])  # default ids: after the largest
    assert index.search(v[1], 1)[0][0, 0] in (1, 2101)


@needs_usearch
def test_many_removals_rebuild_the_graph():
    v, _ = clustered(n=400)
    index = VectorIndex(backend="usearch", n_threads=1).build(v)
    index.remove(np.arange(0, 300))
    assert index._removed == 0 and len(index) == 100  # rebuilt from the 100 left
    np.testing.assert_array_equal(index.search(v[300:], 1)[0][:, 0], np.arange(300, 400))


# -- storage ----------------------------------------------------------------------------------------------

def save(tmp_path, index, name="labels"):
    writer = ModelWriter(tmp_path / "model")
    stage = index.to_stage(writer, name)
    writer.commit("test", {}, [stage])
    return tmp_path / "model"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mmap", [True, False])
def test_save_load_identical(tmp_path, backend, mmap):
    v, q = clustered(n=800)
    index = VectorIndex(backend=backend, ef_search=40, n_threads=1).build(v, ids=np.arange(800) * 3)
    index.remove([0, 3])
    folder = save(tmp_path, index)
    reader = ModelReader(folder, mmap=mmap)
    loaded = VectorIndex.from_stage(reader, reader.stage("labels"), n_threads=1)
    assert loaded.kind == backend and len(loaded) == 798 and loaded.ef_search == 40
    for a, b in zip(index.search(q, 10), loaded.search(q, 10)):
        np.testing.assert_array_equal(a, b)
    loaded.add(v[:1], ids=[1])  # a memory-mapped index is copied before it changes
    loaded.remove([6])
    assert loaded.search(v[0], 1)[0][0, 0] in (0, 1) and len(loaded) == 798
    for a, b in zip(index.search(q, 10), VectorIndex.from_stage(reader, reader.stage("labels")).search(q, 10)):
        np.testing.assert_array_equal(a, b)  # the files are untouched


@pytest.mark.parametrize("backend", BACKENDS)
def test_corrupt_index_file_is_a_checksum_error(tmp_path, backend):
    v, _ = clustered(n=300)
    folder = save(tmp_path, VectorIndex(backend=backend, n_threads=1).build(v))
    path = folder / ("labels/index.usearch" if backend == "usearch" else "labels.safetensors")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    reader = ModelReader(folder)
    with pytest.raises(ModelFormatError, match="checksum mismatch"):
        VectorIndex.from_stage(reader, reader.stage("labels"))


@needs_usearch
def test_stage_that_disagrees_with_the_file(tmp_path):
    v, _ = clustered(n=300)
    folder = save(tmp_path, VectorIndex(backend="usearch", n_threads=1).build(v))
    reader = ModelReader(folder)
    stage = dict(reader.stage("labels"), count=301)
    with pytest.raises(ModelFormatError, match="301"):
        VectorIndex.from_stage(reader, stage)
    with pytest.raises(ModelFormatError, match="not a vector index"):
        VectorIndex.from_stage(reader, dict(stage, backend="faiss"))


def test_loading_usearch_stage_without_usearch(tmp_path, monkeypatch):
    pytest.importorskip("usearch")
    v, _ = clustered(n=300)
    folder = save(tmp_path, VectorIndex(backend="usearch", n_threads=1).build(v))
    monkeypatch.setattr(ann, "_usearch", lambda: None)
    reader = ModelReader(folder)
    with pytest.raises(ConfigError, match=r"pip install 'xmtc\[ann\]'"):
        VectorIndex.from_stage(reader, reader.stage("labels"))
