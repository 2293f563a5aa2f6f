"""Active learning: pick the unlabelled documents worth an expert's time (see :mod:`.strategies`).

>>> to_label = xmtc.select.select_documents(model, pool_texts, 500, "hybrid")   # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError
from .strategies import (STRATEGIES, UNCERTAINTY, coverage_scores, kcenter_greedy, pick_top, rank_mean,
                         uncertainty_scores)

__all__ = ["select_documents", "STRATEGIES", "DEFAULT_STRATEGY", "selection_features"]

# chosen by benchmarks/active_learning.py (see benchmarks/RESULTS.md)
DEFAULT_STRATEGY = "label-coverage"


def selection_features(model, texts) -> Any:
    """What diversity measures distance on: the text embedding of transformer methods, else TF-IDF."""
    member = model.models[0] if hasattr(model, "models") else model  # an Ensemble: its first member
    if hasattr(member, "encode"):
        return member.encode(texts)
    return member.transform(texts)


def select_documents(model, texts: Sequence[str], n: int, strategy: str = DEFAULT_STRATEGY, seed: int = 0, *,
                     k: int = 10, uncertainty: str = "margin", labelled: Sequence[str] | None = None,
                     topk: tuple[np.ndarray, np.ndarray] | None = None) -> list[int]:
    """Indices (into ``texts``) of the ``n`` documents to label next, most valuable first.

    ``k``: top-k labels each strategy looks at; ``uncertainty``: margin or entropy; ``labelled``:
    texts already labelled (diversity keeps away from them too); ``topk``: precomputed
    ``model.predict_topk(texts, k)`` to reuse. ``random`` uses neither the model nor the texts' content.
    """
    if strategy not in STRATEGIES:
        raise ConfigError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if uncertainty not in UNCERTAINTY:
        raise ConfigError(f"uncertainty must be one of {', '.join(UNCERTAINTY)}, got {uncertainty!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ConfigError(f"n must be a non-negative integer, got {n!r}")
    m = texts.shape[0] if sp.issparse(texts) else len(texts)
    n = min(int(n), m)
    if strategy == "random":
        return np.random.default_rng(seed).choice(m, size=n, replace=False).tolist()
    if strategy == "diversity":
        feats = selection_features(model, texts)
        lab = selection_features(model, labelled) if labelled is not None and len(labelled) else None
        return kcenter_greedy(feats, n, labelled=lab, seed=seed).tolist()
    idx, scores = topk if topk is not None else model.predict_topk(texts, k)
    unc = uncertainty_scores(scores, uncertainty)
    cov = coverage_scores(idx, scores, model.label_counts_)
    if strategy == "uncertainty":
        return pick_top(unc, n).tolist()
    if strategy == "label-coverage":
        return pick_top(cov, n).tolist()
    # hybrid: the 3n best by mean rank of both, then k-center greedy among them
    candidates = pick_top(-rank_mean(unc, cov), min(m, 3 * n))
    sub = texts[candidates] if sp.issparse(texts) else [texts[i] for i in candidates]
    feats = selection_features(model, sub)
    lab = selection_features(model, labelled) if labelled is not None and len(labelled) else None
    return candidates[kcenter_greedy(feats, n, labelled=lab, seed=seed)].tolist()
