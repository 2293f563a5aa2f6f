"""What every predictor offers its callers, estimators and ensembles alike: ``(name, score)`` lists, a checked
``k``, score thresholds (a number, or the per-label ones ``xmtc calibrate --thresholds f1`` stores), the metrics
of ``xmtc evaluate`` and the top-k at several depths from one prediction. Functions of any object with
``predict_topk`` and ``labels_`` (and, for metrics, ``label_counts_`` and ``n_train_``), so that the model shell
(:mod:`xmtc.models.base`) and the ensemble (:mod:`xmtc.models.ensemble`) share them without importing each other.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp

from ..data.dataset import as_label_matrix
from ..errors import ConfigError


def named_predictions(predictor, X: Any, k: int, progress: bool) -> list[list[tuple[str, float]]]:
    """``predictor.predict_topk`` as ``(label name, score)`` lists (estimators and ensembles alike)."""
    idx, scores = predictor.predict_topk(X, k, progress=progress)
    names = predictor.labels_.names
    return [[(names[j], float(s)) for j, s in zip(ri, rs) if j >= 0] for ri, rs in zip(idx, scores)]


def resolve_threshold(predictor, threshold: Any):
    """A score threshold: a number, or ``"labels"``: the per-label thresholds that ``xmtc calibrate
    --thresholds f1`` stored in the model (one per label).

    A calibrated model's scores are probabilities, so a number outside [0, 1] would keep every suggestion
    or none: it is refused. Raw scores (``--raw-scores``, a model trained with ``--valid-size 0``) are on
    the method's own scale, where any finite number is a threshold."""
    if threshold is None:
        return None
    if isinstance(threshold, (int, float, np.floating, np.integer)) and not isinstance(threshold, bool):
        return _checked_number(predictor, float(threshold))
    if isinstance(threshold, str):
        if threshold == "labels":
            calibration = getattr(predictor, "calibration_", None)
            if calibration is None:
                raise ConfigError("threshold 'labels' needs per-label thresholds; run `xmtc calibrate MODEL_DIR"
                                  " VALID_FILE --thresholds f1` first")
            return calibration.label_thresholds()
        try:
            value = float(threshold)
        except ValueError:
            raise ConfigError(f"threshold must be a number or 'labels', got {threshold!r}") from None
        return _checked_number(predictor, value)
    arr = np.asarray(threshold, dtype=np.float64)
    if arr.shape != (len(predictor.labels_),):
        raise ConfigError(f"per-label thresholds must be {len(predictor.labels_)} numbers, got shape {arr.shape}")
    return arr


def _checked_number(predictor, value: float) -> float:
    """``value`` as a threshold of ``predictor``'s scores; see :func:`resolve_threshold`."""
    if not np.isfinite(value):
        raise ConfigError(f"threshold must be a finite number, got {value}")
    if getattr(predictor, "calibration_", None) is not None and not 0.0 <= value <= 1.0:
        raise ConfigError(f"threshold must be in [0, 1]: this model's scores are calibrated probabilities,"
                          f" got {value:g}")
    return value


def checked_k(k: Any, n_labels: int) -> int:
    """``k`` of a top-k request as an int in 1..n_labels: a ``k`` above the labels asks for every label (a row
    holds no more), so ``k=10**12`` cannot allocate what it names; anything but a positive integer is refused."""
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise ConfigError(f"k must be a positive integer, got {k!r}")
    return min(int(k), max(int(n_labels), 1))


def evaluate_predictor(predictor, X: Any, Y: Any, ks: Sequence[int], progress: bool, threshold: Any = None,
                       topk: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
    """Metrics of anything with ``predict_topk``, ``labels_``, ``label_counts_`` and ``n_train_``:
    ranking metrics, ``F1@k`` and ``macro-F1@k``, ``coverage@P90/P95``, ``ECE@k`` and, with a threshold,
    ``F1@T`` and ``macro-F1@T`` (see :mod:`xmtc.metrics`). Without one, a model that holds per-label thresholds
    (``xmtc calibrate --thresholds f1``) is measured at those: its calibrated thresholds.
    ``topk``: the predictions of ``X`` at ``max(ks)`` when the caller already has them."""
    from ..metrics import evaluate

    n = X.shape[0] if sp.issparse(X) else len(X)
    Y, _ = as_label_matrix(Y, predictor.labels_, n, unknown_labels="extend")
    threshold = resolve_threshold(predictor, threshold)
    if threshold is None:
        threshold = getattr(getattr(predictor, "calibration_", None), "thresholds", None)
    idx, scores = topk if topk is not None else predictor.predict_topk(X, max(ks), progress=progress)
    return evaluate(Y, (idx, scores), ks=tuple(ks), train_label_counts=predictor.label_counts_,
                    n_train=predictor.n_train_, coverage=True, scores=True, threshold=threshold, f1=True)


def predict_depths(predictor, X: Any, depths: Sequence[int], progress: bool = False
                   ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """``{depth: predictor.predict_topk(X, depth)}``, through :meth:`XMCModel.predict_topk_depths` where the
    predictor has it (the same arrays, the shareable work done once), else one call per depth."""
    depths = sorted({int(d) for d in depths}, reverse=True)
    if hasattr(predictor, "predict_topk_depths"):
        return predictor.predict_topk_depths(X, depths, progress=progress)
    return {d: predictor.predict_topk(X, d, progress=progress) for d in depths}
