"""Negative masks, the hierarchical linear model's training, persistence and validation."""

import numpy as np
import pytest
import scipy.sparse as sp

import xmtc.linear.solver as solver
from xmtc.errors import ConfigError, ModelFormatError, NotFittedError
from xmtc.linear.hierarchy import HierarchicalLinearModel
from xmtc.linear.negatives import active_mask, beam_mask, level_targets


def chain_from(parents, sizes):
    out, n_par = [], 1
    for p, K in zip(parents, sizes):
        out.append(sp.csr_matrix((np.ones(K, np.float32), (np.arange(K), p)), shape=(K, n_par)))
        n_par = K
    return out


# hand-made tree: root -> {A, B} -> {a0, a1 | b0} -> labels {0..4}
#   a0 (0) under A, a1 (1) under A, b0 (2) under B; labels 0,3 under a0, 1 under a1, 2,4 under b0
TREE = chain_from([np.array([0, 0]), np.array([0, 0, 1]), np.array([0, 1, 2, 0, 2])], [2, 3, 5])
Y_HAND = sp.csr_matrix(np.array([[1, 0, 0, 0, 0],    # a0, A
                                 [0, 0, 1, 0, 1],    # b0, B
                                 [0, 1, 0, 1, 0],    # a1 + a0, A
                                 [0, 0, 0, 0, 0]],   # nothing
                                dtype=np.float32))


def test_level_targets_follow_the_tree():
    t0, t1, t2 = level_targets(Y_HAND * 3, TREE)  # values other than 1 still mean "positive"
    np.testing.assert_array_equal(t0.toarray(), [[1, 0], [0, 1], [1, 0], [0, 0]])
    np.testing.assert_array_equal(t1.toarray(), [[1, 0, 0], [0, 0, 1], [1, 1, 0], [0, 0, 0]])
    np.testing.assert_array_equal(t2.toarray(), Y_HAND.toarray())
    assert all(t.dtype == np.float32 and set(t.data) == {1.0} for t in (t0, t1, t2))


def test_masks_tfn_man_and_union():
    targets = level_targets(Y_HAND, TREE)
    np.testing.assert_array_equal(active_mask("tfn+man", 0, targets).toarray(), np.ones((4, 1)))
    beam = np.array([[1, -1], [1, 0], [0, -1], [-1, -1]])  # the model's beam over {A, B}
    np.testing.assert_array_equal(active_mask("tfn", 1, targets).toarray(), [[1, 0], [0, 1], [1, 0], [0, 0]])
    np.testing.assert_array_equal(active_mask("man", 1, targets, beam).toarray(), [[0, 1], [1, 1], [1, 0], [0, 0]])
    np.testing.assert_array_equal(active_mask("tfn+man", 1, targets, beam).toarray(),
                                  [[1, 1], [1, 1], [1, 0], [0, 0]])
    beam2 = np.array([[2, 1], [0, -1], [2, -1], [1, 2]])  # beam over {a0, a1, b0}
    np.testing.assert_array_equal(active_mask("tfn+man", 2, targets, beam2).toarray(),
                                  [[1, 1, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]])
    assert set(active_mask("tfn+man", 2, targets, beam2).data) == {1.0}
    np.testing.assert_array_equal(beam_mask(np.array([[1, 1, -1]]), 3).toarray(), [[0, 1, 0]])
    with pytest.raises(ConfigError, match="negatives"):
        active_mask("hard", 1, targets, beam)
    with pytest.raises(ValueError, match="needs the beam"):
        active_mask("man", 1, targets)


# --- a small real problem --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def reuters(tsv_sample):
    from sklearn.cluster import KMeans
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.preprocessing import normalize

    tr, tr_lab = tsv_sample("reuters21578-apte90", "train", 3000)
    te, te_lab = tsv_sample("reuters21578-apte90", "test", 1000)
    vec = TfidfVectorizer(sublinear_tf=True, min_df=2, dtype=np.float32)
    X, Xt = vec.fit_transform(tr), vec.transform(te)
    names = sorted({lab for labs in tr_lab for lab in labs})
    col = {lab: j for j, lab in enumerate(names)}

    def label_matrix(lists):
        pairs = [(i, col[lab]) for i, labs in enumerate(lists) for lab in labs if lab in col]
        r, c = zip(*pairs)
        return sp.csr_matrix((np.ones(len(r), np.float32), (r, c)), shape=(len(lists), len(names)))

    Y, Yt = label_matrix(tr_lab), label_matrix(te_lab)
    pifa = normalize(Y.T @ X).toarray()  # a 4 -> 16 -> L tree from k-means on PIFA
    k16 = KMeans(16, n_init=1, random_state=0).fit(pifa)
    k4 = KMeans(4, n_init=1, random_state=0).fit(k16.cluster_centers_)
    chain = chain_from([np.zeros(4, int), k4.labels_, k16.labels_], [4, 16, len(names)])
    return X, Y, Xt, Yt, chain


@pytest.fixture(scope="module")
def fitted(reuters):
    X, Y, _, _, chain = reuters
    return HierarchicalLinearModel().fit(X, Y, chain, beam_size=2)


def precision_at_1(Yt, idx):
    return float(np.mean(np.asarray(Yt[np.arange(Yt.shape[0]), idx[:, 0]]).ravel() > 0))


def test_fit_reaches_sane_precision(reuters, fitted):
    _, Y, Xt, Yt, chain = reuters
    assert fitted.n_features == Xt.shape[1] and fitted.n_labels == Y.shape[1]
    assert fitted.level_sizes == [4, 16, Y.shape[1]]
    idx, scores = fitted.predict_topk(Xt, 5, beam_size=3)
    assert idx.shape == (Xt.shape[0], 5) and idx.dtype == np.int32 and scores.dtype == np.float32
    assert precision_at_1(Yt, idx) > 0.85  # ~0.91 measured
    assert np.all(scores[:, :-1] >= scores[:, 1:])
    for got, want in zip(fitted.chain, chain):
        assert (got != want).nnz == 0


def test_fit_is_deterministic_and_man_uses_the_model_so_far(reuters, fitted, monkeypatch):
    X, Y, _, _, chain = reuters
    seen = []

    def recording(X, Y, parent_of, active, **kw):
        seen.append(active.copy())
        return real(X, Y, parent_of, active, **kw)

    real = solver.train_level
    monkeypatch.setattr(solver, "train_level", recording)
    again = HierarchicalLinearModel().fit(X, Y, chain, negatives="man", beam_size=2)
    targets = level_targets(Y, chain)
    arrays = again.to_arrays()
    for t in (1, 2):  # MAN at level t = beam of the model truncated to levels < t, on the training data
        part = dict(arrays, n_levels=np.array([t]))
        beam, _ = HierarchicalLinearModel.from_arrays(part).predict_topk(X, 2, beam_size=2)
        assert (seen[t] != beam_mask(beam, chain[t].shape[1])).nnz == 0
        assert (seen[t] != targets[t - 1]).nnz > 0  # and it differs from teacher forcing
    twice = HierarchicalLinearModel().fit(X, Y, chain, beam_size=2).to_arrays()
    for key, value in fitted.to_arrays().items():
        np.testing.assert_array_equal(twice[key], value)


def test_arrays_round_trip_gives_identical_predictions(reuters, fitted):
    Xt = reuters[2]
    arrays = fitted.to_arrays()
    assert all(isinstance(a, np.ndarray) and a.dtype.kind in "iuf" for a in arrays.values())
    copy = HierarchicalLinearModel.from_arrays({k: v.copy() for k, v in arrays.items()})
    for name in ("l3-hinge", "sigmoid", "noop"):
        a = fitted.predict_topk(Xt, 10, beam_size=4, post_processor=name)
        b = copy.predict_topk(Xt, 10, beam_size=4, post_processor=name)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    for w in fitted.weights:
        assert w.dtype == np.float32 and w.shape[0] == Xt.shape[1] + 1


def corruptions():
    def drop(a):
        del a["W1.indptr"]

    def set_(key, fn):
        def f(a):
            a[key] = fn(a[key].copy())
        return f

    def nan(w):
        w[0] = np.nan
        return w

    def unsort(ind):
        ind[0], ind[1] = ind[1], ind[0]
        return ind

    return {
        "missing key": (drop, "missing array 'W1.indptr'"),
        "parent out of range": (set_("C2.parent", lambda p: p + 1000), "parents must lie"),
        "wrong node count": (set_("C1.parent", lambda p: p[:-1]), "nodes, weights have"),
        "row out of range": (set_("W0.indices", lambda i: i + 10**7), "row indices must lie"),
        "indptr": (set_("W2.indptr", lambda p: p[::-1]), "csc arrays are inconsistent"),
        "short data": (set_("W2.data", lambda d: d[:-1]), "csc arrays are inconsistent"),
        "nan": (set_("W0.data", nan), "NaN"),
        "unsorted": (set_("W0.indices", unsort), "increase strictly"),
        "feature count": (set_("W1.shape", lambda s: s + np.array([1, 0])), "rows, level 0 has"),
        "text dtype": (set_("bias", lambda b: np.array(["x"])), "numeric"),
        "float indices": (set_("W0.indices", lambda i: i.astype(np.float32)), "integers"),
        "format": (set_("format", lambda f: f + 10), "unsupported format"),
        "levels": (set_("n_levels", lambda n: n + 1), "missing array 'W3.data'"),
    }


@pytest.mark.parametrize("case", list(corruptions()))
def test_corrupt_arrays_raise_model_format_error(fitted, case):
    corrupt, message = corruptions()[case]
    arrays = fitted.to_arrays()
    corrupt(arrays)
    with pytest.raises(ModelFormatError, match=message):
        HierarchicalLinearModel.from_arrays(arrays)


def test_input_validation(reuters, fitted):
    X, Y, Xt, _, chain = reuters
    with pytest.raises(ConfigError, match=f"features have 10 columns but the model expects {X.shape[1]}"):
        fitted.predict_topk(Xt[:, :10], 5)
    with pytest.raises(ConfigError, match="post_processor"):
        fitted.predict_topk(Xt, 5, post_processor="softmax")
    with pytest.raises(NotFittedError):
        HierarchicalLinearModel().predict_topk(Xt, 5)
    with pytest.raises(ConfigError, match="negatives"):
        HierarchicalLinearModel().fit(X, Y, chain, negatives="all")
    with pytest.raises(ConfigError, match="labels but Y has"):
        HierarchicalLinearModel().fit(X, Y[:, :10], chain)
    with pytest.raises(ConfigError, match="exactly one parent"):
        HierarchicalLinearModel().fit(X, Y, [chain[0], chain[1] * 0, chain[2]])
    with pytest.raises(ConfigError, match="expected 4 columns"):
        HierarchicalLinearModel().fit(X, Y, [chain[0], chain[2]])


def test_accepts_a_label_tree_object(reuters):
    X, Y, _, _, chain = reuters

    class Tree:  # the LabelTree contract: a `chain` attribute
        pass

    tree = Tree()  # a two-level tree (16 -> L) is fine too
    tree.chain = [sp.csr_matrix(np.ones((16, 1), np.float32)), chain[2]]
    model = HierarchicalLinearModel().fit(X[:500], Y[:500], tree, negatives="tfn")
    assert model.level_sizes == [16, Y.shape[1]]
