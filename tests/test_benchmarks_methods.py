"""benchmarks/methods.py, the methods table: one real run on a tiny text set with xmtc XR-Linear only.

What would silently skew the table: metrics that are not what they say (checked here against a second,
by-hand implementation from the saved predictions), an unregistered method or bad params crashing the
run instead of giving a row, a recorded PECOS row used without saying so or on other data, ratios taken
against the wrong row, an ensemble whose train time is not its members'.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import methods  # noqa: E402

WORDS = {"a": "apple", "b": "banana", "c": "cherry", "d": "date", "e": "elder"}


def _toy(root: Path, seed: int = 0) -> None:
    """Texts naming their labels' words (learnable), plus noise words; 1-2 labels per document."""
    rng = np.random.default_rng(seed)
    (root / "toy").mkdir(parents=True)
    for split, n in (("train", 80), ("test", 30)):
        lines = []
        for i in range(n):
            labels = sorted(set(rng.choice(list(WORDS), size=rng.integers(1, 3))))
            words = [WORDS[x] for x in labels] + [f"noise{rng.integers(0, 20)}" for _ in range(3)]
            rng.shuffle(words)
            lines.append(f"{','.join(labels)}\t{' '.join(words)} {i}\n")
        with gzip.open(root / "toy" / f"{split}.txt.gz", "wt", encoding="utf-8") as fh:
            fh.writelines(lines)


def _run(argv: list[str], capsys) -> tuple[int, str]:
    rc = methods.main(argv)
    return rc, capsys.readouterr().out


def _coverage_by_hand(scores: np.ndarray, correct: np.ndarray, precision: float) -> float:
    """Every candidate threshold tried: accept the documents whose top-1 score is >= it."""
    best = 0.0
    for t in np.unique(scores):
        accepted = scores >= t
        if correct[accepted].mean() >= precision:
            best = max(best, 100.0 * accepted.sum() / scores.size)
    return best


@pytest.fixture()
def recorded_pecos(tmp_path):
    """A methods.py JSON holding only a PECOS row, written as a real run would (for --pecos-from)."""
    def write(meta: dict, p1: float = 50.0) -> Path:
        row = {"library": "pecos-xrt", "kind": "pecos", "k": 100, "train_s": 1000.0, "predict_ms_per_doc": 5.0,
               "peak_rss_mb": 2000.0, "metrics": {"P@1": p1, "P@3": 30.0, "P@5": 20.0, "PSP@5": 25.0,
                                                  "R@100": 80.0, "coverage@P90": 10.0}}
        path = tmp_path / f"pecos-{p1}.json"
        path.write_text(json.dumps({"kind": "methods", "dataset": meta, "rows": [row],
                                    "machine": {"date": "2026-11-23T20:00:00+00:00"}}))
        return path
    return write


@pytest.mark.slow
def test_methods_table_end_to_end_with_xr_linear(tmp_path, capsys, recorded_pecos):
    _toy(tmp_path / "data")
    base = ["--data-root", str(tmp_path / "data"), "--dataset", "toy", "--threads", "1", "--out",
            str(tmp_path / "out"), "--no-install"]
    # first: the data files only (no PECOS, a method that does not exist): prepares meta.json for the recording
    rc, out = _run([*base, "--methods", "no-such-method", "--no-pecos", "--json", str(tmp_path / "first.json")],
                   capsys)
    assert rc == 0
    first = json.loads(out.strip().splitlines()[-1])
    assert first["rows"] == [{"row": "no-such-method", "problem": "unknown method 'no-such-method': not registered "
                              "in this xmtc (it has " + ", ".join(__import__("xmtc").models.method_names()) + ")"}]
    meta = json.loads(Path(first["json"]).read_text())["dataset"]
    pecos_json = recorded_pecos(meta)

    rc, out = _run([*base, "--reuse-features", "--methods", "xr-linear,xr-linear#two,not-a-method,xr-linear#bad",
                    "--params", 'xr-linear#two={"n_trees": 2}', "--params", 'xr-linear#bad={"no_such_key": 1}',
                    "--ensemble", "xr-linear,xr-linear#two", "--pecos-from", str(pecos_json),
                    "--json", str(tmp_path / "table.json")], capsys)
    assert rc == 0
    summary = json.loads(out.strip().splitlines()[-1])  # the last stdout line is one JSON object
    assert summary["json"] == str(tmp_path / "table.json")
    payload = json.loads((tmp_path / "table.json").read_text())
    rows = {r["library"]: r for r in payload["rows"]}
    assert list(rows) == ["xr-linear", "xr-linear#two", "not-a-method", "xr-linear#bad", "ensemble", "pecos-xrt"]
    assert rows["not-a-method"]["problem"].startswith("unknown method 'not-a-method': not registered")
    assert rows["xr-linear#bad"]["problem"].startswith("bad params for xr-linear") and "no_such_key" in \
        rows["xr-linear#bad"]["problem"]

    # the metrics are what they say: recomputed by hand from the child's saved top-100 predictions
    work = tmp_path / "out" / "work" / "toy"
    Y = sp.load_npz(work / "Y_test.npz").tocsr()
    truth = [set(Y.indices[Y.indptr[i]:Y.indptr[i + 1]]) for i in range(Y.shape[0])]
    for name in ("xr-linear", "xr-linear#two", "ensemble"):
        pred = np.load(work / "logs" / f"{name}.npz")
        idx, sc = pred["indices"], pred["scores"]
        assert idx.shape == (30, 100)
        m = rows[name]["metrics"]
        hit = np.array([[j in truth[i] for j in idx[i]] for i in range(30)])
        assert m["P@1"] == pytest.approx(100 * hit[:, 0].mean())
        assert m["P@5"] == pytest.approx(100 * hit[:, :5].sum() / (5 * 30))
        assert m["R@100"] == pytest.approx(100 * np.mean([hit[i].sum() / len(truth[i]) for i in range(30)]))
        assert m["coverage@P90"] == pytest.approx(_coverage_by_hand(sc[:, 0], hit[:, 0], 0.9))
        assert rows[name]["peak_rss_mb"] > 50 and rows[name]["k"] == 100
    assert rows["xr-linear"]["metrics"]["P@1"] > 50  # the words name the labels: a trained model finds them
    assert rows["xr-linear"]["params_passed"] == {"n_threads": 1, "seed": 0}
    assert rows["xr-linear#two"]["params"]["n_trees"] == 2
    # the ensemble's train time is its members' sum
    assert rows["ensemble"]["train_s"] == pytest.approx(rows["xr-linear"]["train_s"] + rows["xr-linear#two"]["train_s"])

    # PECOS: the recorded row, said so, and every ratio against it
    pecos = rows["pecos-xrt"]
    assert pecos["note"].startswith("recorded 2026-11-23T20:00:00+00:00 (pecos-50.0.json), not re-run")
    assert "RECORDED EARLIER" in out and pecos["recorded"]["file"] == str(pecos_json)
    r = rows["xr-linear"]
    assert r["ratios_to_pecos"]["P@1"] == pytest.approx(r["metrics"]["P@1"] / 50.0)
    assert r["ratios_to_pecos"]["train_s"] == pytest.approx(r["train_s"] / 1000.0)
    assert r["ratios_to_pecos"]["peak_rss_mb"] == pytest.approx(r["peak_rss_mb"] / 2000.0)
    assert rows["not-a-method"].get("ratios_to_pecos") is None
    line = next(ln for ln in payload["table"].splitlines() if ln.startswith("| xmtc xr-linear |"))
    assert f"| {r['metrics']['P@1']:.2f} |" in line and f"| {methods.fmt_ratio(r['ratios_to_pecos']['P@1'])} |" in line

    # an ensemble whose member trained (and was saved) in a recorded run: its model and train time are used
    rc, out = _run([*base, "--reuse-features", "--methods", "xr-linear#three", "--params",
                    'xr-linear#three={"max_leaf_size": 2, "branching": 2}', "--ensemble", "xr-linear,xr-linear#three",
                    "--rows-from", str(tmp_path / "table.json"), "--no-pecos", "--json", str(tmp_path / "later.json")],
                   capsys)
    assert rc == 0
    later = {r["library"]: r for r in json.loads((tmp_path / "later.json").read_text())["rows"]}
    assert later["ensemble"]["train_s"] == pytest.approx(rows["xr-linear"]["train_s"]
                                                         + later["xr-linear#three"]["train_s"])

    # a parameter file: its parameters train the row, its prediction variant re-predicts that same model
    pdir = tmp_path / "params"
    (pdir / "toy" / "xr-linear").mkdir(parents=True)
    (pdir / "toy" / "xr-linear" / "deep.json").write_text(json.dumps(
        {"max_leaf_size": 1, "branching": 2, "predict_variants": [{"beam_size": 1}]}))
    (pdir / "toy" / "xr-linear" / "badvariant.json").write_text(json.dumps({"predict_variants": [{"beem": 1}]}))
    rc, out = _run([*base, "--reuse-features", "--methods", "xr-linear#deep,xr-linear#badvariant", "--params-dir",
                    str(pdir), "--no-pecos", "--json", str(tmp_path / "deep.json")], capsys)
    assert rc == 0
    deep = {r["library"]: r for r in json.loads((tmp_path / "deep.json").read_text())["rows"]}
    assert list(deep) == ["xr-linear#deep", "xr-linear#deep@beam_size=1", "xr-linear#badvariant"]
    # a prediction variant the method refuses is a row's problem before anything trains
    assert deep["xr-linear#badvariant"]["problem"].startswith("bad params for xr-linear") and "beem" in \
        deep["xr-linear#badvariant"]["problem"]
    assert not (work / "logs" / "xr-linear#badvariant.npz").exists()
    assert deep["xr-linear#deep"]["params"]["max_leaf_size"] == 1
    assert deep["xr-linear#deep"]["params_file"] == str(pdir / "toy" / "xr-linear" / "deep.json")
    import xmtc
    texts = json.loads((work / "train_texts.json").read_text())
    test_texts = json.loads((work / "test_texts.json").read_text())
    direct = xmtc.XRLinear(max_leaf_size=1, branching=2, n_threads=1, seed=0).fit(
        texts, sp.load_npz(work / "Y_train.npz").tocsr(), progress=False)
    for name, beam in (("xr-linear#deep", 10), ("xr-linear#deep@beam_size=1", 1)):
        idx, _ = direct.set_params(beam_size=beam).predict_topk(test_texts, k=100)
        idx = np.pad(idx, ((0, 0), (0, 100 - idx.shape[1])), constant_values=-1)  # 5 labels: the rest misses
        saved = np.load(work / "logs" / ("xr-linear#deep.npz" if beam == 10 else "xr-linear#deep.v0.npz"))
        assert np.array_equal(saved["indices"], idx)
        hit = np.array([[j in truth[i] for j in idx[i]] for i in range(30)])
        assert deep[name]["metrics"]["R@100"] == pytest.approx(
            100 * np.mean([hit[i].sum() / len(truth[i]) for i in range(30)]))
    # the narrow beam shortens the lists: a variant that were ignored would equal the trained row
    assert deep["xr-linear#deep@beam_size=1"]["metrics"]["R@100"] < deep["xr-linear#deep"]["metrics"]["R@100"]

    # merging: the recorded rows of both runs in one table without running anything; later files win
    rc, out = _run([*base, "--methods", "", "--no-pecos", "--rows-from", str(tmp_path / "first.json"),
                    "--rows-from", str(tmp_path / "table.json"), "--json", str(tmp_path / "merged.json")], capsys)
    assert rc == 0
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert [r["library"] for r in merged["rows"]] == ["no-such-method", "xr-linear", "xr-linear#two", "not-a-method",
                                                      "xr-linear#bad", "ensemble", "pecos-xrt"]
    assert merged["rows"][1]["metrics"] == rows["xr-linear"]["metrics"]


def test_recorded_rows_from_other_data_are_refused_before_training(tmp_path, capsys, recorded_pecos):
    _toy(tmp_path / "data")
    base = ["--data-root", str(tmp_path / "data"), "--dataset", "toy", "--threads", "1", "--out",
            str(tmp_path / "out"), "--no-install"]
    other = recorded_pecos({"dataset": "toy", "n_train": 79, "n_test": 30, "n_labels_train": 5, "cut": None})
    rc = methods.main([*base, "--methods", "xr-linear", "--pecos-from", str(other)])
    err = capsys.readouterr().err
    assert rc == 2 and "other data (n_train 79 there, 80 here)" in err
    assert not (tmp_path / "out" / "work" / "toy" / "logs" / "xr-linear.json").exists()  # nothing trained


def test_params_parsing_and_usage_errors():
    assert methods.parse_params(['lightxml={"epochs": 3}', "elias#b={}"]) == {"lightxml": {"epochs": 3}, "elias#b": {}}
    with pytest.raises(ValueError, match="expected NAME=JSON"):
        methods.parse_params(['{"epochs": 3}'])
    with pytest.raises(ValueError, match="not JSON"):
        methods.parse_params(["lightxml={epochs: 3}"])
    with pytest.raises(ValueError, match="expected a JSON object"):
        methods.parse_params(["lightxml=[3]"])
    for argv in (["--methods", "xr-linear", "--params", 'elias={"a": 1}'],     # params for an unlisted row
                 ["--methods", "xr-linear", "--ensemble", "xr-linear,elias"],  # member not listed
                 ["--methods", "xr-linear,xr-linear"],                          # a row twice
                 ["--methods", "pecos-xrt"]):                                   # PECOS is not an xmtc method
        with pytest.raises(SystemExit):
            methods.parse_args(argv)
    assert methods.method_of("lightxml#b") == "lightxml" and methods.fmt_ratio(0.0012) == "0.001×"


def test_parameter_files_by_dataset_method_and_tag(tmp_path):
    (tmp_path / "d" / "lightxml").mkdir(parents=True)
    (tmp_path / "d" / "lightxml" / "default.json").write_text('{"epochs": 3}')
    (tmp_path / "d" / "lightxml" / "swa.json").write_text('{"epochs": 3, "swa": true, "predict_variants": [{"topk": 5}]}')
    assert methods.params_file(str(tmp_path), "d", "lightxml") == tmp_path / "d" / "lightxml" / "default.json"
    assert methods.params_file(str(tmp_path), "d", "lightxml#swa") == tmp_path / "d" / "lightxml" / "swa.json"
    assert methods.params_file(str(tmp_path), "d", "lightxml#x") is None
    assert methods.params_file("none", "d", "lightxml") is None
    assert methods.read_params_file(tmp_path / "d" / "lightxml" / "swa.json") == ({"epochs": 3, "swa": True},
                                                                                 [{"topk": 5}])
    bad = tmp_path / "bad.json"
    for text, msg in (("{epochs: 3}", "not a JSON file"), ("[1]", "expected a JSON object"),
                      ('{"predict_variants": [{}]}', "predict_variants must be")):
        bad.write_text(text)
        with pytest.raises(ValueError, match=msg) as err:
            methods.read_params_file(bad)
        assert str(bad) in str(err.value)
    # the file's parameters, then --params over them
    args = methods.parse_args(["--methods", "lightxml#swa", "--params-dir", str(tmp_path), "--dataset", "d",
                               "--params", 'lightxml#swa={"epochs": 1}', "--no-pecos"])
    assert args.params["lightxml#swa"] == {"epochs": 1, "swa": True} and args.variants["lightxml#swa"] == [{"topk": 5}]
    assert methods.variant_name("xr-transformer", {"beam_size": 20, "score": "path"}) == \
        "xr-transformer@beam_size=20,score=path"
