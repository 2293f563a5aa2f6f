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


class _Member:
    """A fitted-model stand-in: fixed top-k lists over its own label vocabulary."""

    def __init__(self, names, idx, sc, counts=None, n_train=10, display=None, uris=None):
        from xmtc.data import LabelVocab

        self.labels_ = LabelVocab(names, display=display, uris=uris)
        self.idx, self.sc = np.array(idx), np.array(sc, dtype=np.float32)
        self.label_counts_ = np.ones(len(names), dtype=np.int64) if counts is None else np.array(counts)
        self.n_train_ = n_train

    def predict_topk(self, X, k, progress=False):
        return self.idx[:, :k], self.sc[:, :k]


def _members():
    # A knows a, b, c; B knows b, c, d (its own ids 0, 1, 2). Union: a b c d -> 0 1 2 3.
    A = _Member(["a", "b", "c"], [[0, 2, 1]], [[0.75, 0.5, 0.25]], counts=[5, 3, 1], n_train=10,
                display=["Alpha", "", ""])
    B = _Member(["b", "c", "d"], [[2, 0, -1]], [[0.875, 0.5, 0.0]], counts=[4, 2, 8], n_train=20,
                display=["Beta", "Gamma", "Delta"], uris=["u:b", "u:c", "u:d"])
    return A, B


def test_ensemble_over_the_union_of_labels_by_hand():
    from xmtc.models.ensemble import Ensemble

    A, B = _members()
    sig = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    # A: a .75, c .5, b .25 (ranks 1, 2, 3); B: d .875, b .5 (ranks 1, 2), c known but not listed.
    # average / sigmoid-average: a label is averaged over the members that know it (a: A only, d: B only);
    # c is known to B, so B's 0 counts. rank-average: a member lacking a label gives it 0, mean over both.
    expect = {
        "average": {0: 0.75, 1: (0.25 + 0.5) / 2, 2: 0.5 / 2, 3: 0.875},
        "sigmoid-average": {0: sig(0.75), 1: (sig(0.25) + sig(0.5)) / 2, 2: sig(0.5) / 2, 3: sig(0.875)},
        "rank-average": {0: 1 / 2, 1: (1 / 3 + 1 / 2) / 2, 2: (1 / 2) / 2, 3: 1 / 2},
    }
    for combine, scores in expect.items():
        ens = Ensemble([A, B], combine=combine, k_each=3)
        idx, sc = ens.predict_topk(["x"], 4)
        order = sorted(scores, key=lambda j: (-scores[j], j))
        assert idx[0].tolist() == order, combine
        np.testing.assert_allclose(sc[0], [scores[j] for j in order], rtol=1e-6, err_msg=combine)
    # weights 3 : 1, renormalised per label for average: b .75*.25 + .25*.5, c .75*.5 + .25*0
    idx, sc = Ensemble([A, B], weights=[3, 1], k_each=3).predict_topk(["x"], 4)
    assert idx[0].tolist() == [3, 0, 2, 1]
    np.testing.assert_allclose(sc[0], [0.875, 0.75, 0.375, 0.3125], rtol=1e-6)
    # names and counts of the union
    ens = Ensemble([A, B])
    assert ens.labels_.names == ["a", "b", "c", "d"]
    assert ens.labels_.display == ["Alpha", "Beta", "Gamma", "Delta"]
    assert ens.labels_.uris == ["", "u:b", "u:c", "u:d"] and ens.labels_.texts is None
    assert [ens.labels_.uri(j) for j in range(4)] == ["a", "u:b", "u:c", "u:d"]
    # a's count from A; b, c from A (the first that knows them); d from B rescaled to A's 10 documents
    np.testing.assert_allclose(ens.label_counts_, [5, 3, 1, 4])
    assert ens.n_train_ == 10
    assert ens.predict(["x"], 2) == [[("d", 0.875), ("a", 0.75)]]


def test_ensemble_of_members_with_one_vocabulary_is_unchanged():
    """Identical label vocabularies: exactly the plain weighted mean of the members' lists."""
    from xmtc.models.ensemble import Ensemble, average_topk, transform_scores

    names = ["l0", "l1", "l2", "l3", "l4", "l5"]
    A = _Member(names, IDX_A, SC_A, counts=[1, 2, 3, 4, 5, 6])
    B = _Member(names, IDX_B, SC_B)
    for combine in ("average", "rank-average", "sigmoid-average"):
        for weights in (None, [0.3, 0.1]):
            ens = Ensemble([A, B], combine=combine, weights=weights, k_each=3)
            assert ens.labels_ is A.labels_ and ens.label_counts_ is A.label_counts_
            got = ens.predict_topk(["x"] * 3, 3)
            want = average_topk([(IDX_A, transform_scores(IDX_A, SC_A, combine)),
                                 (IDX_B, transform_scores(IDX_B, SC_B, combine))], 6, 3, weights)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
    # the same labels in another order: the same ranking by name
    perm = [3, 5, 0, 1, 4, 2]  # B2's label j is names[perm[j]]
    inv = np.argsort(perm)
    B2 = _Member([names[p] for p in perm], np.where(IDX_B >= 0, inv[np.where(IDX_B >= 0, IDX_B, 0)], -1), SC_B)
    for combine in ("average", "rank-average"):
        a = Ensemble([A, B], combine=combine, k_each=3).predict(["x"] * 3, 3)
        b = Ensemble([A, B2], combine=combine, k_each=3).predict(["x"] * 3, 3)
        assert a == b


def test_average_topk_known_masks():
    """B lacks label 5: its mean is A's score alone; labels both know are averaged as before."""
    known = [np.ones(6, bool), np.array([1, 1, 1, 1, 1, 0], bool)]
    idx, sc = average_topk([(IDX_A, SC_A), (IDX_B, SC_B)], 6, 3, known=known)
    np.testing.assert_array_equal(idx, [[2, 0, 1], [4, 1, 3], [5, 3, -1]])
    np.testing.assert_allclose(sc, [[0.6875, 0.5, 0.25], [0.625, 0.25, 0.1875], [1.0, 0.5, 0.0]], rtol=1e-7)
    with pytest.raises(ValueError, match="mask"):
        average_topk([(IDX_A, SC_A), (IDX_B, SC_B)], 6, 3, known=known[:1])


def test_cli_ensemble_of_models_with_different_labels(tmp_path, capsys):
    """`xmtc ensemble` over members trained on different label sets: predicts and evaluates the union."""
    import json

    import xmtc
    from xmtc.cli import main

    rng = np.random.default_rng(0)
    words = {"rail": "trains", "bird": "owls", "fish": "salmon", "boat": "ships"}

    def docs(names, n):
        out = []
        for _ in range(n):
            labels = sorted(set(rng.choice(names, size=2)))
            out.append((labels, " ".join(words[x] for x in labels) + " " + " ".join(rng.choice(list("abc"), 3))))
        return out

    a = docs(["rail", "bird", "fish"], 60)
    b = docs(["bird", "fish", "boat"], 60)
    for name, data in (("a", a), ("b", b)):
        xmtc.XRLinear(n_threads=1).fit([t for _, t in data], [y for y, _ in data]).save(tmp_path / name)
    test = docs(["rail", "bird", "fish", "boat"], 20)
    (tmp_path / "test.tsv").write_text("".join(",".join(y) + "\t" + t + "\n" for y, t in test))
    args = ["ensemble", str(tmp_path / "a"), str(tmp_path / "b"), "--input", str(tmp_path / "test.tsv"), "-q"]
    assert main(args + ["--evaluate", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["P@1"] > 80
    assert main(args + ["-k", "4"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 20 and {x for r in rows for x in r["labels"]} == set(words)
