"""xmtc.linear.solver: the per-level L2-loss SVM solver checked against exact references.

References: scikit-learn's LinearSVC (liblinear, the same dual problem with a regularised bias
feature) and, for per-class costs, L-BFGS on the primal.  Everything else (row selection, threads,
buffers, thresholds, degenerate outputs) is checked against the solver's own documented contract.
"""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize

import xmtc.linear.solver as solver
from xmtc.errors import ConfigError
from xmtc.features.tfidf import TfidfFeaturizer
from xmtc.linear.solver import primal_objective, train_level

sklearn_svm = pytest.importorskip("sklearn.svm")

TIGHT = dict(tol=1e-5, max_iter=10000, threshold=0.0)


@pytest.fixture(scope="module")
def reuters(reuters_small):
    """300 real Reuters documents as TF-IDF (unigrams) and their label lists."""
    (texts, labels), _ = reuters_small
    texts, labels = texts[:300], labels[:300]
    X = TfidfFeaturizer(ngram_range=(1, 1), min_df=2).fit_transform(texts)
    names = sorted({lab for ls in labels for lab in ls})
    col = {lab: j for j, lab in enumerate(names)}
    rows = [i for i, ls in enumerate(labels) for _ in ls]
    cols = [col[lab] for ls in labels for lab in ls]
    Y = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(len(labels), len(names)))
    order = np.argsort(-np.asarray(Y.sum(axis=0)).ravel(), kind="stable")
    return sp.csr_matrix(X, dtype=np.float32), sp.csc_matrix(Y[:, order])  # most frequent label first


def synthetic(seed=0, n=60, d=15, density=0.3):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, random_state=seed, format="csr", dtype=np.float32)
    X.data = (X.data * 2 - 0.5).astype(np.float32)  # mixed signs
    y = np.where(X @ rng.normal(size=d) + 0.3 * rng.normal(size=n) > 0, 1, -1)
    return X, y


def train_one(X, y, **kw):
    """train_level on a single output trained on every row; returns (w, b) as float64."""
    n = X.shape[0]
    W = train_level(X, sp.csr_matrix((np.asarray(y) > 0).astype(np.float32)[:, None]), [0],
                    np.ones((n, 1), np.float32), **kw)
    assert W.shape == (X.shape[1] + 1, 1) and W.dtype == np.float32 and sp.isspmatrix_csc(W)
    col = W[:, 0].toarray().ravel().astype(np.float64)
    return col[:-1], col[-1]


def sklearn_objective(X, y, C_pos, C_neg, bias):
    C = 1.0 if C_pos != C_neg else C_pos
    cw = {1: C_pos, -1: C_neg} if C_pos != C_neg else None
    clf = sklearn_svm.LinearSVC(loss="squared_hinge", penalty="l2", dual=True, C=C, fit_intercept=bias > 0,
                                intercept_scaling=bias if bias > 0 else 1.0, class_weight=cw, tol=1e-8,
                                max_iter=100000).fit(X, y)
    # sklearn reports intercept_ = intercept_scaling * (weight of the bias feature)
    b = clf.intercept_[0] / bias if bias > 0 else 0.0
    return primal_objective(X, y, clf.coef_.ravel(), b, C_pos, C_neg, bias)


def lbfgs_objective(X, y, C_pos, C_neg, bias):
    """Minimise the primal directly (it is smooth: squared hinge) over v = [w; b]."""
    Z = sp.hstack([sp.csr_matrix(X, dtype=np.float64), np.full((X.shape[0], 1), float(bias))], format="csr")
    yy = np.asarray(y, dtype=np.float64)
    c = np.where(yy > 0, C_pos, C_neg)

    def fg(v):
        slack = np.maximum(0.0, 1.0 - yy * (Z @ v))
        return 0.5 * v @ v + np.sum(c * slack ** 2), v - 2.0 * (Z.T @ (c * yy * slack))

    res = minimize(fg, np.zeros(Z.shape[1]), jac=True, method="L-BFGS-B",
                   options=dict(maxiter=20000, gtol=1e-12, ftol=1e-15))
    v = res.x
    return primal_objective(X, y, v[:-1], v[-1], C_pos, C_neg, bias)


# ------------------------------------------------------------------------------------------------
# primal_objective itself
# ------------------------------------------------------------------------------------------------

def test_primal_objective_by_hand():
    X = sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]))
    y = np.array([1, -1, 5])  # any value > 0 is positive
    w, b = np.array([0.5, 0.25]), 0.1
    # decision values with bias 2: 0.7, 0.7, 0.95 -> slacks 0.3, 1.7, 0.05
    expected = 0.5 * (0.25 + 0.0625 + 0.01) + 2 * 0.09 + 3 * 2.89 + 2 * 0.0025
    assert primal_objective(X, y, w, b, 2.0, 3.0, 2.0) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="shapes do not match"):
        primal_objective(X, y, np.zeros(3), b, 1.0, 1.0, 1.0)


# ------------------------------------------------------------------------------------------------
# optimality against exact references
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("C, bias", [(1.0, 1.0), (4.0, 1.0), (0.5, 2.0), (1.0, 0.0)])
def test_matches_liblinear_on_reuters(reuters, C, bias):
    X, Y = reuters
    for j in (0, 1, 5):  # a frequent, a mid and a rarer label
        y = np.where(Y[:, j].toarray().ravel() > 0, 1, -1)
        assert 1 <= (y > 0).sum() < y.size - 1
        w, b = train_one(X, y, C_pos=C, C_neg=C, bias=bias, **TIGHT)
        if bias == 0:
            assert b == 0.0  # bias 0 disables the bias feature
        ref = sklearn_objective(X, y, C, C, bias)
        got = primal_objective(X, y, w, b, C, C, bias)
        assert got == pytest.approx(ref, rel=1e-6), (j, got, ref)


def test_default_tolerance_is_close_but_tight_tolerance_is_closer(reuters):
    X, Y = reuters
    y = np.where(Y[:, 0].toarray().ravel() > 0, 1, -1)
    ref = sklearn_objective(X, y, 1.0, 1.0, 1.0)
    loose = primal_objective(X, y, *train_one(X, y, threshold=0.0), 1.0, 1.0, 1.0)
    tight = primal_objective(X, y, *train_one(X, y, **TIGHT), 1.0, 1.0, 1.0)
    assert ref <= loose * (1 + 1e-12) and loose == pytest.approx(ref, rel=2e-2)
    assert abs(tight - ref) <= abs(loose - ref)


@pytest.mark.parametrize("C_pos, C_neg, bias", [(2.0, 0.5, 1.0), (0.3, 3.0, 1.5)])
def test_class_costs_match_liblinear_class_weight(reuters, C_pos, C_neg, bias):
    X, Y = reuters
    y = np.where(Y[:, 0].toarray().ravel() > 0, 1, -1)
    w, b = train_one(X, y, C_pos=C_pos, C_neg=C_neg, bias=bias, **TIGHT)
    got = primal_objective(X, y, w, b, C_pos, C_neg, bias)
    assert got == pytest.approx(sklearn_objective(X, y, C_pos, C_neg, bias), rel=1e-6)
    # and C_pos / C_neg are not swapped or ignored: the symmetric cost gives a different objective
    assert got != pytest.approx(primal_objective(X, y, *train_one(X, y, C_pos=C_neg, C_neg=C_pos, bias=bias,
                                                                 **TIGHT), C_pos, C_neg, bias), rel=1e-4)


@pytest.mark.parametrize("C_pos, C_neg, bias", [(1.0, 1.0, 1.0), (5.0, 0.2, 1.0), (0.1, 2.0, 3.0)])
def test_synthetic_matches_lbfgs_on_the_primal(C_pos, C_neg, bias):
    X, y = synthetic(seed=3)
    w, b = train_one(X, y, C_pos=C_pos, C_neg=C_neg, bias=bias, tol=1e-7, max_iter=100000, threshold=0.0)
    got = primal_objective(X, y, w, b, C_pos, C_neg, bias)
    ref = lbfgs_objective(X, y, C_pos, C_neg, bias)
    assert got == pytest.approx(ref, rel=1e-6)
    if C_pos == C_neg:
        assert got == pytest.approx(sklearn_objective(X, y, C_pos, C_neg, bias), rel=1e-6)


# ------------------------------------------------------------------------------------------------
# which rows train which output
# ------------------------------------------------------------------------------------------------

def level_problem(X, Y):
    """Outputs 0..7 of the Reuters labels under parents, with an active mask that:

    * parent 0 (outputs 0, 1, 2): active on rows 0..199, plus every positive of its outputs;
    * parent 1 (output 3 alone): active on odd rows only; output 3 has positives outside them,
      which must still be trained on;
    * parent 2 (outputs 4..7): active on a random half plus its outputs' positives;
    * parent 3: no outputs (its active rows must change nothing);
    * parent 4 (output 8, a label column with no positives): no active rows -> empty training set.
    """
    n = X.shape[0]
    rng = np.random.default_rng(7)
    Yk = sp.hstack([Y[:, :8], sp.csc_matrix((n, 1))], format="csc")
    parent_of = np.array([0, 0, 0, 1, 2, 2, 2, 2, 4])
    act = np.zeros((n, 5), np.float32)
    act[:200, 0] = 1
    act[1::2, 1] = 1
    act[rng.random(n) < 0.5, 2] = 1
    act[:, 3] = 1
    dense_y = Yk.toarray() != 0
    for p in (0, 2):
        act[dense_y[:, parent_of == p].any(axis=1), p] = 1
    assert np.any(dense_y[:, 3] & (act[:, 1] == 0)), "output 3 needs inactive positives for this test"
    return Yk, parent_of, sp.csr_matrix(act)


def training_rows(Yk, parent_of, active, k):
    """Documented training set of output k: active rows of its parent plus its positives."""
    a = active.toarray()[:, parent_of[k]] != 0
    return np.flatnonzero(a | (Yk[:, k].toarray().ravel() != 0))


def test_each_output_trains_exactly_on_its_rows(reuters):
    X, Y = reuters
    Yk, parent_of, active = level_problem(X, Y)
    W = train_level(X, Yk, parent_of, active, C_pos=2.0, C_neg=0.5, bias=1.5, tol=0.01, threshold=0.0)
    assert W.shape == (X.shape[1] + 1, 9)
    for k in range(8):
        R = training_rows(Yk, parent_of, active, k)
        alone = train_level(X[R], Yk[R][:, [k]], [0], np.ones((R.size, 1)), C_pos=2.0, C_neg=0.5, bias=1.5,
                            tol=0.01, threshold=0.0)
        # the solver promises bit-identical weights, not just the same optimum
        np.testing.assert_array_equal(W[:, k].toarray(), alone.toarray(), err_msg=f"output {k}")
        assert W[:, k].nnz > 0
        # and training on all rows instead would give something else
        if R.size < X.shape[0]:
            everything = train_level(X, Yk[:, [k]], [0], np.ones((X.shape[0], 1)), C_pos=2.0, C_neg=0.5,
                                     bias=1.5, tol=0.01, threshold=0.0)
            assert abs(everything - W[:, [k]]).max() > 1e-4
    assert W[:, 8].nnz == 0  # no active rows and no positives: w = 0, an empty column
    # features outside an output's training rows get no weight at all
    R3 = training_rows(Yk, parent_of, active, 3)
    unseen = np.setdiff1d(np.arange(X.shape[1]), X[R3].indices)
    assert unseen.size and W[unseen, 3].nnz == 0


def test_a_siblings_positive_is_not_a_negative_unless_active(reuters):
    """Two outputs under one parent that is active on odd rows only: each output trains on the odd
    rows plus its own positives, never on its sibling's even-row positives (matcher-aware negatives
    alone give such masks)."""
    X, Y = reuters
    n = X.shape[0]
    Yk = sp.csc_matrix(Y[:, :2])
    act = np.zeros((n, 1), np.float32)
    act[1::2, 0] = 1
    W = train_level(X, Yk, [0, 0], act, **TIGHT)
    for k in range(2):
        own = Yk[:, k].toarray().ravel() != 0
        sibling = Yk[:, 1 - k].toarray().ravel() != 0
        R = training_rows(Yk, np.array([0, 0]), sp.csr_matrix(act), k)
        assert np.any(sibling[::2] & ~own[::2])  # the case at stake: sibling positives outside the mask
        # the same optimum as training on its own rows (the epoch order differs, so not bit for bit)
        alone = train_level(X[R], Yk[R][:, [k]], [0], np.ones((R.size, 1)), **TIGHT)
        np.testing.assert_allclose(W[:, k].toarray(), alone.toarray(), atol=1e-4, err_msg=f"output {k}")
        # while counting the sibling's positives as negatives would move it
        R2 = np.union1d(R, np.flatnonzero(sibling))
        wider = train_level(X[R2], Yk[R2][:, [k]], [0], np.ones((R2.size, 1)), **TIGHT)
        assert abs(wider - W[:, [k]]).max() > 1e-3


def test_positives_always_train_and_active_zeros_do_not(reuters):
    X, Y = reuters
    n = X.shape[0]
    y = Y[:, [2]]
    pos = np.flatnonzero(y.toarray().ravel())
    # an active matrix holding explicit zeros (stored, value 0) activates nothing
    act = sp.csr_matrix((np.zeros(n, np.float32), (np.arange(n), np.zeros(n, int))), shape=(n, 1))
    assert act.nnz == n
    W = train_level(X, y, [0], act, tol=0.01, threshold=0.0)
    ref = train_level(X[pos], y[pos], [0], np.ones((pos.size, 1)), tol=0.01, threshold=0.0)
    np.testing.assert_array_equal(W.toarray(), ref.toarray())
    # positives only: the output scores its positives above zero
    f = X[pos] @ W[:-1, 0].toarray().ravel() + W[-1, 0]
    assert np.all(f > 0)


def test_any_nonzero_in_Y_is_a_positive(reuters):
    """Y's documented contract is "nonzero = positive": weights, even negative ones, must not matter."""
    X, Y = reuters
    Yk, parent_of, active = level_problem(X, Y)
    W = train_level(X, Yk, parent_of, active, threshold=0.0)
    Yw = sp.csc_matrix(Yk, copy=True)
    Yw.data = np.where(np.arange(Yw.nnz) % 3 == 0, -1.0, np.where(np.arange(Yw.nnz) % 3 == 1, 2.5, 1.0))
    W2 = train_level(X, Yw.astype(np.float64), parent_of, active, threshold=0.0)
    np.testing.assert_array_equal(W.toarray(), W2.toarray())


def test_negatives_only_score_below_zero(reuters):
    X, _ = reuters
    n = X.shape[0]
    for bias in (1.0, 2.0):
        W = train_level(X, sp.csr_matrix((n, 1)), [0], np.ones((n, 1)), bias=bias, threshold=0.0)
        b = W[-1, 0]
        f = X @ W[:-1, 0].toarray().ravel() + bias * b
        assert np.all(f < 0)
        assert b < 0 and abs(bias * b + 1) < 0.1  # "close to -1 / bias when its negatives are many"


def test_no_outputs_and_no_features():
    X, y = synthetic()
    W = train_level(X, sp.csr_matrix((X.shape[0], 0)), np.zeros(0, int), np.ones((X.shape[0], 1)))
    assert W.shape == (X.shape[1] + 1, 0)
    # no features at all: only the bias is learnt; all-positive rows give a positive bias
    W = train_level(sp.csr_matrix((5, 0)), np.ones((5, 1)), [0], np.ones((5, 1)), threshold=0.0)
    assert W.shape == (1, 1) and W[0, 0] > 0


# ------------------------------------------------------------------------------------------------
# determinism, threads and internal buffering
# ------------------------------------------------------------------------------------------------

def many_outputs(X, Y):
    """40 outputs (all Reuters label columns present, padded by empty ones) under 3 parents."""
    n = X.shape[0]
    K = 40
    Yk = sp.hstack([Y[:, :K]] + ([sp.csc_matrix((n, K - Y.shape[1]))] if Y.shape[1] < K else []), format="csc")
    parent_of = np.repeat([0, 1, 2], [24, 10, 6])
    rng = np.random.default_rng(1)
    act = sp.csr_matrix((rng.random((n, 3)) < [1.0, 0.4, 0.2]).astype(np.float32))
    return Yk, parent_of, act


def same_csc(A, B):
    return (A.shape == B.shape and np.array_equal(A.indptr, B.indptr) and np.array_equal(A.indices, B.indices)
            and np.array_equal(A.data, B.data))


def test_deterministic_and_independent_of_threads(reuters):
    X, Y = reuters
    Yk, parent_of, act = many_outputs(X, Y)
    ref = train_level(X, Yk, parent_of, act, n_threads=1)
    assert ref.nnz > 0
    for t in (1, 2, 3, 8):  # 3 and 8 also change how outputs are cut into blocks
        assert same_csc(train_level(X, Yk, parent_of, act, n_threads=t), ref), t


def test_output_buffer_and_batch_limits_do_not_change_the_result(reuters, monkeypatch):
    X, Y = reuters
    Yk, parent_of, act = many_outputs(X, Y)
    ref = train_level(X, Yk, parent_of, act, n_threads=2)
    # tiny per-thread output buffers force the kernel to stop and resume many times;
    # a tiny batch budget puts every parent in its own batch
    monkeypatch.setattr(solver, "_OUT_CAP", 1)
    monkeypatch.setattr(solver, "_BATCH_NNZ", 1)
    assert same_csc(train_level(X, Yk, parent_of, act, n_threads=2), ref)


def test_outputs_do_not_depend_on_their_block_mates(reuters):
    X, Y = reuters
    Yk, parent_of, act = many_outputs(X, Y)
    W = train_level(X, Yk, parent_of, act)
    # parent 0 is active everywhere and parent 1 keeps all of its outputs, so every kept output sees the
    # same training rows; only the blocks (which outputs share a pass over the rows) change
    keep = np.concatenate([[3, 17], np.flatnonzero(parent_of == 1)])
    sub = train_level(X, Yk[:, keep], parent_of[keep], act)
    assert same_csc(sub, W[:, keep].tocsc())


def test_threshold_prunes_small_weights_but_keeps_the_bias(reuters):
    X, Y = reuters
    Yk, parent_of, act = many_outputs(X, Y)
    full = train_level(X, Yk, parent_of, act, threshold=0.0).toarray()
    thr = 0.1
    pruned = train_level(X, Yk, parent_of, act, threshold=thr)
    d = X.shape[1]
    P = pruned.toarray()
    expected = np.where(np.abs(full) >= thr, full, 0)
    expected[d] = full[d]  # the bias row survives any threshold
    np.testing.assert_array_equal(P, expected)
    assert 0 < np.count_nonzero(P[:d]) < np.count_nonzero(full[:d])  # something was pruned, not all
    assert pruned.nnz == np.count_nonzero(P)  # no stored zeros
    # a threshold above every weight leaves exactly the bias row, whatever its size
    big = 10 * np.abs(full).max()
    only_bias = train_level(X, Yk, parent_of, act, threshold=big)
    assert np.all(only_bias.indices == d)
    np.testing.assert_array_equal(only_bias.toarray()[d], full[d])
    assert np.count_nonzero(full[d]) == only_bias.nnz > 0


# ------------------------------------------------------------------------------------------------
# argument checking
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw, match", [
    (dict(C_pos=0), "C_pos"), (dict(C_pos=-1.0), "C_pos"), (dict(C_neg=float("nan")), "C_neg"),
    (dict(C_neg="big"), "C_neg"), (dict(bias=-1.0), "bias"), (dict(bias=float("inf")), "bias"),
    (dict(tol=0.0), "tol"), (dict(threshold=-0.1), "threshold"), (dict(max_iter=0), "max_iter"),
    (dict(max_iter=2.5), "max_iter"), (dict(max_iter=True), "max_iter"), (dict(n_threads=0), "n_threads"),
    (dict(n_threads=1.0), "n_threads"), (dict(n_threads=True), "n_threads"),
])
def test_bad_settings_raise_config_error(kw, match):
    X, y = synthetic()
    Y = sp.csr_matrix((y > 0).astype(np.float32)[:, None])
    with pytest.raises(ConfigError, match=match):
        train_level(X, Y, [0], np.ones((X.shape[0], 1)), **kw)


def test_bad_arrays_raise_value_error():
    X, y = synthetic()
    n = X.shape[0]
    Y = sp.csr_matrix((y > 0).astype(np.float32)[:, None])
    ones = np.ones((n, 1))
    cases = [
        ((X.toarray().tolist(), Y, [0], ones), "X must be a 2-D"),
        ((X, Y, [0], np.ones(n)), "active must be a 2-D"),
        ((X[:-1], Y, [0], ones), "Y has 60 rows but X has 59"),
        ((X, Y, [0], ones[:-1]), "active has 59 rows but X has 60"),
        ((X, Y, [0, 0], ones), r"parent_of must have shape \(1,\)"),
        ((X, Y, [0.0], ones), "parent_of must hold integers"),
        ((X, Y, [1], ones), r"parent_of values must lie in \[0, 1\)"),
        ((X, Y, [-1], ones), r"parent_of values must lie in \[0, 1\)"),
    ]
    Xnan = X.copy()
    Xnan.data[0] = np.nan
    cases.append(((Xnan, Y, [0], ones), "X contains NaN"))
    for args, match in cases:
        with pytest.raises(ValueError, match=match):
            train_level(*args)
