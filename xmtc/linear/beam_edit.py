"""Edit a few nodes of a :class:`~xmtc.linear.beam.BeamLevel` without rebuilding the level.

A learn refits the handful of nodes its documents reach (three titles of a new subject: 16 + 16 + 96 of
yso-finna-en's 24,772 nodes). Going through the csc weights for that (``to_weights``, replace the columns,
``from_weights``) converts every weight of every level twice, and the cost grows with the model, not with the
learn. These functions work on the beam layout itself, each one pass of a C kernel over the level's entries
(``xmtc_layout_edit`` / ``xmtc_layout_columns`` in ``xmtc/csrc/beam.c``; ``xmtc_columns_fill`` lays the new
columns out by feature first), and give arrays equal, element for
element, to those :meth:`BeamLevel.from_weights` builds from the edited weights (tests/test_beam_edit.py), so
predictions and saved files are the same either way. A three-title learn into yso-finna-en's 80% model: 10.2-10.9
CPU s through csc, 4.6-6.3 s in place (benchmarks/RESULTS.md).

The layout (beam.py): feature ``f`` owns entries ``ent[feat[f, 1]:feat[f + 1, 1]]``, grouped in segments
``seg[feat[f, 0]:feat[f + 1, 0]]`` of ``(parent, n_entries)``; each entry holds the child's offset under its
parent and the weight, a feature's entries ordered by (parent, offset). An edit drops the edited nodes' entries
and merges their new ones (sorted by feature, parent, offset) into that order, opening a segment wherever the
parent changes within a feature, as ``from_weights`` does.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .. import native
from ..errors import ConfigError
from ..native import ptr
from .beam import ENTRY, BeamLevel, children, feature_sorted, places

__all__ = ["grown", "merged", "node_columns", "replaced", "widened"]


def grown(level: BeamLevel, n_features: int, parent_of: np.ndarray, n_parents: int) -> BeamLevel:
    """``level`` over ``n_features >= level.n_features`` features (the new ones without weights) and the nodes
    ``parent_of`` names: the level's own nodes first, then new ones without weights (new labels, placed in the
    tree). The level itself when nothing grows. Where an own node moves to another parent (a label learned
    again after ``labels remove`` is placed anew), its siblings' offsets change (:func:`_moved`)."""
    parent_of = np.asarray(parent_of, dtype=np.int64)
    K_old, d_old, d = level.n_nodes, level.n_features, int(n_features)
    if d < d_old or parent_of.size < K_old or n_parents < level.n_parents:
        raise ValueError(f"cannot shrink a level of {d_old} features, {K_old} nodes, {level.n_parents} parents"
                         f" to {d}, {parent_of.size}, {n_parents}")
    moves = not np.array_equal(parent_of[:K_old], level.parent_of)
    if not moves and d == d_old and parent_of.size == K_old and n_parents == level.n_parents:
        return level
    child_ptr, child_ids = children(parent_of, n_parents)
    # without a move a new node's id is above every old one, so it comes after its parent's old children: old
    # offsets hold
    feat, seg, ent = _moved(level, parent_of, child_ptr, child_ids) if moves else (level.feat, level.seg, level.ent)
    if d > d_old:  # features past the old ones own no segment and no entry: copies of the closing row
        feat = np.concatenate([feat, np.repeat(feat[-1:], d - d_old, axis=0)])
    bias_w = np.zeros(parent_of.size, dtype=np.float32)
    bias_w[:K_old] = level.bias_w  # a moved node's too: a move keeps its weights
    return BeamLevel(n_features=d, bias=level.bias, child_ptr=child_ptr, child_ids=child_ids, feat=feat, seg=seg,
                     ent=ent, bias_w=bias_w)


def _moved(level: BeamLevel, parent_of: np.ndarray, child_ptr: np.ndarray, child_ids: np.ndarray) -> tuple:
    """The layout arrays ``(feat, seg, ent)`` of ``level``'s weights in the tree ``parent_of`` (sibling lists
    ``child_ptr`` / ``child_ids``), where some of its own nodes changed parents (a label learned again after
    ``labels remove``, or a label without documents placed by its first ones), in one pass over the level's
    entries instead of a rebuild through the csc weights: the moved nodes' entries leave, every other entry's
    offset under its parent is renumbered for the new sibling lists (a move does not change their order: a
    parent's children ascend by id, so each segment stays sorted), and the moved nodes' weights join again under
    their new parents. Equal, array for array, to the rebuild (tests/test_beam_edit.py), which took 3.5 CPU s for
    yso-finna-en's 24,810 leaves on the critical path of a learn of a fifth of it (benchmarks/RESULTS.md)."""
    K_old = level.n_nodes
    moved = np.flatnonzero(parent_of[:K_old] != level.parent_of)
    new_parent, new_offset = places(parent_of, child_ptr, child_ids)
    feat, seg, ent, _ = _edited(level, moved, node_columns(level, moved), new_parent, new_offset,
                                renumber=new_offset[:K_old].astype(np.int32))
    return feat, seg, ent


def widened(W: sp.csc_matrix, d: int) -> sp.csc_matrix:
    """Weights ``W`` (``d_old + 1`` rows, the last the bias) over ``d >= d_old`` features: rows of zeros for the
    features past ``d_old`` (a vocabulary grown by a learn, :mod:`xmtc.linear.update`), the bias row moved to
    ``d``. ``W`` itself when ``d == d_old``."""
    d_old = W.shape[0] - 1
    if d == d_old:
        return W
    if d < d_old:
        raise ConfigError(f"cannot narrow weights of {d_old} features to {d}")
    W = sp.csc_matrix(W, dtype=np.float32)
    indices = np.where(W.indices == d_old, d, W.indices).astype(W.indices.dtype)
    return sp.csc_matrix((W.data.copy(), indices, W.indptr.copy()), shape=(d + 1, W.shape[1]))


def _places(level: BeamLevel) -> tuple[np.ndarray, np.ndarray]:
    """Per node of ``level``: its parent and its offset among the parent's children."""
    return places(level.parent_of, level.child_ptr, level.child_ids)


def _layout_args(level: BeamLevel) -> tuple:
    return (level.n_features, ptr(level.feat, np.int64), ptr(level.seg, np.int32), ptr(level.ent, ENTRY),
            ptr(level.child_ptr, np.int64), ptr(level.child_ids, np.int32))


def node_columns(level: BeamLevel, nodes) -> sp.csc_matrix:
    """The weights of ``nodes`` (distinct) as csc ``(d + 1, len(nodes))``, bias last: ``level.to_weights()[:,
    nodes]`` without converting the rest of the level."""
    nodes = np.asarray(nodes, dtype=np.int64)
    d = level.n_features
    slot = np.full(level.n_nodes, -1, dtype=np.int32)
    slot[nodes] = np.arange(nodes.size, dtype=np.int32)
    kern, args = native.lib(), _layout_args(level)
    # csc straight from the layout: count each column's weights, then fill them in feature order (rows sorted)
    per_node = np.zeros(nodes.size, dtype=np.int64)
    kern.xmtc_layout_columns(*args, ptr(slot, np.int32), ptr(per_node, np.int64), None, None)
    b = level.bias_w[nodes].astype(np.float32)
    has_b = np.flatnonzero(b)
    per_node[has_b] += 1  # the bias, row d, last in its column
    indptr = np.zeros(nodes.size + 1, dtype=np.int64)
    np.cumsum(per_node, out=indptr[1:])
    indices, data = np.empty(int(indptr[-1]), np.int32), np.empty(int(indptr[-1]), np.float32)
    cursor = indptr[:-1].copy()
    kern.xmtc_layout_columns(*args, ptr(slot, np.int32), ptr(cursor, np.int64), ptr(indices, np.int32),
                             ptr(data, np.float32))
    indices[cursor[has_b]] = d
    data[cursor[has_b]] = b[has_b]
    return sp.csc_matrix((data, indices, indptr), shape=(d + 1, nodes.size))


def merged(edits) -> tuple[np.ndarray, sp.csc_matrix | None]:
    """One edit from several ``(nodes, W_cols)`` applied in order: a node edited twice keeps its last columns."""
    edits = [(np.asarray(n, dtype=np.int64), sp.csc_matrix(W, dtype=np.float32)) for n, W in edits if len(n)]
    if not edits:
        return np.empty(0, dtype=np.int64), None
    nodes = np.concatenate([n for n, _ in edits])
    W = sp.hstack([W for _, W in edits], format="csc")
    _, last = np.unique(nodes[::-1], return_index=True)
    pick = np.sort(nodes.size - 1 - last)
    return nodes[pick], sp.csc_matrix(W[:, pick])


def replaced(level: BeamLevel, nodes, W_cols) -> BeamLevel:
    """``level`` with the weights of ``nodes`` (distinct) replaced by the columns of ``W_cols`` (csc
    ``(d + 1, len(nodes))``, bias last; zeros are no weight), every other node's untouched: the level
    :meth:`BeamLevel.from_weights` would build from the edited weights. The level itself when ``nodes`` is
    empty. One pass over the level's entries however many nodes change (:func:`merged` joins edits)."""
    nodes = np.asarray(nodes, dtype=np.int64)
    if nodes.size == 0:
        return level
    d = level.n_features
    W_cols = sp.csc_matrix(W_cols, dtype=np.float32)
    if W_cols.shape != (d + 1, nodes.size):
        raise ValueError(f"W_cols has shape {W_cols.shape}, expected {(d + 1, nodes.size)}")
    if np.unique(nodes).size != nodes.size:
        raise ValueError("nodes must be distinct")
    parent_of, offset = _places(level)
    feat, seg, ent, new_bias = _edited(level, nodes, W_cols, parent_of, offset)
    bias_w = np.array(level.bias_w, dtype=np.float32, copy=True)
    bias_w[nodes] = new_bias
    return BeamLevel(n_features=d, bias=level.bias, child_ptr=level.child_ptr, child_ids=level.child_ids, feat=feat,
                     seg=seg, ent=ent, bias_w=bias_w)


def _edited(level: BeamLevel, nodes: np.ndarray, W_cols: sp.csc_matrix, parent_of: np.ndarray, offset: np.ndarray,
            renumber: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The layout arrays ``(feat, seg, ent)`` of ``level`` with the entries of ``nodes`` dropped and the columns
    of ``W_cols`` (``level.n_features + 1`` rows, the bias last) joined as theirs, each node at ``parent_of[node]``
    and ``offset[node]``; and the nodes' new biases. ``renumber[node]``: every kept node's offset in the new
    layout (None: unchanged)."""
    d = level.n_features
    if not W_cols.has_canonical_format:  # the caller's matrix stays as given
        W_cols = W_cols.copy()
        W_cols.sum_duplicates()
    edited = np.zeros(level.n_nodes, dtype=np.uint8)
    edited[nodes] = 1
    # the new weights in the layout's order: feature, parent, offset under the parent (the columns taken in
    # (parent, offset) order; through scipy's csc -> csr and numpy gathers this took 1.6-2.5 s of yso-finna-en's
    # leaves, 27 million weights, against 0.84-1.28 s for the whole edit now)
    by_place = np.lexsort((offset[nodes], parent_of[nodes]))
    new_ptr, new_ent, new_p, new_bias = feature_sorted(W_cols.indptr.astype(np.int64),
                                                       W_cols.indices.astype(np.int32, copy=False), W_cols.data, d,
                                                       by_place, parent_of[nodes], offset[nodes])
    m = int(new_ptr[d])
    S, nnz = level.seg.shape[0], level.ent.shape[0]
    feat = np.empty((d + 1, 2), dtype=np.int64)
    seg = np.empty((S + m, 2), dtype=np.int32)
    ent = np.empty(nnz + m, dtype=ENTRY)
    counts = np.zeros(2, dtype=np.int64)
    native.lib().xmtc_layout_edit(*_layout_args(level), ptr(edited, np.uint8), ptr(new_ptr, np.int64),
                                  ptr(new_p, np.int32), ptr(new_ent, ENTRY), ptr(feat, np.int64), ptr(seg, np.int32),
                                  ptr(ent, ENTRY), ptr(counts, np.int64),
                                  None if renumber is None else ptr(renumber, np.int32))
    return feat, seg[:counts[0]], ent[:counts[1]], new_bias


