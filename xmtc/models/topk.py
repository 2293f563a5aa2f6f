"""Operations on top-k predictions that several stages share: dropping suggestions below a threshold, and
every suggestion of a text the model cannot read."""

from __future__ import annotations

import numpy as np


def apply_threshold(idx: np.ndarray, scores: np.ndarray, threshold) -> tuple[np.ndarray, np.ndarray]:
    """Drop suggestions scored below the threshold (a number or one per label): -1 / 0, kept rows left-packed."""
    if threshold is None:
        return idx, scores
    t = np.asarray(threshold, dtype=np.float64)
    limit = t if t.ndim == 0 else t[np.where(idx >= 0, idx, 0)]
    keep = (idx >= 0) & (scores >= limit)
    order = np.argsort(~keep, axis=1, kind="stable")  # kept entries first, in their order
    keep = np.take_along_axis(keep, order, axis=1)
    return (np.where(keep, np.take_along_axis(idx, order, axis=1), -1),
            np.where(keep, np.take_along_axis(scores, order, axis=1), 0).astype(scores.dtype))


def empty_topk(k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top-k arrays of no input at all (an empty file, ``predict([])``): shape (0, k)."""
    return np.full((0, k), -1, dtype=np.int32), np.zeros((0, k), dtype=np.float32)


def drop_unreadable(idx: np.ndarray, scores: np.ndarray, X, known: np.ndarray | None, calibrated: bool
                    ) -> tuple[np.ndarray, np.ndarray]:
    """No guesses (-1 / 0) for a text that is blank, or of which no word is in the model's vocabulary
    (``known`` 0, where the model has one): its feature vector is empty, and whatever the model ranks
    first is a guess. A calibrated model has already cut such a text's scores to 0
    (:func:`xmtc.models.calibration.damp_unreadable`): those entries go, and what a label's text matched
    (the label-text route, on character n-grams) stays; of a model with raw scores, every entry goes. The
    CLI, Python and the REST API (which drops zero scores) agree; the CLI and the REST API add a warning
    (:func:`xmtc.models.records.reading_warning`). Feature rows are left as they are."""
    if isinstance(X, np.ndarray) or hasattr(X, "tocsr"):
        return idx, scores
    blank = np.fromiter((not str(t).strip() for t in X), dtype=bool, count=idx.shape[0])
    unread = blank.copy() if known is None else blank | (np.asarray(known) <= 0)
    if not unread.any():
        return idx, scores
    drop = blank[:, None] | (unread[:, None] & ((scores <= 0) | (not calibrated)))
    if not drop.any():
        return idx, scores
    keep = ~drop & (idx >= 0)
    order = np.argsort(~keep, axis=1, kind="stable")  # kept entries first, in their order
    keep = np.take_along_axis(keep, order, axis=1)
    return (np.where(keep, np.take_along_axis(idx, order, axis=1), -1).astype(idx.dtype),
            np.where(keep, np.take_along_axis(scores, order, axis=1), 0).astype(scores.dtype))
