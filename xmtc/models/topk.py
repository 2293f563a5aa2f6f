"""Operations on top-k predictions that several stages share: dropping suggestions below a threshold."""

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
