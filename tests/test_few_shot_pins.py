"""Tests that pin the few-shot stage (``xmtc/models/few_shot.py``, ``few_shot_scores.py``, ``few_shot_chars.py``,
``few_shot_words.py``) against a definition or a hand-computed case: each kills mutants of ``scripts/mutate.py``
that the older tests let pass (the harness runs this file with the stage's other tests)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from xmtc.models import few_shot_words

SOLVER = dict(C_pos=1.0, C_neg=1.0, tol=1e-4, max_iter=2000, threshold=0.0, n_threads=1)


def _rows(seed: int, n: int, d: int = 12) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    return sp.csr_matrix((rng.random((n, d)) * (rng.random((n, d)) < 0.4)).astype(np.float32))


# -- few_shot_words.rankers ---------------------------------------------------------------------------------
def test_pin_words_three_labels_fitted_together_equal_each_fitted_alone():
    """Three labels (2, 3 and 2 documents) in one solver call against the same negatives: each label's ranker,
    leave-one-out values and cross-fitted negative values equal those of the label fitted alone (its columns'
    objectives do not share a term). Kills ``first = np.r_[0, np.cumsum(sizes)[:1]]`` (right for two labels)."""
    negatives = _rows(0, 40)
    pos = [_rows(1, 2), _rows(2, 3), _rows(3, 2)]
    W, loo, values = few_shot_words.rankers(pos, negatives, 5, 2.0, 1.0, **SOLVER)
    assert W.shape == (13, 3) and loo.shape == (3, 5) and len(values) == 3
    for t, P in enumerate(pos):
        Wt, loot, vt = few_shot_words.rankers([P], negatives, 5, 2.0, 1.0, **SOLVER)
        np.testing.assert_allclose(W[:, t].toarray(), Wt.toarray(), atol=1e-3)
        np.testing.assert_allclose(loo[t], loot[0], atol=1e-3)
        np.testing.assert_allclose(values[t], vt[0], atol=1e-3)
        assert np.isneginf(loo[t, P.shape[0]:]).all() and np.isfinite(loo[t, :P.shape[0]]).all()


# -- few_shot.FewShotRankers._joining ---------------------------------------------------------------------------
def _memory(seed: int = 0, n: int = 40, labels: int = 5):
    from xmtc.models.memory import TrainingMemory

    return TrainingMemory(_rows(seed, n), sp.csr_matrix((n, labels), dtype=np.float32), seen=n, capacity=n, seed=0)


def _labelled(ids: list[int], width: int = 6) -> sp.csr_matrix:
    """One new row per entry of ``ids``, carrying that label."""
    k = len(ids)
    return sp.csr_matrix((np.ones(k, np.float32), np.asarray(ids), np.arange(k + 1)), shape=(k, width))


def test_pin_stage_the_highest_stage_label_counts_its_kept_documents_and_leaves_past_few():
    """A stage holding labels 3 and 4 (two documents each): a learn bringing four more documents of label 4 (the
    stage's highest id) takes it to six, past FEW: it leaves the stage, label 3 stays bit for bit. Its kept
    documents are found at the last position of the stage's owners (``_joining``'s clip to ``owners.size - 1``)."""
    from xmtc.models.few_shot import FEW, FewShotRankers

    mem = _memory()
    stage = FewShotRankers.empty(12, 1.0).updated(_rows(5, 4), _labelled([3, 3, 4, 4]), np.array([3, 4]), mem,
                                                  **SOLVER)
    assert stage.label_ids.tolist() == [3, 4] and sorted(stage.pos_owner.tolist()) == [3, 3, 4, 4]
    assert 2 + 4 > FEW
    after = stage.updated(_rows(6, 4), _labelled([4, 4, 4, 4]), np.array([], np.int64), mem, **SOLVER)
    assert after.label_ids.tolist() == [3] and after.pos_owner.tolist() == [3, 3]
    np.testing.assert_array_equal(after.W.toarray(), stage.W[:, 0].toarray())
    # within FEW (two kept + three new) it stays and is refitted on all five
    within = stage.updated(_rows(6, 3), _labelled([4, 4, 4]), np.array([], np.int64), mem, **SOLVER)
    assert within.label_ids.tolist() == [3, 4] and sorted(within.pos_owner.tolist()) == [3, 3] + [4] * 5
    assert np.isfinite(within.loo[1]).all()


# -- few_shot.merge_few_shot ---------------------------------------------------------------------------------
def _hand_stage():
    """Label 7: decision value 2 x_0 - 1, leave-one-out values 0.7, 0.7, negatives at 0.2 and 0.0 (omega 1)."""
    from xmtc.models.few_shot import FEW, RANKS, TAIL, FewShotRankers

    def pad(v, width):
        out = np.full(width, -np.inf, np.float32)
        out[:len(v)] = v
        return out

    W = sp.csc_matrix(np.array([[2.0], [0.0], [0.0], [-1.0]], dtype=np.float32))
    return FewShotRankers([7], W, pad([0.7, 0.7], FEW)[None], pad([0.2, 0.0], TAIL)[None], pad([], RANKS.size)[None],
                          sp.csr_matrix(np.eye(2, 3, dtype=np.float32)), [7, 7], [1.0], 1.0)


def test_pin_stage_merge_few_shot_merges_only_for_a_calibrated_model_with_a_stage():
    """Module doc: the stage's list is merged into a *calibrated* model's top-k. A text with decision value 0.6
    (x_0 = 0.8): p = 2 / (2 + 0 + 1), above the model's second score 0.1, so label 7 replaces label 4 -- for a
    calibrated model; a model without calibration, or without a stage, keeps its own list."""
    from types import SimpleNamespace

    from xmtc.models.few_shot import merge_few_shot

    X = sp.csr_matrix(np.array([[0.8, 0.0, 0.0]], dtype=np.float32))
    idx, sc = np.array([[3, 4]], np.int32), np.array([[0.9, 0.1]], np.float32)
    calibrated = SimpleNamespace(few_shot_=_hand_stage(), calibration_=object())
    got_i, got_s = merge_few_shot(calibrated, idx, sc, ["unused"], None, features=X)
    assert got_i.tolist() == [[3, 7]] and got_s[0, 1] == np.float32(2 / 3)
    for model in (SimpleNamespace(few_shot_=_hand_stage(), calibration_=None),
                  SimpleNamespace(few_shot_=None, calibration_=object()), SimpleNamespace(calibration_=object())):
        got_i, got_s = merge_few_shot(model, idx, sc, ["unused"], None, features=X)
        assert got_i is idx and got_s is sc
