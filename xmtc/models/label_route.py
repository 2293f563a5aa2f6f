"""Labels known only by their text, for methods that learn labels from documents: the label-text route.

A label with no training document (a new YSO concept, a new product category) is invisible to a model
that learns each label from its documents: XR-Linear's ranker for it has no positive example. The route
scores such labels by the TF-IDF cosine between a text and the label's text (its preferred and
alternative names, from the label file) -- SemSup-XC's strong zero-shot baseline, here over character
3-5-grams (:mod:`xmtc.features.char_ngrams`: +16.9 points of top-10 recall of such labels over word
n-grams) -- and puts that cosine on the model's own calibrated scale so that a text-only label competes
fairly with trained ones:

* **the map** is fitted where the model's calibration is fitted, on the validation split ``xmtc train``
  holds out: for each validation text, the :data:`MAP_TOP` *seen* labels with the highest cosine to it,
  each with whether the text carries it, treated as if the labels were unseen; an isotonic regression of
  correct on cosine with Laplace steps gives P(correct | cosine), the same meaning as every calibrated
  score. A cosine of 0 (no word shared with the label's text) is no evidence and scores 0.
* **the prior** of a label without documents: the map is fitted on seen labels, and a label with no document
  is right far less often than one with documents. So the map's odds are shifted by the ratio of the two base
  rates (Saerens et al. 2002's label-shift correction), ``odds(c) = odds_map(c) * rho``, ``rho`` from the share
  of label occurrences on labels without documents, split evenly among the routed labels
  (:mod:`xmtc.models.route_prior`). A learned label leaves the route with its share
  (:meth:`LabelRoute.remove`); a label added by text takes a share of the same mass.
* **prediction**: the route's cosines come from an inverted index of the label texts' n-grams
  (:mod:`xmtc.models.route_kernels`), so a text costs the postings of its own n-grams, not a product with
  every label text; the model's calibrated top-k and the route's top-k over its labels are merged by score
  (a label in both keeps the higher score), so a text-only label enters the top-k only where its
  probability beats the model's own suggestions there, and does not push better-evidenced ones out.
* **which labels**: every label of the vocabulary with a text and no training document, those of
  ``--label-file`` included, and those added later (:meth:`LabelRoute.add`, ``xmtc labels add``).

The route's featurizer is fitted on the label texts and the validation texts and saved with it (a route
saved before it had one reads texts with the model's own word TF-IDF featurizer).
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError, ModelFormatError
from .calibration import isotonic_steps, laplace_blocks
from .route_prior import prior_ratio, unseen_mass

log = logging.getLogger(__name__)

MAP_TOP = 10  # seen labels per validation text the map is fitted on
_REUSE = threading.local()  # per thread: {id(route): (M, k, texts, ids, probabilities)} inside reusing_route_topk


@contextmanager
def reusing_route_topk():
    """Within it (on this thread), :meth:`LabelRoute.topk` of the very texts of an earlier call, at a ``k`` no
    larger than that call's, returns that call's first ``k`` columns instead of scoring the texts again. Exact:
    the kernel orders by cosine, then by label row (a total order), and the probabilities are elementwise.
    :meth:`~xmtc.models.base.XMCModel.predict_topk_depths` asks for the deepest first."""
    outer = getattr(_REUSE, "memo", None)
    _REUSE.memo = {} if outer is None else outer
    try:
        yield
    finally:
        _REUSE.memo = outer


def _top_cosines(X, M: sp.csr_matrix, k: int, index=None) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``X`` (CSR, or its arrays: :func:`~xmtc.models.route_kernels.top_rows`) the ``k`` rows of ``M`` with the largest inner product: (positions, values), best first,
    ties to the lower row; positions -1 where fewer than ``k`` have a positive product. ``index``: ``M``'s
    inverted index (:func:`~xmtc.models.route_kernels.inverted`) where the caller keeps one."""
    from .route_kernels import inverted, top_rows

    return top_rows(X, inverted(M) if index is None else index, M.shape[0], k)


def merge_topk(ia: np.ndarray, sa: np.ndarray, ib: np.ndarray, sb: np.ndarray, k: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best of two top-k lists per row (-1 padded), a label in both keeping its higher score."""
    idx = np.concatenate([ia, ib], axis=1).astype(np.int64)
    sc = np.where(idx >= 0, np.concatenate([sa, sb], axis=1).astype(np.float64), -np.inf)
    order = np.lexsort((-sc, idx))  # by id, best score first within an id (per row)
    sid = np.take_along_axis(idx, order, 1)
    dup_sorted = np.zeros(idx.shape, dtype=bool)
    dup_sorted[:, 1:] = sid[:, 1:] == sid[:, :-1]
    dup = np.zeros(idx.shape, dtype=bool)
    np.put_along_axis(dup, order, dup_sorted, 1)  # back to the lists' own order
    sc[dup] = -np.inf
    best = np.argsort(-sc, axis=1, kind="stable")[:, :k]  # ties keep the model's order, then the route's
    idx, sc = np.take_along_axis(idx, best, 1), np.take_along_axis(sc, best, 1)
    keep = np.isfinite(sc)
    out_i = np.where(keep, idx, -1).astype(np.int32)
    out_s = np.where(keep, sc, 0.0).astype(np.float32)
    if out_i.shape[1] < k:
        pad = k - out_i.shape[1]
        out_i = np.pad(out_i, ((0, 0), (0, pad)), constant_values=-1)
        out_s = np.pad(out_s, ((0, 0), (0, pad)))
    return out_i, out_s


class LabelRoute:
    """Text-only labels (their global ids and TF-IDF rows) and the cosine -> probability map."""

    def __init__(self, label_ids: np.ndarray, M: sp.csr_matrix, map_x: np.ndarray, map_y: np.ndarray,
                 featurizer=None, own_featurizer: bool = False, unseen_mass: float | None = None,
                 seen_labels: int = 0):
        self.label_ids = np.asarray(label_ids, dtype=np.int64)
        self.M = sp.csr_matrix(M, dtype=np.float32)
        self.map_x = np.asarray(map_x, dtype=np.float64)
        self.map_y = np.asarray(map_y, dtype=np.float64)
        self.featurizer = featurizer
        self.own_featurizer = own_featurizer
        self.unseen_mass = unseen_mass  # m of the module doc; None (a route saved before it): no prior shift
        self.seen_labels = int(seen_labels)
        self._index = (None, None)  # (the M it was built from, M's inverted index): built at the first prediction

    def __len__(self) -> int:
        return int(self.label_ids.shape[0])

    # -- fitting ----------------------------------------------------------------------------------------
    @classmethod
    def fit(cls, featurizer, label_texts: list[str], label_counts: np.ndarray, valid_texts: list[str],
            valid_Y: sp.csr_matrix, *, own_featurizer: bool = False, fit_counts: np.ndarray | None = None
            ) -> "LabelRoute":
        """The map from the seen labels' cosines on the validation texts; the route's labels: those with a
        text and no training document; the prior from ``fit_counts``, the label counts of the part the
        validation split was held out from (default ``label_counts``); see the module doc."""
        has_text = np.array([bool(t and t.strip()) for t in label_texts])
        counts = np.asarray(label_counts)
        seen = np.flatnonzero(has_text & (counts > 0))
        if seen.size == 0:
            raise ConfigError("the label-text route needs label texts of labels with training documents")
        Xv = featurizer.transform(valid_texts)
        pos, val = _top_cosines(Xv, featurizer.transform([label_texts[j] for j in seen.tolist()]), MAP_TOP)
        Yv = sp.csr_matrix(valid_Y)
        ok = pos >= 0
        rows = np.repeat(np.arange(pos.shape[0]), pos.shape[1])[ok.ravel()]
        cols = seen[pos[ok]]
        correct = np.asarray(Yv[rows, cols]).ravel() > 0 if rows.size else np.zeros(0, dtype=bool)
        x = val[ok].astype(np.float64)
        if x.size and correct.any() and not correct.all():
            # Laplace steps as the score maps' (:mod:`xmtc.models.calibration`): a block of all-right cosines at
            # the top must not claim 1.0, whose odds no prior could shift
            # scikit-learn's IsotonicRegression(y_min=0, y_max=1)'s breakpoints, without importing scikit-learn
            # (~1 s of `xmtc train --label-file`; isotonic_steps's doc)
            map_x, map_y = isotonic_steps(x, laplace_blocks(x, correct.astype(np.float64)))
        else:  # every cosine right, or none: one block, its Laplace rate everywhere (as the isotonic branch's
            # blocks: all right must not claim 1.0, whose infinite odds no prior could shift); no cosine at all: 0
            rate = (float(correct.sum()) + 1.0) / (correct.size + 2.0) if correct.size else 0.0
            map_x, map_y = np.array([0.0, 1.0]), np.full(2, rate)
        log.info("label-text route: map fitted on %d cosines of %d validation texts (%.1f%% correct);"
                 " P(correct) %.3f at the median cosine", x.size, len(valid_texts), 100 * correct.mean()
                 if correct.size else 0.0, float(np.interp(np.median(x), map_x, map_y)) if x.size else 0.0)
        mass = unseen_mass(Yv, counts if fit_counts is None else fit_counts)
        route = cls(np.zeros(0, dtype=np.int64), sp.csr_matrix((0, featurizer.n_features_), dtype=np.float32),
                    map_x, map_y, featurizer, own_featurizer, mass, seen.size)
        new = np.flatnonzero(has_text & (counts == 0))
        route.add(new, [label_texts[j] for j in new.tolist()])
        return route

    # -- the labels -------------------------------------------------------------------------------------
    def add(self, label_ids, texts: list[str]) -> None:
        """Route the labels ``label_ids`` (global ids) by ``texts``; a label already routed gets the new text."""
        label_ids = np.asarray(label_ids, dtype=np.int64)
        if label_ids.size == 0:
            return
        keep = ~np.isin(self.label_ids, label_ids)
        rows = self.featurizer.transform(list(texts))
        self.label_ids = np.concatenate([self.label_ids[keep], label_ids])
        self.M = sp.csr_matrix(sp.vstack([self.M[keep], rows]), dtype=np.float32)

    def remove(self, label_ids) -> None:
        """Stop routing ``label_ids`` (they were learned: their rankers score them now). Each takes its share
        of the unseen mass with it, ``m <- m (U - r) / U``, so the other route labels' prior is what it was."""
        keep = ~np.isin(self.label_ids, np.asarray(label_ids, dtype=np.int64))
        if self.unseen_mass is not None and keep.size:
            self.unseen_mass *= float(keep.sum()) / keep.size
        self.label_ids, self.M = self.label_ids[keep], sp.csr_matrix(self.M[keep])

    # -- scoring ----------------------------------------------------------------------------------------
    def prior_ratio(self) -> float:
        """``rho`` of :mod:`xmtc.models.route_prior`: a routed label's base rate over a seen label's, for the
        labels routed now (1: a route saved before it had a prior)."""
        if self.unseen_mass is None:
            return 1.0
        return prior_ratio(self.unseen_mass, self.seen_labels, len(self))

    def map_odds(self, cosines: np.ndarray) -> np.ndarray:
        """The fitted map's odds of being right at ``cosines`` (a seen label's, before the prior shift)."""
        q = np.clip(np.interp(np.asarray(cosines, dtype=np.float64), self.map_x, self.map_y), 0.0, 1.0 - 1e-12)
        return q / (1.0 - q)

    def probabilities(self, cosines: np.ndarray) -> np.ndarray:
        """P(correct | cosine) of a label without documents: the fitted map's odds times :meth:`prior_ratio`;
        0 for a cosine of 0."""
        c = np.asarray(cosines, dtype=np.float64)
        odds = self.map_odds(c) * self.prior_ratio()
        return np.where(c > 0, odds / (1.0 + odds), 0.0)

    def topk(self, texts: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` routed labels of each text: (global ids -1 padded, probabilities)."""
        memo = getattr(_REUSE, "memo", None) if isinstance(texts, list) else None
        hit = None if memo is None else memo.get(id(self))
        if hit is not None and hit[0] is self.M and hit[1] >= k and hit[2] == texts:
            return hit[3][:, :k].copy(), hit[4][:, :k].copy()
        ids, probs = self._topk(texts, k)
        if memo is not None:  # a miss (other texts, a larger k or a new M): this call is the one to reuse now
            memo[id(self)] = (self.M, k, list(texts), ids, probs)
        return ids, probs

    def _topk(self, texts: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        M, index = self._index
        if M is not self.M:  # first prediction, or labels added or removed since
            from .route_kernels import inverted

            M, index = self.M, inverted(self.M)
            self._index = (M, index)
        rows = getattr(self.featurizer, "rows", None)  # CSR arrays without a matrix object's set-up
        pos, val = _top_cosines(rows(texts) if rows else self.featurizer.transform(texts), M, k, index)
        ids = np.where(pos >= 0, self.label_ids[np.maximum(pos, 0)] if len(self) else -1, -1)
        return ids.astype(np.int32), np.where(pos >= 0, self.probabilities(val), 0.0).astype(np.float32)

    def merge(self, idx: np.ndarray, scores: np.ndarray, texts: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """The model's top-k ``(idx, scores)`` of ``texts`` merged with the route's (see the module doc)."""
        if len(self) == 0:
            return idx, scores
        ri, rs = self.topk(texts, k)
        return merge_topk(idx, scores, ri, rs, k)

    # -- storage ----------------------------------------------------------------------------------------
    def to_arrays(self) -> tuple[dict, dict[str, np.ndarray]]:
        arrays = {"label_ids": self.label_ids, "map_x": self.map_x, "map_y": self.map_y,
                  "M.data": self.M.data, "M.indices": self.M.indices.astype(np.int64),
                  "M.indptr": self.M.indptr.astype(np.int64), "M.shape": np.array(self.M.shape, dtype=np.int64)}
        params = {"own_featurizer": self.own_featurizer, "format": 1}
        if self.unseen_mass is not None:
            params.update(unseen_mass=float(self.unseen_mass), seen_labels=self.seen_labels)
        return params, arrays

    @classmethod
    def from_arrays(cls, params: dict, arrays: dict, featurizer, n_labels: int, where: str) -> "LabelRoute":
        try:
            shape = tuple(int(v) for v in arrays["M.shape"])
            M = sp.csr_matrix((arrays["M.data"], arrays["M.indices"], arrays["M.indptr"]), shape=shape)
            mass = params.get("unseen_mass")
            route = cls(arrays["label_ids"], M, arrays["map_x"], arrays["map_y"], featurizer,
                        bool(params.get("own_featurizer")), None if mass is None else float(mass),
                        int(params.get("seen_labels", 0)))
            if mass is not None and not (0.0 <= route.unseen_mass < 1.0 and route.seen_labels > 0):
                raise ValueError(f"unseen_mass {mass!r} must lie in (0, 1) with seen_labels > 0")
        except (KeyError, ValueError, TypeError, IndexError) as exc:
            raise ModelFormatError(f"{where}: invalid label-text route ({exc})") from None
        ids = route.label_ids
        if M.shape[0] != ids.shape[0] or (ids.size and (ids.min() < 0 or ids.max() >= n_labels)) or \
                route.map_x.shape != route.map_y.shape or route.map_x.size == 0 or \
                (featurizer is not None and M.shape[1] != featurizer.n_features_):
            raise ModelFormatError(f"{where}: label-text route does not match the model's labels or features")
        return route
