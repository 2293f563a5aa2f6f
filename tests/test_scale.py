"""Scale: memory-mapped weights (format 2), PIFA without a copy of X, training by independent subtrees."""

from __future__ import annotations


import numpy as np
import pytest
import scipy.sparse as sp

from xmtc import XRLinear, load
from xmtc.errors import ConfigError, ModelFormatError
from xmtc.index.kmeans import build_label_tree
from xmtc.index.pifa import normalize_rows, pifa
from xmtc.linear.hierarchy import HierarchicalLinearModel
from xmtc.linear.levelwise import fit_by_levels, group_children, parent_groups
from xmtc.linear.subtrees import choose_depth, cut, fit_by_subtrees
from xmtc.models.array_files import mmap_arrays as _mmap_arrays, read_arrays as _read_arrays, write_arrays as _write_arrays


def _corpus(n=3000, L=400, d=2000, seed=0):
    """Small sparse data whose labels a tree can group: label j favours features of its group."""
    rng = np.random.default_rng(seed)
    group = rng.integers(0, 20, size=L)
    rows, cols, ys = [], [], []
    for i in range(n):
        labs = rng.choice(L, size=1 + rng.integers(0, 3), replace=False)
        ys.append(labs)
        feats = np.concatenate([(100 * group[labs][:, None] + rng.integers(0, 100, size=(labs.size, 4))).ravel(),
                                rng.integers(0, d, size=5)])
        rows += [i] * feats.size
        cols += feats.tolist()
    X = sp.csr_matrix((rng.random(len(rows)).astype(np.float32) + 0.1, (rows, cols)), shape=(n, d))
    X.sum_duplicates()
    Y = sp.csr_matrix((np.ones(sum(len(y) for y in ys), dtype=np.float32),
                       (np.repeat(np.arange(n), [len(y) for y in ys]), np.concatenate(ys))), shape=(n, L))
    return normalize_rows(X), Y


@pytest.fixture(scope="module")
def data():
    X, Y = _corpus()
    tree = build_label_tree(pifa(X, Y), branching=4, max_leaf_size=10, seed=0)
    return X, Y, tree


# -- PIFA without a copy of X ---------------------------------------------------------------------------
def test_pifa_matches_its_definition_bit_for_bit():
    X, Y = _corpus(seed=1)
    X = X.copy()
    X.data *= np.random.default_rng(2).random(X.nnz).astype(np.float32) * 3  # rows far from unit norm
    Y = Y.tolil()
    Y[0, 5] = 7.0  # any non-zero counts as one positive
    Y = Y.tocsr()
    Yb = (Y != 0).astype(np.float32)
    ref = normalize_rows(sp.csr_matrix(Yb.T.tocsr() @ normalize_rows(X), dtype=np.float32), copy=False)
    ref.eliminate_zeros()
    ref.sort_indices()
    got = pifa(X, Y)
    assert np.array_equal(got.indptr, ref.indptr) and np.array_equal(got.indices, ref.indices)
    assert np.array_equal(got.data, ref.data)  # the same float32 products in the same order


# -- memory-mapped arrays ---------------------------------------------------------------------------------
def test_mmap_arrays_equal_safetensors_reader(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {"f32": rng.random((7, 3)).astype(np.float32), "i64": np.arange(-5, 6, dtype=np.int64),
              "i32": rng.integers(-9, 9, size=13).astype(np.int32), "u8": np.arange(5, dtype=np.uint8),
              "f64": rng.random(4), "empty": np.zeros((0, 2), dtype=np.int32), "scalar1": np.array([3.5], np.float32)}
    path = tmp_path / "a.safetensors"
    _write_arrays(path, arrays)
    ref, got = _read_arrays(path), _mmap_arrays(path)
    assert sorted(got) == sorted(ref)
    for key in ref:
        assert got[key].dtype == ref[key].dtype and got[key].shape == ref[key].shape
        assert np.array_equal(got[key], ref[key])
        assert not got[key].flags.writeable


def test_mmap_arrays_refuse_a_shape_that_would_wrap_around(tmp_path):
    import json as _json

    path = tmp_path / "a.safetensors"
    header = _json.dumps({"x": {"dtype": "I64", "shape": [2**62, 4], "data_offsets": [0, 0]}}).encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header)
    with pytest.raises(ModelFormatError, match="declares shape .* but spans 0 bytes"):
        _mmap_arrays(path)


@pytest.mark.parametrize("damage, message", [
    (lambda b: b[:4], "truncated safetensors file"),
    (lambda b: (10**9).to_bytes(8, "little") + b[8:], "header length 1000000000 does not fit"),
    (lambda b: b[:-8], "arrays hold 80 bytes but the file has 72"),
])
def test_mmap_arrays_refuse_damaged_files(tmp_path, damage, message):
    path = tmp_path / "a.safetensors"
    _write_arrays(path, {"x": np.arange(10, dtype=np.int64)})
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ModelFormatError, match=message):
        _mmap_arrays(path)


def test_saved_model_predicts_the_same_with_and_without_mmap(tmp_path, data):
    X, Y, _ = data
    model = XRLinear(branching=4, max_leaf_size=10, n_threads=1).fit(X, Y, progress=False)
    expected = model.predict_topk(X[:300], k=5)
    model.save(tmp_path / "m")
    mapped, copied = load(tmp_path / "m"), load(tmp_path / "m", mmap=False)
    assert isinstance(mapped.models_[0].levels_[-1].ent, np.memmap)
    assert not isinstance(copied.models_[0].levels_[-1].ent, np.memmap)
    for m in (mapped, copied):
        idx, sc = m.predict_topk(X[:300], k=5)
        assert np.array_equal(idx, expected[0]) and np.array_equal(sc, expected[1])


def test_beam_and_csc_layouts_hold_the_same_model(data):
    X, Y, tree = data
    fitted = HierarchicalLinearModel().fit(X, Y, tree, negatives="tfn", n_threads=1)
    beam = HierarchicalLinearModel.from_arrays(fitted.to_arrays(layout="beam"))
    csc = HierarchicalLinearModel.from_arrays(fitted.to_arrays(layout="csc"))
    for a, b in zip(beam.weights, csc.weights):
        assert (a != b).nnz == 0
    p1, p2 = beam.predict_topk(X[:200], 5), csc.predict_topk(X[:200], 5)
    assert np.array_equal(p1[0], p2[0]) and np.array_equal(p1[1], p2[1])


def _beam_corruptions():
    def set_(key, fn):
        def apply(a):
            a[key] = fn(a[key].copy())
        return apply

    def bad_col(e):
        e[0, 0] = 10**6
        return e

    def nan(e):
        e[0, 1] = np.float32(np.nan).view(np.int32)
        return e

    def swap_segments(s):
        s[[0, 1]] = s[[1, 0]]
        return s

    return {
        "missing": (lambda a: a.pop("L1.seg"), "missing array 'L1.seg'"),
        "dtype": (set_("L0.feat", lambda f: f.astype(np.int32)), "must be a 2-d int64"),
        "child offset": (set_("L1.ent", bad_col), "child offsets"),
        "nan": (set_("L2.ent", nan), "NaN"),
        "parent": (set_("L2.seg", lambda s: s + np.array([10**6, 0], dtype=np.int32)), "parents in"),
        "segment order": (set_("L2.seg", swap_segments), "segment"),
        "feat": (set_("L1.feat", lambda f: f[::-1].copy()), "'feat' must be"),
        "children": (set_("L1.child_ids", lambda c: np.zeros_like(c)), "child_ids"),
        "features": (set_("L1.n_features", lambda n: n + 1), "n_features"),
    }


@pytest.mark.parametrize("case", list(_beam_corruptions()))
def test_beam_layout_damage_is_a_model_format_error(data, case):
    X, Y, tree = data
    arrays = HierarchicalLinearModel().fit(X, Y, tree, negatives="tfn", n_threads=1).to_arrays(layout="beam")
    corrupt, message = _beam_corruptions()[case]
    corrupt(arrays)
    with pytest.raises(ModelFormatError, match=message):
        HierarchicalLinearModel.from_arrays(arrays)


# -- training by subtrees ---------------------------------------------------------------------------------
def test_cut_covers_every_node_once(data):
    _, _, tree = data
    chain = tree.chain
    for depth in range(1, len(chain)):
        subs = cut(chain, depth)
        assert len(subs) == chain[depth - 1].shape[0]
        for j in range(len(chain) - depth):
            ids = np.concatenate([s.nodes[j] for s in subs])
            assert np.array_equal(np.sort(ids), np.arange(chain[depth + j].shape[0]))
        # a subtree's nodes descend from its root: walk the labels' parents up to the cut level
        for s in subs:
            up = s.nodes[-1]
            for t in range(len(chain) - 1, depth - 1, -1):
                up = chain[t].indices[up]
            assert np.all(up == s.root)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_subtrees_give_the_whole_tree_fit_exactly(data, depth):
    X, Y, tree = data
    whole = HierarchicalLinearModel().fit(X, Y, tree, negatives="tfn", n_threads=2).to_arrays(layout="beam")
    parts = fit_by_subtrees(X, Y, tree, depth=depth, n_threads=1).to_arrays(layout="beam")
    assert sorted(parts) == sorted(whole)
    for key in whole:
        assert whole[key].dtype == parts[key].dtype and np.array_equal(whole[key], parts[key]), key


def test_a_subtree_without_documents_trains_as_in_the_whole_tree(data):
    X, Y, tree = data
    empty = cut(tree.chain, 2)[3].nodes[-1]
    Y = Y.tolil()
    Y[:, empty] = 0
    Y = Y.tocsr()
    Y.eliminate_zeros()
    whole = HierarchicalLinearModel().fit(X, Y, tree, negatives="tfn").to_arrays(layout="beam")
    parts = fit_by_subtrees(X, Y, tree, depth=2).to_arrays(layout="beam")
    assert all(np.array_equal(whole[k], parts[k]) for k in whole)


def test_subtrees_refuse_matcher_aware_negatives(data):
    X, Y, tree = data
    with pytest.raises(ConfigError, match="negatives='tfn'"):
        fit_by_subtrees(X, Y, tree, negatives="tfn+man")


@pytest.mark.parametrize("negatives", ["tfn+man", "man", "tfn"])
def test_levels_cut_into_parent_groups_give_the_whole_tree_fit_exactly(data, negatives):
    X, Y, tree = data
    whole = HierarchicalLinearModel().fit(X, Y, tree, negatives=negatives, beam_size=3, n_threads=2)
    seen = []

    def runner(X_, targets, parent_of, active, groups, kw, level):
        seen.append(len(groups))
        from xmtc.linear.levelwise import run_groups_in_process

        return run_groups_in_process(X_, targets, parent_of, active, groups, kw, level)

    parts = fit_by_levels(X, Y, tree, negatives=negatives, beam_size=3, workers=3, run_tasks=runner, n_threads=1)
    assert seen[0] == 1 and max(seen) == 12        # the root level is one task; below, 4 groups per worker
    whole, parts = whole.to_arrays(layout="beam"), parts.to_arrays(layout="beam")
    assert sorted(parts) == sorted(whole)
    for key in whole:
        assert whole[key].dtype == parts[key].dtype and np.array_equal(whole[key], parts[key]), key


def test_parent_groups_cover_every_parent_once_costliest_first():
    parent_of = np.array([0, 0, 0, 1, 2, 2, 4, 4])           # parent 3 has no child
    active = sp.csr_matrix(np.array([[1, 1, 0, 1, 1], [1, 0, 1, 0, 1], [1, 0, 0, 0, 0]], dtype=np.float32))
    # cost = (active rows + 1) x children: p0 4*3 = 12, p1 2*1 = 2, p2 2*2 = 4, p4 3*2 = 6
    groups = parent_groups(parent_of, active, 2)
    assert [g.tolist() for g in groups] == [[0], [1, 2, 4]]  # LPT: 12 | 6 + 4 + 2
    assert group_children(parent_of, groups[1]).tolist() == [3, 4, 5, 6, 7]
    assert [g.tolist() for g in parent_groups(parent_of, active, 10)] == [[0], [4], [2], [1]]


def test_choose_depth_wants_four_subtrees_per_worker(data):
    _, _, tree = data
    sizes = tree.level_sizes
    assert sizes[0] == 4
    assert choose_depth(tree.chain, 1) == 1          # 4 subtrees for 1 worker
    assert choose_depth(tree.chain, 2) == 2          # 16 subtrees for 2 workers
    assert choose_depth(tree.chain, 10 ** 6) == len(sizes) - 1


# -- the synthetic scale corpus is reproducible ------------------------------------------------------------
def test_synthetic_corpus_is_seeded_and_power_law():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import _synth

    spec = _synth.SynthSpec(labels=2000, train_docs=6000, test_docs=100, chunk=2500)
    X1, Y1 = _synth.generate(spec, "train")
    X2, Y2 = _synth.generate(spec, "train")
    assert (X1 != X2).nnz == 0 and (Y1 != Y2).nnz == 0
    counts = np.sort(np.asarray(Y1.sum(axis=0)).ravel())[::-1]
    # Zipf with alpha 1: the top label is drawn ~1/H(2000) ~ 12% of the time, the 100th ~100x less often
    assert counts[0] > 20 * max(counts[99], 1)
    norms = np.sqrt(np.asarray(X1.multiply(X1).sum(axis=1)).ravel())
    assert np.allclose(norms, 1.0, atol=1e-5)


def test_pifa_does_not_copy_x():
    """The old PIFA normalised a copy of X: its peak allocation was at least X's size. Now it scales Y."""
    import tracemalloc

    rng = np.random.default_rng(0)
    n, d, L = 100_000, 50_000, 40
    X = sp.csr_matrix((rng.random(20 * n, dtype=np.float32) + 0.1,
                       (np.repeat(np.arange(n), 20), rng.integers(0, d, 20 * n))), shape=(n, d))
    X.sum_duplicates()
    Y = sp.csr_matrix((np.ones(n, dtype=np.float32), (np.arange(n), rng.integers(0, L, n))), shape=(n, L))
    x_bytes = X.data.nbytes + X.indices.nbytes
    tracemalloc.start()
    emb = pifa(X, Y)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    out_bytes = emb.data.nbytes + emb.indices.nbytes
    assert peak < 0.5 * x_bytes + 3 * out_bytes, (peak, x_bytes, out_bytes)
