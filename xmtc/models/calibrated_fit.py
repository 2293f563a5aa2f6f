"""Fit a model and calibrate its scores on a validation split cut from the same data.

A raw XR-Linear score of 0.03 can be a good match: the tree's products of per-level scores are
ranking scores, not probabilities, and nobody can threshold them. ``xmtc train`` therefore holds out
a seeded validation split by default, fits on the rest, and fits the isotonic score maps of
:mod:`xmtc.models.calibration` on the held-out part, so that a saved model's scores read as the share
of such suggestions that are correct. ``--valid-size 0`` trains on everything and keeps raw scores.

How big the split is (:func:`auto_valid_size`): a tenth of the documents, at most 5,000 and none
below 200 documents (too few to fit a map on). 5,000 documents give 50,000 top-10 suggestions, more
than an isotonic map with three label-frequency bands needs; above that, documents are worth more
as training data.

What follows the calibration (``refit``): the held-out tenth costs accuracy on small sets, so where a fit is
cheap (methods that declare ``cheap_refit``: XR-Linear) and the split is at least :data:`REFIT_MIN_SHARE` of the
documents, the split is brought into the model after the maps are fitted, and the maps are kept (they carry over
to weights this close; a fold rescales their label-frequency bands, :func:`xmtc.models.learning.carry_calibration`):

* ``"full"`` (the default where it applies): a second fit on every document, the exact model of a fit on all
  of them, for a second fit's time (the TF-IDF is not computed again, see below).
* ``"fold"``: the split's documents are learned into the fitted model (``XRLinear.learn``: the nodes their rows
  reach are refitted proximally on those rows, started at their weights and each feature held by the curvature
  of the remembered training rows, :func:`xmtc.linear.update.old_curvature`; a label only the split carries is
  fitted against those rows). Its cost is the split's rows, not the corpus.
* ``"none"``: the model keeps only the training part (on yso-finna-en, 5,000 of 522,535 held out, under 1%).

Why full and not fold by default (``benchmarks/refit_modes.py``, XR-Linear defaults, test sets, split seed 0;
seed 1 in RESULTS.md, "xmtc train at its defaults"): P@1 / P@5 of none, fold and full were 94.24 / 23.64, 94.67 /
23.66, 94.77 / 23.68 on reuters, 30.06 / 10.11, 30.92 / 10.34, 30.78 / 10.54 on yso-finna-en-2k-20k, 55.55 /
24.44, 56.26 / 24.64, 56.06 / 24.60 on bibtex and 62.64 / 52.21, 62.89 / 52.02, 61.92 / 52.42 on delicious: the
fold takes back most of what the split cost, for 40-60% of the full refit's CPU time, but its P@5 stays 0.1-0.4
below the full refit's on three of the four sets, and the default keeps accuracy where it was. With one anchor
for every feature (``learn``'s default) instead of the curvature, the fold cost delicious 8 points of P@1
(54.54): its 500 dense bag-of-words features carry the old rows' evidence in every direction.

Both fits and the calibration share one TF-IDF of every document (:meth:`XRLinear.fit_featurizer`): the split's
words join the vocabulary (no labels are read), so no text is featurized twice.

Labels without any training document (a label file's labels that no document carries, or labels added by
text) are right far less often than the documented labels the maps are fitted on: their calibrated odds are
multiplied by the ratio of the two base rates, measured on the split (``Calibration.unseen_ratio``, the same
prior as the label-text route's, :mod:`xmtc.models.route_prior`).

Labels the split does not cover are still calibrated: maps are fitted per band of *training* label
frequency, so a label that never occurs in the split takes its band's map, which was fitted on the
suggestions of every label of similar frequency (a label seen once in training is calibrated like
the other rare labels, not like the frequent ones). A label whose only documents fell into the
split has no training document: it is in the lowest band, and its scores are those of a label the
model never learned.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..data.dataset import Dataset
from ..data.split import split_indices, subset
from ..errors import ConfigError
from .calibration import calibrate
from .open_labels import attach_route
from .route_prior import unseen_mass

log = logging.getLogger(__name__)

AUTO_FRACTION = 0.1
AUTO_MAX = 5000
AUTO_MIN_DOCS = 200
REFIT_MIN_SHARE = 0.02
TOP_K = 10  # suggestions per validation document the maps are fitted on (calibration.calibrate's k)


def auto_valid_size(n: int) -> int:
    """Validation documents ``xmtc train`` holds out from ``n`` when not told (see the module doc)."""
    if n < AUTO_MIN_DOCS:
        return 0
    return min(int(round(AUTO_FRACTION * n)), AUTO_MAX)


REFITS = ("fold", "full", "none")


def resolve_refit(refit: str | bool | None, model, n_valid: int, n: int) -> str:
    """What follows the calibration (see the module doc): ``"fold"``, ``"full"`` or ``"none"``. ``None`` (auto):
    full for methods that declare ``cheap_refit``, when the split is at least :data:`REFIT_MIN_SHARE` of the
    documents; ``True`` is ``"full"`` and ``False`` ``"none"``."""
    if refit is None or refit == "auto":
        return "full" if getattr(model, "cheap_refit", False) and n_valid >= REFIT_MIN_SHARE * n else "none"
    if isinstance(refit, bool):
        return "full" if refit else "none"
    if refit not in REFITS:
        raise ConfigError(f"refit must be auto, {', '.join(REFITS)}, true or false; got {refit!r}")
    if refit == "fold" and not getattr(model, "can_learn", False):
        raise ConfigError(f"refit 'fold' learns the validation split into the model; {model.method} cannot learn")
    return refit


def fit_calibrated(model, ds: Dataset, *, valid_size: float | None = None, seed: int = 0,
                   calibration: str = "isotonic", refit: str | bool | None = None, progress: bool = False,
                   **fit_kw: Any) -> dict:
    """Fit ``model`` on ``ds`` less a validation split, calibrate on the split, then bring the split in (``refit``).

    ``valid_size``: a fraction in [0, 1) or a document count; ``None`` = :func:`auto_valid_size`;
    0 fits on everything and leaves the scores raw. ``refit``: ``"fold"`` (learn the split into the fitted
    model), ``"full"`` (fit again on every document), ``"none"``, or ``None`` / ``"auto"`` as
    :func:`resolve_refit` says. Returns what was done, for the log and the manifest.
    """
    n = len(ds)
    if "valid_size" in model.get_params():
        return _fit_own_split(model, ds, calibration, progress, fit_kw)
    size = auto_valid_size(n) if valid_size is None else valid_size
    train_rows, valid_rows = split_indices(n, size, seed)
    if valid_rows.size == 0:
        model.fit(ds.inputs, ds.Y, labels=ds.labels, progress=progress, **fit_kw)
        model.calibration_ = None
        return {"valid_docs": 0}
    refit = resolve_refit(refit, model, valid_rows.size, n)
    log.info("holding out %d of %d documents (seed %d) to calibrate the scores on", valid_rows.size, n, seed)
    inputs, shared = ds.inputs, {}
    if isinstance(inputs, list) and getattr(model, "cheap_refit", False) \
            and callable(getattr(model, "fit_featurizer", None)):
        # one TF-IDF of every document serves both fits and the calibration (texts only, no labels: the
        # split's words join the vocabulary, its labels reach nothing before the maps are fitted)
        inputs, shared = model.fit_featurizer(inputs), {"keep_featurizer": True}
    Y = sp.csr_matrix(ds.Y)
    texts_of = (lambda rows: {"texts": _rows(ds.inputs, rows)}) if shared else (lambda rows: {})  # for the memory
    model.fit(_rows(inputs, train_rows), Y[train_rows], labels=ds.labels, progress=progress, **shared,
              **texts_of(train_rows), **fit_kw)
    if not getattr(model, "is_main_process_", True):
        return {"valid_docs": int(valid_rows.size)}  # torchrun: rank 0 calibrates and saves
    X_valid, Y_valid = _rows(inputs, valid_rows), Y[valid_rows]
    fit_counts = np.asarray(model.label_counts_).copy()
    cal, info = _calibrate_on(model, X_valid, Y_valid, calibration, progress)
    info.update(valid_seed=int(seed), train_docs=int(train_rows.size))
    t0 = time.perf_counter()
    if refit == "fold":
        log.info("learning the %d validation documents into the model; the score maps carry over",
                 valid_rows.size)
        # the split's labels are rare ones a retrain fits in the trees; the refit modes were measured without
        # the few-shot stage (xmtc.models.few_shot), so the fold keeps them to the trees as a retrain does
        # (its featurizer counted the split's texts already: their n-grams must not be counted again)
        # (texts where there are: the remembered rows keep theirs; the features are the rows of X_valid again)
        model.learn(texts_of(valid_rows).get("texts", X_valid), Y_valid, whole_memory_refit=False, curvature=True,
                    few_shot=False, new_words=False, progress=progress)
    elif refit == "full":
        log.info("fitting again on all %d documents; the score maps carry over", n)
        model.fit(inputs, Y, labels=ds.labels, progress=progress, **shared,
                  **texts_of(np.arange(n)), **fit_kw)
    model.calibration_ = cal
    if refit != "none":
        log.info("%s on all %d documents in %.1fs", "folded in" if refit == "fold" else "refitted", n,
                 time.perf_counter() - t0)
    info["refit_on_all"] = refit != "none"
    info["refit"] = refit
    cal.fit_info = info
    cal.unseen_mass = unseen_mass(Y_valid, fit_counts)
    # after a refit: its label counts say which are unseen; the prior is measured against the fitting part's
    valid_texts = _rows(ds.texts, valid_rows) if ds.texts is not None else None
    attach_route(model, valid_texts, Y_valid, fit_counts=fit_counts)
    return info


def _rows(inputs, rows: np.ndarray):
    """Rows of texts (a list) or of a sparse matrix."""
    return sp.csr_matrix(inputs[rows]) if sp.issparse(inputs) else [inputs[i] for i in rows.tolist()]


def _calibrate_on(model, X_valid, Y_valid, calibration: str, progress: bool):
    """Fit the score maps on the validation split; returns them and the figures before / after (in-sample),
    both read from the one prediction the maps are fitted on."""
    from ..metrics import expected_calibration_error, hits_matrix

    t0 = time.perf_counter()
    model.calibration_ = None
    idx, raw = model.predict_topk(X_valid, TOP_K, progress=progress)
    cal = calibrate(model, X_valid, Y_valid, method=calibration, k=TOP_K, topk=(idx, raw))
    correct = hits_matrix(Y_valid, idx)
    idx_c, p = cal.apply(idx, raw)
    hits_c = hits_matrix(Y_valid, idx_c)
    top = (idx >= 0)[:, :5]
    info = {"valid_docs": int(Y_valid.shape[0]),
            "ECE@5_raw": round(float(expected_calibration_error(raw[:, :5][top], correct[:, :5][top])), 4),
            "ECE@5": round(float(expected_calibration_error(p[:, :5][top], hits_c[:, :5][top])), 4),
            "P@1": round(100.0 * float(np.mean(hits_c[:, 0])), 4)}
    log.info("calibrated the scores on %d validation documents in %.1fs: ECE@5 %.2f%% raw -> %.2f%% (in-sample);"
             " validation P@1 %.2f", info["valid_docs"], time.perf_counter() - t0, info["ECE@5_raw"], info["ECE@5"],
             info["P@1"])
    return cal, info


def _fit_own_split(model, ds: Dataset, calibration: str, progress: bool, fit_kw: dict) -> dict:
    """Methods that hold out a validation split of their own to choose the epoch kept (``valid_size``
    among their parameters: the end-to-end methods) are fitted on everything and calibrated on that
    same split: the documents never trained on, used so far only to pick an epoch, so no second
    share of the data is lost. The split is the method's own rule (its ``seed``); ``valid_size`` 0, or
    fewer than :data:`AUTO_MIN_DOCS` documents in all, leaves the scores raw."""
    from .end_to_end import validation_split

    model.fit(ds.inputs, ds.Y, labels=ds.labels, progress=progress, **fit_kw)
    model.calibration_ = None
    _, rows = validation_split(len(ds), model.valid_size, model.seed)
    if rows.size == 0 or len(ds) < AUTO_MIN_DOCS or not getattr(model, "is_main_process_", True):
        return {"valid_docs": int(rows.size)}
    valid = subset(ds, rows)
    cal, info = _calibrate_on(model, valid.inputs, valid.Y, calibration, progress)
    info.update(valid_seed=int(model.seed), train_docs=len(ds) - int(rows.size), refit_on_all=False)
    cal.fit_info = info
    cal.unseen_mass = unseen_mass(valid.Y, model.label_counts_ - valid.Y.getnnz(axis=0))
    attach_route(model, valid.inputs, valid.Y, fit_counts=model.label_counts_ - valid.Y.getnnz(axis=0))
    return info
