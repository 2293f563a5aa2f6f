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


def drop_unreadable(idx: np.ndarray, scores: np.ndarray, X, known: np.ndarray | None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """No suggestion (-1 / 0) for a text that is blank, or of which no word is in the model's vocabulary
    (``known`` 0, where the model has one): its feature vector is empty, and whatever the model ranks
    first is a guess. The CLI, Python and the REST API all return no labels for it; the CLI and the REST
    API add a warning (:func:`xmtc.models.records.reading_warning`). Feature rows are left as they are."""
    if isinstance(X, np.ndarray) or hasattr(X, "tocsr"):
        return idx, scores
    blank = np.fromiter((not str(t).strip() for t in X), dtype=bool, count=idx.shape[0])
    if known is not None:
        blank |= np.asarray(known) <= 0
    if not blank.any():
        return idx, scores
    return np.where(blank[:, None], -1, idx).astype(idx.dtype), np.where(blank[:, None], 0, scores).astype(scores.dtype)
