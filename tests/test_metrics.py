"""xmtc.metrics against hand-computed values and against a plain per-document loop."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

from xmtc.errors import ConfigError, DataFormatError
from xmtc.metrics import evaluate, hits_matrix, inverse_propensity

# -- a problem small enough to score by hand ---------------------------------------------------------
# 3 documents, 5 labels.
#   doc 0: true {0, 2}   predicted [2, 1, 0]    hits [1, 0, 1]
#   doc 1: true {1, 4}   predicted [4, -1, -1]  hits [1, 0, 0]   (-1: padding, never a hit)
#   doc 2: true {}       predicted [0, 1, 2]    hits [0, 0, 0]   (no true labels: scores 0, still counts)
# Label 4 occurs only in test: the training counts below cover labels 0..3 only.
Y_HAND = sp.csr_matrix(np.array([[1, 0, 1, 0, 0],
                                 [0, 1, 0, 0, 1],
                                 [0, 0, 0, 0, 0]], dtype=np.float32))
PRED_HAND = np.array([[2, 1, 0],
                      [4, -1, -1],
                      [0, 1, 2]])
TRAIN_COUNTS = [3, 1, 7, 0]      # N_l for labels 0..3; label 4 (test only) counts as 0
N_TRAIN = 100

L3 = math.log2(3)                # rank 2 discount is 1/log2(3); rank 1: 1/log2(2) = 1; rank 3: 1/log2(4) = 1/2

HAND = {
    # P@k = hits in top k, summed over docs, / (k * 3)
    "P@1": Fraction(1 + 1 + 0, 1 * 3),          # 2/3
    "P@2": Fraction(1 + 1 + 0, 2 * 3),          # 1/3
    "P@3": Fraction(2 + 1 + 0, 3 * 3),          # 1/3
    # R@k = mean over docs of hits / |true|, doc 2 scores 0
    "R@1": (Fraction(1, 2) + Fraction(1, 2) + 0) / 3,     # 1/3
    "R@2": (Fraction(1, 2) + Fraction(1, 2) + 0) / 3,     # 1/3
    "R@3": (Fraction(2, 2) + Fraction(1, 2) + 0) / 3,     # 1/2
    # nDCG@k: doc 0 DCG@1 = 1, @2 = 1, @3 = 1 + 1/2; doc 1 DCG = 1 throughout
    #         ideal with 2 true labels: @1 = 1, @2 and @3 = 1 + 1/log2(3)
    "nDCG@1": (1 / 1 + 1 / 1 + 0) / 3,                    # 2/3
    "nDCG@2": (1 / (1 + 1 / L3) + 1 / (1 + 1 / L3) + 0) / 3,
    "nDCG@3": (1.5 / (1 + 1 / L3) + 1 / (1 + 1 / L3) + 0) / 3,
    # coverage@k: labels in the test set {0, 1, 2, 4} = 4; hit at least once in a top k:
    "coverage@1": Fraction(2, 4),                         # {2, 4}
    "coverage@2": Fraction(2, 4),                         # {2, 4}
    "coverage@3": Fraction(3, 4),                         # {2, 4, 0}
}


def _psp_hand(w):
    """PSP@k from the inverse propensities w[0..4], written out for the hand problem.

    gained: doc 0 hits label 2 at rank 1 and label 0 at rank 3; doc 1 hits label 4 at rank 1.
    best:   doc 0's true labels {0, 2}, doc 1's {1, 4}, each in descending weight order
            (w0 > w2 since N_0 = 3 < N_2 = 7; w4 > w1 since N_4 = 0 < N_1 = 1).
    """
    assert w[0] > w[2] and w[4] > w[1]
    return {"PSP@1": (w[2] + w[4]) / (w[0] + w[4]),
            "PSP@2": (w[2] + w[4]) / (w[0] + w[2] + w[4] + w[1]),
            "PSP@3": (w[2] + w[0] + w[4]) / (w[0] + w[2] + w[4] + w[1])}


def _pct(d):
    return {k: pytest.approx(100.0 * float(v), rel=1e-12, abs=1e-12) for k, v in d.items()}


def test_hand_precision_recall_ndcg_coverage():
    out = evaluate(Y_HAND, PRED_HAND, ks=(1, 2, 3), coverage=True)
    assert list(out) == ["P@1", "P@2", "P@3", "R@1", "R@2", "R@3", "nDCG@1", "nDCG@2", "nDCG@3",
                         "coverage@1", "coverage@2", "coverage@3"]
    assert out == _pct(HAND)
    assert out["P@1"] == pytest.approx(200 / 3) and out["R@3"] == pytest.approx(50.0)


def test_hand_psp_with_a1_b1():
    # A = 1, B = 1: C = (ln 100 - 1) * (1 + 1)^1 = 2 (ln 100 - 1) = 7.21034037...,
    # w_l = 1 + C (N_l + 1)^-1: N = 3, 1, 7, 0, and 0 for the test-only label 4
    C = 2 * (math.log(100) - 1)
    assert C == pytest.approx(7.2103403719761836)
    w = [1 + C / 4, 1 + C / 2, 1 + C / 8, 1 + C / 1, 1 + C / 1]
    assert inverse_propensity([3, 1, 7, 0, 0], N_TRAIN, a=1.0, b=1.0) == pytest.approx(w, rel=1e-12)
    out = evaluate(Y_HAND, PRED_HAND, ks=(1, 2, 3), train_label_counts=TRAIN_COUNTS, n_train=N_TRAIN,
                   propensity_a=1.0, propensity_b=1.0)
    assert list(out)[-3:] == ["PSP@1", "PSP@2", "PSP@3"]
    assert {k: out[k] for k in ("PSP@1", "PSP@2", "PSP@3")} == _pct(_psp_hand(w))
    # the other metrics do not depend on the propensities
    assert {k: out[k] for k in HAND if not k.startswith("cov")} == _pct(
        {k: v for k, v in HAND.items() if not k.startswith("cov")})


def test_hand_psp_defaults_and_amazon_constants():
    for a, b, kwargs in ((0.55, 1.5, {}), (0.6, 2.6, {"propensity_a": 0.6, "propensity_b": 2.6})):
        C = (math.log(100) - 1) * (b + 1) ** a
        w = [1 + C * (n + b) ** -a for n in (3, 1, 7, 0, 0)]
        out = evaluate(Y_HAND, PRED_HAND, ks=(1, 2, 3), train_label_counts=TRAIN_COUNTS,
                       n_train=N_TRAIN, **kwargs)
        assert {k: out[k] for k in ("PSP@1", "PSP@2", "PSP@3")} == _pct(_psp_hand(w))
    # default constants give different numbers from A = B = 1 (the arguments are really used)
    d = evaluate(Y_HAND, PRED_HAND, ks=(1,), train_label_counts=TRAIN_COUNTS, n_train=N_TRAIN)
    o = evaluate(Y_HAND, PRED_HAND, ks=(1,), train_label_counts=TRAIN_COUNTS, n_train=N_TRAIN,
                 propensity_a=1.0, propensity_b=1.0)
    assert abs(d["PSP@1"] - o["PSP@1"]) > 1e-3


def test_inverse_propensity_literal():
    # A = 0.55, B = 1.5, N = 1000, N_l = 0:
    #   C = (ln 1000 - 1) * 2.5^0.55 = 5.907755 * 1.655263 = 9.778889
    #   w = 1 + C * 1.5^-0.55 = 1 + 9.778889 * 0.800110 = 8.824189
    C = (math.log(1000) - 1) * 2.5 ** 0.55
    assert C == pytest.approx(9.778889, abs=1e-6)
    assert inverse_propensity([0], 1000)[0] == pytest.approx(1 + C * 1.5 ** -0.55, rel=1e-12)
    assert inverse_propensity([0], 1000)[0] == pytest.approx(8.824189, abs=1e-6)
    w = inverse_propensity([0, 1, 10, 1000], 1000)
    assert np.all(np.diff(w) < 0) and np.all(w > 1)         # rarer labels weigh more
    with pytest.raises(ConfigError, match="n_train"):
        inverse_propensity([1], 0)


def test_ks_unsorted_and_duplicated():
    out = evaluate(Y_HAND, PRED_HAND, ks=[3, 1, 3, 2], coverage=True, train_label_counts=TRAIN_COUNTS,
                   n_train=N_TRAIN)
    ref = evaluate(Y_HAND, PRED_HAND, ks=(1, 2, 3), coverage=True, train_label_counts=TRAIN_COUNTS,
                   n_train=N_TRAIN)
    assert list(out) == list(ref) and out == ref
    assert list(out)[:3] == ["P@1", "P@2", "P@3"]
    assert list(evaluate(Y_HAND, PRED_HAND, ks=(np.int64(2),))) == ["P@2", "R@2", "nDCG@2"]


def test_scores_ignored_and_extra_columns_and_label_values():
    scores = np.array([[0.1, 0.9, 0.5], [1.0, 0.0, 0.0], [3.0, 2.0, 1.0]])
    ref = evaluate(Y_HAND, PRED_HAND, ks=(1, 2))
    assert evaluate(Y_HAND, (PRED_HAND, scores), ks=(1, 2)) == ref
    assert evaluate(Y_HAND, PRED_HAND.tolist(), ks=(1, 2)) == ref
    wider = np.hstack([PRED_HAND, np.full((3, 2), -1)])
    assert evaluate(Y_HAND, wider, ks=(1, 2)) == ref
    # any non-zero value is a true label; an explicitly stored zero is not
    Y = sp.csr_matrix((np.array([5.0, 2.0, 0.0, 1.0, 1.0]), np.array([0, 2, 3, 1, 4]), np.array([0, 3, 5, 5])),
                      shape=(3, 5))
    assert Y.nnz == 5
    assert evaluate(Y, PRED_HAND, ks=(1, 2)) == ref
    assert evaluate(sp.csc_matrix(Y_HAND), PRED_HAND, ks=(1, 2)) == ref


def test_all_padding_and_no_true_labels():
    Y = sp.csr_matrix((2, 4), dtype=np.float32)
    out = evaluate(Y, np.full((2, 3), -1), ks=(1, 3), coverage=True, train_label_counts=[1, 1, 1, 1],
                   n_train=10)
    assert out == {k: 0.0 for k in out} and len(out) == 10


def test_psp_training_counts_longer_than_label_space():
    # counts beyond the test's label columns are ignored
    a = evaluate(Y_HAND, PRED_HAND, ks=(1, 3), train_label_counts=TRAIN_COUNTS + [0, 50, 60], n_train=N_TRAIN)
    b = evaluate(Y_HAND, PRED_HAND, ks=(1, 3), train_label_counts=TRAIN_COUNTS + [0], n_train=N_TRAIN)
    assert a == b


def test_hits_matrix_hand():
    expected = [[True, False, True], [True, False, False], [False, False, False]]
    assert hits_matrix(Y_HAND, PRED_HAND).tolist() == expected
    # -1 right after a row whose last column is a true label is still not a hit
    Y = sp.csr_matrix(np.array([[0, 0, 1], [1, 0, 0]], dtype=np.float32))
    assert hits_matrix(Y, np.array([[2, -1], [-1, 0]])).tolist() == [[True, False], [False, True]]


def test_a_label_listed_twice_is_found_once():
    # doc 0 lists its true label 2 three times: one hit (P@3 = 1/3, not 1); doc 1 repeats a miss
    Y = sp.csr_matrix(np.array([[0, 0, 1], [1, 0, 0]], dtype=np.float32))
    pred = np.array([[2, 2, 2], [1, 0, 1]])
    assert hits_matrix(Y, pred).tolist() == [[True, False, False], [False, True, False]]
    m = evaluate(Y, pred, ks=(3,))
    assert m["P@3"] == pytest.approx(100 * 2 / 6) and m["R@3"] == pytest.approx(100.0)


def test_ranks_past_the_predictions_are_misses():
    """Predictions narrower than k equal the same predictions padded with -1 to k (the definition), for
    every metric; a k of 10**12 allocates nothing k wide and divides P@k by it."""
    counts, n_train = np.array([5, 1, 9, 2, 4]), 20
    padded = np.pad(PRED_HAND, ((0, 0), (0, 4)), constant_values=-1)
    scores = np.linspace(1, 0.1, PRED_HAND.size).reshape(PRED_HAND.shape).astype(np.float32)
    narrow = evaluate(Y_HAND, (PRED_HAND, scores), ks=(1, 5, 7), train_label_counts=counts, n_train=n_train,
                      coverage=True, scores=True)
    wide = evaluate(Y_HAND, (padded, np.pad(scores, ((0, 0), (0, 4)))), ks=(1, 5, 7), train_label_counts=counts,
                    n_train=n_train, coverage=True, scores=True)
    assert narrow.keys() == wide.keys() and all(narrow[k] == pytest.approx(wide[k]) for k in wide)
    huge = evaluate(Y_HAND, PRED_HAND, ks=(3, 10**12))
    assert huge["P@1000000000000"] == pytest.approx(huge["P@3"] * 3 / 10**12)
    assert huge["R@1000000000000"] == pytest.approx(huge["R@3"])
    assert huge["nDCG@1000000000000"] == pytest.approx(evaluate(Y_HAND, padded, ks=(7,))["nDCG@7"])


# -- error paths -------------------------------------------------------------------------------------
def test_errors_shapes_and_types():
    with pytest.raises(DataFormatError, match="sparse matrix"):
        evaluate(Y_HAND.toarray(), PRED_HAND, ks=(1,))
    with pytest.raises(DataFormatError, match=r"predictions have shape \(2, 3\), expected \(3, k\)"):
        evaluate(Y_HAND, PRED_HAND[:2], ks=(1,))
    with pytest.raises(DataFormatError, match="predictions have shape"):
        evaluate(Y_HAND, PRED_HAND[:, 0], ks=(1,))
    with pytest.raises(DataFormatError, match="predictions have shape"):
        evaluate(Y_HAND, PRED_HAND[None], ks=(1,))
    with pytest.raises(DataFormatError, match="integers below 5"):
        evaluate(Y_HAND, np.array([[5], [0], [1]]), ks=(1,))
    with pytest.raises(DataFormatError, match="integers below 5"):
        evaluate(Y_HAND, PRED_HAND.astype(float), ks=(1,))


@pytest.mark.parametrize("ks", [(), [0], (-1, 1), (1.0,), (True,), ("1",), (2, None)])
def test_errors_bad_ks(ks):
    with pytest.raises(ConfigError, match="ks must be positive integers"):
        evaluate(Y_HAND, PRED_HAND, ks=ks)


def test_errors_psp_without_n_train():
    for n_train in (None, 0):
        with pytest.raises(ConfigError, match="PSP@k needs n_train"):
            evaluate(Y_HAND, PRED_HAND, ks=(1,), train_label_counts=TRAIN_COUNTS, n_train=n_train)
    # no counts: no PSP keys at all
    assert not any(k.startswith("PSP") for k in evaluate(Y_HAND, PRED_HAND, n_train=5, ks=(1, 3)))


# -- against a straightforward per-document loop ------------------------------------------------------
def _loop_metrics(true_sets, preds, ks, counts, n_train, a, b, n_labels):
    """Every metric by its textbook definition, one document at a time, in plain Python."""
    n = len(true_sets)
    c = (math.log(n_train) - 1) * (b + 1) ** a
    inv = [1 + c * ((counts[l] if l < len(counts) else 0) + b) ** -a for l in range(n_labels)]
    present = set().union(*true_sets)
    out = {}
    for k in ks:
        p = r = ndcg = psp_num = psp_den = 0.0
        found = set()
        for true, pred in zip(true_sets, preds):
            top = [l for l in pred[:k]]
            hit_flags = [l >= 0 and l in true for l in top]
            hits = sum(hit_flags)
            p += hits / k
            if true:
                r += hits / len(true)
                dcg = sum(1 / math.log2(rank + 2) for rank, h in enumerate(hit_flags) if h)
                idcg = sum(1 / math.log2(rank + 2) for rank in range(min(k, len(true))))
                ndcg += dcg / idcg
            psp_num += sum(inv[l] for l, h in zip(top, hit_flags) if h)
            psp_den += sum(sorted((inv[l] for l in true), reverse=True)[:k])
            found |= {l for l, h in zip(top, hit_flags) if h}
        out[f"P@{k}"] = 100 * p / n
        out[f"R@{k}"] = 100 * r / n
        out[f"nDCG@{k}"] = 100 * ndcg / n
        out[f"PSP@{k}"] = 100 * psp_num / psp_den if psp_den else 0.0
        out[f"coverage@{k}"] = 100 * len(found) / len(present) if present else 0.0
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("a,b", [(0.55, 1.5), (0.6, 2.6)])
def test_against_loop_on_random_problem(seed, a, b):
    rng = np.random.default_rng(seed)
    n, n_labels, width = 300, 40, 10
    true_sets = []
    for _ in range(n):
        size = rng.choice([0, 1, 2, 3, 6, 12], p=[0.1, 0.3, 0.25, 0.15, 0.15, 0.05])
        true_sets.append(set(rng.choice(n_labels, size=size, replace=False).tolist()))
    preds = np.full((n, width), -1, dtype=np.int64)
    for i in range(n):
        m = rng.integers(0, width + 1)                     # some rows padded, some empty
        # bias predictions towards true labels so there are plenty of hits at every rank
        pool = list(true_sets[i]) + rng.choice(n_labels, size=8, replace=False).tolist()
        row = list(dict.fromkeys(rng.permutation(pool).tolist()))
        row += [l for l in rng.permutation(n_labels).tolist() if l not in row]
        preds[i, :m] = row[:m]
    rows = [sorted(s) for s in true_sets]
    Y = sp.csr_matrix((np.ones(sum(map(len, rows)), dtype=np.float32),
                       np.array([l for r in rows for l in r], dtype=np.int64),
                       np.cumsum([0] + [len(r) for r in rows])), shape=(n, n_labels))
    counts = rng.integers(0, 60, size=n_labels - 5).tolist()   # the last 5 labels: test only
    ks = (1, 3, 5, 10)
    got = evaluate(Y, preds, ks=ks, train_label_counts=counts, n_train=2000, propensity_a=a,
                   propensity_b=b, coverage=True)
    ref = _loop_metrics(true_sets, preds.tolist(), ks, counts, 2000, a, b, n_labels)
    assert set(got) == set(ref)
    for key in ref:
        assert got[key] == pytest.approx(ref[key], rel=1e-9, abs=1e-9), key
    assert 0 < got["P@1"] < 100 and 0 < got["PSP@5"] < 100 and 0 < got["coverage@10"] <= 100
    flags = hits_matrix(Y, preds)
    assert flags.tolist() == [[l >= 0 and l in s for l in row] for s, row in zip(true_sets, preds.tolist())]
