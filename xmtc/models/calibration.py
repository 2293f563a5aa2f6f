"""Calibrated scores and per-label thresholds: a score of 0.8 should mean "right about 80% of the time".

What the scores mean before and after:

* **Uncalibrated** XR-Linear (and the transformer methods, whose ranker is the same beam search): with
  the default ``l3-hinge`` post-processor a label's score is ``prod_t exp(-max(0, 1 - s_t)^3)`` over
  its tree path's margins, in (0, 1], 1 when every margin clears 1; ``sigmoid`` gives a product of
  per-level sigmoids in (0, 1). Both are monotone confidences, not probabilities (they run far below
  the share of correct suggestions, see benchmarks/RESULTS.md). ``noop`` returns the raw ranker
  margin, unbounded; calibration maps it into [0, 1] too. Ensembles average their members' scores
  (``average``), ``1/rank`` (``rank-average``) or sigmoids (``sigmoid-average``), all in [0, 1] when the
  members' are.
* **Calibrated** (after ``xmtc calibrate MODEL_DIR VALID_FILE``): the estimated probability that the
  suggestion is a true label of the document, learned on a validation file (cut from the training
  data, never the test set) from the model's own top-k suggestions there: for a suggestion with raw
  score s on a label whose training frequency falls in band b, ``p = g_b(s)``.

The map ``g_b`` is fitted per **label-frequency band** (labels grouped by training count into
``n_bands`` bands holding equal shares of the validation suggestions), because one raw score means
different odds for a head label with hundreds of examples and a tail label with three. Two maps are
available: isotonic (scikit-learn's ``sklearn.isotonic.IsotonicRegression``, computed by :func:`isotonic_steps`
to the same breakpoints without importing it) and Platt scaling (``sklearn.linear_model.LogisticRegression``);
benchmarks/calibration.py measures both and the default is the one
with the lower test ECE there. On yso-finna-en-2k-20k (XR-Linear trained on 18,000 documents, calibrated on
the other 2,000 of the training file, scored on the 5,000 test documents), ECE of the top-5 scores: raw 6.98%,
isotonic 1.21% (one band) / 1.10% (three bands), Platt 3.35% / 3.36%; three Platt bands cost 3 points of P@1
through re-ranking. Default: isotonic, three bands. Over nine models (XR-Linear on four splits of
yso-finna-en-2k-20k, bibtex, delicious, reuters; CascadeXML with and without ALC on yso-finna-en-2k-20k;
benchmarks/RESULTS.md, "Calibration: Laplace steps") three bands against one gave coverage@P80 higher on eight
(delicious 0 -> 19.2% of documents; reuters 100% both ways) and P@1 higher on six (+1.0 on delicious), but
coverage@P90 lower on four (CascadeXML 2.26 -> 1.44 and 2.92 -> 1.86, one XR-Linear split 2.00 -> 0.50): at
the very top, where a few validation points set each band's last step, crossing bands can put a wrong
suggestion of one band above the right ones of another.

**Each step is a Laplace estimate.** Pool-adjacent-violators gives each block of validation suggestions the
share of them that is right, so a block of one or two right ones at the top of a band's raw range claimed 1.0
and outranked every other band's best. Each block of ``n`` points with ``h`` right takes ``(h + 1) / (n + 2)``
instead (:func:`laplace_blocks`), and blocks are pooled again where that breaks the order. On the same nine
models: ECE@5 lower on seven (reuters 0.90 -> 0.66, one 2k-20k split 1.28 -> 1.05; higher on both CascadeXML
models, 0.85 -> 0.93 and 0.85 -> 1.00), coverage@P90 0.20 -> 1.44 on CascadeXML, 2.22 -> 1.86 on CascadeXML +
ALC, 1.88 -> 1.56 on one split and unchanged on six, P@1 within 0.16 either way. Isotonic maps are kept as
their breakpoints and applied with linear interpolation, Platt maps as their two coefficients: plain arrays in
a safetensors file listed (with its SHA-256) in the model's manifest, never a pickled estimator.

Calibrated scores re-rank each document's top-k by calibrated score (ties keep the model's order),
since maps of different bands can cross; the same top-k labels are returned. An isotonic map is a
step function: whole ranges of raw scores share one value, and a threshold could no longer separate
them (measured: coverage@P90 fell from 1.4% to 0.1% of the test documents on yso-finna-en-2k-20k,
because the top step mixed right and wrong suggestions that the raw score still told apart). So an
isotonic output is ``(1 - e) g(s) + e clip(s, 0, 1)`` with e = 1e-3: still in [0, 1], strictly
increasing in a raw score in [0, 1] within a band, and the ECE moves by at most 0.1 points. (e = 1e-6
was too small: the float32 scores predict returns rounded the difference away and ties came back.)

Per-label thresholds (``--thresholds f1``): for each label, the calibrated score that maximises that
label's F1 over the validation suggestions (TP: correct suggestions at or above the threshold; FN:
its validation occurrences not accepted). Labels with fewer than ``min_support`` validation
occurrences (default 10) get the one global threshold that maximises micro-F1 instead; one threshold
learned from a few examples only memorises them. Measured on yso-finna-en-2k-20k (2,000 validation
documents, so no label reaches 10 occurrences): per-label thresholds from 3 occurrences gave test F1
24.8 against the global threshold's 26.4, hence the default of 10, with which every label takes the
global threshold there. Per-label thresholds pay off only with a validation set large enough to
hold each label many times.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError, ModelFormatError

METHODS = ("isotonic", "platt")
# isotonic maps are flat between breakpoints; this much of the raw score keeps their order (see module doc)
TIE_BREAK = 1e-3
MIN_BAND = 10  # a band with fewer validation suggestions shares the map fitted on all of them
MIN_SUPPORT = 10  # validation occurrences a label needs for a threshold of its own (see module doc)
# texts with fewer known words than this share have their calibrated scores cut (damp_unreadable)
MIN_KNOWN = 0.5
FORMAT = 1


def _band_of(label_counts: np.ndarray, edges: np.ndarray, indices: np.ndarray) -> np.ndarray:
    counts = label_counts[np.where(indices >= 0, indices, 0)]
    return np.searchsorted(edges, counts, side="left")  # band b: edges[b-1] < count <= edges[b]


class Calibration:
    """Per-band score maps (and optional per-label thresholds) of one model."""

    def __init__(self, method: str, edges: np.ndarray, label_counts: np.ndarray, maps: list[dict],
                 thresholds: np.ndarray | None = None, global_threshold: float | None = None,
                 unseen_mass: float | None = None):
        if method not in METHODS:
            raise ConfigError(f"calibration method must be one of {', '.join(METHODS)}, got {method!r}")
        self.method = method
        self.edges = np.asarray(edges, dtype=np.float64)
        self.label_counts = np.asarray(label_counts, dtype=np.int64)
        self.maps = maps
        self.thresholds = None if thresholds is None else np.asarray(thresholds, dtype=np.float64)
        self.global_threshold = global_threshold
        # the share of label occurrences on labels without documents (None: no prior shift, see unseen_odds)
        self.unseen_mass = unseen_mass
        self.fit_info: dict = {}  # how it was fitted (validation documents, seed, ECE), shown by `xmtc info`

    # -- fitting --------------------------------------------------------------------------------
    @classmethod
    def fit(cls, indices: np.ndarray, scores: np.ndarray, correct: np.ndarray, label_counts: np.ndarray, *,
            method: str = "isotonic", n_bands: int = 3, laplace: bool = True) -> "Calibration":
        """Fit on a validation set's top-k ``(indices, raw scores)`` and whether each suggestion is right.
        ``laplace=False``: isotonic steps at their blocks' plain means (see the module doc; for comparison)."""
        if method not in METHODS:
            raise ConfigError(f"calibration method must be one of {', '.join(METHODS)}, got {method!r}")
        if isinstance(n_bands, bool) or not isinstance(n_bands, (int, np.integer)) or n_bands < 1:
            raise ConfigError(f"n_bands must be a positive integer, got {n_bands!r}")
        valid = indices >= 0
        if not valid.any():
            raise ConfigError("calibration needs at least one suggestion on the validation data")
        label_counts = np.asarray(label_counts, dtype=np.int64)
        cnt = label_counts[indices[valid]].astype(np.float64)
        edges = np.unique(np.quantile(cnt, np.linspace(0, 1, n_bands + 1)[1:-1], method="lower"))
        band = np.searchsorted(edges, cnt, side="left")
        s, y = scores[valid].astype(np.float64), correct[valid].astype(np.float64)
        maps = [cls._fit_one(method, s[band == b], y[band == b], s, y, laplace) for b in range(edges.shape[0] + 1)]
        return cls(method, edges, label_counts, maps)

    @staticmethod
    def _fit_one(method: str, s: np.ndarray, y: np.ndarray, s_all: np.ndarray, y_all: np.ndarray,
                 laplace: bool = True) -> dict:
        if s.size < MIN_BAND:  # too few points to fit a band on its own: use every suggestion
            s, y = s_all, y_all
        if y.min() == y.max():  # one outcome only: the map is a constant (isotonic: Laplace's, see the module doc)
            value = (y.sum() + 1.0) / (y.size + 2.0) if laplace else float(y[0])
            return {"x": np.array([0.0]), "y": np.array([value])} if method == "isotonic" \
                else {"a": np.array([0.0]), "b": np.array([10.0 if y[0] else -10.0])}
        if method == "isotonic":
            x_thr, y_thr = isotonic_steps(s, laplace_blocks(s, y) if laplace else y)
            return {"x": x_thr, "y": y_thr}
        try:
            from sklearn.linear_model import LogisticRegression
        except ImportError:
            raise ConfigError("Platt calibration needs scikit-learn: pip install 'xmtc[calibrate]'") from None

        lr = LogisticRegression(C=1e6, max_iter=1000).fit(s[:, None], y)  # Platt: sigmoid(a s + b), unregularised
        return {"a": np.array([float(lr.coef_[0, 0])]), "b": np.array([float(lr.intercept_[0])])}

    # -- applying -------------------------------------------------------------------------------
    def probabilities(self, indices: np.ndarray, scores: np.ndarray, label_counts: np.ndarray | None = None
                      ) -> np.ndarray:
        """Calibrated scores in [0, 1], same shape and order as ``scores`` (padding stays 0). ``label_counts``: the
        model's training counts now, which say which labels have no document (:meth:`unseen_ratio`; default the
        calibration's own, counted on the part it was fitted beside)."""
        indices = np.asarray(indices)
        scores = np.asarray(scores, dtype=np.float64)
        if indices.size and indices.max() >= self.label_counts.shape[0]:
            raise ConfigError(f"calibration covers {self.label_counts.shape[0]} labels, got label id {indices.max()}")
        band = _band_of(self.label_counts, self.edges, indices)
        out = np.zeros(scores.shape, dtype=np.float64)
        for b, m in enumerate(self.maps):
            sel = (band == b) & (indices >= 0)
            if self.method == "isotonic":
                raw = scores[sel]
                out[sel] = (1 - TIE_BREAK) * np.interp(raw, m["x"], m["y"]) + TIE_BREAK * np.clip(raw, 0.0, 1.0)
            else:
                out[sel] = 1.0 / (1.0 + np.exp(-(m["a"][0] * scores[sel] + m["b"][0])))
        if self.unseen_mass is not None:
            counts = self.label_counts if label_counts is None else np.asarray(label_counts)
            zero = (indices >= 0) & (counts[np.where(indices >= 0, indices, 0)] == 0)
            if zero.any():
                q = np.clip(out[zero], 0.0, 1.0 - 1e-12)
                odds = q / (1.0 - q) * self.unseen_ratio(counts)
                out[zero] = odds / (1.0 + odds)
        return out

    def unseen_ratio(self, label_counts: np.ndarray | None = None) -> float:
        """The base rate of a label without training documents over a documented one's, by which a map's odds
        are multiplied for such labels: ``m / (1 - m) * S / U`` (:mod:`xmtc.models.route_prior`), ``S`` and ``U``
        the labels with and without documents now. The maps are fitted on suggestions of documented labels; a
        method that scores labels from their text alone (dual encoder, label-text, knn) would otherwise give a
        whole vocabulary's doc-less labels the odds of labels with documents."""
        from .route_prior import prior_ratio

        if self.unseen_mass is None:
            return 1.0
        counts = self.label_counts if label_counts is None else np.asarray(label_counts)
        zero = int(np.sum(counts == 0))
        return prior_ratio(self.unseen_mass, int(counts.size - zero), zero)

    def apply(self, indices: np.ndarray, scores: np.ndarray, label_counts: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
        """``(indices, calibrated scores)``, each row re-sorted by calibrated score (see module doc);
        ``label_counts`` as :meth:`probabilities` takes them."""
        p = self.probabilities(indices, scores, label_counts)
        p = np.where(indices >= 0, p, -1.0)  # padding sorts last
        order = np.argsort(-p, axis=1, kind="stable")
        return (np.take_along_axis(np.asarray(indices), order, axis=1),
                np.maximum(np.take_along_axis(p, order, axis=1), 0.0).astype(np.float32))

    def label_thresholds(self) -> np.ndarray:
        if self.thresholds is None:
            raise ConfigError("this model has no per-label thresholds; run `xmtc calibrate ... --thresholds f1`")
        return self.thresholds

    # -- thresholds -----------------------------------------------------------------------------
    def fit_thresholds(self, indices: np.ndarray, probs: np.ndarray, correct: np.ndarray, label_freq: np.ndarray,
                       n_true: int, *, min_support: int = MIN_SUPPORT) -> None:
        """Per-label F1-optimal thresholds on calibrated validation scores (see module doc).

        ``label_freq[j]``: label j's occurrences in the validation data; ``n_true``: all true
        (document, label) pairs there, labels the model does not know included.
        """
        valid = indices >= 0
        lab, p, c = indices[valid].astype(np.int64), probs[valid], correct[valid].astype(bool)
        self.global_threshold = best_threshold(p, c, float(n_true))
        L = self.label_counts.shape[0]
        thr = np.full(L, self.global_threshold, dtype=np.float64)
        order = np.lexsort((-p, lab))
        lab, p, c = lab[order], p[order], c[order]
        starts = np.flatnonzero(np.r_[True, lab[1:] != lab[:-1]])
        ends = np.r_[starts[1:], lab.shape[0]]
        for a, b in zip(starts.tolist(), ends.tolist()):
            j = int(lab[a])
            if j < L and label_freq[j] >= min_support:
                thr[j] = best_threshold(p[a:b], c[a:b], float(label_freq[j]))
        self.thresholds = thr

    # -- storage --------------------------------------------------------------------------------
    def to_arrays(self) -> tuple[dict, dict[str, np.ndarray]]:
        arrays = {"edges": self.edges, "label_counts": self.label_counts,
                  "format": np.array([FORMAT], dtype=np.int64)}
        for b, m in enumerate(self.maps):
            for key, val in m.items():
                arrays[f"band{b}.{key}"] = np.asarray(val, dtype=np.float64)
        if self.thresholds is not None:
            arrays["thresholds"] = self.thresholds
        params = {"method": self.method, "n_bands": len(self.maps), "global_threshold": self.global_threshold}
        if self.unseen_mass is not None:
            params["unseen_mass"] = float(self.unseen_mass)
        if self.fit_info:
            params["fit_info"] = dict(self.fit_info)
        return params, arrays

    @classmethod
    def from_arrays(cls, params: dict, arrays: dict, n_labels: int, where: str) -> "Calibration":
        try:
            method, n_bands = params["method"], int(params["n_bands"])
            if method not in METHODS or n_bands < 1:
                raise ValueError(f"method {method!r}, {n_bands} bands")
            fmt = arrays["format"]
            if fmt.shape != (1,) or int(fmt[0]) != FORMAT:
                raise ValueError(f"unsupported format {fmt.tolist()}")
            keys = ("x", "y") if method == "isotonic" else ("a", "b")
            maps = [{k: np.asarray(arrays[f"band{b}.{k}"], dtype=np.float64) for k in keys} for b in range(n_bands)]
            edges, counts = arrays["edges"], arrays["label_counts"]
            thresholds = arrays.get("thresholds")
        except (KeyError, ValueError, TypeError) as exc:
            raise ModelFormatError(f"{where}: invalid calibration ({exc})") from None
        if edges.shape != (n_bands - 1,) or counts.shape != (n_labels,) or \
                (thresholds is not None and thresholds.shape != (n_labels,)):
            raise ModelFormatError(f"{where}: calibration arrays do not match {n_bands} bands and {n_labels} labels")
        for m in maps:
            if any(not np.all(np.isfinite(v)) or v.ndim != 1 or v.size == 0 for v in m.values()) or \
                    (method == "isotonic" and m["x"].shape != m["y"].shape):
                raise ModelFormatError(f"{where}: calibration maps are malformed")
        g, mass = params.get("global_threshold"), params.get("unseen_mass")
        if mass is not None and (isinstance(mass, bool) or not isinstance(mass, (int, float)) or not 0 <= mass < 1):
            raise ModelFormatError(f"{where}: calibration's unseen_mass must be a number in [0, 1), got {mass!r}")
        cal = cls(method, edges, counts, maps, thresholds, None if g is None else float(g),
                  None if mass is None else float(mass))
        info = params.get("fit_info")
        cal.fit_info = dict(info) if isinstance(info, dict) else {}
        return cal


def isotonic_steps(s: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The breakpoints ``(x, y)`` of the least-squares non-decreasing fit of ``y`` on ``s`` in [0, 1], as
    scikit-learn's ``IsotonicRegression(y_min=0, y_max=1).fit(s, y)`` keeps them (``X_thresholds_``,
    ``y_thresholds_``: equal ``s`` pooled to their mean, then the first and last point of each flat step), read
    by ``np.interp``. Computed by :func:`pava`, not scikit-learn's: importing scikit-learn costs ``xmtc train``
    0.6-1.0 s on this 2-core machine, a sixth of a small set's whole command; tests/test_calibration.py holds the
    two to the same breakpoints."""
    order = np.lexsort((y, s))
    s, y = np.asarray(s, dtype=np.float64)[order], np.asarray(y, dtype=np.float64)[order]
    xs, start, count = np.unique(s, return_index=True, return_counts=True)
    means = np.add.reduceat(y, start) / count
    fit = np.clip(pava(means, count.astype(np.float64)), 0.0, 1.0)
    keep = np.ones(fit.size, dtype=bool)
    keep[1:-1] = (fit[1:-1] != fit[:-2]) | (fit[1:-1] != fit[2:])
    return xs[keep], fit[keep]


def pava(y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The weighted least-squares non-decreasing fit of ``y`` in its order (pool-adjacent-violators), what
    ``scipy.optimize.isotonic_regression(y, weights=weights).x`` gives; in C (``xmtc/csrc/isotonic.c``) because
    importing ``scipy.optimize`` costs every ``xmtc train`` 0.3 s (2-core machine, scipy 1.17), about a tenth of
    a small set's command. Weights must be positive."""
    from ..native import lib, ptr

    fit = np.array(y, dtype=np.float64)  # copies: the kernel works in place
    w = np.array(weights, dtype=np.float64)
    if fit.ndim != 1 or w.shape != fit.shape:
        raise ValueError(f"pava: y and weights must be 1-d and of one length, got {fit.shape} and {w.shape}")
    first = np.empty(fit.size, dtype=np.int64)
    lib().xmtc_pava(ptr(fit, np.float64), ptr(w, np.float64), ptr(first, np.int64), fit.size)
    return fit


def laplace_blocks(s: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Each point's target for the final isotonic fit: the Laplace estimate ``(h + 1) / (n + 2)`` of the
    pool-adjacent-violators block it falls in (``n`` points, ``h`` right) of a plain isotonic fit of ``y`` on
    ``s``. Pooling these again restores monotonicity where a small block fell below a larger one under it."""
    fitted = np.interp(s, *isotonic_steps(s, y))
    _, block, n = np.unique(fitted, return_inverse=True, return_counts=True)  # equal values: one block
    hits = np.bincount(block, weights=y, minlength=n.size)
    return ((hits + 1.0) / (n + 2.0))[block]


def best_threshold(probs: np.ndarray, correct: np.ndarray, n_true: float) -> float:
    """The score t maximising ``2 TP / (2 TP + FP + FN)`` when accepting suggestions with score >= t.

    ``n_true``: all true (document, label) pairs the suggestions could have found (FN = n_true - TP).
    Candidates are the suggestions' own scores; 1.0 + eps when accepting none is best.
    """
    order = np.argsort(-probs, kind="stable")
    p, c = probs[order], correct[order].astype(np.float64)
    tp = np.cumsum(c)
    fp = np.arange(1, p.shape[0] + 1) - tp
    ends = np.flatnonzero(np.r_[p[1:] != p[:-1], True])
    if ends.size == 0:
        return 1.0 + 1e-9
    f1 = 2 * tp[ends] / np.maximum(2 * tp[ends] + fp[ends] + (n_true - tp[ends]), 1e-12)
    best = int(np.argmax(f1))
    return float(p[ends[best]]) if f1[best] > 0 else 1.0 + 1e-9


def calibrate(model, X, Y, *, method: str = "isotonic", n_bands: int = 3, k: int = 10,
              thresholds: str | None = None, min_support: int = MIN_SUPPORT, progress: bool = False,
              laplace: bool = True, topk: tuple[np.ndarray, np.ndarray] | None = None) -> Calibration:
    """Fit ``model.calibration_`` on validation inputs ``X`` and labels ``Y`` (label lists or sparse).

    The raw (uncalibrated) top-``k`` suggestions are the training points; ``thresholds="f1"`` also
    learns per-label thresholds. ``topk``: the model's raw top-``k`` of ``X`` when the caller has them already.
    Returns the calibration (also set on the model; save the model to keep it).
    """
    from ..metrics import hits_matrix
    from ..data.dataset import as_label_matrix

    if thresholds not in (None, "f1"):
        raise ConfigError(f"thresholds must be 'f1' or None, got {thresholds!r}")
    n = X.shape[0] if hasattr(X, "shape") else len(X)
    Y, _ = as_label_matrix(Y, model.labels_, n, unknown_labels="extend")
    if topk is None:
        previous = getattr(model, "calibration_", None)
        model.calibration_ = None
        try:
            topk = model.predict_topk(X, k, progress=progress)
        finally:
            model.calibration_ = previous
    idx, raw = topk
    correct = hits_matrix(Y, idx)
    cal = Calibration.fit(idx, raw, correct, model.label_counts_, method=method, n_bands=n_bands, laplace=laplace)
    if thresholds == "f1":
        L = len(model.labels_)
        freq = np.asarray(Y[:, :L].getnnz(axis=0), dtype=np.int64)
        cal.fit_thresholds(idx, cal.probabilities(idx, raw), correct, freq, Y.nnz, min_support=min_support)
    model.calibration_ = cal
    return cal


def damp_unreadable(indices: np.ndarray, scores: np.ndarray, known: np.ndarray,
                    min_known: float = MIN_KNOWN) -> tuple[np.ndarray, np.ndarray]:
    """Scale the calibrated scores of a text by ``known / min_known`` when less than ``min_known`` of its
    words are in the model's vocabulary (0 for a text with no known word).

    The score maps were fitted on validation texts the model reads almost whole; they say nothing of a
    text in another language, or of one whose few known words carry the whole L2-normalised feature
    vector, where a raw score can be as high as for a real match. Below ``min_known`` the suggestion
    rests on a fraction of the text, and its score is cut in proportion (see :data:`MIN_KNOWN`).
    """
    factor = np.minimum(1.0, np.asarray(known, dtype=np.float64) / min_known)
    if np.all(factor >= 1.0):
        return indices, scores
    return indices, (scores * factor[:, None]).astype(scores.dtype)
