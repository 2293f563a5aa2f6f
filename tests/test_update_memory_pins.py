"""Tests that pin learn's update of a tree model (``xmtc/linear/update.py``) and the training memory
(``xmtc/models/memory.py``) against a definition or a hand-computed case: each kills mutants of
``scripts/mutate.py`` that the older tests let pass (the harness picks them by the ``pin_update`` / ``pin_memory``
in their names)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp


# -- a hand-made two-level tree: labels 0, 1 under cluster 0, labels 2, 3 under cluster 1 ---------------------------
_LEAF_OF = np.array([0, 0, 1, 1])
_SOLVER = dict(C_pos=1.0, C_neg=1.0, bias=1.0, tol=1e-6, max_iter=1000, threshold=0.0, n_threads=1)


def _rows(features: list[int], d: int = 6) -> sp.csr_matrix:
    """One row per entry: feature ``f`` at 1.0 and feature ``d - 1`` (a word every text has) at 0.5."""
    n = len(features)
    dense = np.zeros((n, d), np.float32)
    dense[np.arange(n), features] = 1.0
    dense[:, d - 1] = 0.5
    return sp.csr_matrix(dense)


@pytest.fixture(scope="module")
def two_level():
    """Label ``j``'s documents have word ``j``: the matcher sends word 0 / 1 to cluster 0 and word 2 / 3 to
    cluster 1."""
    from xmtc.index.tree import LabelTree
    from xmtc.linear.hierarchy import HierarchicalLinearModel

    feats = [0, 0, 1, 1, 2, 2, 3, 3]
    X = _rows(feats)
    Y = sp.csr_matrix((np.ones(8, np.float32), (np.arange(8), feats)), shape=(8, 4))
    tree = LabelTree.from_parents([np.zeros(2, np.int64), _LEAF_OF])
    h = HierarchicalLinearModel().fit(X, Y, tree, negatives="tfn", **_SOLVER)
    return h, X, Y


def test_pin_update_a_two_level_tree_places_each_new_label_by_its_documents_cluster(two_level):
    """Module doc, 1.: a two-level tree (one cluster level) votes by the matcher like a deeper one; only a flat
    model (one level) puts every new label under the root."""
    from xmtc.linear.update import place_new_labels

    h, _, _ = two_level
    assert len(h.levels_) == 2
    X = _rows([2, 3, 0, 1])                                         # two documents each of two new labels
    Y = sp.csr_matrix(np.array([[1, 0], [1, 0], [0, 1], [0, 1]], np.float32))
    assert place_new_labels(h, X, Y).tolist() == [1, 0]
    assert place_new_labels(h, X, Y[:, ::-1]).tolist() == [0, 1]


def test_pin_update_training_rows_put_the_replay_first_and_count_its_rows():
    """``_training_rows``: ``(X, Y, n_old)`` -- the replayed rows stacked before the new ones, their labels widened
    to the new columns, and ``n_old`` their number (not their width)."""
    from xmtc.linear.update import _training_rows

    X_old = _rows([0, 1, 2])                                        # 3 rows over 6 features
    Y_old = sp.csr_matrix(np.eye(3, 4, dtype=np.float32))
    X_new = _rows([3, 4])
    Y_new = sp.csr_matrix(np.array([[0, 0, 0, 1, 1], [0, 0, 0, 0, 1]], np.float32))
    X, Y, n_old = _training_rows(X_new, Y_new, (X_old, Y_old), 6, 4)
    assert n_old == 3
    np.testing.assert_array_equal(X.toarray(), np.vstack([X_old.toarray(), X_new.toarray()]))
    np.testing.assert_array_equal(Y.toarray(), np.vstack([np.c_[np.eye(3, 4), np.zeros(3)], Y_new.toarray()]))
    X2, Y2, n2 = _training_rows(X_new, Y_new, None, 6, 4)
    assert X2 is X_new and Y2 is Y_new and n2 == 0


def test_pin_update_refuses_new_rows_narrower_than_the_models_features(two_level):
    """Module doc, 5.: the feature space only grows (a grown vocabulary is appended after the model's ``d``); rows
    over fewer features than the model's are refused, not taken as a narrower model."""
    from xmtc.errors import ConfigError
    from xmtc.linear.update import update

    h, X, Y = two_level
    with pytest.raises(ConfigError, match="expects 6"):
        update(h, sp.csr_matrix(X[:, :5]), Y, **_SOLVER)
    new, _ = update(h, X, Y, **_SOLVER)                              # the model's own width is taken as it is
    assert new.n_features == 6


def test_pin_update_fresh_columns_take_only_the_models_own_cold_labels():
    """``fresh_columns``: the columns past the model's ``n_labels_old`` and the ``cold`` ids *among its own*; a cold
    id at or past ``n_labels_old`` is not one of its labels and joins only as one of the new columns."""
    from xmtc.linear.update import fresh_columns

    assert fresh_columns(5, 5, cold=[1, 5]).tolist() == [1]
    assert fresh_columns(5, 7, cold=[4, 5, 9]).tolist() == [4, 5, 6]
    assert fresh_columns(5, 5, cold=[]).tolist() == []


def test_pin_update_refuses_label_rows_that_do_not_fit_each_check_alone(two_level):
    """``Y`` needs one row per document *and* at least the model's label columns: either mismatch alone is the
    one-line ``ConfigError``."""
    from xmtc.errors import ConfigError
    from xmtc.linear.update import update

    h, X, Y = two_level
    with pytest.raises(ConfigError, match="Y has shape"):
        update(h, X, Y[:7], **_SOLVER)                              # a row short, the columns right
    with pytest.raises(ConfigError, match="Y has shape"):
        update(h, X, Y[:, :3], **_SOLVER)                           # the rows right, a column short
