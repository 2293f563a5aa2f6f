"""End-to-end behaviour of the XR-Linear estimator on real (small) data."""

import numpy as np
import pytest

import xmtc
from xmtc.errors import DataFormatError, ModelFormatError, NotFittedError


@pytest.fixture(scope="module")
def fitted(reuters_small):
    (texts, labels), _ = reuters_small
    return xmtc.XRLinear(max_leaf_size=8, branching=4, n_threads=2).fit(texts, labels, progress=False)


def test_fit_predict_is_accurate(fitted, reuters_small):
    _, (texts, labels) = reuters_small
    m = fitted.evaluate(texts, labels, ks=(1, 3, 5))
    assert m["P@1"] > 80.0
    assert set(["P@1", "P@3", "P@5", "R@5", "nDCG@5", "PSP@5"]) <= set(m)
    preds = fitted.predict(texts[:3], k=4)
    assert len(preds) == 3 and all(len(p) == 4 for p in preds)
    assert all(isinstance(n, str) and isinstance(s, float) for p in preds for n, s in p)
    assert all(p[i][1] >= p[i + 1][1] for p in preds for i in range(3))


def test_save_load_identical_predictions_and_files(fitted, reuters_small, tmp_path):
    (train_texts, train_labels), (texts, _) = reuters_small
    fitted.save(tmp_path / "a")
    loaded = xmtc.load(tmp_path / "a")
    i1, s1 = fitted.predict_topk(texts, 5)
    i2, s2 = loaded.predict_topk(texts, 5)
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_array_equal(s1, s2)
    again = xmtc.XRLinear(max_leaf_size=8, branching=4, n_threads=1).fit(train_texts, train_labels, progress=False)
    again.set_params(n_threads=2)
    again.save(tmp_path / "b")
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "b").iterdir())
    for name in files:  # same seed (and any thread count) -> byte-identical model files
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_batched_prediction_equals_one_batch(fitted, reuters_small):
    _, (texts, _) = reuters_small
    i1, s1 = fitted.predict_topk(texts, 5)
    i2, s2 = fitted.predict_topk(texts, 5, batch_size=64)
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_array_equal(s1, s2)


def test_tree_ensemble_and_precomputed_features(reuters_small):
    (texts, labels), (test_texts, test_labels) = reuters_small
    base = xmtc.XRLinear(max_leaf_size=8, branching=4).fit(texts, labels, progress=False)
    ens = xmtc.XRLinear(max_leaf_size=8, branching=4, n_trees=3).fit(texts, labels, progress=False)
    assert len(ens.models_) == 3
    assert ens.evaluate(test_texts, test_labels)["P@1"] >= base.evaluate(test_texts, test_labels)["P@1"] - 2.0
    X = base.transform(texts)
    feat = xmtc.XRLinear(max_leaf_size=8, branching=4).fit(X, labels, labels=base.labels_, progress=False)
    i1, _ = base.predict_topk(test_texts, 5)
    i2, _ = feat.predict_topk(base.transform(test_texts), 5)
    np.testing.assert_array_equal(i1, i2)
    with pytest.raises(Exception, match="precomputed features"):
        feat.predict(test_texts)
    with pytest.raises(DataFormatError, match="columns but the model expects"):
        feat.predict_topk(X[:, :10], 5)


def test_input_errors(fitted, tmp_path):
    with pytest.raises(NotFittedError):
        xmtc.XRLinear().predict(["x"])
    with pytest.raises(DataFormatError, match="single string"):
        fitted.predict("one text")
    with pytest.raises(DataFormatError, match="line 2: text must be a string"):
        fitted.predict(["ok", 3])
    with pytest.raises(DataFormatError, match="got 2 label lists for 3 documents"):
        xmtc.XRLinear().fit(["a b", "c d", "e f"], [["x"], ["y"]], progress=False)
    preds = fitted.predict(["", "   "], k=3)  # empty texts are valid input: bias-only scores
    assert len(preds) == 2
    with pytest.raises(ModelFormatError, match="not found"):
        xmtc.load(tmp_path / "missing")
