"""Beam search: exact agreement with exhaustive scoring and with a plain-Python beam search."""

import numpy as np
import pytest
import scipy.sparse as sp

from xmtc.errors import ConfigError
from xmtc.linear.beam import BeamLevel, beam_search, prepare_features, topk_to_csr

def dyadic(rng, shape, density, scale=8):
    """Sparse values on a 1/8 grid: every sum is exact, so scores match a reference bit for bit."""
    M = sp.random(*shape, density=density, random_state=rng, format="csc", dtype=np.float32)
    M.data = (np.round((M.data - 0.4) * 2 * scale) / scale).astype(np.float32)
    M.eliminate_zeros()
    return M


def random_model(rng, d=40, sizes=(3, 8, 25), bias=1.0, density=0.3):
    """Random tree (children not contiguous, one childless parent) and random weights per level."""
    parents, levels, weights = [], [], []
    n_par = 1
    for t, K in enumerate(sizes):
        usable = n_par - 1 if t == len(sizes) - 1 else n_par  # leave the last inner node childless
        p = rng.integers(0, usable, K)
        p[:usable] = rng.permutation(usable)[: min(usable, K)]
        W = dyadic(rng, (d + 1, K), density)
        parents.append(p)
        weights.append(W)
        levels.append(BeamLevel.from_weights(W, p, n_par, bias=bias))
        n_par = K
    return parents, weights, levels


def transform(raw, name):
    raw = raw.astype(np.float32)
    if name == "l3-hinge":
        return np.exp(-np.maximum(0.0, 1.0 - raw.astype(np.float64)) ** 3).astype(np.float32)
    if name == "sigmoid":
        return (1.0 / (1.0 + np.exp(-raw.astype(np.float64)))).astype(np.float32)
    return raw


def combine(v, parent, name):
    return v if name == "noop" else (v * parent).astype(np.float32)


def raw_scores(X, W, bias):
    Xa = np.hstack([X.toarray(), np.full((X.shape[0], 1), bias, dtype=np.float32)]).astype(np.float64)
    return (Xa @ W.toarray().astype(np.float64)).astype(np.float32)  # exact on the dyadic grid


def exhaustive(X, parents, weights, bias, name, k):
    node = np.ones((X.shape[0], 1), dtype=np.float32)
    reachable = np.ones((X.shape[0], 1), dtype=bool)
    for p, W in zip(parents, weights):
        node = combine(transform(raw_scores(X, W, bias), name), node[:, p], name)
        reachable = reachable[:, p]
    idx = np.full((X.shape[0], k), -1, dtype=np.int64)
    sc = np.zeros((X.shape[0], k), dtype=np.float32)
    for i in range(X.shape[0]):
        cand = np.flatnonzero(reachable[i])
        order = cand[np.lexsort((cand, -node[i, cand]))][:k]
        idx[i, : order.size] = order
        sc[i, : order.size] = node[i, order]
    return idx, sc


def python_beam(X, parents, weights, bias, name, k, beam, label_score="product"):
    """The algorithm spelled out per instance: expand the beam, keep the best (score desc, id asc); with
    ``label_score="ranker"`` the labels' scores ignore their clusters' (the beam only picks the candidates)."""
    out_i = np.full((X.shape[0], k), -1, dtype=np.int64)
    out_s = np.zeros((X.shape[0], k), dtype=np.float32)
    raws = [transform(raw_scores(X, W, bias), name) for W in weights]
    for i in range(X.shape[0]):
        cur = [(0, np.float32(1.0))]
        for t, p in enumerate(parents):
            if t == len(parents) - 1 and label_score == "ranker":
                cur = [(node, np.float32(1.0)) for node, _ in cur]
            cand = [(c, combine(raws[t][i, c], s, name)) for (node, s) in cur for c in np.flatnonzero(p == node)]
            cand.sort(key=lambda cs: (-cs[1], cs[0]))
            cur = cand[: (k if t == len(parents) - 1 else beam)]
        for r, (c, s) in enumerate(cur):
            out_i[i, r], out_s[i, r] = c, s
    return out_i, out_s


@pytest.mark.parametrize("name", ["l3-hinge", "sigmoid", "noop"])
def test_full_beam_equals_exhaustive(name):
    rng = np.random.default_rng(1)
    bias = 0.5
    parents, weights, levels = random_model(rng, bias=bias)
    X = sp.csr_matrix(dyadic(rng, (100, 40), 0.25))  # >= 64 rows: the parallel path
    X = sp.csr_matrix(sp.diags((np.arange(100) != 7).astype(np.float32)) @ X)  # row 7 empty: bias only
    assert X[7].nnz == 0
    k = 27  # two more than there are labels
    idx, sc = beam_search(X, levels, k, beam_size=25, post_processor=name)
    ref_i, ref_s = exhaustive(X, parents, weights, bias, name, k)
    assert idx.dtype == np.int32 and sc.dtype == np.float32 and idx.shape == (100, k)
    np.testing.assert_array_equal(idx, ref_i)
    np.testing.assert_allclose(sc, ref_s, rtol=1e-6, atol=0)
    assert np.all(idx[:, -2:] == -1) and np.all(sc[:, -2:] == 0) and np.all(idx[:, :-2] >= 0)
    if name == "l3-hinge":  # saturated scores (exactly 1 or 0) create ties: they must fall to smaller ids
        assert np.any(sc[:, :-1] == sc[:, 1:])


@pytest.mark.parametrize("name", ["l3-hinge", "sigmoid", "noop"])
@pytest.mark.parametrize("beam,k", [(1, 3), (2, 5), (3, 4)])
def test_narrow_beam_equals_python_reference(name, beam, k):
    rng = np.random.default_rng(2)
    parents, weights, levels = random_model(rng)
    X = sp.csr_matrix(dyadic(rng, (30, 40), 0.3))
    idx, sc = beam_search(X, levels, k, beam_size=beam, post_processor=name)
    ref_i, ref_s = python_beam(X, parents, weights, 1.0, name, k, beam)
    np.testing.assert_array_equal(idx, ref_i)
    np.testing.assert_allclose(sc, ref_s, rtol=1e-6, atol=0)


@pytest.mark.parametrize("name", ["l3-hinge", "sigmoid"])
@pytest.mark.parametrize("beam,k", [(1, 3), (2, 5)])
def test_ranker_label_score_equals_python_reference_and_differs_from_the_product(name, beam, k):
    rng = np.random.default_rng(2)
    parents, weights, levels = random_model(rng)
    X = sp.csr_matrix(dyadic(rng, (30, 40), 0.3))
    idx, sc = beam_search(X, levels, k, beam_size=beam, post_processor=name, label_score="ranker")
    ref_i, ref_s = python_beam(X, parents, weights, 1.0, name, k, beam, label_score="ranker")
    np.testing.assert_array_equal(idx, ref_i)
    np.testing.assert_allclose(sc, ref_s, rtol=1e-6, atol=0)
    product = beam_search(X, levels, k, beam_size=beam, post_processor=name)
    assert not np.array_equal(product[1], sc)
    # the same candidates (the beam's clusters' labels), only ordered by their own score
    ranked = beam_search(X, levels, 25, beam_size=beam, post_processor=name, label_score="ranker")[0]
    assert all(set(r[r >= 0]) == set(q[q >= 0]) for r, q in zip(ranked, beam_search(X, levels, 25, beam_size=beam,
                                                                                        post_processor=name)[0]))


def test_ranker_label_score_by_hand():
    # root -> clusters {0, 1}; labels 0, 1 under cluster 0 and label 2 under cluster 1; one feature, bias 0
    W0 = sp.csc_matrix(np.array([[2.0, 0.0], [0.0, 0.0]], dtype=np.float32))        # s(c0) = 2, s(c1) = 0
    W1 = sp.csc_matrix(np.array([[0.5, -0.5, 3.0], [0.0, 0.0, 0.0]], dtype=np.float32))  # s = 0.5, -0.5, 3
    levels = [BeamLevel.from_weights(W0, np.zeros(2, int), 1, bias=0.0),
              BeamLevel.from_weights(W1, np.array([0, 0, 1]), 2, bias=0.0)]
    X = sp.csr_matrix(np.array([[1.0]], dtype=np.float32))
    f = lambda s: np.float32(np.exp(-max(0.0, 1.0 - s) ** 3))  # noqa: E731
    # product: label 2 scores f(0) f(3) = 0.37 < label 0's f(2) f(0.5) = 0.88; ranker alone: f(3) = 1 first
    idx, sc = beam_search(X, levels, 3, beam_size=2)
    np.testing.assert_array_equal(idx, [[0, 2, 1]])
    np.testing.assert_allclose(sc, [[f(2) * f(0.5), f(0) * f(3), f(2) * f(-0.5)]], rtol=1e-6)
    idx, sc = beam_search(X, levels, 3, beam_size=2, label_score="ranker")
    np.testing.assert_array_equal(idx, [[2, 0, 1]])
    np.testing.assert_allclose(sc, [[f(3), f(0.5), f(-0.5)]], rtol=1e-6)
    # a beam of one cluster: label 2 is no candidate, whatever its own score
    idx, _ = beam_search(X, levels, 3, beam_size=1, label_score="ranker")
    np.testing.assert_array_equal(idx, [[0, 1, -1]])
    with pytest.raises(ConfigError, match="label_score"):
        beam_search(X, levels, 3, label_score="sum")


def test_ties_go_to_smaller_index_and_rows_are_padded():
    # zero weights: every node scores l3-hinge(0) = exp(-1); children of a parent are not contiguous
    chain_parents = [np.zeros(2, int), np.array([1, 0, 1, 0, 1, 0])]
    levels = [BeamLevel.from_weights(sp.csc_matrix((4, len(p)), dtype=np.float32), p, n)
              for p, n in zip(chain_parents, (1, 2))]
    X = sp.csr_matrix(np.array([[1.0, 0, 2.0], [0, 0, 0]], dtype=np.float32))
    idx, sc = beam_search(X, levels, 4, beam_size=1)
    e = np.float32(np.exp(-1.0))
    np.testing.assert_array_equal(idx, [[1, 3, 5, -1]] * 2)
    np.testing.assert_array_equal(sc, [[e * e, e * e, e * e, 0]] * 2)
    idx, _ = beam_search(X, levels, 6, beam_size=2)
    np.testing.assert_array_equal(idx, [[0, 1, 2, 3, 4, 5]] * 2)


def test_sorted_descending_and_thread_count_does_not_matter():
    rng = np.random.default_rng(3)
    _, _, levels = random_model(rng, d=60, sizes=(4, 16, 60), density=0.2)
    X = sp.csr_matrix(dyadic(rng, (300, 60), 0.2))
    i1, s1 = beam_search(X, levels, 10, beam_size=3, n_threads=1)
    i2, s2 = beam_search(X, levels, 10, beam_size=3, n_threads=2)
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_array_equal(s1, s2)
    assert np.all(s1[:, :-1] >= s1[:, 1:])
    tie = (s1[:, :-1] == s1[:, 1:]) & (i1[:, 1:] >= 0)
    assert np.any(tie) and np.any(i1 == -1)  # both situations occur in this problem
    assert np.all(i1[:, :-1][tie] < i1[:, 1:][tie])
    one_i, one_s = beam_search(X[5:6], levels, 10, beam_size=3)  # serial single-row path
    np.testing.assert_array_equal(one_i[0], i1[5])
    np.testing.assert_array_equal(one_s[0], s1[5])


def test_layout_round_trips_weights():
    rng = np.random.default_rng(4)
    parents, weights, levels = random_model(rng)
    for p, W, lv in zip(parents, weights, levels):
        back = lv.to_weights()
        assert back.has_sorted_indices and back.dtype == np.float32
        assert (back != W).nnz == 0
        np.testing.assert_array_equal(lv.parent_of, p)


def test_unsorted_duplicate_and_float64_input_is_canonicalised():
    rng = np.random.default_rng(5)
    parents, weights, levels = random_model(rng)
    X = sp.csr_matrix(dyadic(rng, (20, 40), 0.3))
    want = beam_search(X, levels, 5, beam_size=2)
    coo = X.tocoo()
    half = coo.data / 2  # each entry split in two, rows reversed: unsorted with duplicates
    order = np.arange(coo.nnz)[::-1]
    messy = sp.csr_matrix((np.concatenate([half, half])[np.r_[order, order]].astype(np.float64),
                           (np.r_[coo.row[order], coo.row[order]], np.r_[coo.col[order], coo.col[order]])),
                          shape=X.shape)
    got = beam_search(messy, levels, 5, beam_size=2)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert prepare_features(X, 40) is X  # already canonical: no copy


def test_bad_arguments():
    rng = np.random.default_rng(6)
    _, _, levels = random_model(rng)
    X = sp.csr_matrix(dyadic(rng, (3, 40), 0.3))
    with pytest.raises(ConfigError, match="post_processor"):
        beam_search(X, levels, 5, post_processor="softmax")
    with pytest.raises(ConfigError, match="expects 40"):
        beam_search(X[:, :30], levels, 5)
    with pytest.raises(ConfigError, match="k must be"):
        beam_search(X, levels, 0)
    with pytest.raises(ConfigError, match="beam_size"):
        beam_search(X, levels, 5, beam_size=0)


def test_topk_to_csr():
    idx = np.array([[4, 1, -1], [-1, -1, -1], [0, 2, 3]], dtype=np.int32)
    sc = np.array([[0.9, 0.5, 0], [0, 0, 0], [0.3, 0.2, 0.1]], dtype=np.float32)
    M = topk_to_csr(idx, sc, 5)
    assert M.shape == (3, 5) and M.dtype == np.float32 and M.has_sorted_indices
    want = np.array([[0, 0.5, 0, 0, 0.9], [0] * 5, [0.3, 0, 0.2, 0.1, 0]], dtype=np.float32)
    np.testing.assert_array_equal(M.toarray(), want)


def test_topk_to_csr_with_more_rows_than_columns_of_the_top_k():
    """A (n, k) top-k with n != k: one csr row per text (the row pointer is sized by the texts, not by k)."""
    idx = np.array([[2, -1], [-1, -1], [1, 0], [3, -1]], dtype=np.int32)
    sc = np.array([[0.7, 0], [0, 0], [0.4, 0.2], [0.1, 0]], dtype=np.float32)
    M = topk_to_csr(idx, sc, 4)
    assert M.shape == (4, 4) and M.indptr.tolist() == [0, 1, 1, 3, 4]
    np.testing.assert_array_equal(M.toarray(), np.array([[0, 0, 0.7, 0], [0] * 4, [0.2, 0.4, 0, 0], [0, 0, 0, 0.1]],
                                                        dtype=np.float32))
