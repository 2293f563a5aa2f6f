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

Only the weights of the query's own features are read, from the beam-search layout
(:class:`~xmtc.linear.beam.BeamLevel`), so one explanation costs the query's features times the
nodes that use them, never the size of the model.
"""

from __future__ import annotations

import numpy as np

from .beam import BeamLevel, post_processor_code


def _feature_rows(level: BeamLevel, features: np.ndarray):
    """All weights of the given features at ``level`` as coo arrays (position in ``features``, node, value)."""
    pos_parts, node_parts, val_parts = [], [], []
    for p, f in enumerate(features.tolist()):
        s0, s1 = int(level.feat[f, 0]), int(level.feat[f + 1, 0])
        e0, e1 = int(level.feat[f, 1]), int(level.feat[f + 1, 1])
        if e1 == e0:
            continue
        parents = np.repeat(level.seg[s0:s1, 0], level.seg[s0:s1, 1])
        ent = level.ent[e0:e1]
        node_parts.append(level.child_ids[level.child_ptr[parents] + ent["col"]])
        val_parts.append(ent["val"])
        pos_parts.append(np.full(e1 - e0, p, dtype=np.int64))
    if not pos_parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0, dtype=np.float32)
    return np.concatenate(pos_parts), np.concatenate(node_parts).astype(np.int64), np.concatenate(val_parts)


def label_paths(levels: list[BeamLevel], labels: np.ndarray) -> np.ndarray:
    """(len(labels), D): the node of each level on each label's path (last column = the label)."""
    labels = np.asarray(labels, dtype=np.int64)
    out = np.empty((labels.shape[0], len(levels)), dtype=np.int64)
    node = labels
    for t in range(len(levels) - 1, -1, -1):
        out[:, t] = node
        node = levels[t].parent_of[node].astype(np.int64)
    return out


def path_contributions(levels: list[BeamLevel], features: np.ndarray, values: np.ndarray, labels,
                       post_processor: str = "l3-hinge") -> dict[str, np.ndarray]:
    """Contributions of one query's features to each label's path margins.

    ``features``/``values``: the query's non-zero feature ids and values (a csr row). Returns
    ``contrib`` (len(labels), len(features)): feature j's summed ``x_j W_t[j, n_t]`` over the levels
    the score uses; ``margins`` (len(labels), D): each level's margin ``s_t`` (bias included);
    ``bias`` (len(labels),): the bias part of the used levels; ``used`` (D,) bool: which levels count;
    ``score`` (len(labels),): the post-processed score recomputed from the margins.
    """
    code = post_processor_code(post_processor)
    features = np.asarray(features, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    paths = label_paths(levels, labels)
    D = len(levels)
    used = np.ones(D, dtype=bool)
    if post_processor == "noop":
        used[:-1] = False
    contrib = np.zeros((labels.shape[0], features.shape[0]))
    margins = np.zeros((labels.shape[0], D))
    bias = np.zeros(labels.shape[0])
    for t, level in enumerate(levels):
        pos, node, val = _feature_rows(level, features)
        # a dense (features x K_t) block would grow with the level size; match the path nodes instead
        for r in range(labels.shape[0]):
            hit = node == paths[r, t]
            part = np.zeros(features.shape[0])
            np.add.at(part, pos[hit], val[hit].astype(np.float64) * values[pos[hit]])
            b = float(level.bias) * float(level.bias_w[paths[r, t]])
            margins[r, t] = part.sum() + b
            if used[t]:
                contrib[r] += part
                bias[r] += b
    if code == 0:  # l3-hinge
        score = np.exp(-(np.maximum(0.0, 1.0 - margins) ** 3).sum(axis=1))
    elif code == 1:  # sigmoid
        score = np.prod(1.0 / (1.0 + np.exp(-margins)), axis=1)
    else:
        score = margins[:, -1].copy()
    return {"contrib": contrib, "margins": margins, "bias": bias, "used": used, "score": score}
