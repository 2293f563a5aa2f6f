"""Combining several models' top-k lists into one ranking.

Only the candidates each member returned are known, so a label absent from a member's list counts
as score 0 there; this is how omikuji and PECOS average tree ensembles, and it keeps combination
cost proportional to n * members * k rather than n * L.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


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
    entries), ``chunk`` rows at a time: no numba here, so predicting with a tree ensemble -- XR-Linear's
    default on small label sets -- does not load numba's compiler (~54 MB, ~0.5 s) into a server.
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


def average_topk(parts: list[tuple[np.ndarray, np.ndarray]], n_labels: int, k: int,
                 weights: list[float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Weighted mean of several members' top-k scores, then top-k again."""
    if not parts:
        raise ValueError("average_topk needs at least one member's top-k lists")
    weights = [1.0] * len(parts) if weights is None else [float(w) for w in weights]
    if len(weights) != len(parts) or not all(np.isfinite(w) and w >= 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"weights must be {len(parts)} non-negative finite numbers, not all zero; got {weights}")
    total = float(sum(weights))
    acc = None
    for (idx, sc), w in zip(parts, weights):
        m = topk_matrix(idx, sc * np.float32(w / total), n_labels)
        acc = m if acc is None else acc + m
    return csr_topk(acc, k)


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


class Ensemble:
    """Several fitted models with the same labels, predicting together (average / rank / sigmoid average).

    >>> ens = Ensemble([xmtc.load("a"), xmtc.load("b")], combine="rank-average")   # doctest: +SKIP
    >>> ens.predict(["a text"], k=5)                                              # doctest: +SKIP
    """

    method = "ensemble"

    def __init__(self, models, combine: str = "average", weights=None, k_each: int = 20):
        from ..errors import ConfigError

        self.models = list(models)
        if not self.models:
            raise ConfigError("an ensemble needs at least one model")
        if combine not in COMBINERS:
            raise ConfigError(f"combine must be one of {', '.join(COMBINERS)}, got {combine!r}")
        names = self.models[0].labels_.names
        for i, m in enumerate(self.models[1:], 2):
            if m.labels_.names != names:
                raise ConfigError(f"model {i} has other labels than model 1 ({len(m.labels_)} vs {len(names)});"
                                  " ensemble members must share their label vocabulary")
        self.combine = combine
        self.weights = weights
        self.k_each = k_each
        self.labels_ = self.models[0].labels_
        self.label_counts_ = self.models[0].label_counts_
        self.n_train_ = self.models[0].n_train_

    def predict_topk(self, X, k: int = 5, *, progress: bool = False):
        parts = []
        for m in self.models:
            idx, sc = m.predict_topk(X, max(k, self.k_each), progress=progress)
            parts.append((idx, transform_scores(idx, sc, self.combine)))
        return average_topk(parts, len(self.labels_), k, self.weights)

    def predict(self, X, k: int = 5, *, progress: bool = False):
        from .base import named_predictions

        return named_predictions(self, X, k, progress)

    def explain(self, X, k: int = 5, n_terms: int = 10) -> list[list[dict]]:
        """Top-k labels with the members' contributions combined; see :mod:`xmtc.models.explain`."""
        from .explain import explain_ensemble

        return explain_ensemble(self, X, k, n_terms)

    def evaluate(self, X, Y, ks=(1, 3, 5), *, progress: bool = False, threshold=None) -> dict:
        """Metrics as :meth:`XMCModel.evaluate`, propensities from the first member's training counts."""
        from .base import evaluate_predictor

        return evaluate_predictor(self, X, Y, ks, progress, threshold)
