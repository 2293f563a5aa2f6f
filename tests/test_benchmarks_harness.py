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
import _runner_base  # noqa: E402
import _runners  # noqa: E402
import _runners_linear  # noqa: E402
import _runners_transformer  # noqa: E402
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
    _runners_linear._write_xc(tmp_path / "t.txt", X, Y)
    with open(tmp_path / "t.txt", "rb") as src, gzip.open(tmp_path / "t.txt.gz", "wb") as dst:
        dst.write(src.read())
    raw = formats.read_xc(tmp_path / "t.txt.gz")
    np.testing.assert_allclose(raw.X.toarray(), X.toarray(), rtol=1e-6)
    assert [sorted(map(int, row)) for row in raw.labels] == [list(Y[i].indices) for i in range(20)]


def test_topk_from_csr_matches_dense_argsort():
    rng = np.random.default_rng(4)
    P = sp.random(30, 40, density=0.1, random_state=rng, format="csr", dtype=np.float32)
    idx, sc = _runner_base.topk_from_csr(P, 5)
    D = P.toarray()
    for i in range(30):
        nz = np.flatnonzero(D[i])
        want = nz[np.lexsort((nz, -D[i, nz]))][:5]
        assert list(idx[i, : want.size]) == list(want) and np.all(idx[i, want.size:] == -1)
        np.testing.assert_array_equal(sc[i, : want.size], D[i, want])


def test_child_peak_rss_is_its_own_not_the_parents():
    ballast = np.ones(300 * 2**20 // 8)  # the parent holds ~300 MB when it starts the child
    code = f"import sys; sys.path.insert(0, {str(BENCH)!r}); import _memory; print(_memory.peak_rss_mb())"
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


# -- transformer.py: dataset cut, texts for the children, PECOS parameter mapping, table -----------------
def _toy_text_dataset(root: Path, n_train=40, n_test=30) -> None:
    (root / "toy").mkdir(parents=True)
    for split, n in (("train", n_train), ("test", n_test)):
        with gzip.open(root / "toy" / f"{split}.txt.gz", "wt", encoding="utf-8") as fh:
            fh.writelines(f"{'abc'[i % 3]},d\ttext number {i} é\n" for i in range(n))


def test_dataset_cut_is_seeded_random_and_texts_are_written(tmp_path):
    _toy_text_dataset(tmp_path / "data")
    ds = _data.load_dataset(tmp_path / "data", "toy", max_train=10, max_test=5, seed=1)
    again = _data.load_dataset(tmp_path / "data", "toy", max_train=10, max_test=5, seed=1)
    assert len(ds.train_texts) == 10 and len(ds.test_texts) == 5 and ds.Y_train.shape[0] == 10
    assert ds.train_texts == again.train_texts and ds.train_texts != [f"text number {i} é" for i in range(10)]
    assert ds.Y_test.shape[0] == 5 and any("cut" in n for n in ds.notes)
    full = _data.load_dataset(tmp_path / "data", "toy")
    assert len(full.train_texts) == 40 and not full.notes
    _data.featurize(ds)
    work = _data.save_work(ds, tmp_path / "work")
    import json
    assert json.loads((work / "train_texts.json").read_text(encoding="utf-8")) == ds.train_texts
    d = _runner_base._load(work, ("Y_train",), texts=True)
    assert d["test_texts"] == ds.test_texts and "X_train" not in d and _runner_base._n_test(d) == 5


def test_pecos_xrt_settings_carry_every_shared_setting():
    shared = {"encoder": "/m", "max_length": 32, "epochs": 1, "batch_size": 32, "encode_batch_size": 128,
              "nr_splits": 16, "max_leaf_size": 100, "beam_size": 10, "max_match_clusters": 32768,
              "negatives": "tfn+man"}
    s = _runners_transformer.pecos_xrt_settings(shared, threads=2, seed=0, k=5)
    tp = s["train_params"]
    assert tp["preliminary_indexer_params"] == {"nr_splits": 16, "max_leaf_size": 100, "seed": 0, "threads": 2}
    m = tp["matcher_params_chain"]
    assert (m["model_shortcut"], m["num_train_epochs"], m["batch_size"], m["negative_sampling"], m["use_gpu"]) == \
        ("/m", 1, 32, "tfn+man", False)
    assert m["batch_gen_workers"] == 2  # never 0: PECOS 1.2.8 also uses it as sparse_matmul threads (SIGFPE)
    assert tp["ranker_params"]["hlm_args"] == {"neg_mining_chain": "tfn+man", "model_chain": {"threads": 2}}
    assert tp["fix_clustering"] is True and tp["max_match_clusters"] == 32768
    assert s["pred_params"]["matcher_params_chain"]["truncate_length"] == 32
    assert s["train_kwargs"] == {"threads": 2, "beam_size": 10}
    assert s["predict_kwargs"]["only_topk"] == 5 and s["predict_kwargs"]["beam_size"] == 10
    merged = _runners_transformer._deep_merge(s, {"train_params": {"fix_clustering": False,
                                                       "matcher_params_chain": {"learning_rate": 5e-5}}})
    assert merged["train_params"]["fix_clustering"] is False
    assert merged["train_params"]["matcher_params_chain"]["learning_rate"] == 5e-5
    assert merged["train_params"]["matcher_params_chain"]["num_train_epochs"] == 1  # siblings kept
    assert s["train_params"]["fix_clustering"] is True  # the input is not mutated


def test_transformer_table_ratio_row_is_xmtc_xrt_over_pecos_xrt():
    import transformer
    m = {"P@1": 40.0, "P@3": 20.0, "P@5": 12.0, "nDCG@5": 38.0, "PSP@5": 30.0}
    rows = [{"library": "xmtc-xrt", "train_s": 500.0, "predict_ms_per_doc": 2.0, "peak_rss_mb": 1000.0,
             "metrics": m},
            {"library": "pecos-xrt", "train_s": 1000.0, "predict_ms_per_doc": 4.0, "peak_rss_mb": 2000.0,
             "metrics": m},
            {"library": "xmtc", "train_s": 1.0, "predict_ms_per_doc": 0.1, "peak_rss_mb": 100.0, "metrics": m}]
    table = transformer.render_table(rows)
    ratio_line = [ln for ln in table.splitlines() if ln.startswith("| **xmtc / PECOS**")][0]
    assert ratio_line.count("0.50×") == 3 and ratio_line.count("1.00×") == 5
    assert "| xmtc XR-Linear (reference" in table
    assert transformer.ratios(rows)["train_s"] == pytest.approx(0.5)


class _FakeXRTransformer(_FakeXRLinear):
    """Stands in for xmtc.XRTransformer: texts in, its own TF-IDF, most frequent labels out."""

    def fit(self, texts, Y, progress=True):
        from xmtc.features.tfidf import TfidfFeaturizer  # the real one: the runner checks it against the shared

        assert isinstance(texts, list) and isinstance(texts[0], str) and sp.issparse(Y)
        self.featurizer_ = TfidfFeaturizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
        self.featurizer_.fit_transform(texts)
        self.heads_, self.n_features_ = {0: None, 1: None}, 7
        self.models_ = [type("M", (), {"level_sizes": [2, Y.shape[1]]})()]
        self.tree_sizes_ = [2, Y.shape[1]]
        return super().fit(texts, Y)


def test_xmtc_xrt_child_reads_texts_and_checks_the_tfidf(tmp_path, monkeypatch):
    import json
    import types

    import xmtc.features.tfidf  # noqa: F401  (imported before xmtc is faked below)
    _toy_text_dataset(tmp_path / "data")
    ds = _data.load_dataset(tmp_path / "data", "toy")
    _data.featurize(ds)
    work = _data.save_work(ds, tmp_path / "work")
    mod = types.ModuleType("xmtc")
    mod.XRTransformer, mod.__version__ = _FakeXRTransformer, "fake"
    mod.__path__ = sys.modules["xmtc"].__path__  # xmtc.features.* stays importable
    monkeypatch.setitem(sys.modules, "xmtc", mod)
    result = tmp_path / "xrt.json"
    shared = {"encoder": "/m", "max_length": 32, "epochs": 1, "batch_size": 32, "encode_batch_size": 128,
              "nr_splits": 16, "max_leaf_size": 100, "beam_size": 10, "max_match_clusters": 32768,
              "negatives": "tfn+man"}
    rc = _runners.main(["xmtc-xrt", "--work", str(work), "--result", str(result), "--scratch", str(tmp_path / "s"),
                        "--threads", "1", "--shared", json.dumps(shared), "--params", '{"epochs": 2}'])
    assert rc == 0
    res = json.loads(result.read_text())
    assert res["params"]["encoder"] == "/m" and res["params"]["epochs"] == 2 and res["params"]["device"] == "cpu"
    assert res["params"]["branching"] == 16 and res["params"]["n_threads"] == 1
    assert res["tfidf_check"] == {"same_shape_as_shared": True, "max_abs_diff_test": 0.0,
                                  "xmtc_shape": [30, ds.X_test.shape[1]], "shared_shape": [30, ds.X_test.shape[1]]}
    assert res["n_test"] == 30 and res["tree"] == [2, 4]
    pred = np.load(result.with_suffix(".npz"))
    assert pred["indices"].shape == (30, 5)


def test_tree_seed_params_and_spread_by_hand():
    assert linear.seeded_params("xmtc", {"n_trees": 3}, 4) == {"n_trees": 3, "seed": 4}
    assert linear.seeded_params("pecos", {"indexer": {"nr_splits": 8}}, 2, Path("t.npz")) == {
        "indexer": {"nr_splits": 8, "seed": 2}, "tree_file": "t.npz"}
    assert linear.seeded_params("omikuji", {"n_trees": 2}, 1) == {"n_trees": 2}

    def row(lib, p1, train):
        return {"library": lib, "train_s": train, "predict_ms_per_doc": 0.1,
                "metrics": {"P@1": p1, "P@3": 0.0, "P@5": 0.0, "nDCG@5": 0.0, "PSP@5": 0.0}}

    runs = {0: [row("xmtc", 60.0, 1.0), row("pecos", 61.0, 2.0)],
            1: [row("xmtc", 62.0, 3.0), {"library": "pecos", "problem": "failed"}],
            2: [row("xmtc", 64.0, 2.0), row("pecos", 63.0, 4.0)]}
    out = {e["library"]: e for e in linear.seed_spread(runs)}
    assert out["xmtc"]["n_seeds"] == 3 and out["xmtc"]["P@1"] == (62.0, 2.0)   # sd of 60, 62, 64
    assert out["pecos"]["n_seeds"] == 2 and out["pecos"]["P@1"][0] == 62.0
    assert out["pecos"]["P@1"][1] == pytest.approx(2 ** 0.5) and out["xmtc"]["train_s"] == (2.0, 1.0)
    table = linear.render_spread(list(out.values()), [0, 1, 2])
    assert "| 62.00 ± 2.00 |" in table and "| **xmtc − PECOS** |  |  | +0.00 |" in table
