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

Refitting on everything (``refit``): the held-out tenth costs accuracy on small sets, so where a fit
is cheap (methods that declare ``cheap_refit``: XR-Linear) and the split is at least
:data:`REFIT_MIN_SHARE` of the documents, the model is fitted again on all of them after the maps are
fitted, and keeps the maps. Measured on yso-finna-en-2k-20k (2,000 held out, seeds 0 / 1): the model
fitted on 18,000 documents reached test P@1 29.98 / 30.26 and ECE@5 1.13 / 1.21; refitted on all
20,000 with the same maps, P@1 31.60 / 31.42 and ECE@5 0.99 / 1.12, so the maps carry over. On
yso-finna-en (5,000 of 522,535 held out, under 1%) the second fit would double the time for little.

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

from ..data.dataset import Dataset
from ..data.split import split_dataset, subset
from .calibration import calibrate
from .open_labels import attach_route
from .route_prior import unseen_mass

log = logging.getLogger(__name__)

AUTO_FRACTION = 0.1
AUTO_MAX = 5000
AUTO_MIN_DOCS = 200
REFIT_MIN_SHARE = 0.02


def auto_valid_size(n: int) -> int:
    """Validation documents ``xmtc train`` holds out from ``n`` when not told (see the module doc)."""
    if n < AUTO_MIN_DOCS:
        return 0
    return min(int(round(AUTO_FRACTION * n)), AUTO_MAX)


def fit_calibrated(model, ds: Dataset, *, valid_size: float | None = None, seed: int = 0,
                   calibration: str = "isotonic", refit: bool | None = None, progress: bool = False,
                   **fit_kw: Any) -> dict:
    """Fit ``model`` on ``ds`` less a validation split, then calibrate on the split.

    ``valid_size``: a fraction in [0, 1) or a document count; ``None`` = :func:`auto_valid_size`;
    0 fits on everything and leaves the scores raw. ``refit``: fit again on every document after
    calibrating (``None``: as the module doc says). Returns what was done, for the log and the manifest.
    """
    n = len(ds)
    if "valid_size" in model.get_params():
        return _fit_own_split(model, ds, calibration, progress, fit_kw)
    size = auto_valid_size(n) if valid_size is None else valid_size
    train, valid = split_dataset(ds, size, seed)
    if len(valid) == 0:
        model.fit(train.inputs, train.Y, labels=train.labels, progress=progress, **fit_kw)
        model.calibration_ = None
        return {"valid_docs": 0}
    log.info("holding out %d of %d documents (seed %d) to calibrate the scores on", len(valid), n, seed)
    model.fit(train.inputs, train.Y, labels=train.labels, progress=progress, **fit_kw)
    if not getattr(model, "is_main_process_", True):
        return {"valid_docs": len(valid)}  # torchrun: rank 0 calibrates and saves
    cal, info = _calibrate_on(model, valid, calibration, progress)
    info.update(valid_seed=int(seed), train_docs=len(train))
    if refit is None:
        refit = bool(getattr(model, "cheap_refit", False)) and len(valid) >= REFIT_MIN_SHARE * n
    if refit:
        log.info("fitting again on all %d documents; the score maps carry over", n)
        model.fit(ds.inputs, ds.Y, labels=ds.labels, progress=progress, **fit_kw)
        model.calibration_ = cal
    info["refit_on_all"] = bool(refit)
    cal.fit_info = info
    cal.unseen_mass = unseen_mass(valid.Y, train.Y.getnnz(axis=0))
    # after a refit: its label counts say which are unseen; the prior is measured against the fitting part's
    attach_route(model, valid.inputs, valid.Y, fit_counts=train.Y.getnnz(axis=0))
    return info


def _calibrate_on(model, valid: Dataset, calibration: str, progress: bool):
    """Fit the score maps on ``valid``; returns them and the figures before / after (in-sample)."""
    t0 = time.perf_counter()
    model.calibration_ = None
    before = model.evaluate(valid.inputs, valid.Y, ks=(1, 5))
    cal = calibrate(model, valid.inputs, valid.Y, method=calibration, progress=progress)
    after = model.evaluate(valid.inputs, valid.Y, ks=(1, 5))
    info = {"valid_docs": len(valid), "ECE@5_raw": round(float(before["ECE@5"]), 4),
            "ECE@5": round(float(after["ECE@5"]), 4), "P@1": round(float(after["P@1"]), 4)}
    log.info("calibrated the scores on %d validation documents in %.1fs: ECE@5 %.2f%% raw -> %.2f%% (in-sample);"
             " validation P@1 %.2f", len(valid), time.perf_counter() - t0, info["ECE@5_raw"], info["ECE@5"],
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
    cal, info = _calibrate_on(model, subset(ds, rows), calibration, progress)
    info.update(valid_seed=int(model.seed), train_docs=len(ds) - int(rows.size), refit_on_all=False)
    cal.fit_info = info
    valid = subset(ds, rows)
    cal.unseen_mass = unseen_mass(valid.Y, model.label_counts_ - valid.Y.getnnz(axis=0))
    attach_route(model, valid.inputs, valid.Y, fit_counts=model.label_counts_ - valid.Y.getnnz(axis=0))
    return info
