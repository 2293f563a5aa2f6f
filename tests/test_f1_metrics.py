"""F1@k, macro-F1@k, F1@T and macro-F1@T (xmtc.metrics) pinned against scikit-learn's ``f1_score`` on the same
binary prediction matrix: the top k (or the suggestions at or above a threshold) of each document as its
predicted label set.

The zero-division convention: a label that is neither in the test set nor suggested (0/0) is left out of the
macro average, i.e. ``f1_score(Y, P, average="macro", labels=<labels true or suggested>)``, which gives the
same figure whatever ``zero_division`` is; over all L columns, scikit-learn would count such labels as
``zero_division`` (0 by LibMultiLabel's convention, 1 by another), so the figure would depend on L.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

sklearn_metrics = pytest.importorskip("sklearn.metrics", reason="scikit-learn (the calibrate extra) is not installed")

from xmtc.metrics import accepted, evaluate, f1_scores  # noqa: E402


def binary_predictions(indices: np.ndarray, n_labels: int) -> sp.csr_matrix:
    """The (n, L) 0/1 matrix of the suggested labels (-1: none; a label listed twice is one prediction)."""
    rows = np.repeat(np.arange(indices.shape[0]), indices.shape[1])
    cols = indices.ravel()
    keep = cols >= 0
    P = sp.csr_matrix((np.ones(int(keep.sum())), (rows[keep], cols[keep])), shape=(indices.shape[0], n_labels))
    P.data[:] = 1.0
    return P


def sklearn_f1(Y: sp.csr_matrix, P: sp.csr_matrix, zero_division=0.0) -> tuple[float, float]:
    """scikit-learn's micro F1, and its macro F1 over the labels that are true or predicted somewhere."""
    f1 = sklearn_metrics.f1_score
    Y = (Y > 0).astype(np.int64)
    P = (P > 0).astype(np.int64)
    labels = np.flatnonzero(np.asarray(Y.sum(axis=0)).ravel() + np.asarray(P.sum(axis=0)).ravel())
    micro = f1(Y, P, average="micro", zero_division=zero_division)
    macro = f1(Y, P, average="macro", labels=labels, zero_division=zero_division)
    return 100.0 * micro, 100.0 * macro


def random_case(seed: int, n: int = 300, n_labels: int = 60, k: int = 6):
    """True label sets of 0-4 labels (some documents without any), and top-k suggestions with -1 padding and
    repeated ids, skewed towards the frequent labels as real suggestions are."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, n_labels + 1)
    p /= p.sum()
    rows = [rng.choice(n_labels, size=rng.integers(0, 5), replace=False, p=p) for _ in range(n)]
    Y = sp.csr_matrix((np.ones(sum(map(len, rows))), (np.repeat(np.arange(n), [len(r) for r in rows]),
                                                      np.concatenate(rows).astype(np.int64))), shape=(n, n_labels))
    idx = rng.choice(n_labels, size=(n, k), p=p).astype(np.int32)
    idx[rng.random((n, k)) < 0.1] = -1
    scores = -np.sort(-rng.random((n, k)), axis=1)
    return Y, idx, scores


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_f1_at_k_is_sklearns_on_the_top_k(seed):
    Y, idx, scores = random_case(seed)
    out = evaluate(Y, (idx, scores), ks=(1, 3, 6), f1=True)
    for k in (1, 3, 6):
        micro, macro = sklearn_f1(Y, binary_predictions(idx[:, :k], Y.shape[1]))
        assert out[f"F1@{k}"] == pytest.approx(micro, rel=1e-12, abs=1e-12)
        assert out[f"macro-F1@{k}"] == pytest.approx(macro, rel=1e-12, abs=1e-12)
    assert list(out)[-6:] == ["F1@1", "F1@3", "F1@6", "macro-F1@1", "macro-F1@3", "macro-F1@6"]


@pytest.mark.parametrize("threshold", [0.0, 0.4, 0.8, "per-label"])
def test_f1_at_a_threshold_is_sklearns_on_the_accepted_suggestions(threshold):
    Y, idx, scores = random_case(3)
    t = np.random.default_rng(4).random(Y.shape[1]) if threshold == "per-label" else threshold
    out = evaluate(Y, (idx, scores), ks=(1, 6), scores=True, threshold=t)
    kept = np.where(idx >= 0, idx, -1)
    limit = t[np.clip(kept, 0, None)] if threshold == "per-label" else t
    kept[scores < limit] = -1
    micro, macro = sklearn_f1(Y, binary_predictions(kept, Y.shape[1]))
    assert out["F1@T"] == pytest.approx(micro, rel=1e-12, abs=1e-12)
    assert out["macro-F1@T"] == pytest.approx(macro, rel=1e-12, abs=1e-12)
    assert np.array_equal(accepted(idx, scores, t), kept)


def test_the_zero_division_convention():
    """Labels nobody has or suggests do not move macro-F1 (scikit-learn's zero_division is then moot); over all
    columns, scikit-learn's figure would move with them."""
    Y, idx, _ = random_case(5, n_labels=40)
    wide = sp.hstack([Y, sp.csr_matrix((Y.shape[0], 40))]).tocsr()  # 40 more labels, never true nor suggested
    P = binary_predictions(idx, 80)
    ours = f1_scores(wide, idx)
    assert ours == pytest.approx(f1_scores(Y, idx), rel=1e-12)
    assert ours == pytest.approx(sklearn_f1(wide, P, zero_division=0.0), rel=1e-12)
    assert ours == pytest.approx(sklearn_f1(wide, P, zero_division=1.0), rel=1e-12)
    every_column = 100 * sklearn_metrics.f1_score((wide > 0).astype(int), (P > 0).astype(int), average="macro",
                                                  zero_division=0.0)
    assert every_column < ours[1] - 1


def test_no_labels_and_no_suggestions_score_zero():
    Y = sp.csr_matrix((3, 4))
    assert f1_scores(Y, np.full((3, 2), -1)) == (0.0, 0.0)


def test_evaluate_reports_f1_of_a_real_model_as_sklearn_computes_it(tmp_path, capsys):
    """`xmtc evaluate` on the bundled sample: F1@k / macro-F1@k from its predictions, and after `xmtc calibrate
    --thresholds f1`, F1@T / macro-F1@T at the model's calibrated thresholds without --threshold."""
    import gzip

    import xmtc
    from xmtc.cli import main
    from xmtc.data import read_dataset, sample_path

    with gzip.open(sample_path("train"), "rt", encoding="utf-8") as fh:
        lines = fh.readlines()
    (tmp_path / "train.txt").write_text("".join(lines[::12]), encoding="utf-8")
    (tmp_path / "valid.txt").write_text("".join(lines[5::12]), encoding="utf-8")
    with gzip.open(sample_path("test"), "rt", encoding="utf-8") as fh:
        (tmp_path / "test.txt").write_text("".join(fh.readlines()[:800]), encoding="utf-8")
    model_dir = tmp_path / "m"
    assert main(["train", str(tmp_path / "train.txt"), "-o", str(model_dir), "-q"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(model_dir), str(tmp_path / "test.txt"), "--json", "-q"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "F1@T" not in out  # no threshold given, none stored
    model = xmtc.load(model_dir)
    test = read_dataset(tmp_path / "test.txt", labels=model.labels_, unknown_labels="extend")
    idx, scores = model.predict_topk(test.texts, 5)
    for k in (1, 3, 5):
        micro, macro = sklearn_f1(test.Y, binary_predictions(idx[:, :k], test.Y.shape[1]))
        assert out[f"F1@{k}"] == pytest.approx(micro, abs=1e-4) and out[f"macro-F1@{k}"] == pytest.approx(macro, abs=1e-4)
    assert main(["calibrate", str(model_dir), str(tmp_path / "valid.txt"), "--thresholds", "f1", "-q"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(model_dir), str(tmp_path / "test.txt"), "--json", "-q"]) == 0
    out = json.loads(capsys.readouterr().out)
    model = xmtc.load(model_dir)
    idx, scores = model.predict_topk(test.texts, 5)
    kept = accepted(idx, scores, model.calibration_.thresholds)
    micro, macro = sklearn_f1(test.Y, binary_predictions(kept, test.Y.shape[1]))
    assert out["F1@T"] == pytest.approx(micro, abs=1e-4) and out["macro-F1@T"] == pytest.approx(macro, abs=1e-4)
    assert 0 < out["macro-F1@T"] < 100
