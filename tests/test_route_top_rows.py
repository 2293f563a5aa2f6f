"""The label-text route's per-text top-k (xmtc/models/route_kernels.py): the bounded heap gives exactly the lists
a full product and a stable sort give -- the same rows, the same order (ties to the lower row), the same float32
sums, -1 / 0 where fewer than k rows have a positive product."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from xmtc.models.route_kernels import inverted, top_rows


def _reference(X: sp.csr_matrix, M: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Full products summed as the kernel sums them (float32, in the text's sorted n-gram order), then a stable
    argsort of the negated products: ties keep the lower row first."""
    X = sp.csr_matrix(X, dtype=np.float32)
    X.sort_indices()
    T = np.asarray(sp.csr_matrix(M, dtype=np.float32).T.toarray(), dtype=np.float32)
    pos = np.full((X.shape[0], k), -1, dtype=np.int64)
    val = np.zeros((X.shape[0], k), dtype=np.float32)
    for i in range(X.shape[0]):
        s = np.zeros(M.shape[0], dtype=np.float32)
        for j, v in zip(X.indices[X.indptr[i]:X.indptr[i + 1]], X.data[X.indptr[i]:X.indptr[i + 1]]):
            s = s + np.float32(v) * T[j]
        order = np.argsort(-s, kind="stable")
        best = order[s[order] > 0][:k]
        pos[i, :len(best)] = best
        val[i, :len(best)] = s[best]
    return pos, val


def _inputs(seed: int, n_texts: int, n_rows: int, n_cols: int, density: float, levels: int | None):
    """Random non-negative texts and label rows; with ``levels`` the values are a few small dyadic numbers and a
    third of the label rows repeat others, so equal products (ties) are everywhere; some texts are empty, some
    hit no label (a column no label holds)."""
    rng = np.random.default_rng(seed)

    def draw(n, m, d):
        A = sp.random(n, m, density=d, format="csr", random_state=rng, dtype=np.float32)
        if levels:
            A.data = (rng.integers(1, levels + 1, A.nnz) / 4).astype(np.float32)
        return A

    M = draw(n_rows, n_cols - 1, density)
    if levels:
        M = sp.vstack([M, M[rng.choice(n_rows, n_rows // 3)]])
    M = sp.csr_matrix(sp.hstack([M, sp.csr_matrix((M.shape[0], 1), dtype=np.float32)]))  # last column: no label
    X = draw(n_texts, n_cols, density).tolil()
    X[1, :] = 0  # empty text
    X[2, :] = 0
    X[2, n_cols - 1] = 1.0  # only an n-gram no label holds
    return sp.csr_matrix(X, dtype=np.float32), sp.csr_matrix(M[rng.permutation(M.shape[0])], dtype=np.float32)


@pytest.mark.parametrize("seed,n_rows,n_cols,density,levels", [
    (0, 300, 40, 0.15, 3),    # many ties
    (1, 500, 60, 0.08, None),  # continuous values
    (2, 40, 25, 0.2, 2),      # few rows: k beyond the candidates
    (3, 1200, 30, 0.3, 4),    # many candidates per text
])
@pytest.mark.parametrize("k", [1, 2, 5, 17, 100, 1000])
def test_top_rows_equal_a_full_product_and_a_stable_sort(seed, n_rows, n_cols, density, levels, k):
    X, M = _inputs(seed, 60, n_rows, n_cols, density, levels)
    ref_pos, ref_val = _reference(X, M, k)
    index = inverted(M)
    pos, val = top_rows(X, index, M.shape[0], k)
    assert pos.dtype == np.int64 and val.dtype == np.float32 and pos.shape == (X.shape[0], k)
    assert np.array_equal(pos, ref_pos)
    assert np.array_equal(val.view(np.int32), ref_val.view(np.int32))  # bit for bit
    assert (pos[1] == -1).all() and (pos[2] == -1).all()  # the empty text and the one that hits no label
    # the CSR arrays give the same, and one text at a time the same as the batch
    pos2, val2 = top_rows((X.indptr, X.indices, X.data), index, M.shape[0], k)
    assert np.array_equal(pos2, pos) and np.array_equal(val2, val)
    for i in range(0, X.shape[0], 7):
        p1, v1 = top_rows(X[i], index, M.shape[0], k)
        assert np.array_equal(p1[0], pos[i]) and np.array_equal(v1[0], val[i])


def test_top_rows_ties_go_to_the_lower_row_whatever_the_order_rows_are_met():
    # one text, 50 label rows with the same product, met in the postings' order of several n-grams
    n = 50
    M = sp.csr_matrix(np.ones((n, 3), dtype=np.float32))
    X = sp.csr_matrix(np.array([[1.0, 1.0, 1.0]], dtype=np.float32))
    for k in (1, 7, 50, 60):
        pos, val = top_rows(X, inverted(M), n, k)
        m = min(k, n)
        assert pos[0].tolist() == list(range(m)) + [-1] * (k - m)
        assert (val[0, :m] == 3.0).all() and (val[0, m:] == 0).all()
    # rows whose first touch comes late in the scan (a later n-gram) but tie with earlier ones
    M = sp.csr_matrix(np.array([[0, 0, 2], [1, 1, 0], [0, 2, 0], [2, 0, 0], [0, 0, 2]], dtype=np.float32))
    pos, val = top_rows(X, inverted(M), 5, 3)
    assert pos[0].tolist() == [0, 1, 2] and val[0].tolist() == [2.0, 2.0, 2.0]
    pos, val = top_rows(X, inverted(M), 5, 5)
    assert pos[0].tolist() == [0, 1, 2, 3, 4]


def test_top_rows_edge_shapes():
    X, M = _inputs(5, 10, 30, 12, 0.3, 2)
    index = inverted(M)
    pos, val = top_rows(X, index, M.shape[0], 0)
    assert pos.shape == (10, 0) and val.shape == (10, 0)
    pos, val = top_rows(X[:0], index, M.shape[0], 5)
    assert pos.shape == (0, 5)
    empty = inverted(sp.csr_matrix((0, 12), dtype=np.float32))
    pos, val = top_rows(X, empty, 0, 4)
    assert (pos == -1).all() and (val == 0).all()
