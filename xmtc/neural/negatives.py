"""Hard negatives for contrastive label retrieval: what the current encoder confuses, and batches built so
that the in-batch labels are themselves hard.

Two ways of the embedding family to make a mini-batch's negatives informative, both recomputed with the
current encoder before each epoch (:meth:`xmtc.neural.network.Network.begin_epoch`):

* **ANN-mined negatives** (DEXML's ``dist-de-hnm``, ANCE): embed every training text and every label with
  the current model, take each text's nearest label vectors by inner product from the
  :class:`~xmtc.index.ann.VectorIndex` and drop its positives: :func:`mine_hard_negatives` returns, per
  text, the ``k`` highest-scoring labels that are not positives. A step then samples a few of them per
  text (:func:`sample_negatives`, uniformly from that top-``k``, as DEXML samples from its top-100
  shortlist) and adds them to the batch's label set.
* **cluster-grouped mini-batches** (NGAME's negative-mining-aware batching): texts whose labels lie close
  together share a batch, so the labels of one text are hard negatives of the others at no mining cost.
  :func:`cluster_batches` gives each text the normalised mean of its positive labels' vectors, clusters
  these keys by balanced spherical 2-means (:func:`xmtc.index.kmeans.build_label_tree`, leaves of at most
  ``batch_size`` texts), lays the texts out leaf by leaf (sibling leaves are adjacent, so a batch that
  straddles two leaves still holds close texts) and cuts ``ceil(n / batch_size)`` batches, shuffled. NGAME
  clusters the texts' own embeddings; clustering by label vectors groups what the brief of this method asks
  for ("texts whose labels are close") and makes the batch's labels, not just its texts, similar.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def is_positive(Y: sp.csr_matrix, rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Bool array shaped like ``ids`` (n, k): whether label ``ids[i, j]`` is a positive of text ``rows[i]``
    (``-1`` ids are never positive). Vectorised: one sorted search over the (row, label) keys of ``Y``."""
    Y = sp.csr_matrix(Y)
    L = np.int64(max(Y.shape[1], int(ids.max(initial=-1)) + 1, 1))
    yr = np.repeat(np.arange(Y.shape[0], dtype=np.int64), np.diff(Y.indptr))
    keys = np.sort(yr * L + Y.indices.astype(np.int64))
    q = np.asarray(rows, dtype=np.int64)[:, None] * L + np.asarray(ids, dtype=np.int64)
    pos = np.searchsorted(keys, q)
    found = (pos < keys.size) & (keys[np.minimum(pos, max(keys.size - 1, 0))] == q) if keys.size else \
        np.zeros(q.shape, dtype=bool)
    return found & (ids >= 0)


def mine_hard_negatives(text_vecs: np.ndarray, label_vecs: np.ndarray, Y: sp.csr_matrix, k: int, *,
                        index=None, n_threads: int = 0) -> np.ndarray:
    """(n, k) int64: for every text, the ``k`` labels of highest inner product ``<text_vec, label_vec>`` that
    are not among its positives in ``Y``, best first (``-1`` where fewer exist).

    ``index``: a built :class:`~xmtc.index.ann.VectorIndex` over ``label_vecs`` (ids = label numbers), or
    None to build one here (exact search below its crossover, HNSW above)."""
    from ..index.ann import VectorIndex

    Y = sp.csr_matrix(Y)
    n = text_vecs.shape[0]
    out = np.full((n, k), -1, dtype=np.int64)
    if n == 0 or k == 0:
        return out
    if index is None:
        index = VectorIndex(metric="ip", n_threads=n_threads).build(label_vecs)
    max_pos = int(np.diff(Y.indptr).max(initial=0))
    want = min(k + max_pos, len(index))
    ids, _ = index.search(np.ascontiguousarray(text_vecs, dtype=np.float32), want)
    ids = ids.astype(np.int64)
    keep = (ids >= 0) & ~is_positive(Y, np.arange(n), ids)
    # the kept entries of each row, left-packed in their (best-first) order, cut to k
    order = np.argsort(~keep, axis=1, kind="stable")
    packed = np.take_along_axis(np.where(keep, ids, -1), order, axis=1)[:, :k]
    out[:, :packed.shape[1]] = packed
    return out


def sample_negatives(mined: np.ndarray, n_negatives: int, rng: np.random.Generator) -> np.ndarray:
    """(B, n_negatives) int64: per row, ``n_negatives`` distinct entries drawn uniformly from the row's
    valid (>= 0) mined labels; ``-1`` where a row has fewer."""
    B, k = mined.shape
    out = np.full((B, n_negatives), -1, dtype=np.int64)
    if B == 0 or k == 0 or n_negatives == 0:
        return out
    # random keys, invalid entries last: the first n_negatives of each row's order are a uniform sample
    keys = rng.random((B, k)) + (mined < 0)
    pick = np.argsort(keys, axis=1)[:, :n_negatives]
    out[:, :pick.shape[1]] = np.take_along_axis(mined, pick, axis=1)
    return out


def text_keys(Y: sp.csr_matrix, label_vecs: np.ndarray) -> np.ndarray:
    """(n, d) float32: each text's normalised mean of its positive labels' vectors (zero rows for texts
    without labels)."""
    Y = sp.csr_matrix(Y, dtype=np.float32)
    keys = np.asarray(Y @ label_vecs, dtype=np.float32)
    norms = np.linalg.norm(keys, axis=1, keepdims=True)
    return keys / np.where(norms > 0, norms, 1.0)


def cluster_batches(keys: np.ndarray, batch_size: int, rng: np.random.Generator, *, seed: int = 0,
                    n_threads: int | None = None) -> list[np.ndarray]:
    """``ceil(n / batch_size)`` batches of row ids in which rows with close ``keys`` share a batch (see the
    module docstring); the batches come in random order, each sorted."""
    from ..index.kmeans import build_label_tree

    n = keys.shape[0]
    if n == 0:
        return []
    if n <= batch_size:
        return [np.arange(n)]
    tree = build_label_tree(np.ascontiguousarray(keys, dtype=np.float32), branching=2, max_leaf_size=batch_size,
                            seed=seed, n_threads=n_threads)
    leaf = np.asarray(tree.chain[-1].indices, dtype=np.int64)
    layout = np.lexsort((rng.random(n), leaf))  # leaf by leaf, random inside a leaf
    batches = [np.sort(layout[s:s + batch_size]) for s in range(0, n, batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]
