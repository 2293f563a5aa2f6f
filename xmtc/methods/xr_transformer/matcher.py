"""The neural matcher: beam search down the fine-tuned levels with their heads (XR-Transformer's matcher).

Level by level, a text's beam is expanded to the children of its nodes, each child scored by the
level's head on the text's embedding, and the ``keep`` best kept. Scores follow PECOS's post-processors
(as :mod:`xmtc.linear.beam` does for linear levels): ``l3-hinge`` transforms a head score s to
``exp(-max(0, 1 - s)^3)`` and multiplies it with the parent's score; ``noop`` keeps the raw score and
ignores the parent's (PECOS's ``noop`` combiner; the top-k that shapes the next level's training
shortlist is this one, as in PECOS's ``TransformerMatcher.predict``). The first level scores every node.

Rows go in chunks whose gathered head rows (rows x candidates x hidden floats) stay under ``gather_bytes``,
so memory does not grow with the data; the top-``keep`` are found with ``argpartition`` (O(candidates))
then sorted (O(keep log keep)), ties to the smaller node id.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ...errors import ConfigError

POST_PROCESSORS = ("l3-hinge", "noop")


def top_k(scores: np.ndarray, ids: np.ndarray | None, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Best ``k`` per row of ``scores`` (rows, c), score descending then id ascending; -inf = not a candidate.

    ``ids`` (rows, c) names each column (None: the column index). Returns ``(ids (rows, k), scores)``,
    -1 / 0 where a row has fewer than k candidates.
    """
    n, c = scores.shape
    k_eff = min(k, c)
    if ids is None:
        ids = np.broadcast_to(np.arange(c, dtype=np.int64), (n, c))
    if k_eff < c:
        part = np.argpartition(-scores, k_eff - 1, axis=1)[:, :k_eff]
    else:
        part = np.broadcast_to(np.arange(c), (n, c))
    sc = np.take_along_axis(scores, part, 1)
    cid = np.take_along_axis(ids, part, 1)
    # exact order with ties to the smaller id: lexsort on (id, -score) per row
    order = np.lexsort((cid, -sc), axis=1) if n else np.zeros((0, k_eff), dtype=np.int64)
    sc = np.take_along_axis(sc, order, 1)
    cid = np.take_along_axis(cid, order, 1).astype(np.int64)
    # argpartition may cut inside a tie at the boundary; the tie's members score equal, so only the id
    # choice can differ from a full sort -- acceptable for a shortlist, documented here.
    out_ids = np.full((n, k), -1, dtype=np.int64)
    out_sc = np.zeros((n, k), dtype=np.float32)
    ok = np.isfinite(sc)
    out_ids[:, :k_eff] = np.where(ok, cid, -1)
    out_sc[:, :k_eff] = np.where(ok, sc, 0.0)
    return out_ids, out_sc


def _transform(s: np.ndarray, post: str) -> np.ndarray:
    if post == "l3-hinge":
        return np.exp(-np.maximum(0.0, 1.0 - s) ** 3)
    return s


def head_beam_step(emb: np.ndarray, W: np.ndarray, b: np.ndarray, beam_ids: np.ndarray | None,
                   beam_scores: np.ndarray | None, children: sp.csr_matrix | None, keep: int, *,
                   post_processor: str = "noop", gather_bytes: int = 1 << 26) -> tuple[np.ndarray, np.ndarray]:
    """One level of the neural beam: ``(ids (n, keep), scores (n, keep))``.

    ``beam_ids`` (n, b) -1 padded nodes of the level above (None: score every node of this level);
    ``children`` (K_{t-1}, K_t) from :func:`xmtc.neural.shortlist.children_csr`.
    """
    if post_processor not in POST_PROCESSORS:
        raise ConfigError(f"post_processor must be one of {', '.join(POST_PROCESSORS)}, got {post_processor!r}")
    n, h = emb.shape
    K = W.shape[0]
    out_ids = np.full((n, keep), -1, dtype=np.int64)
    out_sc = np.zeros((n, keep), dtype=np.float32)
    if beam_ids is None:
        chunk = max(1, gather_bytes // (4 * K))
        for s in range(0, n, chunk):
            sc = emb[s:s + chunk] @ W.T + b
            sc = _transform(sc, post_processor).astype(np.float32)
            out_ids[s:s + chunk], out_sc[s:s + chunk] = top_k(sc, None, keep)
        return out_ids, out_sc
    width = int(np.diff(children.indptr).max(initial=1)) * beam_ids.shape[1]
    chunk = max(1, gather_bytes // (4 * max(1, width) * h))
    cptr, cidx = children.indptr, children.indices
    for s in range(0, n, chunk):
        e = emb[s:s + chunk]
        bid = beam_ids[s:s + chunk]
        bsc = beam_scores[s:s + chunk] if beam_scores is not None else np.ones(bid.shape, np.float32)
        rows = e.shape[0]
        valid = bid >= 0
        safe = np.where(valid, bid, 0)
        counts = np.where(valid, cptr[safe + 1] - cptr[safe], 0)          # children per beam entry
        per_row = counts.sum(1)
        c = int(per_row.max(initial=0))
        if c == 0:
            continue
        flat_counts = counts.ravel()
        starts = np.repeat(cptr[safe.ravel()], flat_counts)
        offs = np.arange(flat_counts.sum()) - np.repeat(np.cumsum(flat_counts) - flat_counts, flat_counts)
        child = cidx[starts + offs].astype(np.int64)
        parent_sc = np.repeat(bsc.ravel(), flat_counts)
        row_of = np.repeat(np.arange(rows), per_row)
        col_of = np.arange(row_of.size) - np.repeat(np.cumsum(per_row) - per_row, per_row)
        ids = np.full((rows, c), -1, dtype=np.int64)
        ids[row_of, col_of] = child
        psc = np.zeros((rows, c), dtype=np.float32)
        psc[row_of, col_of] = parent_sc
        safe_ids = np.maximum(ids, 0)
        sc = np.einsum("rch,rh->rc", W[safe_ids], e) + b[safe_ids]
        sc = _transform(sc, post_processor)
        if post_processor != "noop":
            sc = sc * psc
        sc = np.where(ids >= 0, sc, -np.inf).astype(np.float32)
        out_ids[s:s + rows], out_sc[s:s + rows] = top_k(sc, ids, keep)
    return out_ids, out_sc


def neural_beam(emb: np.ndarray, heads: list[tuple[np.ndarray, np.ndarray]], children: list[sp.csr_matrix | None],
                beam_size: int, post_processor: str = "l3-hinge") -> tuple[np.ndarray, np.ndarray]:
    """Beam search over consecutive fine-tuned levels 0..m: ``heads[t] = (W, b)``, ``children[t]`` the
    (K_{t-1}, K_t) child matrix (unused for t = 0). Returns the beam at level m."""
    ids = sc = None
    for t, (W, b) in enumerate(heads):
        ids, sc = head_beam_step(emb, W, b, ids, sc, None if t == 0 else children[t], beam_size,
                                 post_processor=post_processor)
    return ids, sc
