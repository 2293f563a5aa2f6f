"""xmtc.models.ensemble: top-k lists <-> sparse score rows, and averaging members' top-k lists."""

import numpy as np
import pytest
import scipy.sparse as sp

from xmtc.models.ensemble import average_topk, csr_topk, topk_matrix

# two members' top-3 lists over 6 labels for 3 documents (-1 pads a short list; its score is ignored)
IDX_A = np.array([[0, 2, -1], [1, 3, 4], [5, -1, -1]])
SC_A = np.array([[0.75, 0.5, 9.0], [0.5, 0.375, 0.25], [1.0, 0.0, 0.0]], dtype=np.float32)
IDX_B = np.array([[2, 1, 0], [4, -1, -1], [3, -1, -1]])
SC_B = np.array([[0.875, 0.5, 0.25], [1.0, -7.0, 0.0], [1.0, 0.0, 0.0]], dtype=np.float32)


def test_topk_matrix_places_scores_and_drops_padding():
    M = topk_matrix(IDX_A, SC_A, 6)
    assert sp.isspmatrix_csr(M) and M.dtype == np.float32 and M.shape == (3, 6)
    np.testing.assert_array_equal(M.toarray(), [[0.75, 0, 0.5, 0, 0, 0],
                                                [0, 0.5, 0, 0.375, 0.25, 0],
                                                [0, 0, 0, 0, 0, 1.0]])
    assert M.nnz == 6  # the padding's scores (9.0) never enter
    # duplicates within a row are summed
    D = topk_matrix(np.array([[3, 1, 3]]), np.array([[0.5, 0.25, 0.125]]), 4)
    np.testing.assert_array_equal(D.toarray(), [[0, 0.25, 0, 0.625]])
    assert D.nnz == 2
    # all padding -> empty rows
    assert topk_matrix(np.full((2, 3), -1), np.ones((2, 3)), 5).nnz == 0


def test_csr_topk_orders_by_score_then_label():
    M = sp.csr_matrix(np.array([[0.1, 0.5, 0.0, 0.5, 0.9, 0.5],
                                [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                                [0.0, -1.0, 0.0, 0.0, 2.0, 0.0]], dtype=np.float32))
    idx, sc = csr_topk(M, 4)
    assert idx.dtype == np.int32 and sc.dtype == np.float32 and idx.shape == sc.shape == (3, 4)
    # ties at 0.5 go to the smaller label index: 1, 3, then 5
    np.testing.assert_array_equal(idx, [[4, 1, 3, 5], [-1, -1, -1, -1], [4, 1, -1, -1]])
    np.testing.assert_array_equal(sc, np.array([[0.9, 0.5, 0.5, 0.5], [0, 0, 0, 0], [2.0, -1.0, 0, 0]],
                                               dtype=np.float32))
    idx, sc = csr_topk(M, 2)
    np.testing.assert_array_equal(idx, [[4, 1], [-1, -1], [4, 1]])
    # the order of the stored entries does not matter (unsorted indices, ties reversed in storage)
    U = sp.csr_matrix((np.array([0.5, 0.5, 0.9, 0.5], np.float32), np.array([5, 3, 4, 1]), np.array([0, 4])),
                      shape=(1, 6))
    assert not U.has_sorted_indices
    np.testing.assert_array_equal(csr_topk(U, 3)[0], [[4, 1, 3]])
    # k = 0 and zero rows
    assert csr_topk(M, 0)[0].shape == (3, 0)
    assert csr_topk(sp.csr_matrix((0, 6)), 3)[0].shape == (0, 3)


def test_csr_topk_matches_a_lexicographic_reference_on_long_rows():
    """Many ties in long rows: a plain (unstable) sort by score would mix the label order up."""
    rng = np.random.default_rng(0)
    dense = rng.choice([0.0, 0.25, 0.5, 0.75], size=(20, 300), p=[0.4, 0.2, 0.2, 0.2]).astype(np.float32)
    M = sp.csr_matrix(dense)
    k = 50
    idx, sc = csr_topk(M, k)
    for i in range(dense.shape[0]):
        cols = np.flatnonzero(dense[i])
        ref = cols[np.lexsort((cols, -dense[i, cols]))][:k]
        np.testing.assert_array_equal(idx[i, :ref.size], ref)
        np.testing.assert_array_equal(sc[i, :ref.size], dense[i, ref])
        assert np.all(idx[i, ref.size:] == -1)


def test_csr_topk_sums_duplicate_entries():
    """A csr with duplicate (row, column) entries means their sum, as everywhere in scipy."""
    data = np.array([1.0, 2.0, 1.5], np.float32)
    D = sp.csr_matrix((data, np.array([3, 1, 3]), np.array([0, 3])), shape=(1, 5))
    assert not D.has_canonical_format
    idx, sc = csr_topk(D, 3)
    np.testing.assert_array_equal(idx, [[3, 1, -1]])
    np.testing.assert_array_equal(sc, [[2.5, 2.0, 0.0]])
    np.testing.assert_array_equal(D.data, data)  # the caller's matrix is left alone
    assert D.nnz == 3


def test_csr_topk_accepts_other_sparse_formats():
    M = sp.coo_matrix(([0.25, 0.75], ([0, 1], [2, 0])), shape=(2, 3))
    idx, sc = csr_topk(M, 2)
    np.testing.assert_array_equal(idx, [[2, -1], [0, -1]])
    np.testing.assert_array_equal(sc, [[0.25, 0], [0.75, 0]])


def test_average_topk_by_hand():
    idx, sc = average_topk([(IDX_A, SC_A), (IDX_B, SC_B)], 6, 3)
    # doc 0: label 0 (0.75+0.25)/2 = 0.5, label 2 (0.5+0.875)/2 = 0.6875, label 1 (0+0.5)/2 = 0.25
    # doc 1: label 4 (0.25+1)/2 = 0.625, label 1 0.5/2, label 3 0.375/2 (missing from B: counts 0)
    # doc 2: labels 3 and 5 tie at 0.5 -> smaller index first, then -1 padding with score 0
    np.testing.assert_array_equal(idx, [[2, 0, 1], [4, 1, 3], [3, 5, -1]])
    np.testing.assert_allclose(sc, [[0.6875, 0.5, 0.25], [0.625, 0.25, 0.1875], [0.5, 0.5, 0.0]], rtol=1e-7)
    assert idx.dtype == np.int32 and sc.dtype == np.float32
    # k below the number of candidates keeps the best; k above pads
    idx2, _ = average_topk([(IDX_A, SC_A), (IDX_B, SC_B)], 6, 1)
    np.testing.assert_array_equal(idx2, [[2], [4], [3]])
    idx5, sc5 = average_topk([(IDX_A, SC_A), (IDX_B, SC_B)], 6, 5)
    np.testing.assert_array_equal(idx5[2], [3, 5, -1, -1, -1])
    np.testing.assert_array_equal(sc5[2, 2:], 0)


def test_average_topk_weights():
    # weights 3 : 1 -> 0.75 * A + 0.25 * B
    idx, sc = average_topk([(IDX_A, SC_A), (IDX_B, SC_B)], 6, 3, weights=[3.0, 1.0])
    np.testing.assert_array_equal(idx, [[0, 2, 1], [4, 1, 3], [5, 3, -1]])
    np.testing.assert_allclose(sc, [[0.625, 0.59375, 0.125], [0.4375, 0.375, 0.28125], [0.75, 0.25, 0]],
                               rtol=1e-7)
    # only ratios matter
    idx2, sc2 = average_topk([(IDX_A, SC_A), (IDX_B, SC_B)], 6, 3, weights=[0.3, 0.1])
    np.testing.assert_array_equal(idx2, idx)
    np.testing.assert_allclose(sc2, sc, rtol=1e-6)


def test_average_of_one_member_is_that_member():
    idx, sc = average_topk([(IDX_B, SC_B)], 6, 3)
    np.testing.assert_array_equal(idx, IDX_B)
    np.testing.assert_array_equal(sc, np.where(IDX_B >= 0, SC_B, 0))


def test_average_topk_bad_weights():
    parts = [(IDX_A, SC_A), (IDX_B, SC_B)]
    with pytest.raises(ValueError, match="weights"):
        average_topk(parts, 6, 3, weights=[1.0])  # would silently drop a member
    with pytest.raises(ValueError, match="weights"):
        average_topk(parts, 6, 3, weights=[1.0, -1.0])
    with pytest.raises(ValueError, match="member"):
        average_topk([], 6, 3)
