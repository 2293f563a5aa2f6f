"""End-to-end behaviour of the XR-Linear estimator on real (small) data."""

import json

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
    base = xmtc.XRLinear(max_leaf_size=8, branching=4, n_trees=1).fit(texts, labels, progress=False)
    ens = xmtc.XRLinear(max_leaf_size=8, branching=4, n_trees=3).fit(texts, labels, progress=False)
    assert len(ens.models_) == 3
    assert ens.evaluate(test_texts, test_labels)["P@1"] >= base.evaluate(test_texts, test_labels)["P@1"] - 2.0
    X = base.transform(texts)
    feat = xmtc.XRLinear(max_leaf_size=8, branching=4, n_trees=1).fit(X, labels, labels=base.labels_,
                                                                      progress=False)
    i1, _ = base.predict_topk(test_texts, 5)
    i2, _ = feat.predict_topk(base.transform(test_texts), 5)
    np.testing.assert_array_equal(i1, i2)
    with pytest.raises(Exception, match="precomputed features"):
        feat.predict(test_texts)
    with pytest.raises(DataFormatError, match="columns but the model expects"):
        feat.predict_topk(X[:, :10], 5)


def test_auto_tree_count_is_two_seeded_trees_on_a_small_label_set_and_one_otherwise(reuters_small, tmp_path):
    from xmtc.methods.xr_linear.config import AUTO_TREES_MAX_LABELS, resolve_n_trees

    (texts, labels), (test_texts, _) = reuters_small
    auto = xmtc.XRLinear(max_leaf_size=8, branching=4).fit(texts, labels, progress=False)   # n_trees=0: auto
    two = xmtc.XRLinear(max_leaf_size=8, branching=4, n_trees=2).fit(texts, labels, progress=False)
    assert auto.n_trees == 0 and len(auto.models_) == 2
    for a, b in zip(auto.predict_topk(test_texts, 5), two.predict_topk(test_texts, 5)):
        np.testing.assert_array_equal(a, b)  # the same trees (seeds 0, 1) as asking for two
    auto.save(tmp_path / "m")
    again = xmtc.load(tmp_path / "m")
    assert len(again.models_) == 2 and again.n_trees == 0
    np.testing.assert_array_equal(again.predict_topk(test_texts, 5)[0], auto.predict_topk(test_texts, 5)[0])
    flat = xmtc.XRLinear(max_leaf_size=1000).fit(texts, labels, progress=False)
    assert len(flat.models_) == 1  # a flat model is the same for every seed
    assert resolve_n_trees(0, AUTO_TREES_MAX_LABELS, False) == 2
    assert resolve_n_trees(0, AUTO_TREES_MAX_LABELS + 1, False) == 1
    assert AUTO_TREES_MAX_LABELS == 4096 and resolve_n_trees(0, 24810, False) == 1  # yso-finna-en: one tree
    assert resolve_n_trees(2, 10**6, True) == 2  # an explicit count is kept
    # a manifest whose tree stages disagree with its n_trees is refused, not half-loaded
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    manifest["params"]["n_trees"] = 3
    (tmp_path / "m" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelFormatError, match="2 tree stage"):
        xmtc.load(tmp_path / "m")


def test_ensemble_trees_stop_at_ensemble_tol_and_a_single_tree_at_tol(reuters_small, monkeypatch):
    from xmtc.methods.xr_linear import estimator as xr_linear

    (texts, labels), _ = reuters_small
    seen = []
    real = xr_linear.plain_linear_fit

    def spy(*args, **kw):
        seen.append(kw["tol"])
        return real(*args, **kw)

    monkeypatch.setattr(xr_linear, "plain_linear_fit", spy)
    small = dict(max_leaf_size=8, branching=4)
    loose = xmtc.XRLinear(n_trees=2, tol=0.1, ensemble_tol=2.0, **small).fit(texts, labels, progress=False)
    assert seen == [2.0, 2.0]
    seen.clear()
    xmtc.XRLinear(n_trees=1, tol=0.1, ensemble_tol=2.0, **small).fit(texts, labels, progress=False)
    assert seen == [0.1]
    seen.clear()
    tight = xmtc.XRLinear(n_trees=2, tol=2.0, ensemble_tol=0.1, **small).fit(texts, labels, progress=False)
    assert seen == [0.1, 0.1]
    # the tolerance reaches the solver: a looser stop leaves different leaf weights
    Wl, Wt = (m.models_[0].levels_[-1].to_weights() for m in (loose, tight))
    assert abs(Wl - Wt).sum() > 1e-3


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
