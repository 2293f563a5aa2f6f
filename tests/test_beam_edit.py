"""xmtc.linear.beam_edit: editing a few nodes of a beam-layout level gives the level a rebuild gives.

Reference: the edit done on the csc weights (dense numpy here) and :meth:`BeamLevel.from_weights` of the
result; every array of the edited level must equal the rebuilt one's, element for element (a dropped entry,
a mis-ordered insert, a wrong segment count or an off-by-one feature start all show as unequal arrays).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from xmtc.linear.beam import BeamLevel
from xmtc.linear.beam_edit import grown, merged, node_columns, replaced

ARRAYS = ("child_ptr", "child_ids", "feat", "seg", "ent", "bias_w")


def _same(a: BeamLevel, b: BeamLevel) -> None:
    assert a.n_features == b.n_features and a.bias == b.bias
    for name in ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype, name
        assert x.shape == y.shape, name
        if name == "ent":
            assert np.array_equal(x["col"], y["col"]) and np.array_equal(x["val"], y["val"]), name
        else:
            assert np.array_equal(x, y), name


def _random_level(rng, d, K, P, density):
    parent_of = rng.integers(0, P, K)
    W = (rng.random((d + 1, K)) < density) * rng.normal(size=(d + 1, K))
    return W.astype(np.float32), parent_of


# the hand case: two parents; nodes 0, 2 under parent 0, node 1 under parent 1; features 0..2, bias row 3
HAND_W = np.array([[1, 2, 0],
                   [0, 3, 4],
                   [5, 0, 0],
                   [0.5, 0, -1]], dtype=np.float32)
HAND_PARENTS = np.array([0, 1, 0])


def _hand_edit(node: int, col: sp.csc_matrix, dense_col) -> BeamLevel:
    """The hand case's level with ``node``'s column replaced by ``col``, checked against the rebuild with the
    column ``dense_col``; returns the edited level."""
    level = BeamLevel.from_weights(sp.csc_matrix(HAND_W), HAND_PARENTS, 2)
    out = replaced(level, [node], col)
    edited = HAND_W.copy()
    edited[:, node] = dense_col
    _same(out, BeamLevel.from_weights(sp.csc_matrix(edited), HAND_PARENTS, 2))
    return out


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), d=st.integers(1, 30), K=st.integers(1, 25), P=st.integers(1, 6),
       density=st.sampled_from([0.0, 0.1, 0.5, 1.0]), n_edit=st.integers(0, 25))
def test_replaced_equals_a_rebuild_from_the_edited_weights(seed, d, K, P, density, n_edit):
    rng = np.random.default_rng(seed)
    P = min(P, K)
    W, parent_of = _random_level(rng, d, K, P, density)
    level = BeamLevel.from_weights(sp.csc_matrix(W), parent_of, P, bias=0.5)
    nodes = rng.permutation(K)[:min(n_edit, K)]  # any order, not only ascending
    new = ((rng.random((d + 1, nodes.size)) < rng.choice([0.0, 0.3, 1.0])) * rng.normal(size=(d + 1, nodes.size)))
    edited = W.copy()
    edited[:, nodes] = new
    expect = BeamLevel.from_weights(sp.csc_matrix(edited), parent_of, P, bias=0.5)
    _same(replaced(level, nodes, sp.csc_matrix(new.astype(np.float32))), expect)
    # the old weights of the edited nodes, read off the layout
    got = node_columns(level, nodes)
    assert got.has_sorted_indices
    assert np.array_equal(got.toarray(), W[:, nodes])
    assert np.array_equal(node_columns(level, nodes).indices, sp.csc_matrix(W[:, nodes]).indices)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), d=st.integers(1, 20), extra_d=st.integers(0, 5), K=st.integers(1, 15),
       extra_k=st.integers(0, 5), P=st.integers(1, 5), extra_p=st.integers(0, 2))
def test_grown_equals_a_rebuild_with_empty_features_and_nodes(seed, d, extra_d, K, extra_k, P, extra_p):
    rng = np.random.default_rng(seed)
    P = min(P, K)
    W, parent_of = _random_level(rng, d, K, P, 0.4)
    level = BeamLevel.from_weights(sp.csc_matrix(W), parent_of, P, bias=1.0)
    P2 = P + extra_p
    parent_new = np.concatenate([parent_of, rng.integers(0, P2, extra_k)])
    big = np.zeros((d + extra_d + 1, K + extra_k), dtype=np.float32)
    big[:d, :K] = W[:d]
    big[-1, :K] = W[d]  # the bias row moves to the end
    expect = BeamLevel.from_weights(sp.csc_matrix(big), parent_new, P2, bias=1.0)
    out = grown(level, d + extra_d, parent_new, P2)
    _same(out, expect)
    # and a new node's weights can then be set like any other's
    if extra_k:
        col = rng.normal(size=(d + extra_d + 1, 1)).astype(np.float32)
        big[:, [K]] = col
        _same(replaced(out, [K], sp.csc_matrix(col)), BeamLevel.from_weights(sp.csc_matrix(big), parent_new, P2, bias=1.0))


def test_a_hand_case():
    level = BeamLevel.from_weights(sp.csc_matrix(HAND_W), HAND_PARENTS, 2)
    out = replaced(level, [2], sp.csc_matrix(np.array([[7], [0], [0], [0]], dtype=np.float32)))
    # feature 0: parent 0 -> node 0 (offset 0) 1.0, node 2 (offset 1) 7.0; parent 1 -> node 1 2.0
    assert out.seg.tolist() == [[0, 2], [1, 1], [1, 1], [0, 1]]
    assert out.feat.tolist() == [[0, 0], [2, 3], [3, 4], [4, 5]]
    assert out.ent["col"].tolist() == [0, 1, 0, 0, 0]
    assert out.ent["val"].tolist() == [1.0, 7.0, 2.0, 3.0, 5.0]
    assert out.bias_w.tolist() == [0.5, 0.0, 0.0]
    assert level.ent["val"].tolist() == [1.0, 2.0, 4.0, 3.0, 5.0]  # the given level is not modified


def test_a_node_that_moves_to_another_parent_rebuilds_the_level():
    rng = np.random.default_rng(0)
    W, parent_of = _random_level(rng, 6, 8, 3, 0.6)
    level = BeamLevel.from_weights(sp.csc_matrix(W), parent_of, 3)
    moved = parent_of.copy()
    moved[2] = (moved[2] + 1) % 3  # its siblings' offsets shift under both parents
    parent_new = np.concatenate([moved, [0]])
    big = np.zeros((9, 9), dtype=np.float32)
    big[:6, :8] = W[:6]
    big[8, :8] = W[6]
    _same(grown(level, 8, parent_new, 3), BeamLevel.from_weights(sp.csc_matrix(big), parent_new, 3))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), d=st.integers(1, 20), extra_d=st.integers(0, 4), K=st.integers(1, 20),
       extra_k=st.integers(0, 4), P=st.integers(1, 6), extra_p=st.integers(0, 2), n_moved=st.integers(1, 6),
       density=st.sampled_from([0.0, 0.2, 0.7, 1.0]))
def test_nodes_moved_to_other_parents_equal_a_rebuild(seed, d, extra_d, K, extra_k, P, extra_p, n_moved, density):
    """Own nodes placed under other parents (their siblings' offsets shift under the old and the new parent), with
    new features, nodes and parents besides: every array as a rebuild from the weights gives it (a renumbering
    off by one, a moved node's weights or bias lost, a segment left empty or unsorted all show)."""
    rng = np.random.default_rng(seed)
    P = min(P, K)
    W, parent_of = _random_level(rng, d, K, P, density)
    level = BeamLevel.from_weights(sp.csc_matrix(W), parent_of, P, bias=1.0)
    P2 = P + extra_p
    moved = rng.permutation(K)[:min(n_moved, K)]
    parent_new = np.concatenate([parent_of, rng.integers(0, P2, extra_k)])
    parent_new[moved] = rng.integers(0, P2, moved.size)  # some may land on their own parent again
    big = np.zeros((d + extra_d + 1, K + extra_k), dtype=np.float32)
    big[:d, :K] = W[:d]
    big[-1, :K] = W[d]
    expect = BeamLevel.from_weights(sp.csc_matrix(big), parent_new, P2, bias=1.0)
    _same(grown(level, d + extra_d, parent_new, P2), expect)


def test_bad_edits_are_refused():
    level = BeamLevel.from_weights(sp.csc_matrix(np.ones((3, 2), dtype=np.float32)), np.array([0, 0]), 1)
    with pytest.raises(ValueError, match="shape"):
        replaced(level, [0], sp.csc_matrix((4, 1), dtype=np.float32))
    with pytest.raises(ValueError, match="distinct"):
        replaced(level, [0, 0], sp.csc_matrix((3, 2), dtype=np.float32))
    with pytest.raises(ValueError, match="shrink"):
        grown(level, 1, np.array([0, 0]), 1)
    assert grown(level, 2, np.array([0, 0]), 1) is level


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n_edits=st.integers(0, 4))
def test_merged_edits_equal_the_edits_one_after_another(seed, n_edits):
    rng = np.random.default_rng(seed)
    d, K, P = 12, 10, 3
    W, parent_of = _random_level(rng, d, K, P, 0.4)
    level = BeamLevel.from_weights(sp.csc_matrix(W), parent_of, P)
    edits, one_by_one = [], level
    for _ in range(n_edits):
        nodes = rng.permutation(K)[:rng.integers(0, K + 1)]
        cols = sp.csc_matrix((rng.random((d + 1, nodes.size)) < 0.5) * rng.normal(size=(d + 1, nodes.size)),
                             dtype=np.float32)
        edits.append((nodes, cols))
        one_by_one = replaced(one_by_one, nodes, cols)
    _same(replaced(level, *merged(edits)), one_by_one)


def test_explicit_zeros_in_the_new_columns_are_no_weight_and_a_weight_of_one_is_kept():
    # node 0's new column stored with explicit zeros (feature 0, the bias) and a 1.0
    col = sp.csc_matrix((np.array([0.0, 1.0, 0.0], np.float32), np.array([0, 2, 3]), np.array([0, 3])), shape=(4, 1))
    assert col.nnz == 3  # the zeros are stored entries
    out = _hand_edit(0, col, [0, 0, 1, 0])
    # by hand: feature 0 keeps node 1's 2.0 only; feature 1 as before (node 2 under parent 0 first, then node 1);
    # feature 2 now holds node 0 (offset 0) at 1.0 instead of 5.0; no bias for node 0
    assert out.ent["val"].tolist() == [2.0, 4.0, 3.0, 1.0] and out.bias_w.tolist() == [0.0, 0.0, -1.0]


def test_new_columns_with_duplicate_and_unsorted_entries_are_summed_and_left_as_given():
    # node 2's new column holds feature 1 twice (0.25 + 0.5), its entries out of order
    col = sp.csc_matrix((np.array([2.0, 0.25, 7.0, 0.5], np.float32), np.array([3, 1, 0, 1]), np.array([0, 4])),
                        shape=(4, 1))
    assert not col.has_canonical_format
    _hand_edit(2, col, [7, 0.75, 0, 2])
    assert col.indices.tolist() == [3, 1, 0, 1] and col.data.tolist() == [2.0, 0.25, 7.0, 0.5]  # the caller's
