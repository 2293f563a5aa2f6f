"""The peer benchmark harness (benchmarks/): data mapping, child plumbing, table.

The peers themselves live in a separate venv that CI does not build, so these tests cover the
parts whose mistakes would silently skew a comparison: label columns, top-k extraction, the XC
file written for omikuji, per-child peak RSS, and failure reporting. (The metrics are xmtc's own,
tested in test_metrics.py.)
"""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import _data  # noqa: E402
import _runners  # noqa: E402
import linear  # noqa: E402

from xmtc.data import formats  # noqa: E402


def test_label_matrices_share_columns_and_append_test_only_labels():
    Y_tr, Y_te, names = _data.label_matrices([["b", "a"], ["c"], ["a", "a"]], [["c", "zz"], [], ["a", "new"]])
    assert list(names) == ["a", "b", "c", "new", "zz"]
    assert Y_tr.shape == (3, 3) and Y_te.shape == (3, 5)
    assert Y_tr.toarray().tolist() == [[1, 1, 0], [0, 0, 1], [1, 0, 0]]  # duplicate "a" counted once
    assert Y_te.toarray().tolist() == [[0, 0, 1, 0, 1], [0, 0, 0, 0, 0], [1, 0, 0, 1, 0]]


def test_xc_roundtrip_through_the_omikuji_writer(tmp_path):
    rng = np.random.default_rng(3)
    X = sp.random(20, 30, density=0.2, random_state=rng, format="csr", dtype=np.float32)
    Y = sp.random(20, 7, density=0.2, random_state=rng, format="csr", dtype=np.float32)
    Y.data[:] = 1
    X.sort_indices(), Y.sort_indices()
    _runners._write_xc(tmp_path / "t.txt", X, Y)
    with open(tmp_path / "t.txt", "rb") as src, gzip.open(tmp_path / "t.txt.gz", "wb") as dst:
        dst.write(src.read())
    raw = formats.read_xc(tmp_path / "t.txt.gz")
    np.testing.assert_allclose(raw.X.toarray(), X.toarray(), rtol=1e-6)
    assert [sorted(map(int, row)) for row in raw.labels] == [list(Y[i].indices) for i in range(20)]


def test_topk_from_csr_matches_dense_argsort():
    rng = np.random.default_rng(4)
    P = sp.random(30, 40, density=0.1, random_state=rng, format="csr", dtype=np.float32)
    idx, sc = _runners.topk_from_csr(P, 5)
    D = P.toarray()
    for i in range(30):
        nz = np.flatnonzero(D[i])
        want = nz[np.lexsort((nz, -D[i, nz]))][:5]
        assert list(idx[i, : want.size]) == list(want) and np.all(idx[i, want.size:] == -1)
        np.testing.assert_array_equal(sc[i, : want.size], D[i, want])


def test_child_peak_rss_is_its_own_not_the_parents():
    ballast = np.ones(300 * 2**20 // 8)  # the parent holds ~300 MB when it starts the child
    code = f"import sys; sys.path.insert(0, {str(BENCH)!r}); import _runners; print(_runners.peak_rss_mb())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         start_new_session=True)
    assert 5 < float(out.stdout) < 200
    del ballast


@pytest.fixture()
def work(tmp_path):
    ds = _data.Dataset("tiny", None, None, sp.csr_matrix(np.eye(4, 3, dtype=np.float32)),
                       sp.csr_matrix(np.eye(2, 3, dtype=np.float32)), np.array(["a", "b", "c"]),
                       X_train=sp.csr_matrix(np.eye(4, 6, dtype=np.float32)),
                       X_test=sp.csr_matrix(np.eye(2, 6, dtype=np.float32)))
    return _data.save_work(ds, tmp_path / "work")


def test_child_failures_become_table_notes(work, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    res, problem = linear.run_child("/bin/false", "pecos", [], work, logs, timeout=30, threads=1)
    assert res is None and problem.startswith("failed (exit 1)")
    slow = tmp_path / "slow-python"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    res, problem = linear.run_child(str(slow), "pecos", [], work, logs, timeout=0.5, threads=1)
    assert res is None and problem.startswith("timeout after")
    try:
        import napkinxc  # noqa: F401
        pytest.skip("napkinxc is installed in the test interpreter")
    except ImportError:
        pass
    res, problem = linear.run_child(sys.executable, "napkinxc", [], work, logs, timeout=60, threads=1)
    assert res is None and problem.startswith("not installed: napkinxc not importable")


def test_table_has_ratio_row_and_problem_rows():
    m = {"P@1": 90.0, "P@3": 30.0, "P@5": 20.0, "nDCG@5": 80.0, "PSP@5": 70.0}
    rows = [{"library": "xmtc", "train_s": 1.0, "predict_ms_per_doc": 0.1, "peak_rss_mb": 100.0,
             "metrics": {k: v * 1.01 for k, v in m.items()}},
            {"library": "pecos", "train_s": 2.0, "predict_ms_per_doc": 0.2, "peak_rss_mb": 200.0, "metrics": m},
            {"library": "omikuji", "problem": "not installed: x"}]
    table = linear.render_table(rows)
    ratio_line = [ln for ln in table.splitlines() if ln.startswith("| **xmtc / PECOS**")][0]
    assert ratio_line.count("0.50×") == 3 and ratio_line.count("1.01×") == 5
    assert "| omikuji 0.5.2 | – |" in table and "not installed: x" in table
    assert linear.ratios(rows)["train_s"] == pytest.approx(0.5)
    assert linear.ratios(rows[1:]) is None


class _FakeXRLinear:
    """Stands in for xmtc.XRLinear: predicts the most frequent training labels for every row."""

    def __init__(self, **params):
        self.params = params

    def get_params(self):
        return dict(self.params)

    def fit(self, X, Y, progress=True):
        if isinstance(Y, list):  # label-name lists (the latency path)
            self.names_ = sorted({n for row in Y for n in row})
            Y = sp.csr_matrix(([1.0] * sum(map(len, Y)),
                               [self.names_.index(n) for row in Y for n in row],
                               np.cumsum([0] + [len(r) for r in Y])), shape=(len(Y), len(self.names_)))
        else:
            self.names_ = [str(i) for i in range(Y.shape[1])]
        self.order_ = np.argsort(-np.asarray(Y.sum(axis=0)).ravel(), kind="stable")
        return self

    def predict_topk(self, X, k=5):
        n = X.shape[0] if sp.issparse(X) else len(X)
        top = np.full(k, -1, dtype=np.int32)
        top[: min(k, self.order_.size)] = self.order_[:k]
        return np.tile(top, (n, 1)), np.tile(np.linspace(1, 0.5, k, dtype=np.float32), (n, 1))

    def predict(self, texts, k=5):
        idx, sc = self.predict_topk(texts, k)
        return [[(self.names_[j], float(s)) for j, s in zip(ri, rs) if j >= 0] for ri, rs in zip(idx, sc)]

    def save(self, folder):
        Path(folder).mkdir(parents=True, exist_ok=True)
        np.save(Path(folder) / "order.npy", self.order_)
        (Path(folder) / "names.txt").write_text("\n".join(self.names_))
        return str(folder)


def _fake_load(folder):
    m = _FakeXRLinear()
    m.order_ = np.load(Path(folder) / "order.npy")
    m.names_ = (Path(folder) / "names.txt").read_text().split("\n")
    return m


@pytest.fixture()
def fake_xmtc(monkeypatch):
    import types
    mod = types.ModuleType("xmtc")
    mod.XRLinear, mod.load, mod.__version__ = _FakeXRLinear, _fake_load, "fake"
    monkeypatch.setitem(sys.modules, "xmtc", mod)
    return mod


def test_xmtc_child_writes_predictions_and_times(fake_xmtc, work, tmp_path):
    result = tmp_path / "xmtc.json"
    rc = _runners.main(["xmtc", "--work", str(work), "--result", str(result), "--scratch", str(tmp_path / "s"),
                        "--threads", "1", "--params", '{"n_trees": 3}'])
    assert rc == 0
    import json
    res = json.loads(result.read_text())
    assert res["params"] == {"n_trees": 3, "n_threads": 1} and res["n_test"] == 2
    assert res["train_s"] >= 0 and res["predict_ms_per_doc"] >= 0 and res["peak_rss_mb"] > 0
    pred = np.load(result.with_suffix(".npz"))
    assert pred["indices"].shape == (2, 5) and list(pred["indices"][0]) == [0, 1, 2, -1, -1]


def test_single_text_latency_child(fake_xmtc, tmp_path):
    root = tmp_path / "data"
    (root / "toy").mkdir(parents=True)
    for split, n in (("train", 30), ("test", 40)):
        with gzip.open(root / "toy" / f"{split}.txt.gz", "wt", encoding="utf-8") as fh:
            fh.writelines(f"{'ab'[i % 2]},c\ttext number {i}\n" for i in range(n))
    result = tmp_path / "lat.json"
    rc = _runners.main(["xmtc-latency", "--work", str(tmp_path), "--result", str(result), "--scratch",
                        str(tmp_path / "s"), "--data-root", str(root), "--dataset", "toy", "--latency-n", "25"])
    assert rc == 0
    import json
    res = json.loads(result.read_text())
    assert res["n"] == 25 and 0 < res["p50_ms"] <= res["p99_ms"] <= res["max_ms"]
    assert res["example"]["labels"][0][0] == "c"  # label names come back, most frequent first
