"""Score calibration and thresholds: by hand on tiny tables, then end to end on a real model."""

import json

import numpy as np
import pytest

import xmtc
from xmtc.cli import main
from xmtc.errors import ConfigError, ModelFormatError
from xmtc.metrics import expected_calibration_error, hits_matrix
from xmtc.models.base import apply_threshold
from xmtc.models.calibration import TIE_BREAK, Calibration, best_threshold, calibrate


def test_isotonic_map_equals_pav_by_hand():
    idx = np.array([[0], [0], [0], [0]] * 3)
    s = np.array([[0.1], [0.2], [0.3], [0.4]] * 3)
    y = np.array([[0], [1], [0], [1]] * 3, dtype=bool)
    cal = Calibration.fit(idx, s, y, np.array([5]), method="isotonic", n_bands=1)
    # pool adjacent violators: 0.2 (1) and 0.3 (0) merge -> blocks of 3 wrong, 3 right + 3 wrong, 3 right;
    # each block's Laplace estimate (h + 1) / (n + 2): 1/5, 4/8, 4/5
    p = cal.probabilities(np.array([[0, 0, 0, 0]]), np.array([[0.1, 0.2, 0.3, 0.4]]))[0]
    raw = np.array([0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(p, (1 - TIE_BREAK) * np.array([0.2, 0.5, 0.5, 0.8]) + TIE_BREAK * raw, atol=1e-12)
    assert p[2] > p[1]  # the tie-break keeps the raw order inside a flat step


def test_bands_are_calibrated_separately():
    # label 0 is rare (2 training examples) and always wrong; label 1 is frequent (90) and always right
    rng = np.random.default_rng(0)
    idx = np.repeat(np.array([[0, 1]]), 40, axis=0)
    s = rng.uniform(0.2, 0.8, size=(40, 2))
    y = np.zeros((40, 2), dtype=bool)
    y[:, 1] = True
    for method in ("isotonic", "platt"):
        cal = Calibration.fit(idx, s, y, np.array([2, 90]), method=method, n_bands=2)
        assert cal.edges.tolist() == [2.0]
        p = cal.probabilities(idx, s)
        if method == "isotonic":  # one outcome per band: Laplace's 1/42 and 41/42 over its 40 points
            np.testing.assert_allclose(p, (1 - TIE_BREAK) * np.array([1 / 42, 41 / 42]) + TIE_BREAK * s, atol=1e-12)
        else:
            assert p[:, 0].max() < 0.01 and p[:, 1].min() > 0.99, method
        one = Calibration.fit(idx, s, y, np.array([2, 90]), method=method, n_bands=1)
        assert abs(one.probabilities(idx, s).mean() - 0.5) < 0.05  # one band can only say "half"


def test_a_small_top_block_cannot_claim_certainty():
    """Plain PAV gives the single best-scored point 1.0 above a block of 20 at 0.9; with each block at
    (h + 1) / (n + 2) the top block (2/3) falls below the one under it (19/22) and the two pool, weighted by
    their points: (20 * 19/22 + 2/3) / 21."""
    s = np.r_[np.linspace(0.5, 0.6, 20), 0.9][:, None]
    y = np.r_[np.ones(18), np.zeros(2), np.ones(1)].astype(bool)[:, None]  # the 20's two wrong ones score highest
    cal = Calibration.fit(np.zeros((21, 1), dtype=int), s, y, np.array([4]), method="isotonic", n_bands=1)
    p = cal.probabilities(np.zeros((1, 2), dtype=int), np.array([[0.55, 0.9]]))[0]
    pooled = (20 * 19 / 22 + 2 / 3) / 21
    np.testing.assert_allclose(p, (1 - TIE_BREAK) * pooled + TIE_BREAK * np.array([0.55, 0.9]), atol=1e-12)


def test_platt_is_logistic_regression_on_the_score():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(1)
    s = rng.uniform(0, 1, size=(200, 1))
    y = rng.uniform(0, 1, size=(200, 1)) < s
    cal = Calibration.fit(np.zeros((200, 1), dtype=int), s, y, np.array([3]), method="platt", n_bands=1)
    lr = LogisticRegression(C=1e6, max_iter=1000).fit(s, y.ravel())
    np.testing.assert_allclose(cal.probabilities(np.zeros((200, 1), int), s)[:, 0], lr.predict_proba(s)[:, 1],
                               rtol=1e-6)


def test_best_threshold_and_apply_threshold_by_hand():
    # t=.9: TP1 FP0 FN2 -> .5 ; t=.8: TP1 FP1 FN2 -> .4 ; t=.3: TP2 FP1 FN1 -> 2/3
    assert best_threshold(np.array([0.9, 0.8, 0.3]), np.array([1, 0, 1]), 3) == pytest.approx(0.3)
    assert best_threshold(np.array([0.9, 0.8]), np.array([0, 0]), 3) > 1.0  # accept nothing
    idx = np.array([[4, 2, 7], [1, -1, -1]])
    sc = np.array([[0.9, 0.3, 0.5], [0.2, 0, 0]], dtype=np.float32)
    i2, s2 = apply_threshold(idx, sc, 0.4)
    assert i2.tolist() == [[4, 7, -1], [-1, -1, -1]]
    np.testing.assert_allclose(s2, [[0.9, 0.5, 0], [0, 0, 0]])
    per_label = np.full(8, 0.95)
    per_label[2] = 0.1
    assert apply_threshold(idx, sc, per_label)[0].tolist() == [[2, -1, -1], [-1, -1, -1]]


@pytest.fixture(scope="module")
def split(reuters_small):
    (texts, labels), test = reuters_small
    return (texts[:1500], labels[:1500]), (texts[1500:], labels[1500:]), test


def test_calibrate_lowers_ece_and_survives_save_load(split, tmp_path):
    (tr_x, tr_y), (va_x, va_y), (te_x, te_y) = split
    model = xmtc.XRLinear(max_leaf_size=8, branching=4, n_threads=2).fit(tr_x, tr_y, progress=False)
    raw_idx, raw_sc = model.predict_topk(te_x, 5)
    before = model.evaluate(te_x, te_y)
    cal = calibrate(model, va_x, va_y, method="isotonic", thresholds="f1")
    idx, sc = model.predict_topk(te_x, 5)
    # same labels per row, scores are the calibration's map of the raw ones, rows sorted by them
    assert all(set(a) == set(b) for a, b in zip(idx.tolist(), raw_idx.tolist()))
    p = cal.probabilities(raw_idx, raw_sc)
    for r in range(len(te_x)):
        want = dict(zip(raw_idx[r].tolist(), p[r].tolist()))
        assert sc[r].tolist() == pytest.approx([want[j] for j in idx[r].tolist()], abs=1e-6)
        assert all(sc[r, i] >= sc[r, i + 1] for i in range(4))
    after = model.evaluate(te_x, te_y, threshold="labels")
    assert after["ECE@5"] < before["ECE@5"]
    Yte, _ = xmtc.models.base.as_label_matrix(te_y, model.labels_, len(te_x), unknown_labels="extend")
    assert after["ECE@5"] == pytest.approx(expected_calibration_error(sc[idx >= 0], hits_matrix(Yte, idx)[idx >= 0]))
    model.save(tmp_path / "m")
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert "calibration.safetensors" in manifest["files"]
    loaded = xmtc.load(tmp_path / "m")
    i2, s2 = loaded.predict_topk(te_x, 5)
    np.testing.assert_array_equal(i2, idx)
    np.testing.assert_array_equal(s2, sc)
    np.testing.assert_array_equal(loaded.calibration_.thresholds, cal.thresholds)
    # a refit model drops the calibration of its old weights
    assert model.fit(tr_x[:300], tr_y[:300], progress=False).calibration_ is None


def test_cli_calibrate_threshold_and_errors(split, tmp_path, capsys):
    (tr_x, tr_y), (va_x, va_y), (te_x, te_y) = split
    model = xmtc.XRLinear(max_leaf_size=8, branching=4, n_threads=2).fit(tr_x, tr_y, progress=False)
    model.save(tmp_path / "m")
    write = lambda path, xs, ys: path.write_text("".join(json.dumps({"text": x, "labels": y}) + "\n"
                                                        for x, y in zip(xs, ys)))
    write(tmp_path / "valid.jsonl", va_x, va_y)
    write(tmp_path / "test.jsonl", te_x, te_y)
    assert main(["evaluate", str(tmp_path / "m"), str(tmp_path / "test.jsonl"), "-q", "--threshold", "labels"]) == 2
    assert "xmtc calibrate" in capsys.readouterr().err
    # -o writes the calibrated model elsewhere and leaves MODEL_DIR byte for byte as it was
    before = {f.name: f.read_bytes() for f in (tmp_path / "m").iterdir()}
    assert main(["calibrate", str(tmp_path / "m"), str(tmp_path / "valid.jsonl"), "-o", str(tmp_path / "c"),
                 "-q"]) == 0
    assert str(tmp_path / "c") in capsys.readouterr().out
    assert {f.name: f.read_bytes() for f in (tmp_path / "m").iterdir()} == before
    assert xmtc.load(tmp_path / "m").calibration_ is None
    assert xmtc.load(tmp_path / "c").calibration_ is not None
    assert main(["calibrate", str(tmp_path / "m"), str(tmp_path / "valid.jsonl"), "--method", "platt",
                 "--thresholds", "f1", "-q", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["method"] == "platt" and report["after"]["ECE@5"] < report["before"]["ECE@5"]
    assert main(["evaluate", str(tmp_path / "m"), str(tmp_path / "test.jsonl"), "-q", "--json", "--threshold",
                 "0.5"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    loaded = xmtc.load(tmp_path / "m")
    assert metrics["F1@T"] == pytest.approx(loaded.evaluate(te_x, te_y, threshold=0.5)["F1@T"], abs=1e-4)
    assert main(["predict", str(tmp_path / "m"), str(tmp_path / "test.jsonl"), "-q", "--threshold", "0.5"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == len(te_x) and all(s >= 0.5 for r in rows for s in r["scores"])
    assert main(["predict", str(tmp_path / "m"), str(tmp_path / "test.jsonl"), "--threshold", "high"]) == 2
    assert "threshold must be a number or 'labels'" in capsys.readouterr().err
    # a damaged calibration is reported as such
    st = tmp_path / "m" / "calibration.safetensors"
    st.write_bytes(st.read_bytes()[:-4])
    with pytest.raises(ModelFormatError, match="calibration.safetensors"):
        xmtc.load(tmp_path / "m")


def test_calibration_arrays_are_checked():
    cal = Calibration.fit(np.array([[0, 1]] * 20), np.random.default_rng(0).uniform(size=(20, 2)),
                          np.array([[True, False]] * 20), np.array([1, 50]), n_bands=2)
    params, arrays = cal.to_arrays()
    again = Calibration.from_arrays(params, arrays, 2, "x")
    np.testing.assert_array_equal(again.probabilities(np.array([[0, 1]]), np.array([[0.3, 0.3]])),
                                  cal.probabilities(np.array([[0, 1]]), np.array([[0.3, 0.3]])))
    with pytest.raises(ModelFormatError, match="do not match"):
        Calibration.from_arrays(params, arrays, 3, "x")
    bad = dict(arrays)
    del bad["band0.x"]
    with pytest.raises(ModelFormatError, match="invalid calibration"):
        Calibration.from_arrays(params, bad, 2, "x")
    with pytest.raises(ConfigError):
        Calibration.fit(np.array([[0]]), np.array([[0.5]]), np.array([[True]]), np.array([1]), method="beta")


def test_labels_without_documents_take_the_base_rate_of_such_labels():
    """Odds of a label with no training document times m / (1 - m) * S / U (S, U: labels with and without
    documents). By hand: a flat map 0.5 (odds 1), m = 0.2, S = 2, U = 2: odds 0.25, P = 0.2; documented labels
    keep the map's value; the model's current counts decide which labels have none."""
    cal = Calibration("isotonic", np.array([]), np.array([5, 0, 0, 3]), [{"x": np.array([0.0]), "y": np.array([0.5])}],
                      unseen_mass=0.2)
    idx, raw = np.array([[0, 1, 2, 3]]), np.array([[0.0, 0.0, 0.0, 0.0]])
    q = (1 - TIE_BREAK) * 0.5  # the map's value at raw 0 (the tie-break's share of a raw 0 is 0)
    assert cal.unseen_ratio() == pytest.approx(0.25)
    shifted = q / (1 - q) * 0.25
    np.testing.assert_allclose(cal.probabilities(idx, raw), [[q, shifted / (1 + shifted), shifted / (1 + shifted), q]],
                               rtol=1e-9)
    # label 1 learned since (count 2): S = 3, U = 1, ratio 0.25 * 3 = 0.75, for label 2 only
    now = np.array([5, 2, 0, 3])
    shifted = q / (1 - q) * 0.75
    assert cal.probabilities(idx, raw, now)[0, 2] == pytest.approx(shifted / (1 + shifted), rel=1e-9)
    assert cal.probabilities(idx, raw, now)[0, 1] == pytest.approx((1 - TIE_BREAK) * 0.5)
    params, arrays = cal.to_arrays()
    assert Calibration.from_arrays(params, arrays, 4, "x").unseen_mass == 0.2
    cal.unseen_mass = None  # a calibration saved before it: no shift
    assert cal.probabilities(idx, raw)[0, 1] == pytest.approx((1 - TIE_BREAK) * 0.5)


def test_isotonic_steps_are_scikit_learns_breakpoints():
    """calibration.isotonic_steps (SciPy's PAV, equal scores pooled, flat steps trimmed to their ends) against
    scikit-learn's IsotonicRegression(y_min=0, y_max=1): the same X_thresholds_ / y_thresholds_ on scores with
    many ties (rounded to 1-3 decimals) and 0/1 or real targets, and the same interpolated map."""
    from sklearn.isotonic import IsotonicRegression

    from xmtc.models.calibration import isotonic_steps

    rng = np.random.default_rng(7)
    for trial in range(100):
        n = int(rng.integers(2, 300))
        s = np.round(rng.random(n), int(rng.integers(1, 4))).astype(np.float32).astype(np.float64)
        y = (rng.random(n) < s ** 2).astype(np.float64) if trial % 2 else rng.random(n)
        ref = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(s, y)
        x_thr, y_thr = isotonic_steps(s, y)
        np.testing.assert_allclose(x_thr, ref.X_thresholds_, rtol=0, atol=0)
        np.testing.assert_allclose(y_thr, ref.y_thresholds_, rtol=0, atol=1e-12)
        grid = np.linspace(-0.1, 1.1, 50)
        np.testing.assert_allclose(np.interp(grid, x_thr, y_thr), ref.predict(grid), atol=1e-12)


def test_pava_is_scipys_isotonic_regression():
    """calibration.pava (C) against its definition: hand cases, then SciPy's pool-adjacent-violators on random
    values, ties and weights (a kernel that pooled unweighted, or only neighbours once, or not at all, differs)."""
    from scipy.optimize import isotonic_regression

    from xmtc.models.calibration import pava

    np.testing.assert_array_equal(pava(np.array([3.0, 1.0, 2.0]), np.ones(3)), [2.0, 2.0, 2.0])
    np.testing.assert_allclose(pava(np.array([1.0, 0.0]), np.array([1.0, 3.0])), [0.25, 0.25])  # weighted mean
    np.testing.assert_array_equal(pava(np.array([0.0, 2.0, 1.0, 3.0]), np.ones(4)), [0.0, 1.5, 1.5, 3.0])
    assert pava(np.zeros(0), np.zeros(0)).shape == (0,)
    rng = np.random.default_rng(11)
    for trial in range(300):
        n = int(rng.integers(1, 200))
        y = rng.random(n) if trial % 3 else np.round(rng.random(n), 1)
        w = rng.integers(1, 20, n).astype(np.float64) if trial % 2 else rng.random(n) + 0.01
        np.testing.assert_allclose(pava(y, w), isotonic_regression(y, weights=w).x, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="one length"):
        pava(np.ones(3), np.ones(2))


def test_train_with_a_label_file_imports_neither_scikit_learn_nor_scipy_optimize(tmp_path):
    """`xmtc train --label-file` (calibration and the label-text route's map, both isotonic) loads neither
    scikit-learn (~1 s) nor scipy.optimize (~0.3 s), the imports the isotonic maps once cost every command."""
    import subprocess
    import sys
    import textwrap

    from xmtc.data import sample_path

    code = textwrap.dedent(f"""
        import sys
        from xmtc import cli
        assert cli.main(["train", {str(sample_path("train"))!r}, "-o", {str(tmp_path / "m")!r}, "-q",
                         "--label-file", {str(sample_path("labels"))!r}]) == 0
        print(sorted(k for k in sys.modules if k.split(".")[0] == "sklearn" or k.startswith("scipy.optimize")))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-2000:]
    assert (tmp_path / "m" / "label_route.safetensors").exists()  # the route was fitted, its map with it
