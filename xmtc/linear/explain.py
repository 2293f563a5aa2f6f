"""Exact per-feature contributions to a label's score in a hierarchical linear model.

A label's score in XR-Linear is built from the linear margins of the nodes on its tree path
(root's child ... leaf = the label): at level t the node n_t scores ``s_t = sum_j x_j W_t[j, n_t] +
bias * b_t[n_t]``, and the post-processor ``f`` turns the margins into the score:

* ``l3-hinge``: ``score = prod_t exp(-max(0, 1 - s_t)^3)``;
* ``sigmoid``:  ``score = prod_t 1 / (1 + exp(-s_t))``;
* ``noop``:     ``score = s_D`` (only the ranker's margin; see :mod:`xmtc.linear.beam`).

The score is increasing in every margin it uses, so the margins are what a feature can push. We
define feature j's **contribution** as ``sum_t x_j W_t[j, n_t]`` over the levels the score uses (every
level; the last one only for ``noop``): its exact share of the *summed path margin*
``sum_t s_t = sum_j contribution_j + bias part``. This is an exact decomposition of the margins, not of
the (non-linear) score itself; the per-level margins are returned too, so ``f`` of them gives back the
beam search's score exactly (the tests check both identities).

Only the weights of the query's own features at the path's nodes are read, from the beam-search
layout (:class:`~xmtc.linear.beam.BeamLevel`): one binary search per (feature, path node), so one
explanation costs the query's features times the path length, never the size of the model.
"""

from __future__ import annotations

import numpy as np

from .beam import BeamLevel, post_processor_code


def _segment_offsets(level: BeamLevel) -> np.ndarray:
    """Entry offset of every (feature, parent) segment (segments follow one another in entry order);
    computed once per level and kept on it."""
    offsets = getattr(level, "_explain_seg_offsets", None)
    if offsets is None:
        offsets = np.zeros(level.seg.shape[0] + 1, dtype=np.int64)
        np.cumsum(level.seg[:, 1], out=offsets[1:])
        level._explain_seg_offsets = offsets
    return offsets


def parent_of(level: BeamLevel) -> np.ndarray:
    """``level.parent_of`` (rebuilt from the layout on every access), kept on the level after the first call."""
    parent_of = getattr(level, "_explain_parent_of", None)
    if parent_of is None:
        parent_of = level._explain_parent_of = level.parent_of
    return parent_of


def _path_weights(level: BeamLevel, features: np.ndarray, nodes: np.ndarray, parent_of: np.ndarray) -> np.ndarray:
    """(len(features), len(nodes)): the weight ``W[f, node]`` of each query feature at each given node.

    Reads one segment per (feature, node's parent), found by binary search in the feature's sorted
    parent list, then the node's entry in it: the cost follows the query and the path, not the number
    of nodes that use a feature (a dense embedding dimension is used by every node of a level).
    """
    out = np.zeros((features.shape[0], nodes.shape[0]), dtype=np.float64)
    if nodes.shape[0] == 0:
        return out
    parents = parent_of[nodes].astype(np.int64)
    lo = level.child_ptr[parents]
    hi = level.child_ptr[parents + 1]
    offset = np.array([np.searchsorted(level.child_ids[a:b], n) for a, b, n in zip(lo, hi, nodes)], dtype=np.int64)
    seg_off = _segment_offsets(level)
    for i, f in enumerate(features.tolist()):
        s0, s1 = int(level.feat[f, 0]), int(level.feat[f + 1, 0])
        if s1 == s0:
            continue
        seg_parents = level.seg[s0:s1, 0]
        pos = np.searchsorted(seg_parents, parents)
        found = pos < (s1 - s0)
        found[found] = seg_parents[pos[found]] == parents[found]
        for r in np.flatnonzero(found).tolist():
            s = s0 + int(pos[r])
            cols = level.ent["col"][seg_off[s]:seg_off[s + 1]]
            j = int(np.searchsorted(cols, offset[r]))
            if j < cols.shape[0] and cols[j] == offset[r]:
                out[i, r] = float(level.ent["val"][seg_off[s] + j])
    return out


def label_paths(levels: list[BeamLevel], labels: np.ndarray) -> np.ndarray:
    """(len(labels), D): the node of each level on each label's path (last column = the label)."""
    labels = np.asarray(labels, dtype=np.int64)
    out = np.empty((labels.shape[0], len(levels)), dtype=np.int64)
    node = labels
    for t in range(len(levels) - 1, -1, -1):
        out[:, t] = node
        node = parent_of(levels[t])[node].astype(np.int64)
    return out


def path_contributions(levels: list[BeamLevel], features: np.ndarray, values: np.ndarray, labels,
                       post_processor: str = "l3-hinge", label_score: str = "product") -> dict[str, np.ndarray]:
    """Contributions of one query's features to each label's path margins.

    ``features``/``values``: the query's non-zero feature ids and values (a csr row). Returns
    ``contrib`` (len(labels), len(features)): feature j's summed ``x_j W_t[j, n_t]`` over the levels
    the score uses; ``margins`` (len(labels), D): each level's margin ``s_t`` (bias included);
    ``bias`` (len(labels),): the bias part of the used levels; ``used`` (D,) bool: which levels count;
    ``score`` (len(labels),): the post-processed score recomputed from the margins. With ``label_score="ranker"``
    (:func:`~xmtc.linear.beam.beam_search`) only the label's own level counts, as with ``noop``.
    """
    code = post_processor_code(post_processor)
    features = np.asarray(features, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    paths = label_paths(levels, labels)
    D = len(levels)
    used = np.ones(D, dtype=bool)
    if post_processor == "noop" or label_score == "ranker":
        used[:-1] = False
    contrib = np.zeros((labels.shape[0], features.shape[0]))
    margins = np.zeros((labels.shape[0], D))
    bias = np.zeros(labels.shape[0])
    for t, level in enumerate(levels):
        W = _path_weights(level, features, paths[:, t], parent_of(level))   # (features, labels)
        part = (W * values[:, None]).T
        b = float(level.bias) * level.bias_w[paths[:, t]].astype(np.float64)
        margins[:, t] = part.sum(axis=1) + b
        if used[t]:
            contrib += part
            bias += b
    if code == 0:  # l3-hinge
        score = np.exp(-(np.maximum(0.0, 1.0 - margins[:, used]) ** 3).sum(axis=1))
    elif code == 1:  # sigmoid
        score = np.prod(1.0 / (1.0 + np.exp(-margins[:, used])), axis=1)
    else:
        score = margins[:, -1].copy()
    return {"contrib": contrib, "margins": margins, "bias": bias, "used": used, "score": score}
