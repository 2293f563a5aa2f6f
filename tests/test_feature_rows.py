"""Given sparse features (Extreme Classification bag-of-words files, .npz): XR-Linear scales each row to unit
L2 norm in training and prediction alike (``normalize_features``, default true), as PECOS's benchmarks and
benchmarks/linear.py do; ``false`` and every model saved before the setting use the rows as given."""

from __future__ import annotations

import json

import numpy as np
import scipy.sparse as sp

import xmtc
from xmtc.cli import main
from xmtc.data.formats import write_xc


def _features(seed=0, n=240, d=40, L=12):
    """Rows whose norms differ by up to 50x (bag-of-words counts of short and long documents), labels tied
    to the features so the model has something to learn."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.2, random_state=seed, format="csr", dtype=np.float32)
    X.data = np.ceil(X.data * 4).astype(np.float32)
    X = sp.csr_matrix(sp.diags(rng.uniform(1, 50, n).astype(np.float32)) @ X)
    dense = X.toarray()
    Y = (dense[:, :L] > 0) | (rng.random((n, L)) < 0.02)
    Y[~Y.any(axis=1), 0] = True
    return X, sp.csr_matrix(Y, dtype=np.float32)


def _unit(X):
    D = X.toarray().astype(np.float64)
    n = np.linalg.norm(D, axis=1, keepdims=True)
    return D / np.where(n > 0, n, 1.0)


def test_a_model_trained_on_a_feature_file_uses_unit_length_rows_and_says_so_in_its_manifest(tmp_path):
    X, Y = _features()
    write_xc(tmp_path / "train.txt", X, Y)
    assert main(["train", str(tmp_path / "train.txt"), "-o", str(tmp_path / "m"), "--n-trees", "1",
                 "-q"]) == 0
    assert json.loads((tmp_path / "m" / "manifest.json").read_text())["params"]["normalize_features"] is True
    model = xmtc.load(tmp_path / "m")
    np.testing.assert_allclose(model.transform(X).toarray(), _unit(X), rtol=1e-6, atol=1e-7)
    # the definition: the same model as one fitted on rows normalised beforehand and used as given
    by_hand = xmtc.XRLinear(n_trees=1, normalize_features=False).fit(sp.csr_matrix(_unit(X), dtype=np.float32), Y,
                                                                     progress=False)
    ours = xmtc.XRLinear(n_trees=1).fit(X, Y, progress=False)
    a, b = ours.predict_topk(X * 7.0, 5), by_hand.predict_topk(sp.csr_matrix(_unit(X), dtype=np.float32), 5)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_allclose(a[1], b[1], rtol=1e-5)


def test_normalize_features_false_and_a_model_saved_before_it_use_the_rows_as_given(tmp_path):
    X, Y = _features(1)
    write_xc(tmp_path / "train.txt", X, Y)
    assert main(["train", str(tmp_path / "train.txt"), "-o", str(tmp_path / "raw"), "--n-trees", "1",
                 "--normalize-features", "false", "-q"]) == 0
    raw = xmtc.load(tmp_path / "raw")
    assert raw.normalize_features is False
    np.testing.assert_array_equal(raw.transform(X).toarray(), X.toarray())
    before = raw.predict_topk(X, 5)
    # a folder written before the setting existed: no such key in its params; it loads and predicts as then
    manifest = json.loads((tmp_path / "raw" / "manifest.json").read_text())
    del manifest["params"]["normalize_features"]
    (tmp_path / "raw" / "manifest.json").write_text(json.dumps(manifest))
    old = xmtc.load(tmp_path / "raw")
    assert old.normalize_features is False
    np.testing.assert_array_equal(old.transform(X).toarray(), X.toarray())
    after = old.predict_topk(X, 5)
    np.testing.assert_array_equal(after[0], before[0])
    np.testing.assert_array_equal(after[1], before[1])


def test_a_text_model_leaves_its_own_tfidf_rows_alone():
    texts = ["railways of finland", "steam trains", "birds of lapland", "wild mushrooms", "old maps",
             "baltic sea islands"] * 5
    labels = [["rail"], ["rail"], ["birds"], ["fungi"], ["maps"], ["sea"]] * 5
    model = xmtc.XRLinear(n_trees=1).fit(texts, labels, progress=False)
    rows = model.transform(texts)
    np.testing.assert_array_equal(model.transform(rows).toarray(), rows.toarray())
