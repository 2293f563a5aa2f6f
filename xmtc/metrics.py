"""Ranking metrics for extreme multi-label classification, all in percent.

One implementation serves the estimators' ``evaluate``, the CLI and the benchmarks, so every
library in a comparison is scored the same way. Every metric is averaged over all test documents:
a document without true labels scores 0 (it has nothing to hit), so all metrics share one
denominator and a model is never rewarded for test rows it cannot be right about.

- ``P@k``: hits among the top k, over k.
- ``R@k``: hits among the top k, over the document's number of true labels.
- ``nDCG@k``: DCG of the top k (gain 1, discount 1/log2(rank + 1)) over the ideal DCG of
  min(k, |true labels|) hits.
- ``PSP@k``: propensity-scored precision (Jain, Prabhu, Varma, KDD'16), normalised as the
  Extreme Classification Repository's tools do: the summed inverse propensities of the hits over the
  best achievable sum (each document's k rarest true labels), as a ratio of totals. Propensity
  ``p_l = 1 / (1 + C (N_l + B)^-A)``, ``C = (ln N - 1)(B + 1)^A``, with ``N_l`` label l's training
  count and ``N`` the number of training documents; A = 0.55, B = 1.5 by default (their values for
  Wikipedia-like sets; Amazon sets use 0.6 / 2.6).
- ``coverage@k``: the share of labels that occur in the test set that the model predicts correctly
  at least once in some top k (a rough view of how much of the label space it reaches).
- ``F1@k`` / ``macro-F1@k`` (``f1=True``; :func:`f1_scores`): the top k of each document taken as its
  predicted label set, i.e. the binary (n, L) matrix with a 1 for every suggested label: napkinXC's F1 at k.
  Micro: ``2 TP / (2 TP + FP + FN)`` summed over all labels (FN counts every true label not suggested).
  Macro: the mean over labels of each label's ``2 TP_l / (2 TP_l + FP_l + FN_l)``, over the labels that
  occur in the test set or are suggested at least once. A label with neither has no F1 (0/0); leaving
  it out, rather than counting it 0 or 1, keeps the figure independent of how many labels the model
  knows but the test set never mentions. This is scikit-learn's ``f1_score(Y, P, average="macro",
  labels=those labels)``, with any ``zero_division``; LibMultiLabel's Macro-F1 (0 for such labels, all L
  columns) is this figure times the number of those labels over L.

Predictions are ``(indices, scores)`` arrays of shape (n, k') with ``-1`` padding for missing
entries; the ranking metrics use only the order of the columns. The score metrics (below) also read
the scores, which they take as probabilities in [0, 1] (what a calibrated model returns):

- ``coverage@P90`` / ``coverage@P95`` (:func:`coverage_at_precision`): the largest share of test
  documents whose top-1 suggestion could be accepted automatically above ONE score threshold while
  the accepted suggestions keep precision >= 90% (95%). Documents tied at the threshold's score are
  accepted together (a threshold cannot split equal scores); 0 when no threshold reaches the precision.
- ``ECE@k`` (:func:`expected_calibration_error`): expected calibration error of all top-k
  suggestions pooled, 10 equal-width score bins on [0, 1]: ``sum_b |B_b|/N * |acc(B_b) - conf(B_b)|``
  with acc the share of correct suggestions and conf their mean score (scores clipped to [0, 1]).
  Reported in percent like everything here: the ECE <= 0.05 bar is ``ECE@5 <= 5``.
- ``F1@T`` (:func:`f1_at_threshold`): micro-averaged F1 of the suggestions among the top k whose
  score is >= T (one global T, or one per label): ``2 TP / (2 TP + FP + FN)``, FN counting every true
  label not accepted, also those outside the top k. ``macro-F1@T``: the macro average of the same
  accepted suggestions, over labels as for ``macro-F1@k`` (LibMultiLabel reports F1 at a threshold).

Per label (:func:`per_label_metrics`, ``xmtc evaluate --per-label``): for each label, its support (test
documents that carry it), how often it is suggested, and P, R and F1 of those suggestions, the
suggestions being whatever lists are passed in (the top k, or those left after a threshold).
Summing TP, suggestions and support over the labels gives back the micro figures above (F1@T).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import scipy.sparse as sp

from .errors import ConfigError, DataFormatError

__all__ = ["evaluate", "inverse_propensity", "hits_matrix", "coverage_at_precision", "expected_calibration_error",
           "f1_at_threshold", "f1_scores", "per_label_metrics"]


def inverse_propensity(train_label_counts, n_train: int, a: float = 0.55, b: float = 1.5) -> np.ndarray:
    """``1 / p_l``: the weight a hit on label l earns in PSP@k (rare labels weigh more)."""
    counts = np.asarray(train_label_counts, dtype=np.float64)
    if n_train < 1:
        raise ConfigError(f"n_train must be >= 1 for propensities, got {n_train}")
    c = (np.log(n_train) - 1.0) * (b + 1.0) ** a
    return 1.0 + c * (counts + b) ** (-a)


def binary_csr(Y) -> sp.csr_matrix:
    Y = sp.csr_matrix(Y, dtype=np.float32, copy=True)
    Y.sum_duplicates()
    Y.eliminate_zeros()
    Y.sort_indices()
    Y.data[:] = 1.0
    return Y


def hits_matrix(Y: sp.csr_matrix, indices: np.ndarray) -> np.ndarray:
    """Boolean (n, k): is ``indices[i, j]`` a true label of row i? One searchsorted, no row loop."""
    n, _ = indices.shape
    n_cols = np.int64(max(Y.shape[1], int(indices.max(initial=-1)) + 1, 1))
    rows = np.repeat(np.arange(Y.shape[0], dtype=np.int64), np.diff(Y.indptr))
    true_keys = rows * n_cols + Y.indices.astype(np.int64)  # sorted: csr rows ascend, indices sorted
    if true_keys.size == 0:
        return np.zeros(indices.shape, dtype=bool)
    query = np.arange(n, dtype=np.int64)[:, None] * n_cols + indices.astype(np.int64)
    pos = np.minimum(np.searchsorted(true_keys, query), true_keys.size - 1)
    return (true_keys[pos] == query) & (indices >= 0) & first_occurrence(indices)


def first_occurrence(indices: np.ndarray) -> np.ndarray:
    """False where a row repeats an id it predicted earlier: a label is found once, however often listed."""
    order = np.argsort(indices, axis=1, kind="stable")  # equal ids keep their left-to-right order
    ranked = np.take_along_axis(indices, order, axis=1)
    repeat = np.zeros(indices.shape, dtype=bool)
    repeat[:, 1:] = ranked[:, 1:] == ranked[:, :-1]
    first = np.ones(indices.shape, dtype=bool)
    np.put_along_axis(first, order, ~repeat, axis=1)
    return first


def _top_per_row_sum(Y: sp.csr_matrix, weights: np.ndarray, k: int) -> np.ndarray:
    """Per row, the sum of the k largest weights among its true labels (PSP's best case)."""
    rows = np.repeat(np.arange(Y.shape[0], dtype=np.int64), np.diff(Y.indptr))
    w = weights[Y.indices]
    order = np.lexsort((-w, rows))
    rank = np.arange(order.size) - Y.indptr[rows[order]]
    keep = rank < k
    return np.bincount(rows[order][keep], weights=w[order][keep], minlength=Y.shape[0])


def _check_ks(ks: Sequence[int]) -> tuple[int, ...]:
    ks = tuple(ks)
    if not ks or any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 for k in ks):
        raise ConfigError(f"ks must be positive integers, got {ks!r}")
    return tuple(sorted(set(int(k) for k in ks)))


def coverage_at_precision(top1_scores, top1_correct, precision: float) -> float:
    """Largest share (percent) of documents whose top-1 can be accepted above one threshold at >= precision.

    ``top1_scores`` (n,) with NaN where a document has no suggestion (never accepted);
    ``top1_correct`` (n,) bool. ``precision`` in (0, 1].
    """
    s = np.asarray(top1_scores, dtype=np.float64)
    c = np.asarray(top1_correct, dtype=bool)
    n = s.shape[0]
    if n == 0:
        return 0.0
    ok = ~np.isnan(s)
    s, c = s[ok], c[ok]
    if s.shape[0] == 0:  # no document has a suggestion
        return 0.0
    order = np.argsort(-s, kind="stable")
    s, c = s[order], c[order]
    hits = np.cumsum(c)
    count = np.arange(1, s.shape[0] + 1)
    ends = np.flatnonzero(np.append(s[1:] != s[:-1], True))  # last position of each distinct score
    good = ends[hits[ends] >= precision * count[ends] - 1e-12]
    return 100.0 * float(count[good[-1]]) / n if good.size else 0.0


def expected_calibration_error(scores, correct, n_bins: int = 10) -> float:
    """ECE in percent over pooled suggestions (scores clipped to [0, 1]; bin b = [b/M, (b+1)/M), last closed)."""
    s = np.clip(np.asarray(scores, dtype=np.float64).ravel(), 0.0, 1.0)
    c = np.asarray(correct, dtype=np.float64).ravel()
    if s.size == 0:
        return 0.0
    b = np.minimum((s * n_bins).astype(np.int64), n_bins - 1)
    gap = np.abs(np.bincount(b, weights=c, minlength=n_bins) - np.bincount(b, weights=s, minlength=n_bins))
    return 100.0 * float(gap.sum()) / s.size


def _score_table(Y, predictions) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray, np.ndarray]:
    if not isinstance(predictions, tuple) or len(predictions) != 2:
        raise DataFormatError(None, None, "score metrics need (indices, scores) predictions")
    indices, scores = (np.asarray(a) for a in predictions)
    if not sp.issparse(Y):
        raise DataFormatError(None, None, f"true labels must be a sparse matrix, got {type(Y).__name__}")
    Y = binary_csr(Y)
    if indices.shape != scores.shape or indices.ndim != 2 or indices.shape[0] != Y.shape[0]:
        raise DataFormatError(None, None, f"predictions have shapes {indices.shape}/{scores.shape},"
                                          f" expected ({Y.shape[0]}, k) both")
    return Y, indices, scores.astype(np.float64), hits_matrix(Y, indices)


def f1_at_threshold(Y_true, predictions, threshold) -> float:
    """Micro F1 (percent) of the top-k suggestions with score >= threshold (a number or one per label)."""
    Y, indices, scores, hits = _score_table(Y_true, predictions)
    valid = (indices >= 0) & first_occurrence(indices)
    t = np.asarray(threshold, dtype=np.float64)
    if t.ndim == 0:
        accept = valid & (scores >= t)
    else:
        if t.shape[0] < Y.shape[1] and indices.max(initial=-1) >= t.shape[0]:
            raise DataFormatError(None, None, f"{t.shape[0]} thresholds for predicted label ids up to"
                                              f" {indices.max()}")
        accept = valid & (scores >= t[np.where(indices >= 0, indices, 0)])
    tp = float((accept & hits).sum())
    fp = float((accept & ~hits).sum())
    fn = float(Y.nnz) - tp
    return 100.0 * 2 * tp / (2 * tp + fp + fn) if tp + fp + fn > 0 else 0.0


def f1_scores(Y_true, indices) -> tuple[float, float]:
    """Micro and macro F1 (percent) of the label sets ``indices`` (n, k), -1 padded, as the module doc defines
    them for ``F1@k`` and ``macro-F1@k``: the binary matrix of the suggested labels against ``Y_true``."""
    per = per_label_metrics(Y_true, indices)
    tp, denom = per["tp"], per["support"] + per["predicted"]
    present = denom > 0
    if not present.any():
        return 0.0, 0.0
    micro = 200.0 * float(tp.sum()) / float(denom.sum())
    return micro, float(np.mean(per["F1"][present]))


def accepted(indices: np.ndarray, scores: np.ndarray, threshold) -> np.ndarray:
    """``indices`` with -1 where the score is below the threshold (a number or one per label)."""
    t = np.asarray(threshold, dtype=np.float64)
    limit = t if t.ndim == 0 else t[np.clip(indices, 0, t.shape[0] - 1)]
    return np.where((indices >= 0) & (scores >= limit), indices, -1)


def score_metrics(Y_true, predictions, k: int, threshold=None) -> dict[str, float]:
    """``coverage@P90``, ``coverage@P95``, ``ECE@k`` and, with a threshold, ``F1@T`` and ``macro-F1@T``; see the
    module doc."""
    Y, indices, scores, hits = _score_table(Y_true, predictions)
    top1 = np.where(indices[:, 0] >= 0, scores[:, 0], np.nan) if indices.shape[1] else np.full(Y.shape[0], np.nan)
    out = {"coverage@P90": coverage_at_precision(top1, hits[:, 0], 0.90),
           "coverage@P95": coverage_at_precision(top1, hits[:, 0], 0.95)}
    valid = (indices[:, :k] >= 0)
    out[f"ECE@{k}"] = expected_calibration_error(scores[:, :k][valid], hits[:, :k][valid])
    if threshold is not None:
        out["F1@T"] = f1_at_threshold(Y, (indices[:, :k], scores[:, :k]), threshold)
        out["macro-F1@T"] = f1_scores(Y, accepted(indices[:, :k], scores[:, :k], threshold))[1]
    return out


def evaluate(Y_true, predictions, ks: Sequence[int] = (1, 3, 5), train_label_counts=None,
             n_train: int | None = None, *, propensity_a: float = 0.55, propensity_b: float = 1.5,
             coverage: bool = False, scores: bool = False, threshold=None, f1: bool = False) -> dict[str, float]:
    """Metrics in percent for every k: ``P@k``, ``R@k``, ``nDCG@k``; ``PSP@k`` when the training label
    counts (and ``n_train``) are given; ``coverage@k`` when ``coverage`` is true; ``F1@k`` and
    ``macro-F1@k`` when ``f1`` is true; with ``scores`` (predictions must then be ``(indices, scores)``),
    ``coverage@P90``, ``coverage@P95``, ``ECE@<max k>`` and, when ``threshold`` is given, ``F1@T`` and
    ``macro-F1@T`` over the top max(ks).

    ``Y_true`` is the (n, L) sparse label matrix (any non-zero is a true label); ``predictions`` is
    ``(indices, scores)`` or just ``indices``, shape (n, k'), -1 padded. Ranks past k' are misses: a model
    with fewer labels than k predicts no more than its labels, and P@k still divides by k. Nothing is
    allocated k wide, so a k of 10**12 costs what k' costs.
    Keys come in the order P, R, nDCG, PSP, coverage, F1, macro-F1, each for ascending k.
    """
    ks = _check_ks(ks)
    indices = np.asarray(predictions[0] if isinstance(predictions, tuple) else predictions)
    if not sp.issparse(Y_true):
        raise DataFormatError(None, None, f"true labels must be a sparse matrix, got {type(Y_true).__name__}")
    Y = binary_csr(Y_true)
    if indices.ndim != 2 or indices.shape[0] != Y.shape[0]:
        raise DataFormatError(None, None, f"predictions have shape {indices.shape}, expected ({Y.shape[0]}, k)")
    if indices.size and (indices.dtype.kind not in "iu" or indices.max() >= Y.shape[1]):
        raise DataFormatError(None, None, f"predicted label ids must be integers below {Y.shape[1]}")
    depth = min(max(ks), indices.shape[1])  # ranks that hold predictions; the rest are misses
    indices = indices[:, :depth]
    hits = hits_matrix(Y, indices)
    n = max(Y.shape[0], 1)
    n_true = np.diff(Y.indptr)
    discount = 1.0 / np.log2(np.arange(2, max(depth, min(max(ks), int(n_true.max(initial=0)))) + 2))
    cum_hits = np.cumsum(hits, axis=1)

    def hits_in_top(k: int) -> np.ndarray:
        return cum_hits[:, min(k, depth) - 1] if depth else np.zeros(Y.shape[0])

    out: dict[str, float] = {}
    for k in ks:
        out[f"P@{k}"] = 100.0 * float(hits_in_top(k).sum()) / (k * n)
    for k in ks:
        recall = np.divide(hits_in_top(k), n_true, out=np.zeros(Y.shape[0]), where=n_true > 0)
        out[f"R@{k}"] = 100.0 * float(recall.sum()) / n
    ideal_by_count = np.concatenate([[0.0], np.cumsum(discount)])
    for k in ks:
        dcg = (hits[:, :k] * discount[:min(k, depth)]).sum(axis=1)
        ideal = ideal_by_count[np.minimum(n_true, min(k, ideal_by_count.size - 1))]
        out[f"nDCG@{k}"] = 100.0 * float(np.divide(dcg, ideal, out=np.zeros_like(dcg), where=ideal > 0).sum()) / n
    if train_label_counts is not None:
        if not n_train:
            raise ConfigError("PSP@k needs n_train, the number of training documents")
        counts = np.zeros(Y.shape[1], dtype=np.float64)
        tc = np.asarray(train_label_counts, dtype=np.float64)
        counts[:min(tc.size, counts.size)] = tc[:counts.size]  # test-only labels: count 0
        inv_p = inverse_propensity(counts, n_train, propensity_a, propensity_b)
        gained = np.where(hits, inv_p[np.where(indices >= 0, indices, 0)], 0.0)
        for k in ks:
            best = _top_per_row_sum(Y, inv_p, k).sum()
            out[f"PSP@{k}"] = 100.0 * float(gained[:, :k].sum() / best) if best > 0 else 0.0
    if coverage:
        n_present = int(np.count_nonzero(Y.getnnz(axis=0)))
        for k in ks:
            found = np.unique(indices[:, :k][hits[:, :k]])
            out[f"coverage@{k}"] = 100.0 * found.size / n_present if n_present else 0.0
    if f1:
        pairs = {k: f1_scores(Y, indices[:, :k]) for k in ks}
        out.update({f"F1@{k}": micro for k, (micro, _) in pairs.items()})
        out.update({f"macro-F1@{k}": macro for k, (_, macro) in pairs.items()})
    if scores or threshold is not None:
        out.update(score_metrics(Y, predictions, max(ks), threshold))
    return out


def per_label_metrics(Y_true, indices) -> dict[str, np.ndarray]:
    """Per label j (arrays over the labels): ``support`` (true in how many rows), ``predicted`` (suggested
    in how many), ``tp``, and ``P``, ``R``, ``F1`` in percent (0 where undefined: nothing suggested, or
    no support), plus ``order``: the labels that occur or are suggested, worst first (F1 ascending,
    then support descending, then label index).

    ``indices`` (n, k) are the suggestions, -1 padded (e.g. a thresholded top-k); a label listed twice
    in a row counts once.
    """
    Y = binary_csr(Y_true) if sp.issparse(Y_true) else None
    if Y is None:
        raise DataFormatError(None, None, f"true labels must be a sparse matrix, got {type(Y_true).__name__}")
    indices = np.asarray(indices)
    if indices.ndim != 2 or indices.shape[0] != Y.shape[0]:
        raise DataFormatError(None, None, f"predictions have shape {indices.shape}, expected ({Y.shape[0]}, k)")
    n_labels = max(Y.shape[1], int(indices.max(initial=-1)) + 1)
    suggested = (indices >= 0) & first_occurrence(indices)
    hits = hits_matrix(Y, indices)
    support = np.bincount(Y.indices, minlength=n_labels).astype(np.int64)
    predicted = np.bincount(indices[suggested], minlength=n_labels).astype(np.int64)
    tp = np.bincount(indices[hits], minlength=n_labels).astype(np.int64)
    precision = np.divide(100.0 * tp, predicted, out=np.zeros(n_labels), where=predicted > 0)
    recall = np.divide(100.0 * tp, support, out=np.zeros(n_labels), where=support > 0)
    denom = support + predicted
    f1 = np.divide(200.0 * tp, denom, out=np.zeros(n_labels), where=denom > 0)
    present = np.flatnonzero(denom > 0)
    order = present[np.lexsort((present, -support[present], f1[present]))]
    return {"support": support, "predicted": predicted, "tp": tp, "P": precision, "R": recall, "F1": f1,
            "order": order}
