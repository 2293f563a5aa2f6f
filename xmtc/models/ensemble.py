"""Combining several models' top-k lists into one ranking.

Only the candidates each member returned are known, so a label absent from a member's list counts
as score 0 there; this is how omikuji and PECOS average tree ensembles, and it keeps combination
cost proportional to n * members * k rather than n * L.

Members may know different labels (models trained on different label sets, or on data where some
labels never occurred). The ensemble ranks the union of their label ids: the first member's labels in
its order, then each further member's new ones in its order; a label's display name, URI and text come
from the first member that has one. A label a member does not know is not one it scored low, and
what it counts as depends on what ``combine`` averages:

* ``average`` and ``sigmoid-average`` average score estimates on one scale (probabilities, or margins
  squashed into them): a member without the label has no estimate, so the label's score is the
  weighted mean over the members that know it (weights renormalised per label). A member that knows
  the label but left it out of its top list still counts with 0, as before.
* ``rank-average`` averages votes by position: every member spends the same reciprocal ranks
  1, 1/2, 1/3, ... on its own candidates, and a member that cannot rank a label ranks it below all of
  them, which is its lowest score, 0 (the same as a label it left out of its list). The mean is over
  all members; otherwise a label known to one member would keep that member's whole vote undiluted
  and beat labels every member agrees on.

When all members share one label vocabulary, both rules are the plain weighted mean of before.

PSP@k needs training counts: a label takes the count of the first member that knows it, rescaled to
the first member's number of training documents (``n_train_``) when that member's differs.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError


def topk_matrix(indices: np.ndarray, scores: np.ndarray, n_labels: int) -> sp.csr_matrix:
    """(indices, scores) with -1 padding -> csr (n, n_labels); duplicates in a row are summed."""
    n, k = indices.shape
    rows = np.repeat(np.arange(n, dtype=np.int64), k)
    cols = indices.ravel().astype(np.int64)
    vals = scores.ravel().astype(np.float32)
    keep = cols >= 0
    mat = sp.csr_matrix((vals[keep], (rows[keep], cols[keep])), shape=(n, n_labels), dtype=np.float32)
    mat.sum_duplicates()
    return mat


def csr_topk(mat: sp.csr_matrix, k: int, chunk: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    """Best k entries of every row, score descending, ties to the smaller label index; rows with fewer
    than k entries are padded with index -1 and score 0.

    Vectorised numpy on rows padded to the longest row (a combined top-k row holds at most members x k
    entries), ``chunk`` rows at a time: no JIT compiler here, so predicting with a tree ensemble -- XR-Linear's
    default on small label sets -- loads nothing beyond numpy (a JIT such as numba costs ~54 MB, ~0.5 s).
    """
    mat = sp.csr_matrix(mat)
    if not mat.has_canonical_format:  # duplicate entries of a cell mean their sum (scipy's semantics)
        mat = mat.copy()
        mat.sum_duplicates()
    n, k = mat.shape[0], int(k)
    out_idx = np.full((n, k), -1, dtype=np.int32)
    out_val = np.zeros((n, k), dtype=np.float32)
    for lo in range(0, n, chunk) if k > 0 else ():
        part = mat[lo:lo + chunk]
        lens = np.diff(part.indptr)
        width = int(lens.max(initial=0))
        if width == 0:
            continue
        rows = np.repeat(np.arange(part.shape[0]), lens)
        pos = np.arange(part.nnz) - np.repeat(part.indptr[:-1], lens)
        vals = np.full((part.shape[0], width), -np.inf, dtype=np.float32)
        cols = np.full((part.shape[0], width), np.iinfo(np.int32).max, dtype=np.int32)
        vals[rows, pos] = part.data
        cols[rows, pos] = part.indices
        order = np.lexsort((cols, -vals), axis=1)[:, :k]  # last key first: score descending, then label
        top_v = np.take_along_axis(vals, order, axis=1)
        top_c = np.take_along_axis(cols, order, axis=1)
        real = np.isfinite(top_v)
        take = min(k, width)
        out_idx[lo:lo + part.shape[0], :take] = np.where(real, top_c, -1)
        out_val[lo:lo + part.shape[0], :take] = np.where(real, top_v, 0.0)
    return out_idx, out_val


# entries (summed over members) up to which the top-k arrays are averaged directly (_summed_topk): its sorts
# beat scipy's set-up for a few texts, but for 20,000 texts x 2 trees x 100 it took 15.4 s against the sparse
# sum's 3.8 s (same numbers; a loaded 2-core machine)
ARRAY_PATH_MAX = 1 << 15


def average_topk(parts: list[tuple[np.ndarray, np.ndarray]], n_labels: int, k: int,
                 weights: list[float] | None = None, known: list[np.ndarray] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Weighted mean of several members' top-k scores, then top-k again.

    ``known``: per member, a boolean mask over the ``n_labels`` labels it knows; a label's mean is then
    taken over the members that know it only (see the module doc). ``None``: every member knows every label.
    """
    if not parts:
        raise ValueError("average_topk needs at least one member's top-k lists")
    weights = [1.0] * len(parts) if weights is None else [float(w) for w in weights]
    if len(weights) != len(parts) or not all(np.isfinite(w) and w >= 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"weights must be {len(parts)} non-negative finite numbers, not all zero; got {weights}")
    total = float(sum(weights))
    if known is None and sum(np.asarray(i).size for i, _ in parts) <= ARRAY_PATH_MAX:
        return _summed_topk(parts, [np.float32(w / total) for w in weights], k)
    acc = None
    for (idx, sc), w in zip(parts, weights):
        m = topk_matrix(idx, sc * np.float32(w / total), n_labels)
        acc = m if acc is None else acc + m
    if known is not None:
        if len(known) != len(parts):
            raise ValueError(f"known must hold one label mask per member ({len(parts)}), got {len(known)}")
        known_w = sum(np.asarray(mask, dtype=bool).astype(np.float64) * w for mask, w in zip(known, weights))
        partial = known_w < total
        if np.any(partial):  # labels some members lack: divide by the weight of those that know them
            scale = np.ones(n_labels, dtype=np.float64)
            scale[partial] = np.divide(total, known_w[partial], out=np.zeros(int(partial.sum())),
                                       where=known_w[partial] > 0)
            acc = sp.csr_matrix(acc.multiply(scale[None, :].astype(np.float32)), dtype=np.float32)
    return csr_topk(acc, k)


def _summed_topk(parts: list[tuple[np.ndarray, np.ndarray]], scales: list, k: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`average_topk` without label masks, on the top-k arrays themselves: the same numbers as summing the
    members' :func:`topk_matrix` and taking :func:`csr_topk` (float32 sums in member order; with two or more
    members a sum of 0 is no entry, as scipy's sparse sum drops it), for a cost in proportion to the entries
    rather than scipy's per-matrix set-up, which was most of a one-text prediction's averaging."""
    n = parts[0][0].shape[0]
    ids = np.concatenate([np.asarray(i, dtype=np.int64) for i, _ in parts], axis=1)
    vals = np.concatenate([(np.asarray(s) * c).astype(np.float32) for (_, s), c in zip(parts, scales)], axis=1)
    rows = np.repeat(np.arange(n, dtype=np.int64), ids.shape[1])
    ids, vals = ids.ravel(), vals.ravel()
    keep = ids >= 0
    rows, ids, vals = rows[keep], ids[keep], vals[keep]
    # by row, then label; stable, so a label's entries stay in member order (one integer key: np.lexsort took
    # 7.5 s on 4M entries here, argsort of the combined key 1.0 s)
    order = np.argsort(rows * (int(ids.max(initial=0)) + 1) + ids, kind="stable")
    rows, ids, vals = rows[order], ids[order], vals[order]
    first = np.ones(rows.size, dtype=bool)
    first[1:] = (rows[1:] != rows[:-1]) | (ids[1:] != ids[:-1])
    sums = np.zeros(int(first.sum()), dtype=np.float32)
    np.add.at(sums, np.cumsum(first) - 1, vals)  # one at a time, in order: ((0 + a) + b) + ...
    rows, ids = rows[first], ids[first]
    if len(parts) > 1:
        nz = sums != 0
        rows, ids, sums = rows[nz], ids[nz], sums[nz]
    # per row: score descending, then the smaller label (rows and labels are ascending already: two stable sorts)
    order = np.argsort(-sums, kind="stable")
    order = order[np.argsort(rows[order], kind="stable")]
    rows, ids, sums = rows[order], ids[order], sums[order]
    starts = np.searchsorted(rows, np.arange(n))
    rank = np.arange(rows.size) - starts[rows]
    top = rank < k
    out_idx = np.full((n, max(int(k), 0)), -1, dtype=np.int32)
    out_val = np.zeros((n, max(int(k), 0)), dtype=np.float32)
    out_idx[rows[top], rank[top]] = ids[top]
    out_val[rows[top], rank[top]] = sums[top]
    return out_idx, out_val


COMBINERS = ("average", "rank-average", "sigmoid-average")


def transform_scores(indices: np.ndarray, scores: np.ndarray, combine: str) -> np.ndarray:
    """Per-member score transform before averaging (X-Transformer's ensembles).

    * ``average``: the scores as they are (members on the same scale, e.g. the same method);
    * ``rank-average``: ``1 / (rank + 1)``, scale-free, for members whose scores are not comparable;
    * ``sigmoid-average``: ``sigmoid(score)``, squashing unbounded margins into (0, 1).
    Padding (-1) stays 0.
    """
    if combine == "average":
        out = np.asarray(scores, dtype=np.float32)
    elif combine == "rank-average":
        out = np.broadcast_to(1.0 / np.arange(1, indices.shape[1] + 1, dtype=np.float32), indices.shape)
    elif combine == "sigmoid-average":
        out = 1.0 / (1.0 + np.exp(-np.asarray(scores, dtype=np.float64)))
    else:
        raise ValueError(f"combine must be one of {', '.join(COMBINERS)}, got {combine!r}")
    return np.where(indices >= 0, out, 0.0).astype(np.float32)


def union_vocab(vocabs) -> tuple:
    """``(union vocabulary, per member an int64 array: its label id -> union id)``; see the module doc."""
    from ..data.labels import LabelVocab

    first = vocabs[0]
    if all(v.names == first.names for v in vocabs[1:]):
        ids = np.arange(len(first), dtype=np.int64)
        return first, [ids] * len(vocabs)
    index: dict[str, int] = {}
    names: list[str] = []
    maps = []
    for v in vocabs:
        for n in v.names:
            if n not in index:
                index[n] = len(names)
                names.append(n)
        maps.append(np.fromiter((index[n] for n in v.names), dtype=np.int64, count=len(v.names)))

    def merged(attr: str):
        if all(getattr(v, attr) is None for v in vocabs):
            return None
        out = [""] * len(names)
        for v, ids in zip(vocabs, maps):
            values = getattr(v, attr)
            for j, value in enumerate(values or ()):
                if value and not out[ids[j]]:
                    out[ids[j]] = value
        return out

    return LabelVocab(names, display=merged("display"), texts=merged("texts"), uris=merged("uris")), maps


class Ensemble:
    """Several fitted models predicting together (average / rank / sigmoid average) over the union of
    their labels; see the module doc for a label that some members lack.

    >>> ens = Ensemble([xmtc.load("a"), xmtc.load("b")], combine="rank-average")   # doctest: +SKIP
    >>> ens.predict(["a text"], k=5)                                              # doctest: +SKIP
    """

    method = "ensemble"

    def __init__(self, models, combine: str = "average", weights=None, k_each: int = 20):
        self.models = list(models)
        if not self.models:
            raise ConfigError("an ensemble needs at least one model")
        if combine not in COMBINERS:
            raise ConfigError(f"combine must be one of {', '.join(COMBINERS)}, got {combine!r}")
        self.combine = combine
        self.weights = weights
        self.k_each = k_each
        self.labels_, self.member_ids_ = union_vocab([m.labels_ for m in self.models])
        first = self.models[0]
        self.n_train_ = first.n_train_
        self.shared_labels_ = all(len(ids) == len(self.labels_) and np.array_equal(ids, np.arange(len(ids)))
                                  for ids in self.member_ids_)
        if self.shared_labels_:
            self.label_counts_ = first.label_counts_
            self.known_ = None
            return
        self.known_ = []
        counts = np.full(len(self.labels_), np.nan)
        for m, ids in zip(self.models, self.member_ids_):
            mask = np.zeros(len(self.labels_), dtype=bool)
            mask[ids] = True
            self.known_.append(mask)
            own = np.asarray(m.label_counts_, dtype=np.float64)
            if m.n_train_ != self.n_train_:
                own = own * (self.n_train_ / m.n_train_)
            fresh = np.isnan(counts[ids])
            counts[ids[fresh]] = own[fresh]
        exact = all(m.n_train_ == self.n_train_ for m in self.models) \
            and np.asarray(first.label_counts_).dtype.kind in "iu"
        self.label_counts_ = counts.astype(np.int64) if exact else counts

    def predict_topk(self, X, k: int = 5, *, progress: bool = False):
        """The members' top-k combined; like a model's, at most as wide as the ensemble's labels."""
        from .predictor import checked_k

        k = checked_k(k, len(self.labels_))
        if (X.shape[0] if sp.issparse(X) else len(X)) == 0:
            from .topk import empty_topk
            return empty_topk(k)
        parts = []
        for m, ids in zip(self.models, self.member_ids_):
            idx, sc = m.predict_topk(X, max(k, self.k_each), progress=progress)
            if not self.shared_labels_:
                idx = np.where(idx >= 0, ids[np.where(idx >= 0, idx, 0)], -1)
            parts.append((idx, transform_scores(idx, sc, self.combine)))
        known = None if self.shared_labels_ or self.combine == "rank-average" else self.known_
        return average_topk(parts, len(self.labels_), k, self.weights, known)

    def known_fraction(self, X):
        """Per text, the largest share of known words among the members that have a vocabulary (a text
        one member can read is not unreadable to the ensemble); None when no member has one."""
        parts = [f for f in (m.known_fraction(X) for m in self.models) if f is not None]
        return np.max(parts, axis=0) if parts else None

    def predict(self, X, k: int = 5, *, progress: bool = False):
        from .predictor import named_predictions

        return named_predictions(self, X, k, progress)

    def explain(self, X, k: int = 5, n_terms: int = 10) -> list[list[dict]]:
        """Top-k labels with the members' contributions combined; see :mod:`xmtc.models.explain`."""
        from .explain import explain_ensemble

        return explain_ensemble(self, X, k, n_terms)

    def evaluate(self, X, Y, ks=(1, 3, 5), *, progress: bool = False, threshold=None) -> dict:
        """Metrics as :meth:`XMCModel.evaluate`, propensities from ``label_counts_`` (see the module doc)."""
        from .predictor import evaluate_predictor

        return evaluate_predictor(self, X, Y, ks, progress, threshold)
