"""xmtc train's fit-calibrate-refit (xmtc.models.calibrated_fit): the refit modes and the TF-IDF they share."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

import xmtc
from xmtc.data import sample_path
from xmtc.data.dataset import Dataset, label_matrix
from xmtc.data.split import split_indices
from xmtc.errors import ConfigError
from xmtc.models.calibrated_fit import auto_valid_size, fit_calibrated, resolve_refit


@pytest.fixture(scope="module")
def small():
    lines = gzip.open(sample_path("train"), "rt", encoding="utf-8").read().splitlines()[:3000]
    texts = [line.split("\t", 1)[1] for line in lines]
    labels = [line.split("\t", 1)[0].split(",") for line in lines]
    return texts, labels


def _dataset(texts, labels) -> Dataset:
    Y, vocab = label_matrix(labels)
    return Dataset(texts, None, Y, vocab, None)


def _weights(model):
    return [w.toarray() for tree in model.models_ for w in tree.weights]


def test_the_default_refit_is_the_plain_fit_on_every_document(small):
    """The model xmtc train saves (refit "full", one shared TF-IDF) has the weights and vocabulary of
    XRLinear().fit on all documents: sharing the featurizer changes nothing but the time."""
    texts, labels = small
    ds = _dataset(texts, labels)
    trained = xmtc.XRLinear(n_threads=1)
    info = fit_calibrated(trained, ds)
    assert info["refit"] == "full" and trained.n_train_ == len(texts) and trained.calibration_ is not None
    plain = xmtc.XRLinear(n_threads=1).fit(texts, ds.Y, labels=ds.labels, progress=False)
    assert trained.featurizer_.n_features_ == plain.featurizer_.n_features_
    for a, b in zip(_weights(trained), _weights(plain)):
        np.testing.assert_array_equal(a, b)


def test_fold_learns_the_split_into_the_model_fitted_without_it(small):
    """refit "fold": the model fitted on the training part, then the split learned in: every document counted,
    the maps kept, and the weights moved from the part's fit (which refit "none" keeps)."""
    texts, labels = small
    ds = _dataset(texts, labels)
    Y = ds.Y
    none, fold = xmtc.XRLinear(n_threads=1), xmtc.XRLinear(n_threads=1)
    fit_calibrated(none, ds, refit="none")
    info = fit_calibrated(fold, ds, refit="fold")
    train_rows, valid_rows = split_indices(len(texts), auto_valid_size(len(texts)), 0)
    assert none.n_train_ == train_rows.size and fold.n_train_ == len(texts) and info["refit"] == "fold"
    assert np.array_equal(fold.label_counts_, np.asarray(Y.getnnz(axis=0)))
    assert fold.calibration_ is not None and fold.calibration_.fit_info["train_docs"] == train_rows.size
    moved = [np.abs(a - b).max() for a, b in zip(_weights(none), _weights(fold))]
    assert all(m > 0 for m in moved)  # every level of every tree took the split in


def test_refit_choices_and_their_errors():
    class Cheap:
        cheap_refit, can_learn, method = True, True, "x"

    class Dear:
        cheap_refit, can_learn, method = False, False, "y"

    assert resolve_refit(None, Cheap(), 200, 2000) == "full" and resolve_refit("auto", Cheap(), 10, 2000) == "none"
    assert resolve_refit(None, Dear(), 200, 2000) == "none" and resolve_refit(True, Dear(), 1, 2) == "full"
    assert resolve_refit(False, Cheap(), 200, 2000) == "none" and resolve_refit("fold", Cheap(), 1, 2) == "fold"
    with pytest.raises(ConfigError, match="cannot learn"):
        resolve_refit("fold", Dear(), 200, 2000)
    with pytest.raises(ConfigError, match="refit must be"):
        resolve_refit("twice", Cheap(), 200, 2000)
