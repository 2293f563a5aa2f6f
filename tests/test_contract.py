"""One contract, every registered method (the table of ``xmtc.registry``): a method passes by being listed.

What each estimator must do, checked the same way for all of them: fit / predict shapes and types,
save -> load gives identical predictions, parameters round-trip (object, manifest), fitting is required
before predicting, unknown parameters are refused, the command line trains it (its parameters given as its
own flags), predicts and evaluates it, it explains where it declares ``explain``, its scores calibrate, and
the server answers one request for it (the model's labels and scores).
Method-specific behaviour (samplers, losses, schedules) is pinned in each method's own test file.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from xmtc.cli import main
from xmtc.config import option_name
from xmtc.errors import ConfigError, NotFittedError
from xmtc.models import load
from xmtc.models.calibration import calibrate, damp_unreadable
from xmtc.registry import estimator_class, method_names

# Small settings for fields a method may have; each is applied where the method's config has the field.
# They make a fit take seconds on 200 titles; the method's own rules stay as they are.
SMALL = dict(max_length=16, epochs=1, batch_size=32, n_threads=1, valid_size=0, seed=0, max_leaf_size=8,
             cluster_size=8, branching=4, learning_rate=1e-3, ranker=False, head_init="random",
             stage2_epochs=1, shortlist_size=12, kappa=8, beam_size=4, topk=None)
# values that depend on the method's other settings
PER_METHOD = {"cascadexml": dict(level_dropout="0"),
              "elias": dict(cluster_size=4, beam_size=3),
              # no label file here: a label's training texts are its text (label-text) or its id is
              # (knn); the tiny encoder embeds all texts almost alike (cosines 0.88-1), so every
              # document votes and every label is a candidate, lest near-ties at the K-th neighbour decide
              "label-text": dict(label_texts="documents"),
              "knn": dict(label_texts="names", n_neighbors=256, label_candidates=1000)}


def small_params(method: str, encoder: str) -> dict:
    fields = {f.name for f in dataclasses.fields(estimator_class(method).config_class)}
    params = {k: v for k, v in SMALL.items() if k in fields and v is not None}
    params.update({k: v for k, v in PER_METHOD.get(method, {}).items() if k in fields})
    if "encoder" in fields:
        params["encoder"] = encoder
    return params


@pytest.fixture(scope="module")
def sample(tsv_sample):
    return tsv_sample("yso-finna-en-2k-20k", "train", 240), tsv_sample("yso-finna-en-2k-20k", "test", 40)


@pytest.fixture(scope="module", params=method_names())
def fitted(request, sample, tmp_path_factory):
    method = request.param
    cls = estimator_class(method)
    enc = request.getfixturevalue("tiny_bert") if "torch" in cls.requires else ""
    params = small_params(method, enc)
    (texts, labels), _ = sample
    model = cls(**params).fit(texts, labels)
    folder = tmp_path_factory.mktemp(method) / "model"
    model.save(folder)
    return method, params, model, folder


def test_fit_and_predict_shapes(fitted, sample):
    method, _, model, _ = fitted
    _, (test, _) = sample
    idx, scores = model.predict_topk(test, 3)
    assert idx.shape == scores.shape == (len(test), 3) and idx.dtype == np.int32 and scores.dtype == np.float32
    assert np.all((idx >= -1) & (idx < len(model.labels_)))
    assert np.all(np.isfinite(scores)) and np.all(np.diff(scores, axis=1) <= 1e-6), "scores best first"
    named = model.predict(test[:2], k=3)
    assert [[n for n, _ in row] for row in named] == [[model.labels_.names[j] for j in r if j >= 0] for r in idx[:2]]


def test_save_load_gives_identical_predictions_and_params(fitted, sample):
    method, params, model, folder = fitted
    _, (test, _) = sample
    loaded = load(folder)
    assert type(loaded) is type(model) and loaded.get_params() == model.get_params()
    a, b = model.predict_topk(test, 5), loaded.predict_topk(test, 5)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_allclose(a[1], b[1], rtol=1e-6, atol=1e-7)


def test_params_round_trip_and_are_validated(fitted):
    method, params, model, _ = fitted
    cls = type(model)
    assert cls(**model.get_params()).get_params() == model.get_params()
    assert all(model.get_params()[k] == v for k, v in params.items())
    with pytest.raises(ConfigError, match="unknown parameter"):
        cls(not_a_parameter=1)


def test_k_above_the_label_count_asks_for_every_label(fitted, sample):
    """``k`` past the labels is ``k`` = the number of labels (a row holds no more): a huge ``k`` (a typo, a
    fuzzer's 10**12) neither allocates what it names nor fails. (The first ranks need not equal a smaller
    k's: APLC's pruned search and the beams widen with k.)"""
    method, _, model, _ = fitted
    _, (test, _) = sample
    n = model.n_labels
    idx, scores = model.predict_topk(test[:3], 10**12)
    assert idx.shape == scores.shape == (3, n)
    all_idx, all_scores = model.predict_topk(test[:3], n)
    np.testing.assert_array_equal(idx, all_idx)
    np.testing.assert_array_equal(scores, all_scores)


def test_predicting_before_fitting_is_an_error(fitted):
    with pytest.raises(NotFittedError):
        type(fitted[2])().predict_topk(["a text"], 3)


def test_explains_where_it_declares_it(fitted, sample, capsys):
    method, _, model, folder = fitted
    if not hasattr(model, "explain"):  # the command says so in one line, naming the methods that can
        capsys.readouterr()
        assert main(["explain", str(folder), "oil prices", "-q"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"xmtc: error: {folder}: a {method} model cannot explain")
        assert "xr-linear" in err and method not in err.split("works with")[1]
        return
    _, (test, _) = sample
    out = model.explain(test[:2], k=2, n_terms=3)
    idx, scores = model.predict_topk(test[:2], 2)
    assert [[e["label"] for e in row] for row in out] == [[model.labels_.names[j] for j in r if j >= 0] for r in idx]
    np.testing.assert_allclose([[e["score"] for e in row] for row in out], scores, rtol=1e-5, atol=1e-6)


def test_scores_calibrate(fitted, sample):
    method, _, model, _ = fitted
    (texts, labels), _ = sample
    model.calibration_ = None
    raw_idx, raw = model.predict_topk(texts[:120], 5)
    cal = calibrate(model, texts[:120], labels[:120], k=5)
    try:
        idx, scores = model.predict_topk(texts[:120], 5)
    finally:
        model.calibration_ = None
    exp_idx, exp_scores = cal.apply(raw_idx, raw)  # the definition: the maps applied to the raw top-k ...
    known = model.known_fraction(texts[:120])
    if known is not None:  # ... damped where the model reads little of the text
        exp_idx, exp_scores = damp_unreadable(exp_idx, exp_scores, known)
    np.testing.assert_array_equal(idx, exp_idx)
    np.testing.assert_allclose(scores, exp_scores, rtol=1e-5, atol=1e-6)
    assert np.all((scores >= 0) & (scores <= 1)) and not np.allclose(scores, raw)


def test_served_answers_one_request(fitted, sample):
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    from fastapi.testclient import TestClient

    from xmtc.serve.app import create_app

    method, _, _, folder = fitted
    _, (test, _) = sample
    with TestClient(create_app({"p": str(folder)})) as client:
        r = client.post("/v1/projects/p/suggest", data={"text": test[0], "limit": 3})
    assert r.status_code == 200
    model = load(folder)
    idx, scores = model.predict_topk([test[0]], 3)
    expected = [(model.labels_.uri(j), s) for j, s in zip(idx[0], scores[0]) if j >= 0 and s > 0]
    assert [x["uri"] for x in r.json()["results"]] == [u for u, _ in expected]
    np.testing.assert_allclose([x["score"] for x in r.json()["results"]], [s for _, s in expected], rtol=1e-5)


def test_command_line_trains_predicts_and_evaluates(fitted, sample, tmp_path, capsys):
    method, params, _, _ = fitted
    (texts, labels), (test, test_labels) = sample
    train = tmp_path / "train.tsv"
    train.write_text("".join(",".join(l) + "\t" + t + "\n" for t, l in zip(texts, labels)), encoding="utf-8")
    tests = tmp_path / "test.tsv"
    tests.write_text("".join(",".join(l) + "\t" + t + "\n" for t, l in zip(test, test_labels)), encoding="utf-8")
    # the method's parameters as its own flags (every field has one), the method named in a --config file too
    (tmp_path / "params.json").write_text(json.dumps({"method": method}))
    flags = [a for k, v in params.items() for a in (option_name(k), str(v).lower() if isinstance(v, bool) else str(v))]
    out = tmp_path / "m"
    assert main(["train", str(train), "-o", str(out), "--method", method, "--config", str(tmp_path / "params.json"),
                 *flags, "-q"]) == 0
    model = load(out)
    assert all(model.get_params()[k] == v for k, v in params.items())
    assert main(["predict", str(out), str(tests), "-k", "2", "-q"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    idx, _ = model.predict_topk(test, 2)
    assert [r["labels"] for r in rows] == [[model.labels_.names[j] for j in row if j >= 0] for row in idx]
    assert main(["evaluate", str(out), str(tests), "--json", "-q"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    expected = model.evaluate(test, test_labels, ks=(1, 3, 5))
    assert metrics["P@1"] == round(expected["P@1"], 4) and metrics["nDCG@5"] == round(expected["nDCG@5"], 4)
    assert main(["info", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["method"] == method
