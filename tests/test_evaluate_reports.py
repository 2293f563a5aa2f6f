"""`xmtc evaluate --per-label`, the evaluation plot with a threshold, and `xmtc calibrate`'s report."""

import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import xmtc
from xmtc.cli import main
from xmtc.metrics import evaluate, hits_matrix, per_label_metrics


def test_per_label_metrics_by_hand():
    # 3 documents, 5 labels; label 4 is never true nor suggested (left out of the table)
    Y = sp.csr_matrix(np.array([[1, 1, 0, 0, 0],
                                [1, 0, 1, 0, 0],
                                [0, 0, 1, 0, 0]], dtype=np.float32))
    idx = np.array([[0, 3, -1],    # 0 right, 3 wrong
                    [0, 1, 0],     # 0 right (listed twice: counts once), 1 wrong
                    [2, 3, -1]])   # 2 right, 3 wrong
    m = per_label_metrics(Y, idx)
    assert m["support"].tolist() == [2, 1, 2, 0, 0]
    assert m["predicted"].tolist() == [2, 1, 1, 2, 0]
    assert m["tp"].tolist() == [2, 0, 1, 0, 0]
    np.testing.assert_allclose(m["P"], [100, 0, 100, 0, 0])
    np.testing.assert_allclose(m["R"], [100, 0, 50, 0, 0])
    np.testing.assert_allclose(m["F1"], [100, 0, 200 / 3, 0, 0])
    # worst first: F1 0 (label 1 with support 1 before label 3 with support 0), then 2 (66.7), then 0 (100)
    assert m["order"].tolist() == [1, 3, 2, 0]


def test_per_label_sums_give_the_micro_metrics():
    rng = np.random.default_rng(1)
    Y = sp.csr_matrix((rng.random((50, 20)) < 0.15).astype(np.float32))
    idx = np.stack([rng.permutation(20)[:5] for _ in range(50)])
    sc = -np.sort(-rng.random((50, 5)), axis=1)
    full = evaluate(Y, (idx, sc), ks=(5,), threshold=0.5)
    m = per_label_metrics(Y, idx)
    assert 100 * m["tp"].sum() / (5 * 50) == pytest.approx(full["P@5"])
    kept = np.where(sc >= 0.5, idx, -1)
    mt = per_label_metrics(Y, kept)
    assert 200 * mt["tp"].sum() / (mt["predicted"].sum() + mt["support"].sum()) == pytest.approx(full["F1@T"])
    assert mt["tp"].sum() == hits_matrix(Y, kept).sum()


@pytest.fixture(scope="module")
def model_and_test(reuters_small, tmp_path_factory):
    (texts, labels), (test_texts, test_labels) = reuters_small
    d = tmp_path_factory.mktemp("reports")
    model = xmtc.XRLinear(max_leaf_size=8, branching=4, n_threads=2).fit(texts[:800], labels[:800], progress=False)
    model.save(d / "m")
    (d / "test.tsv").write_text("".join(",".join(y) + "\t" + " ".join(x.split()) + "\n"
                                        for x, y in zip(test_texts, test_labels)))
    (d / "valid.tsv").write_text("".join(",".join(y) + "\t" + " ".join(x.split()) + "\n"
                                         for x, y in zip(texts[800:1400], labels[800:1400])))
    return d


def _read_table(path):
    lines = path.read_text().splitlines()
    header = lines[0].split("\t")
    return header, [dict(zip(header, line.split("\t"))) for line in lines[1:]]


def test_cli_per_label_table(model_and_test, capsys):
    d = model_and_test
    assert main(["evaluate", str(d / "m"), str(d / "test.tsv"), "-q", "--json", "--per-label", str(d / "pl.tsv")]) == 0
    capsys.readouterr()
    header, rows = _read_table(d / "pl.tsv")
    assert header == ["id", "name", "support", "predicted", "P", "R", "F1", "train_count"]
    f1 = [float(r["F1"]) for r in rows]
    assert f1 == sorted(f1)  # worst first
    for a, b in zip(rows, rows[1:]):
        if a["F1"] == b["F1"]:
            assert int(a["support"]) >= int(b["support"])
    model = xmtc.load(d / "m")
    counts = dict(zip(model.labels_.names, model.label_counts_.tolist()))
    assert all(int(r["train_count"]) == counts.get(r["id"], 0) for r in rows)
    # supports are the test set's label counts; top-5 suggestions: 5 per document
    test_labels = [line.split("\t")[0].split(",") for line in (d / "test.tsv").read_text().splitlines()]
    assert sum(int(r["support"]) for r in rows) == sum(len(set(y)) for y in test_labels)
    assert sum(int(r["predicted"]) for r in rows) == 5 * len(test_labels)
    # with a threshold, the table holds the suggestions it keeps: their sums give F1@T
    assert main(["evaluate", str(d / "m"), str(d / "test.tsv"), "-q", "--json", "--threshold", "0.3", "--per-label",
                 str(d / "plt.tsv")]) == 0
    import json
    f1_t = json.loads(capsys.readouterr().out)["F1@T"]
    _, rows_t = _read_table(d / "plt.tsv")
    tp = sum(round(float(r["R"]) * int(r["support"]) / 100) for r in rows_t)
    kept = sum(int(r["predicted"]) for r in rows_t)
    assert kept < 5 * len(test_labels)
    assert 200 * tp / (kept + sum(int(r["support"]) for r in rows_t)) == pytest.approx(f1_t, abs=1e-3)


def test_plot_with_a_threshold_keeps_every_count_label_inside(model_and_test, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from xmtc.plots import evaluation_report, thresholded_prf

    figures = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))
    rng = np.random.default_rng(0)
    Y = sp.csr_matrix((rng.random((300, 30)) < 0.1).astype(np.float32))
    idx = np.stack([rng.permutation(30)[:5] for _ in range(300)])
    hits = hits_matrix(Y, idx)
    sc = np.where(hits, 1.0, rng.uniform(0, 0.4, idx.shape)).astype(np.float32)  # a full top bin at score 1.0
    order = np.argsort(-sc, axis=1, kind="stable")
    idx, sc = np.take_along_axis(idx, order, 1), np.take_along_axis(sc, order, 1)
    hits = hits_matrix(Y, idx)
    path = model_and_test / "plot.png"
    evaluation_report(path, Y, idx, sc, rng.integers(1, 50, 30), 500, threshold=0.5)
    assert path.read_bytes()[:4] == b"\x89PNG"
    fig = figures[-1]
    renderer = fig.canvas.get_renderer()
    rel = fig.axes[3]
    box = rel.get_window_extent(renderer)
    counts = [t for t in rel.texts if t.get_text().replace(",", "").isdigit()]
    assert counts
    for t in counts:  # inside the panel: none is cut by the figure's edge or lies on the axis labels
        e = t.get_window_extent(renderer)
        assert box.x0 <= e.x0 and e.x1 <= box.x1 and box.y0 <= e.y0 and e.y1 <= box.y1, t.get_text()
    # the threshold is drawn: its line in the reliability panel, P/R/F1 at T in the precision panel
    assert any("threshold 0.5" in t.get_text() for t in rel.get_legend().get_texts())
    p, r, f1, _ = thresholded_prf(Y, idx, sc, hits, 0.5)
    assert f1 == pytest.approx(evaluate(Y, (idx, sc), ks=(5,), threshold=0.5)["F1@T"])
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert f"F1@T at T: {f1:.1f}" in legend and f"precision at T: {p:.1f}" in legend


def test_calibrate_help_and_report(model_and_test, tmp_path, capsys):
    out = subprocess.run([sys.executable, "-m", "xmtc.cli", "calibrate", "--help"], capture_output=True, text=True)
    assert "80% of such" in " ".join(out.stdout.split()) and "%%" not in out.stdout
    import shutil
    shutil.copytree(model_and_test / "m", tmp_path / "m")
    assert main(["calibrate", str(tmp_path / "m"), str(model_and_test / "valid.tsv"), "--thresholds", "f1", "-q"]) == 0
    report = capsys.readouterr().out
    assert "nan" not in report.lower()
    f1_line = next(line for line in report.splitlines() if line.strip().startswith("F1@T"))
    assert f1_line.split()[1] == "-" and float(f1_line.split()[3]) > 0
