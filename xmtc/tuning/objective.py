"""What one ``xmtc tune`` trial does: fit a configuration on the training part, score it on the validation part.

The split is ``xmtc train``'s own (:func:`xmtc.data.split.split_dataset` with
:func:`xmtc.models.calibrated_fit.auto_valid_size` and the same seed), so the documents a tuned
configuration is chosen on are the ones ``xmtc train --config BEST.json`` later calibrates on, and none of
them is ever fitted on during the search.

Features are computed once per distinct featurization: a method whose config declares ``TUNE_TFIDF_INPUT``
(its ``fit`` takes the TF-IDF matrix of ``cfg.tfidf()`` in place of the texts, as XR-Linear's does) gets
the training and validation matrices from a small cache keyed by the TF-IDF parameters, so trials that
change only C, the tree or the beam skip the featurizer. Other methods are fitted on the texts.

Scores are kept per document (:func:`doc_stats`), so that the gain of the best trial over the defaults can
be tested against its paired bootstrap noise (:func:`gain_and_noise`), not just read off two means.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import build_config, config_to_dict
from ..data.dataset import Dataset
from ..data.split import split_dataset
from ..errors import ConfigError
from ..metrics import binary_csr, hits_matrix
from ..models.calibrated_fit import auto_valid_size

_METRIC = re.compile(r"^(P|R|nDCG)@([1-9][0-9]*)$|^F1@([0-9.]+)$")
FEATURE_CACHE = 3  # featurizations kept: each holds the training and validation matrices
#: loggers whose INFO lines (every level of every tree of every trial) would bury the search's own progress
FIT_LOGGERS = ("xmtc.methods", "xmtc.linear", "xmtc.index", "xmtc.features", "xmtc.models", "xmtc.neural")


@dataclass(frozen=True)
class Metric:
    """What a trial is scored by: ``P@k``, ``R@k``, ``nDCG@k`` or ``F1@T`` (micro F1 of the top-5 suggestions
    whose score, calibrated on the validation part as ``xmtc train`` calibrates, is at least T)."""

    name: str
    kind: str
    k: int
    threshold: float | None = None


def parse_metric(text: str) -> Metric:
    """A :class:`Metric` from ``P@1``, ``nDCG@5``, ``R@10``, ``F1@0.5``; a one-line ConfigError otherwise."""
    m = _METRIC.match(text.strip())
    if not m:
        raise ConfigError(f"--metric {text!r}: expected P@k, R@k, nDCG@k (k a positive integer) or F1@T"
                          " (T a score threshold in [0, 1])")
    if m.group(3) is not None:
        try:
            t = float(m.group(3))
        except ValueError:
            t = -1.0
        if not 0.0 <= t <= 1.0:
            raise ConfigError(f"--metric {text!r}: the threshold of F1@T is a probability in [0, 1]")
        return Metric(text.strip(), "F1", 5, t)
    return Metric(text.strip(), m.group(1), int(m.group(2)))


def doc_stats(metric: Metric, Y, idx: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Per validation document, what the metric sums over: a column of per-document values for P, R and
    nDCG (the metric is their mean, in percent), and true positives, false positives and false negatives
    for F1 (the metric is micro F1 of the column sums)."""
    Y = binary_csr(Y)
    idx = idx[:, :metric.k]
    hits = hits_matrix(Y, idx)
    n_true = np.diff(Y.indptr).astype(np.float64)
    if metric.kind == "P":
        return (hits.sum(axis=1) / metric.k)[:, None]
    if metric.kind == "R":
        return np.divide(hits.sum(axis=1), n_true, out=np.zeros(len(n_true)), where=n_true > 0)[:, None]
    if metric.kind == "nDCG":
        discount = 1.0 / np.log2(np.arange(2, metric.k + 2))
        dcg = (hits * discount[:hits.shape[1]]).sum(axis=1)
        ideal = np.concatenate([[0.0], np.cumsum(discount)])[np.minimum(n_true, metric.k).astype(int)]
        return np.divide(dcg, ideal, out=np.zeros(len(dcg)), where=ideal > 0)[:, None]
    accept = (idx >= 0) & (scores[:, :metric.k] >= metric.threshold)
    tp = (accept & hits).sum(axis=1)
    fp = (accept & ~hits).sum(axis=1)
    return np.stack([tp, fp, n_true - tp], axis=1).astype(np.float64)


def metric_value(metric: Metric, stats: np.ndarray) -> float:
    """The metric, in percent, of :func:`doc_stats` rows (all of them, or a bootstrap sample's)."""
    if metric.kind == "F1":
        tp, fp, fn = stats.sum(axis=0)
        return 100.0 * 2 * tp / (2 * tp + fp + fn) if tp + fp + fn > 0 else 0.0
    return 100.0 * float(stats[:, 0].mean()) if len(stats) else 0.0


def gain_and_noise(metric: Metric, best: np.ndarray, default: np.ndarray, n_boot: int = 500,
                   seed: int = 0) -> tuple[float, float]:
    """Gain of ``best`` over ``default`` (same documents, same order) and the standard deviation of that gain
    over ``n_boot`` paired bootstrap resamples of the documents: how much of the gain chance alone gives."""
    gain = metric_value(metric, best) - metric_value(metric, default)
    rng = np.random.default_rng(seed)
    n = len(best)
    draws = [metric_value(metric, best[s]) - metric_value(metric, default[s])
             for s in (rng.integers(0, n, n) for _ in range(n_boot))]
    return gain, float(np.std(draws))


class TrialRunner:
    """The split, the feature cache and the scoring of one configuration (see the module doc)."""

    def __init__(self, cls: type, ds: Dataset, metric: Metric, *, valid_size: float | None = None,
                 seed: int = 0, fixed: dict[str, Any] | None = None):
        self.cls, self.metric, self.fixed = cls, metric, dict(fixed or {})
        size = auto_valid_size(len(ds)) if valid_size is None else valid_size
        self.train, self.valid = split_dataset(ds, size, seed)
        if len(self.valid) == 0:
            raise ConfigError(f"tuning needs a validation split; {len(ds)} documents give none (at least 200"
                              " are needed for the automatic split, or give --valid-size)")
        self.cached_input = bool(getattr(cls.config_class, "TUNE_TFIDF_INPUT", False)) and ds.texts is not None
        self._features: OrderedDict = OrderedDict()
        self.featurizations = 0

    def config(self, values: dict[str, Any]):
        """The config dataclass of ``values`` over the fixed parameters (checked as ``xmtc train`` checks)."""
        return build_config(self.cls.config_class, {**self.fixed, **values}, source="trial")

    def _inputs(self, cfg) -> tuple[Any, Any]:
        if not self.cached_input:
            return self.train.inputs, self.valid.inputs
        tfidf = cfg.tfidf()
        key = tuple(sorted(dataclasses.asdict(tfidf).items()))
        if key in self._features:
            self._features.move_to_end(key)
            return self._features[key]
        featurizer = tfidf.make_featurizer(getattr(cfg, "n_threads", None))
        pair = (featurizer.fit_transform(self.train.texts), featurizer.transform(self.valid.texts))
        self.featurizations += 1
        self._features[key] = pair
        while len(self._features) > FEATURE_CACHE:
            self._features.popitem(last=False)
        return pair

    def run(self, values: dict[str, Any]) -> np.ndarray:
        """Fit the configuration ``values`` on the training part; its :func:`doc_stats` on the validation part."""
        with quiet_fits():
            return self._run(values)

    def _run(self, values: dict[str, Any]) -> np.ndarray:
        cfg = self.config(values)
        X_train, X_valid = self._inputs(cfg)
        model = self.cls(**config_to_dict(cfg))
        model.fit(X_train, self.train.Y, labels=self.train.labels, progress=False)
        if self.metric.kind == "F1":
            from ..models.calibration import calibrate

            calibrate(model, X_valid, self.valid.Y, progress=False)
        idx, scores = model.predict_topk(X_valid, self.metric.k)
        return doc_stats(self.metric, self.valid.Y, idx, scores)


@contextlib.contextmanager
def quiet_fits():
    """The fits' INFO logging off for the duration (kept at DEBUG: ``--log-level DEBUG`` shows every fit)."""
    loggers = [logging.getLogger(name) for name in FIT_LOGGERS]
    if logging.getLogger().getEffectiveLevel() <= logging.DEBUG:
        yield
        return
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
