"""XR-Linear's label tree: the flat one-vs-all path against its definition, a given tree, the tree shape."""

import numpy as np
import pytest
import scipy.sparse as sp

import xmtc
from xmtc.errors import ConfigError
from xmtc.index.tree import LabelTree
from xmtc.linear.hierarchy import HierarchicalLinearModel
from xmtc.linear.solver import train_level


@pytest.fixture(scope="module")
def small():
    """Random sparse features with labels that depend on them: 300 train / 80 test rows, 12 labels."""
    rng = np.random.default_rng(7)
    n, d, L = 380, 60, 12
    X = sp.random(n, d, density=0.15, random_state=rng, format="csr", dtype=np.float32)
    X = sp.csr_matrix(X.multiply(1.0 / np.maximum(1e-9, sp.linalg.norm(X, axis=1))[:, None]), dtype=np.float32)
    proto = rng.standard_normal((d, L)).astype(np.float32)
    S = X @ proto
    Y = sp.csr_matrix((S > np.quantile(S, 0.85, axis=0)).astype(np.float32))
    return X[:300], Y[:300], X[300:]


def test_flat_one_vs_all_equals_its_definition(small):
    """A label set within max_leaf_size gives DiSMEC-style one-vs-all: every label's squared-hinge SVM
    trained on every instance, each test row scored against all labels, l3-hinge transform, top k."""
    X, Y, Xt = small
    model = xmtc.XRLinear(max_leaf_size=100, threshold=0.0, n_threads=1).fit(X, Y, progress=False)
    assert model.models_[0].level_sizes == [12]
    L = Y.shape[1]
    W = train_level(X, Y, np.zeros(L, dtype=np.int64), sp.csr_matrix(np.ones((X.shape[0], 1), np.float32)),
                    threshold=0.0, n_threads=1).toarray()
    s = Xt.toarray().astype(np.float64) @ W[:-1] + 1.0 * W[-1]
    want = np.exp(-np.maximum(0.0, 1.0 - s) ** 3)
    idx, sc = model.predict_topk(Xt, k=4)
    order = np.argsort(-want, axis=1, kind="stable")[:, :4]
    np.testing.assert_allclose(sc, np.take_along_axis(want, order, axis=1), rtol=1e-4, atol=1e-6)
    # same labels, except where two scores tie to float32 precision
    gap = np.abs(np.diff(np.sort(want, axis=1)[:, ::-1][:, :5], axis=1)).min(axis=1)
    clear = gap > 1e-5
    assert clear.sum() > 0.8 * clear.size
    np.testing.assert_array_equal(idx[clear], order[clear])


def test_given_tree_trains_exactly_that_tree(small):
    X, Y, Xt = small
    tree = LabelTree.from_parents([[0, 0], [0, 0, 1], np.arange(12) % 3])
    model = xmtc.XRLinear(n_threads=1).fit(X, Y, tree=tree, progress=False)
    from xmtc.index.pifa import normalize_rows

    # given feature rows are L2-normalised by the model (normalize_features), so the reference sees them so too
    ref = HierarchicalLinearModel().fit(normalize_rows(X), Y, tree, negatives="tfn", threshold=0.05, n_threads=1)
    assert model.models_[0].level_sizes == [2, 3, 12]
    for a, b in zip(model.models_[0].weights, ref.weights):
        assert (a != b).nnz == 0
    a, b = model.predict_topk(Xt, k=3), ref.predict_topk(normalize_rows(Xt), k=3)
    np.testing.assert_array_equal(a[0], b[0])
    # a chain of cluster matrices works too; a tree over other labels, or with n_trees > 1, does not
    again = xmtc.XRLinear(n_threads=1).fit(X, Y, tree=tree.chain, progress=False)
    np.testing.assert_array_equal(again.predict_topk(Xt, k=3)[0], a[0])
    with pytest.raises(ConfigError, match="one leaf per label"):
        xmtc.XRLinear().fit(X, Y, tree=LabelTree.from_parents([[0, 0], [0, 1, 1]]), progress=False)
    with pytest.raises(ConfigError, match="n_trees=1"):
        xmtc.XRLinear(n_trees=2).fit(X, Y, tree=tree, progress=False)


def test_default_tree_shape_is_binary(small):
    """12 labels, leaves of at most 7, branching 4: binary = 2 leaves of 6 (the smallest power of two
    >= 12 / 7), full = 4 leaves of 3 (branching^1)."""
    X, Y, _ = small
    binary = xmtc.XRLinear(branching=4, max_leaf_size=7, n_threads=1).fit(X, Y, progress=False)
    full = xmtc.XRLinear(branching=4, max_leaf_size=7, tree_shape="full", n_threads=1).fit(X, Y, progress=False)
    assert binary.models_[0].level_sizes == [2, 12]
    assert full.models_[0].level_sizes == [4, 12]


def test_auto_trees_count_the_labels_with_documents_not_a_vocabularys_docless_ones(small):
    from xmtc.methods.xr_linear.config import AUTO_TREES, AUTO_TREES_MAX_LABELS

    X, Y, _ = small
    # the 12 documented labels plus a whole vocabulary's worth of labels without documents
    wide = sp.hstack([Y, sp.csr_matrix((Y.shape[0], AUTO_TREES_MAX_LABELS), dtype=np.float32)], format="csr")
    model = xmtc.XRLinear(max_leaf_size=4, n_threads=1).fit(X, wide, progress=False)
    assert len(model.models_) == AUTO_TREES == 2


def test_two_trees_fitted_side_by_side_equal_those_fitted_one_after_the_other(small, monkeypatch):
    """With two threads the trees are fitted two at a time; each is the tree a one-thread fit makes (the
    solver's result does not depend on its threads), in its place; they ran in the pool, not the caller's thread."""
    import threading

    from xmtc.methods.xr_linear import estimator

    X, Y, _ = small
    cfg = dict(n_trees=2, branching=2, max_leaf_size=3, threshold=0.0)
    one = xmtc.XRLinear(n_threads=1, **cfg).fit(X, Y, progress=False)
    seen, real = set(), estimator.plain_linear_fit

    def fit(*a, **k):
        seen.add(threading.get_ident())
        return real(*a, **k)

    monkeypatch.setattr(estimator, "plain_linear_fit", fit)
    two = xmtc.XRLinear(n_threads=2, **cfg).fit(X, Y, progress=False)
    assert seen and threading.get_ident() not in seen
    assert [m.level_sizes for m in two.models_] == [m.level_sizes for m in one.models_]
    assert one.models_[0].level_sizes != [12]  # a real tree, and the two trees differ in their seeds
    for a, b in zip(one.models_, two.models_):
        for la, lb in zip(a.levels_, b.levels_):
            assert np.array_equal(la.ent, lb.ent) and np.array_equal(la.bias_w, lb.bias_w)
    assert not all(np.array_equal(x.ent, y.ent) for x, y in zip(one.models_[0].levels_, one.models_[1].levels_))


def test_two_trees_side_by_side_advance_one_bar_to_its_end(small, monkeypatch):
    """With bars on, the trees fitted side by side advance one "linear levels" bar by every level of both trees,
    and only the fit closes it (a tree's own close would end it halfway)."""
    import io

    import tqdm.auto

    X, Y, _ = small
    bars = []
    real = tqdm.auto.tqdm

    class Recorded(real):
        def __init__(self, *a, **k):
            super().__init__(*a, **{**k, "file": io.StringIO()})
            self.done, self.closed = 0, 0
            bars.append(self)

        def update(self, n=1):
            self.done += n

        def close(self):
            self.closed += 1
            super().close()

    monkeypatch.setattr(tqdm.auto, "tqdm", Recorded)
    model = xmtc.XRLinear(n_trees=2, branching=2, max_leaf_size=3, n_threads=2).fit(X, Y, progress=True)
    levels = [b for b in bars if b.desc == "linear levels"]
    assert len(levels) == 1
    assert levels[0].total == levels[0].done == sum(len(m.level_sizes) for m in model.models_) > 2
    assert levels[0].closed == 1
