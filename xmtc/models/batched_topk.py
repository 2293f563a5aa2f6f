"""A model's top-k over any number of inputs: in batches, and at several depths in one pass.

What :meth:`XMCModel.predict_topk <xmtc.models.base.XMCModel.predict_topk>` and :meth:`predict_topk_depths
<xmtc.models.base.XMCModel.predict_topk_depths>` do around the model's own work on one batch (its hooks
``_candidates``, ``_raw_topk``, ``_finish_topk``, ``_topk_batch``, ``known_fraction``, ``_raw_prefix``): check
the input and ``k``, answer an empty input, cut the inputs into batches so that featurizing a large file never
holds all of its features at once and a progress bar can show documents/s and the ETA, and, for several depths,
plan which raw top-k serves which depth. Separate from the model shell (:mod:`xmtc.models.base`), which says
what one batch is; here is only how many batches, and in which order, make a prediction.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp

from ..errors import DataFormatError
from .predictor import checked_k

__all__ = ["batched_topk", "topk_at_depths"]


def batched_topk(model, X: Any, k: int, progress: bool, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``model.predict_topk(X, k)``: batches of ``batch_size`` inputs through ``model._topk_batch``, with a
    progress bar (when ``progress``) where there is more than one batch."""
    model._check_fitted()
    k = checked_k(k, model.n_labels)
    if isinstance(X, (str, bytes)):
        raise DataFormatError(None, None, "expected a list of texts, got a single string; wrap it in a list")
    n = X.shape[0] if sp.issparse(X) else len(X)
    if n == 0:
        from .topk import empty_topk
        return empty_topk(int(k))
    k_ask = model._candidates(int(k))
    if n <= batch_size:
        return model._topk_batch(X, k_ask, int(k))
    from ..progress import progress_bar

    idx_parts, score_parts = [], []
    with progress_bar(progress, total=n, unit="doc", desc="predict") as bar:
        for start in range(0, n, batch_size):
            chunk = X[start:start + batch_size]
            idx, scores = model._topk_batch(chunk, k_ask, int(k))
            idx_parts.append(idx)
            score_parts.append(scores)
            bar.update(idx.shape[0])
    return np.concatenate(idx_parts), np.concatenate(score_parts)


def topk_at_depths(model, X: Any, depths: Sequence[int], progress: bool,
                   batch_size: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """``model.predict_topk_depths(X, depths)``: ``{depth: model.predict_topk(X, depth)}``, each bit for bit.

    Not one prediction at the deepest depth cut down: a calibrated top-k is re-sorted within the raw
    candidates the method was asked for (:meth:`~xmtc.models.base.XMCModel.calibrated_topk`), and two trees'
    average depends on how deep each tree's list goes, so the first 5 of a top-100 are not a top-5. What is
    shared: the method's raw top-k wherever ``model._raw_prefix`` promises that the narrower one is the first
    columns of the wider (then each depth is calibrated and merged from those columns, as its own call does), the
    known-word shares, and the label-text route's top-k, whose order is total (:meth:`LabelRoute.reusing_topk
    <xmtc.models.label_route.LabelRoute.reusing_topk>`)."""
    from .topk import empty_topk

    model._check_fitted()
    ks = {d: checked_k(d, model.n_labels) for d in depths}
    if isinstance(X, (str, bytes)):
        raise DataFormatError(None, None, "expected a list of texts, got a single string; wrap it in a list")
    n = X.shape[0] if sp.issparse(X) else len(X)
    if n == 0 or not ks:
        return {d: empty_topk(k) for d, k in ks.items()}
    asks = {d: model._candidates(k) for d, k in ks.items()}
    plan: list[tuple[int, list]] = []  # (raw width asked of the method, the depths finished from it)
    for d in sorted(ks, key=lambda d: (-asks[d], -ks[d])):  # widest first: it serves the narrower ones
        group = next((g for a, g in plan if model._raw_prefix(asks[d], a)), None)
        if group is None:
            plan.append((asks[d], [d]))
        else:
            group.append(d)
    parts: dict[int, list] = {d: [] for d in ks}
    from ..progress import progress_bar
    from .label_route import reusing_route_topk

    with progress_bar(progress and n > batch_size, total=n, unit="doc", desc="predict") as bar, \
            reusing_route_topk():
        for start in range(0, n, batch_size):
            chunk = X[start:start + batch_size] if n > batch_size else X
            known = None
            for ask, group in plan:
                idx, scores, features = model._raw_topk(chunk, ask)
                if known is None:  # after the first raw call, whose input checks name a bad text's line
                    known = model.known_fraction(chunk)
                for d in group:
                    width = asks[d]  # copies: no depth's finishing sees another's arrays
                    parts[d].append(model._finish_topk(idx[:, :width].copy(), scores[:, :width].copy(), chunk,
                                                       known, ks[d], features))
            bar.update(min(batch_size, n - start))
    return {d: (np.concatenate([p[0] for p in ps]), np.concatenate([p[1] for p in ps])) if len(ps) > 1
            else ps[0] for d, ps in parts.items()}
