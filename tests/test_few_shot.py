"""Labels learned from a few documents, scored flat (:mod:`xmtc.models.few_shot`): the probability by its
definition, the leave-one-out and cross-fitted values against fits made one at a time, the merge, storage, and
the stage in a model that learns, saves, explains and removes labels."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import xmtc
from xmtc.errors import ModelFormatError
from xmtc.linear.solver import train_level
from xmtc.models import few_shot as fs
from xmtc.models.few_shot import FEW, RANKS, TAIL, FewShotRankers, probability
from xmtc.models.calibration import MIN_KNOWN
from xmtc.models.memory import TrainingMemory
from xmtc.models.open_labels import remove_labels

from serve_support import sample_docs

NEG = -np.inf


def _pad(values, width):
    out = np.full(width, NEG, dtype=np.float32)
    out[:len(values)] = values
    return out


# -- the probability ------------------------------------------------------------------------------------
def test_probability_counts_leave_one_out_positives_against_weighted_negatives_by_hand():
    loo = _pad([0.5, 0.2], FEW)[None, :]
    tail = _pad([0.4, 0.3, 0.1], TAIL)[None, :]
    ranks = _pad([], RANKS.size)[None, :]
    s = np.array([[0.6], [0.45], [0.35], [0.15], [-1.0]])
    p = probability(s, loo, tail, ranks, np.array([2.0]))[:, 0]
    # s: A (loo >= s), N (negatives >= s), precision A / (A + 2 N + 1); p: the best precision at or below s,
    # read at s and at the leave-one-out values 0.5 (1 / (1 + 0 + 1)) and 0.2 (2 / (2 + 4 + 1)) below it
    want = [max(0 / 1, 1 / 2, 2 / 7), max(1 / 2, 2 / 7), max(1 / (1 + 2 + 1), 2 / 7), 2 / (2 + 4 + 1),
            2 / (2 + 6 + 1)]
    np.testing.assert_allclose(p, want)


def test_below_the_tail_the_count_is_read_from_the_rank_sketch():
    loo = _pad([0.0, 0.0], FEW)[None, :]
    tail = np.full((1, TAIL), 0.5, dtype=np.float32)  # 256 negatives at 0.5
    ranks = _pad([0.2, -0.3], RANKS.size)[None, :]  # the 512th negative at 0.2, the 1024th at -0.3
    p = probability(np.array([[0.4], [0.1], [-0.5]]), loo, tail, ranks, np.array([1.0]))[:, 0]
    # above the leave-one-out values (0, 0): their precision, with N(0) = 512 read from the sketch
    np.testing.assert_allclose(p, [2 / (2 + 512 + 1), 2 / (2 + 512 + 1), 2 / (2 + 1024 + 1)])
    p = probability(np.array([[-0.1]]), _pad([0.0], FEW)[None, :], tail, ranks, np.array([1.0]))
    np.testing.assert_allclose(p, [[1 / (1 + 512 + 1)]])


# -- fitting: the values against one fit at a time ---------------------------------------------------------
def _toy(seed=0, n=300, d=40):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.15, random_state=seed, format="csr", dtype=np.float32)
    X = sp.csr_matrix(sp.diags(1.0 / np.maximum(np.sqrt(np.asarray(X.multiply(X).sum(1)).ravel()), 1e-6)) @ X)
    Y = sp.csr_matrix((n, 4), dtype=np.float32)
    P = sp.csr_matrix(rng.random((3, d)).astype(np.float32) * (rng.random((3, d)) < 0.3))
    return X, Y, P


SOLVER = dict(C_pos=1.0, C_neg=1.0, tol=1e-4, max_iter=2000, threshold=0.0, n_threads=1)


def _alone(X, y, bias=1.0):
    """One column, fitted on exactly the rows given, all active."""
    return train_level(X, sp.csr_matrix(y[:, None].astype(np.float32)), np.zeros(1, np.int32),
                       sp.csr_matrix(np.ones((X.shape[0], 1), np.float32)), bias=bias,
                       **{**SOLVER, "C_neg": SOLVER["C_neg"] * 2.0})


def _value(W, x, bias=1.0):
    W = W.toarray()
    return float((sp.csr_matrix(x) @ W[:-1])[0, 0] + bias * W[-1, 0])


def test_leave_one_out_and_cross_fitted_values_match_fits_made_one_at_a_time():
    X, Y, P = _toy(n=600)
    mem = TrainingMemory(X, Y, seen=2 * X.shape[0], capacity=X.shape[0], seed=0)  # omega = 2
    Y_new = sp.csr_matrix((np.ones(3, np.float32), np.full(3, 4), np.arange(4)), shape=(3, 5))
    stage = FewShotRankers.empty(X.shape[1], 1.0).updated(P, Y_new, np.array([4]), mem, **SOLVER)
    assert stage.label_ids.tolist() == [4] and stage.omega.tolist() == [2.0]
    n = X.shape[0]
    # the full ranker: every remembered row a negative, the three documents positives
    full = _alone(sp.vstack([X, P]), np.r_[np.zeros(n), np.ones(3)])
    np.testing.assert_allclose(stage.W.toarray(), full.toarray(), atol=2e-3)
    # leave-one-out: the ranker fitted without document i scores document i
    for i in range(3):
        rest = [r for r in range(3) if r != i]
        Wi = _alone(sp.vstack([X, P[rest]]), np.r_[np.zeros(n), np.ones(2)])
        assert stage.loo[0, i] == pytest.approx(_value(Wi, P[i]), abs=2e-3)
    assert np.all(np.isneginf(stage.loo[0, 3:]))
    # cross-fitting: each remembered row scored by the ranker fitted without its half
    values = []
    for h in (0, 1):
        other = np.flatnonzero(np.arange(n) % 2 != h)
        Wh = _alone(sp.vstack([X[other], P]), np.r_[np.zeros(other.size), np.ones(3)])
        mine = X[np.flatnonzero(np.arange(n) % 2 == h)]
        values.append(np.asarray(mine @ Wh.toarray()[:-1]).ravel() + Wh.toarray()[-1, 0])
    ordered = np.sort(np.concatenate(values))[::-1]
    np.testing.assert_allclose(stage.neg_tail[0], ordered[:TAIL], atol=2e-3)
    assert stage.neg_ranks[0, 0] == pytest.approx(ordered[511], abs=2e-3) and np.isneginf(stage.neg_ranks[0, 1:]).all()
    # the in-sample values (the documents the ranker saw) are higher than the leave-one-out ones
    assert np.all(np.asarray(P @ full.toarray()[:-1]).ravel() + full.toarray()[-1, 0] > stage.loo[0, :3] + 0.05)


def test_the_negative_sketch_keeps_the_tail_and_the_values_at_the_ranks():
    values = np.random.default_rng(0).permutation(-np.arange(1500, dtype=np.float32))  # the r-th highest: 1 - r
    tail, ranks = fs.negative_sketch(values)
    np.testing.assert_array_equal(tail, -np.arange(TAIL, dtype=np.float32))
    assert RANKS[:2].tolist() == [512, 1024]
    np.testing.assert_array_equal(ranks[:2], [-511.0, -1023.0])
    assert np.isneginf(ranks[2:]).all()
    tail, ranks = fs.negative_sketch(np.array([0.5, 0.25], dtype=np.float32))
    assert tail[:3].tolist() == [0.5, 0.25, -np.inf] and np.isneginf(ranks).all()


def test_one_document_is_held_without_a_ranker_and_more_than_few_keep_a_label_out_of_the_stage():
    X, Y, P = _toy(1)
    mem = TrainingMemory(X, Y, seen=X.shape[0], capacity=X.shape[0], seed=0)
    rows = sp.vstack([P[:1]] + [P] * 2, format="csr")  # label 4: one document; label 5: six
    Y_new = sp.csr_matrix((np.ones(7, np.float32), np.r_[4, np.full(6, 5)], np.arange(8)), shape=(7, 6))
    stage = FewShotRankers.empty(X.shape[1], 1.0).updated(rows, Y_new, np.array([4, 5]), mem, **SOLVER)
    assert fs.MIN_DOCS == 2 and FEW == 5
    # label 4 is held: its document kept, no weights, probability 0 for every text (its own included)
    assert stage.label_ids.tolist() == [4] and stage.W.nnz == 0
    assert (stage.pos_X != P[:1]).nnz == 0 and stage.pos_owner.tolist() == [4]
    assert not stage.topk(sp.vstack([P, X]), 3)[1].any()


def test_a_held_labels_arrays_are_those_of_a_label_with_no_leave_one_out_value_and_no_negatives():
    """The held label's record by definition: no weights, leave-one-out values and negative sketch all padding
    (``negative_sketch`` of no values), and the omega of the memory it was learned against, ``seen / remembered``,
    as the label fitted beside it in the same learn has."""
    X, Y, P = _toy(3)
    mem = TrainingMemory(X, Y, seen=3 * X.shape[0], capacity=X.shape[0], seed=0)  # omega = 3
    # label 4: one document (held); label 5: two (fitted)
    Y_new = sp.csr_matrix((np.ones(3, np.float32), [4, 5, 5], np.arange(4)), shape=(3, 6))
    stage = FewShotRankers.empty(X.shape[1], 1.0).updated(P, Y_new, np.array([4, 5]), mem, **SOLVER)
    assert stage.label_ids.tolist() == [4, 5] and stage.W.shape == (X.shape[1] + 1, 2)
    assert stage.W[:, 0].nnz == 0 and stage.W[:, 1].nnz > 0
    tail, ranks = fs.negative_sketch(np.zeros(0, np.float32))
    np.testing.assert_array_equal(stage.neg_tail[0], tail)
    np.testing.assert_array_equal(stage.neg_ranks[0], ranks)
    assert np.isneginf(stage.loo[0]).all() and np.isfinite(stage.loo[1, :2]).all()
    assert stage.omega.tolist() == [3.0, 3.0] == [mem.seen / len(mem)] * 2
    assert sorted(stage.pos_owner.tolist()) == [4, 5, 5]
    assert (stage.pos_X[stage.pos_owner == 4] != P[:1]).nnz == 0 and (stage.pos_X[stage.pos_owner == 5] != P[1:]).nnz == 0


def test_a_label_with_few_documents_joins_the_stage_one_more_stays_out_and_an_empty_stage_keeps_its_width():
    """Module doc: :data:`MIN_DOCS` to :data:`FEW` documents (both ends included) join the stage; FEW + 1 do not,
    and a stage left with no label is the empty stage over the model's ``d`` features (it saves and loads)."""
    X, Y, P = _toy(4)
    d = X.shape[1]
    mem = TrainingMemory(X, Y, seen=X.shape[0], capacity=X.shape[0], seed=0)
    rows = sp.vstack([P, P[:2], P, P[:2], P[:1]], format="csr")  # label 4: rows 0-4 (FEW); label 5: rows 5-10
    Y_new = sp.csr_matrix((np.ones(11, np.float32), np.r_[np.full(FEW, 4), np.full(FEW + 1, 5)], np.arange(12)),
                          shape=(11, 6))
    stage = FewShotRankers.empty(d, 1.0).updated(rows, Y_new, np.array([4, 5]), mem, **SOLVER)
    assert stage.label_ids.tolist() == [4] and np.isfinite(stage.loo[0]).all()  # all FEW leave-one-out values
    only5 = sp.csr_matrix(Y_new[FEW:])
    empty = FewShotRankers.empty(d, 1.0).updated(rows[FEW:], only5, np.array([5]), mem, **SOLVER)
    assert len(empty) == 0 and empty.W.shape == (d + 1, 0) and empty.pos_X.shape == (0, d)
    params, arrays = empty.to_arrays()
    assert len(FewShotRankers.from_arrays(params, arrays, d, 6, "test")) == 0


def test_a_fresh_label_without_a_document_in_the_learn_is_not_held_and_no_memory_leaves_the_stage():
    """Only the fresh labels the new rows carry are touched (a fresh label known by its text alone is not held
    with no document); without remembered rows -- none, or an empty memory -- the stage stays as it is."""
    X, Y, P = _toy(5)
    mem = TrainingMemory(X, Y, seen=X.shape[0], capacity=X.shape[0], seed=0)
    Y_new = sp.csr_matrix((np.ones(2, np.float32), [4, 4], [0, 1, 2]), shape=(2, 6))  # label 5: no document
    stage = FewShotRankers.empty(X.shape[1], 1.0).updated(P[:2], Y_new, np.array([4, 5]), mem, **SOLVER)
    assert stage.label_ids.tolist() == [4] and sorted(stage.pos_owner.tolist()) == [4, 4]
    nothing = TrainingMemory(X[:0], Y[:0], seen=0, capacity=10, seed=0)
    for memory in (None, nothing):
        same = stage.updated(P[2:], sp.csr_matrix(Y_new[:1]), np.array([5]), memory, **SOLVER)
        assert same.label_ids.tolist() == [4] and same.pos_X.shape[0] == 2
        np.testing.assert_array_equal(same.W.toarray(), stage.W.toarray())


def test_a_held_label_is_fitted_on_all_its_documents_when_the_second_arrives():
    X, Y, P = _toy(7)
    mem = TrainingMemory(X, Y, seen=X.shape[0], capacity=X.shape[0], seed=0)
    one = sp.csr_matrix((np.ones(1, np.float32), [4], [0, 1]), shape=(1, 6))
    two = sp.csr_matrix((np.ones(2, np.float32), [4, 4], [0, 1, 2]), shape=(2, 6))
    three = sp.csr_matrix((np.ones(3, np.float32), [4, 4, 4], np.arange(4)), shape=(3, 6))
    held = FewShotRankers.empty(X.shape[1], 1.0).updated(P[:1], one, np.array([4]), mem, **SOLVER)
    # the label has a tree ranker after its first learn: it is not fresh any more, the stage holds it
    later = held.updated(P[1:3], two, np.array([], dtype=np.int64), mem, **SOLVER)
    at_once = FewShotRankers.empty(X.shape[1], 1.0).updated(P[:3], three, np.array([4]), mem, **SOLVER)
    assert later.label_ids.tolist() == [4] and later.pos_X.shape[0] == 3
    np.testing.assert_array_equal(later.W.toarray(), at_once.W.toarray())
    np.testing.assert_array_equal(later.loo, at_once.loo)
    np.testing.assert_array_equal(later.neg_tail, at_once.neg_tail)
    assert np.isfinite(later.loo[0, :3]).all()


def test_a_stage_label_that_grows_past_few_documents_leaves_and_one_that_grows_within_is_refitted():
    X, Y, P = _toy(2)
    mem = TrainingMemory(X, Y, seen=X.shape[0], capacity=X.shape[0], seed=0)
    two = sp.csr_matrix((np.ones(2, np.float32), [4, 4], [0, 1, 2]), shape=(2, 6))
    stage = FewShotRankers.empty(X.shape[1], 1.0).updated(P[:2], two, np.array([4]), mem, **SOLVER)
    W_before = stage.W.toarray()
    one_more = sp.csr_matrix((np.ones(1, np.float32), [4], [0, 1]), shape=(1, 6))
    grown = stage.updated(P[2:], one_more, np.array([], dtype=np.int64), mem, **SOLVER)
    assert grown.pos_X.shape[0] == 3 and np.isfinite(grown.loo[0, :3]).all()  # kept its two, took the third
    assert np.abs(grown.W.toarray() - W_before).max() > 1e-3
    many = sp.csr_matrix((np.ones(4, np.float32), [4] * 4, np.arange(5)), shape=(4, 6))
    assert len(grown.updated(sp.vstack([P, P[:1]]), many, np.array([], dtype=np.int64), mem, **SOLVER)) == 0


# -- merge and storage -----------------------------------------------------------------------------------
def _hand_stage(d=3):
    """Label 7: decision value = 2 x_0 - 1; its leave-one-out values 0.7, 0.7; negatives at 0.2, 0.0."""
    W = sp.csc_matrix(np.array([[2.0], [0.0], [0.0], [-1.0]], dtype=np.float32))
    return FewShotRankers([7], W, _pad([0.7, 0.7], FEW)[None], _pad([0.2, 0.0], TAIL)[None],
                          _pad([], RANKS.size)[None], sp.csr_matrix(np.eye(2, d, dtype=np.float32)), [7, 7],
                          [1.0], 1.0)


def test_merge_adds_the_stage_label_where_it_beats_the_model_and_keeps_the_higher_score():
    stage = _hand_stage()
    X = sp.csr_matrix(np.array([[0.8, 0, 0], [0.55, 0, 0], [0.0, 1, 0]], dtype=np.float32))
    # decision values 0.6, 0.1, -1: p = 2/(2+0+1), 2/(2+1+1), 2/(2+2+1)
    idx = np.array([[3, 7], [3, 4], [3, 4]], dtype=np.int32)
    sc = np.array([[0.9, 0.1], [0.9, 0.6], [0.9, 0.6]], dtype=np.float32)
    out_i, out_s = stage.merge(idx, sc, X)
    assert out_i.tolist() == [[3, 7], [3, 4], [3, 4]]
    np.testing.assert_allclose(out_s, [[0.9, 2 / 3], [0.9, 0.6], [0.9, 0.6]], rtol=1e-6)
    out_i, out_s = stage.merge(idx, np.array([[0.9, 0.1], [0.3, 0.2], [0.9, 0.6]], np.float32), X)
    assert out_i[1].tolist() == [7, 3] and out_s[1, 0] == pytest.approx(0.5)
    # a damped (hardly readable) text: the stage's score is cut like the model's own
    out_i, out_s = stage.merge(idx, np.array([[0.9, 0.1], [0.3, 0.2], [0.9, 0.6]], np.float32), X,
                               damp=np.array([1.0, 0.2, 1.0]))
    assert out_i[1].tolist() == [3, 4]


def test_storage_round_trips_and_refuses_a_stage_of_another_model():
    stage = _hand_stage()
    params, arrays = stage.to_arrays()
    back = FewShotRankers.from_arrays(params, arrays, n_features=3, n_labels=8, where="f")
    for name in ("label_ids", "loo", "neg_tail", "neg_ranks", "omega", "pos_owner"):
        np.testing.assert_array_equal(getattr(back, name), getattr(stage, name))
    assert abs(back.W - stage.W).max() == 0 and abs(back.pos_X - stage.pos_X).max() == 0
    with pytest.raises(ModelFormatError, match="few-shot"):
        FewShotRankers.from_arrays(params, arrays, n_features=3, n_labels=7, where="f")  # label 7 of 7
    with pytest.raises(ModelFormatError, match="few-shot"):
        FewShotRankers.from_arrays(params, arrays, n_features=4, n_labels=8, where="f")
    with pytest.raises(ModelFormatError, match="few-shot"):
        FewShotRankers.from_arrays({**params, "few": FEW + 1}, arrays, n_features=3, n_labels=8, where="f")


# -- in a model ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    texts, labels = sample_docs(step=6)
    cut = int(len(texts) * 0.8)
    model = xmtc.XRLinear(n_trees=1, max_leaf_size=16, branching=4, n_threads=2)
    from xmtc.data.dataset import Dataset, label_matrix
    from xmtc.models.calibrated_fit import fit_calibrated

    Y, vocab = label_matrix(labels[:cut])
    fit_calibrated(model, Dataset(texts[:cut], None, Y, vocab), progress=False)
    music = [t for t in texts[cut:] if "music" in t.lower().split()]
    model.learn(music[:3], [["new-music"]] * 3, few_shot="words")  # the ranker on the model's words; a stage
    return model, texts, cut, music                                  # keeps its scorer in later learns


def test_a_label_learned_from_three_documents_joins_the_stage_and_is_scored_flat(learned):
    model, texts, cut, music = learned
    j = list(model.labels_.names).index("new-music")
    assert model.few_shot_.label_ids.tolist() == [j]
    own = model.calibrated_topk(*model._predict_batch(texts[cut:], 10), texts[cut:])
    merged_i, merged_s = model.predict_topk(texts[cut:], 10)
    X = model.transform(texts[cut:])
    p = probability(fs._decision(X, model.few_shot_.W, 1.0), model.few_shot_.loo, model.few_shot_.neg_tail,
                    model.few_shot_.neg_ranks, model.few_shot_.omega)[:, 0]
    p = p * np.minimum(1.0, model.known_fraction(texts[cut:]) / MIN_KNOWN)  # cut as the model's own scores are
    for r in range(len(texts) - cut):
        tree = dict(zip(own[0][r].tolist(), own[1][r].tolist())).get(j, 0.0)
        got = dict(zip(merged_i[r].tolist(), merged_s[r].tolist()))
        if j in got:  # its score: the higher of the trees' and the stage's
            assert got[j] == pytest.approx(max(tree, p[r]), rel=1e-5)


def test_the_stage_survives_save_and_load_and_explain_names_it(learned, tmp_path):
    model, texts, cut, music = learned
    model.save(tmp_path / "m")
    back = xmtc.load(tmp_path / "m", mmap=False)
    a, b = model.predict_topk(texts[cut:], 10), back.predict_topk(texts[cut:], 10)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_allclose(a[1], b[1])
    j = list(model.labels_.names).index("new-music")
    rows = [r for r in range(len(texts) - cut) if j in a[0][r]]
    flat = []
    for r in rows:
        own = model.calibrated_topk(*model._predict_batch([texts[cut + r]], 10), [texts[cut + r]])
        tree = dict(zip(own[0][0].tolist(), own[1][0].tolist())).get(j, -1.0)
        score = dict(zip(a[0][r].tolist(), a[1][r].tolist()))[j]
        if score != tree:
            flat.append(r)
    assert flat, "no suggestion of the learned label came from the stage"
    r = flat[0]
    entry = [e for e in back.explain([texts[cut + r]], k=10)[0] if e["label"] == "new-music"][0]
    assert entry["source"] == "few-shot"
    assert sum(t["weight"] for t in entry["terms"]) + entry["bias"] == pytest.approx(entry["margin"], abs=1e-4) \
        or len(entry["terms"]) == 10


def test_a_removed_stage_label_is_never_suggested(learned):
    model, texts, cut, music = learned
    import copy

    m = copy.deepcopy(model)
    remove_labels(m, ["new-music"])
    j = list(m.labels_.names).index("new-music")
    idx, _ = m.predict_topk(texts[cut:] + music, 20)
    assert not (idx == j).any()


def _three_labels():
    """Labels 9, 2, 5 (in that order): decision value = w x_0 - 1 with w = 1, 2.3, 3; leave-one-out values 0.7,
    0.7; negatives at 0.2, 0.0."""
    W = sp.csc_matrix(np.array([[1.0, 2.3, 3.0], [0, 0, 0], [0, 0, 0], [-1.0, -1.0, -1.0]], dtype=np.float32))
    loo = np.vstack([_pad([0.7, 0.7], FEW)] * 3)
    tail = np.vstack([_pad([0.2, 0.0], TAIL)] * 3)
    return FewShotRankers([9, 2, 5], W, loo, tail, np.vstack([_pad([], RANKS.size)] * 3),
                          sp.csr_matrix((6, 3), dtype=np.float32), [9, 9, 2, 2, 5, 5], [1.0, 1.0, 1.0], 1.0)


def test_topk_returns_the_k_most_probable_stage_labels_best_first():
    stage = _three_labels()
    X = sp.csr_matrix(np.array([[0.5, 0, 0], [0.3, 0, 0]], dtype=np.float32))
    # row 0: values -0.5, 0.15, 0.5 -> N = 2, 1, 0 -> p = 2/(2+2+1), 2/(2+1+1), 2/(2+0+1)
    # row 1: values -0.7, -0.31, -0.1 -> p = 2/5 each: ties keep the stage's order
    p = probability(fs._decision(X, stage.W, 1.0), stage.loo, stage.neg_tail, stage.neg_ranks, stage.omega)
    np.testing.assert_allclose(p, [[2 / 5, 2 / 4, 2 / 3], [2 / 5, 2 / 5, 2 / 5]])
    ids, sc = stage.topk(X, 2)
    assert ids.tolist() == [[5, 2], [9, 2]]
    np.testing.assert_allclose(sc, [[2 / 3, 2 / 4], [2 / 5, 2 / 5]], rtol=1e-6)
    # values 0, 1.3, 2: above the leave-one-out values 0.7 a label keeps their precision, 2 / (2 + 0 + 1)
    ids, sc = stage.topk(sp.csr_matrix(np.array([[1.0, 0, 0]], dtype=np.float32)), 2)
    assert ids.tolist() == [[2, 5]] and sc.tolist() == [[pytest.approx(2 / 3), pytest.approx(2 / 3)]]
    # a stage without leave-one-out values (no document left out) suggests nothing
    empty = _hand_stage()
    empty.loo[:] = NEG
    ids, sc = empty.topk(sp.csr_matrix(np.array([[0.8, 0, 0]], dtype=np.float32)), 1)
    assert ids.tolist() == [[-1]] and sc.tolist() == [[0.0]]


def test_a_stage_assembled_from_parts_holds_its_labels_in_ascending_id_order():
    a, b = _three_labels()._subset(np.array([True, False, False])), _three_labels()._subset(np.array([False, True, True]))
    c = _three_labels()
    c.label_ids = np.array([7, 0, 3])
    stacked = fs._stack([a, b, c], 3, 1.0)
    assert stacked.label_ids.tolist() == [0, 2, 3, 5, 7, 9]
    # each column follows its label
    np.testing.assert_array_equal(stacked.W.toarray()[0], np.float32([2.3, 2.3, 3.0, 3.0, 1.0, 1.0]))
    assert stacked.pos_owner.tolist() == [9, 9, 2, 2, 5, 5, 9, 9, 2, 2, 5, 5]


def test_evidence_is_each_feature_times_its_weight_and_sums_to_the_decision_value():
    stage = _hand_stage()
    x = sp.csr_matrix(np.array([[0.8, 0.5, 0.0]], dtype=np.float32))
    weights, bias, margin = stage.evidence(x, 7)
    assert weights == {0: pytest.approx(1.6)} and bias == pytest.approx(-1.0)
    assert margin == pytest.approx(float(fs._decision(x, stage.W, 1.0)[0, 0])) == pytest.approx(0.6)


def test_labels_fitted_together_equal_labels_fitted_one_at_a_time():
    X, Y, P = _toy(3)
    mem = TrainingMemory(X, Y, seen=X.shape[0], capacity=X.shape[0], seed=0)
    rows = sp.vstack([P, P[:0:-1] * 0.5], format="csr")  # label 4: rows 0-2, label 5: rows 3-4 (sizes differ)
    Y_new = sp.csr_matrix((np.ones(5, np.float32), [4, 4, 4, 5, 5], np.arange(6)), shape=(5, 6))
    both = FewShotRankers.empty(X.shape[1], 1.0).updated(rows, Y_new, np.array([4, 5]), mem, **SOLVER)
    assert both.label_ids.tolist() == [4, 5]
    for col, j in enumerate((4, 5)):
        mine = np.flatnonzero(Y_new[:, j].toarray().ravel())
        one = FewShotRankers.empty(X.shape[1], 1.0).updated(rows[mine], sp.csr_matrix(Y_new[mine]),
                                                             np.array([j]), mem, **SOLVER)
        # the same objectives, solved to tolerance 1e-4 in another row order
        np.testing.assert_allclose(both.W[:, col].toarray(), one.W.toarray(), atol=1e-3)
        np.testing.assert_allclose(both.loo[col], one.loo[0], atol=1e-3)
        np.testing.assert_allclose(both.neg_tail[col], one.neg_tail[0], atol=1e-3)
        assert abs(both.pos_X[both.pos_owner == j] - rows[mine]).max() == 0


def test_remembered_rows_that_carry_the_label_are_not_its_negatives():
    X, Y, P = _toy(4)
    Y = sp.csr_matrix((np.ones(2, np.float32), [4, 4], [0, 1, 2] + [2] * (X.shape[0] - 2)), shape=(X.shape[0], 5))
    mem = TrainingMemory(X, Y, seen=X.shape[0], capacity=X.shape[0], seed=0)  # rows 0 and 1 carry label 4
    Y_new = sp.csr_matrix((np.ones(3, np.float32), [4, 4, 4], np.arange(4)), shape=(3, 5))
    stage = FewShotRankers.empty(X.shape[1], 1.0).updated(P, Y_new, np.array([4]), mem, **SOLVER)
    rest = X[2:]
    want = train_level(sp.vstack([rest, P]), sp.csr_matrix(np.r_[np.zeros(rest.shape[0]), np.ones(3)][:, None]
                                                            .astype(np.float32)), np.zeros(1, np.int32),
                       sp.csr_matrix(np.ones((rest.shape[0] + 3, 1), np.float32)), bias=1.0, **SOLVER)
    np.testing.assert_allclose(stage.W.toarray(), want.toarray(), atol=2e-3)


def test_a_learn_that_does_not_touch_a_stage_label_leaves_it_bit_for_bit():
    X, Y, P = _toy(5)
    mem = TrainingMemory(X, Y, seen=X.shape[0], capacity=X.shape[0], seed=0)
    first = FewShotRankers.empty(X.shape[1], 1.0).updated(
        P, sp.csr_matrix((np.ones(3, np.float32), [4, 4, 4], np.arange(4)), shape=(3, 6)), np.array([4]), mem, **SOLVER)
    grown = TrainingMemory(sp.vstack([X, X[:50]]), sp.vstack([Y, Y[:50]]), seen=5 * X.shape[0],
                           capacity=X.shape[0] + 50, seed=0)  # omega would change on a refit
    other = sp.csr_matrix((np.ones(2, np.float32), [5, 5], np.arange(3)), shape=(2, 6))
    after = first.updated(P[:2], other, np.array([5]), grown, **SOLVER)
    assert after.label_ids.tolist() == [4, 5]
    assert abs(after.W[:, 0] - first.W).max() == 0 and after.omega[0] == first.omega[0] == 1.0
    np.testing.assert_array_equal(after.loo[0], first.loo[0])


def test_an_old_label_the_new_documents_carry_never_joins_the_stage():
    X, Y, P = _toy(6)
    Y = sp.csr_matrix((np.ones(30, np.float32), np.zeros(30, np.int64), np.r_[np.arange(31), np.full(X.shape[0] - 30, 30)]),
                      shape=(X.shape[0], 5))  # label 0 has 30 remembered documents
    mem = TrainingMemory(X, Y, seen=X.shape[0], capacity=X.shape[0], seed=0)
    # three new documents, each of label 0 (old, with a ranker) and of the new label 5
    Y_new = sp.csr_matrix((np.ones(6, np.float32), [0, 5, 0, 5, 0, 5], [0, 2, 4, 6]), shape=(3, 6))
    stage = FewShotRankers.empty(X.shape[1], 1.0).updated(P, Y_new, np.array([5]), mem, **SOLVER)
    assert stage.label_ids.tolist() == [5]


def test_a_label_taught_one_document_at_a_time_joins_the_stage_at_its_second(learned):
    model0, texts, cut, music = learned
    import copy

    model = copy.deepcopy(model0)
    model.learn(music[3:4], [["one-at-a-time"]])
    j = list(model.labels_.names).index("one-at-a-time")
    assert j in model.few_shot_.label_ids.tolist()
    col = model.few_shot_.label_ids.tolist().index(j)
    assert not np.isfinite(model.few_shot_.loo[col]).any()  # held: no ranker yet
    model.learn(music[4:5], [["one-at-a-time"]])
    col = model.few_shot_.label_ids.tolist().index(j)
    assert int((model.few_shot_.pos_owner == j).sum()) == 2 and np.isfinite(model.few_shot_.loo[col, :2]).all()


def test_a_learned_model_featurizes_each_text_once_per_prediction(learned, monkeypatch):
    model, texts, cut, music = learned
    want = model.predict_topk(texts[cut:], 10)
    calls = []
    original = model.featurizer_.transform
    monkeypatch.setattr(model.featurizer_, "transform", lambda t: calls.append(len(t)) or original(t))
    got = model.predict_topk(texts[cut:], 10)
    assert calls == [len(texts) - cut]  # the trees' features go on to the few-shot rankers
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    calls.clear()
    depths = model.predict_topk_depths(texts[cut:], [5, 10])
    assert len(calls) == 1 and np.array_equal(depths[10][0], want[0])


def _probability_one_label_at_a_time(values, loo, tail, ranks, omega):
    """The definition, label by label with sorted searches (the stage's first implementation): a second
    implementation for the vectorised :func:`probability`."""
    out = np.zeros(values.shape)
    for j in range(values.shape[1]):
        lo, ta, ra = np.sort(loo[j]), np.sort(tail[j]), np.sort(ranks[j])

        def ratio(s):
            A = lo.size - np.searchsorted(lo, s, side="left")
            N = ta.size - np.searchsorted(ta, s, side="left")
            deeper = ra.size - np.searchsorted(ra, s, side="left")
            N = np.where(deeper > 0, RANKS[np.maximum(deeper - 1, 0)], N)
            return A / (A + omega[j] * N + 1.0)

        points = np.sort(loo[j][np.isfinite(loo[j])])
        out[:, j] = ratio(values[:, j])
        if points.size:
            best = np.maximum.accumulate(ratio(points))
            at = np.searchsorted(points, values[:, j], side="right")
            out[:, j] = np.maximum(out[:, j], np.where(at > 0, best[np.maximum(at - 1, 0)], 0.0))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_vectorised_probability_equals_the_label_by_label_definition(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    m, n = int(rng.integers(1, 9)), int(rng.integers(1, 60))
    loo, tail, ranks = np.full((m, FEW), NEG), np.full((m, TAIL), NEG), np.full((m, RANKS.size), NEG)
    for j in range(m):
        k, t, r = int(rng.integers(0, FEW + 1)), int(rng.integers(0, TAIL + 1)), int(rng.integers(0, RANKS.size + 1))
        loo[j, :k] = rng.normal(size=k).round(1)  # rounded: ties between values, points and sketches
        tail[j, :t] = -np.sort(-rng.normal(size=t).round(1))
        ranks[j, :r] = -np.sort(-(rng.normal(size=r) - 3).round(1))
    values = rng.normal(size=(n, m)).round(1)
    omega = rng.uniform(1, 5, m)
    want = _probability_one_label_at_a_time(values, loo, tail, ranks, omega)
    np.testing.assert_allclose(probability(values, loo, tail, ranks, omega), want, rtol=1e-12)
    import xmtc.models.few_shot_scores as scores

    monkeypatch.setattr(scores, "CHUNK", 1)  # one text per block: the blocks' seams
    np.testing.assert_allclose(probability(values, loo, tail, ranks, omega), want, rtol=1e-12)


def test_the_stages_cached_decision_equals_its_definition():
    stage = _three_labels()
    X = sp.csr_matrix(np.array([[0.5, 0.2, 0], [0.3, 0, 1.0]], dtype=np.float32))
    np.testing.assert_allclose(stage.decision(X), fs._decision(X, stage.W, 1.0))
    np.testing.assert_allclose(stage.decision(X), stage.decision(X))  # cached, the same


def test_a_label_with_exactly_a_ranks_count_of_negatives_has_that_rank_filled():
    _, ranks = fs.negative_sketch(-np.arange(512, dtype=np.float32))  # 512 negatives: rank 512 is the last one
    assert ranks[0] == -511.0 and np.isneginf(ranks[1:]).all()


def test_probability_of_no_label_or_no_text_is_empty_and_blocks_stay_within_chunk(monkeypatch):
    import xmtc.models.few_shot_scores as scores

    none = probability(np.zeros((3, 0)), np.zeros((0, FEW)), np.zeros((0, TAIL)), np.zeros((0, RANKS.size)),
                       np.zeros(0))
    assert none.shape == (3, 0)
    stage = _three_labels()
    values = np.random.default_rng(1).normal(size=(7, 3))
    args = (stage.loo, stage.neg_tail, stage.neg_ranks, stage.omega)
    want = probability(values, *args)
    seen = []
    real = scores._ratio
    monkeypatch.setattr(scores, "_ratio", lambda S, *a: seen.append(S.shape[0]) or real(S, *a))
    for chunk, block in ((3 * TAIL * 2, 2), (1, 1), (3 * TAIL * 100, 7)):  # comparisons per block -> texts per block
        monkeypatch.setattr(scores, "CHUNK", chunk)
        seen.clear()
        np.testing.assert_array_equal(probability(values, *args), want)
        assert max(seen[1:]) == block  # seen[0]: the interpolation points (FEW rows)
