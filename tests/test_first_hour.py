"""What a new user meets first: calibrated scores by default, names and line numbers in every output,
a missing extra named with its `pip install`, texts the model cannot read flagged, and the command
line's strictness (no abbreviations, the command's own usage, a hint for another method's flag)."""

import gzip
import json

import numpy as np
import pytest

import xmtc
from xmtc.cli import main
from xmtc.data.split import split_indices
from xmtc.features.tfidf import TfidfFeaturizer
from xmtc.models.calibration import MIN_KNOWN, damp_unreadable
from xmtc.models.calibrated_fit import auto_valid_size


@pytest.fixture(scope="module")
def files(reuters_small, tmp_path_factory):
    (tr_t, tr_l), (te_t, te_l) = reuters_small
    d = tmp_path_factory.mktemp("first-hour")
    with gzip.open(d / "train.txt.gz", "wt", encoding="utf-8") as fh:
        for t, l in zip(tr_t, tr_l):
            fh.write(",".join(l) + "\t" + t.replace("\t", " ").replace("\n", " ") + "\n")
    names = sorted({x for row in tr_l for x in row})
    with gzip.open(d / "labels.txt.gz", "wt", encoding="utf-8") as fh:
        fh.write("#id\turi\tprefLabel\tlabel_text\tn_docs\n")
        for n in names:
            fh.write(f"{n}\thttp://example.org/{n}\tName of {n}\t{n} text\t1\n")
    with open(d / "test.jsonl", "w", encoding="utf-8") as fh:
        for i, (t, l) in enumerate(zip(te_t[:50], te_l[:50])):
            fh.write(json.dumps({"text": t, "labels": l, "document_id": f"doc-{i}"}) + "\n")
    (d / "texts.txt").write_text("\n".join(t.replace("\n", " ") for t in te_t[:20]) + "\n", encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def model_dir(files):
    out = files / "model"
    assert main(["train", str(files / "train.txt.gz"), "-o", str(out), "--label-file", str(files / "labels.txt.gz"),
                 "--max-leaf-size", "8", "--n-trees", "1", "--quiet"]) == 0
    return out


def _jsonl(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_train_holds_out_and_calibrates_by_default(model_dir):
    model = xmtc.load(model_dir)
    info = model.calibration_.fit_info
    n = 2000  # reuters_small's training documents
    assert info["valid_docs"] == auto_valid_size(n) == 200
    assert info["train_docs"] == n - 200 and info["valid_seed"] == 0
    assert info["refit_on_all"] is True and model.n_train_ == n  # xr-linear refits on everything


def test_valid_size_zero_keeps_raw_scores(files, tmp_path):
    out = tmp_path / "raw"
    assert main(["train", str(files / "train.txt.gz"), "-o", str(out), "--valid-size", "0", "--n-trees", "1",
                 "--quiet"]) == 0
    assert xmtc.load(out).calibration_ is None


def test_calibrated_scores_differ_from_raw_and_raw_scores_flag_gives_them(model_dir, files, capsys):
    model = xmtc.load(model_dir)
    texts = (files / "texts.txt").read_text(encoding="utf-8").splitlines()
    cal_idx, cal_scores = model.predict_topk(texts, 3)
    model.calibration_ = None
    raw_idx, raw_scores = model.predict_topk(texts, 3)
    assert not np.allclose(cal_scores, raw_scores)
    assert main(["predict", str(model_dir), str(files / "texts.txt"), "-k", "3", "--raw-scores", "-q"]) == 0
    rows = _jsonl(capsys.readouterr().out)
    names = model.labels_.names
    assert [r["labels"] for r in rows] == [[names[j] for j in row] for row in raw_idx]
    np.testing.assert_allclose([r["scores"] for r in rows], raw_scores, atol=1e-6)


def test_predict_lines_carry_names_and_line_numbers(model_dir, files, capsys):
    assert main(["predict", str(model_dir), str(files / "texts.txt"), "-k", "2", "-q"]) == 0
    rows = _jsonl(capsys.readouterr().out)
    assert [r["line"] for r in rows] == list(range(1, 21))
    for r in rows:
        assert r["names"] == [f"Name of {label}" for label in r["labels"]]


def test_predict_keeps_jsonl_document_ids(model_dir, files, capsys):
    assert main(["predict", str(model_dir), str(files / "test.jsonl"), "-k", "1", "-q"]) == 0
    rows = _jsonl(capsys.readouterr().out)
    assert [r["document_id"] for r in rows] == [f"doc-{i}" for i in range(50)] and "line" not in rows[0]


def test_known_fraction_counts_vocabulary_words():
    f = TfidfFeaturizer(min_df=1).fit(["history of finnish railways", "steam engines of finland"])
    # 'history', 'of' known, 'trains' not: 2/3; an empty text reads nothing: 0
    np.testing.assert_allclose(f.known_fraction(["history of trains", "", "xyz abc", "finland railways"]),
                               [2 / 3, 0.0, 0.0, 1.0])


def test_damp_unreadable_scales_below_min_known():
    idx = np.array([[0, 1], [1, 0], [0, -1]])
    scores = np.array([[0.8, 0.4], [0.6, 0.2], [0.5, 0.0]], dtype=np.float32)
    known = np.array([1.0, MIN_KNOWN / 2, 0.0])
    _, out = damp_unreadable(idx, scores, known)
    np.testing.assert_allclose(out, [[0.8, 0.4], [0.3, 0.1], [0.0, 0.0]], rtol=1e-6)


def test_unreadable_text_is_flagged_and_scored_low(model_dir, tmp_path, capsys):
    (tmp_path / "q.txt").write_text("zzqx wvvk yyyq\nrautatieläisten ammattiyhdistysliike\n", encoding="utf-8")
    assert main(["predict", str(model_dir), str(tmp_path / "q.txt"), "-k", "3", "-q"]) == 0
    rows = _jsonl(capsys.readouterr().out)
    for r in rows:
        assert r["known_words"] == 0 and "vocabulary" in r["warning"] and max(r["scores"], default=0) == 0


def test_readable_text_has_no_warning(model_dir, files, capsys):
    assert main(["predict", str(model_dir), str(files / "texts.txt"), "-k", "1", "-q"]) == 0
    assert all("warning" not in r for r in _jsonl(capsys.readouterr().out))


def test_missing_extra_is_named_before_reading_data(monkeypatch, tmp_path, capsys):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    rc = main(["train", str(tmp_path / "does-not-exist.tsv"), "-o", str(tmp_path / "m"), "--method", "lightxml"])
    err = capsys.readouterr().err
    assert rc == 2 and "pip install 'xmtc[transformer]'" in err and "does-not-exist" not in err
    assert "internal error" not in err


def test_missing_extra_on_load_names_the_install(monkeypatch, model_dir, tmp_path, capsys):
    import importlib.util
    import shutil
    folder = tmp_path / "m"
    shutil.copytree(model_dir, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["method"] = "lightxml"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert main(["predict", str(folder), str(tmp_path / "none.txt")]) == 2
    assert "pip install 'xmtc[transformer]'" in capsys.readouterr().err


def test_abbreviated_flags_are_refused(files, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", str(files / "train.txt.gz"), "-o", str(tmp_path / "m"), "--n-tree", "3"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "unrecognized arguments: --n-tree 3" in err and "usage: xmtc train" in err


def test_unknown_flag_shows_the_commands_usage(model_dir, files, capsys):
    with pytest.raises(SystemExit):
        main(["predict", str(model_dir), str(files / "texts.txt"), "--bogus"])
    err = capsys.readouterr().err
    assert "usage: xmtc predict" in err and "xmtc predict: error: unrecognized arguments: --bogus" in err


def test_another_methods_flag_gets_a_method_hint(files, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["train", str(files / "train.txt.gz"), "-o", str(tmp_path / "m"), "--epochs", "2"])
    err = capsys.readouterr().err
    assert "--epochs is a parameter of" in err and "lightxml" in err and "not of xr-linear" in err


def test_empty_and_single_document_training_files(tmp_path, capsys):
    (tmp_path / "empty.tsv").write_text("")
    assert main(["train", str(tmp_path / "empty.tsv"), "-o", str(tmp_path / "m")]) == 2
    assert "is empty: no documents to train on" in capsys.readouterr().err
    (tmp_path / "one.tsv").write_text("a,b\tone text only\n")
    assert main(["train", str(tmp_path / "one.tsv"), "-o", str(tmp_path / "m")]) == 2
    assert "1 training text cannot give features" in capsys.readouterr().err


def test_info_shows_labels_training_size_and_calibration(model_dir, capsys):
    assert main(["info", str(model_dir), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["labels"] == len(xmtc.load(model_dir).labels_) and info["training_documents"] == 2000
    assert info["calibration"]["valid_docs"] == 200 and info["size_mb"] > 0
    assert main(["info", str(model_dir)]) == 0
    out = capsys.readouterr().out
    assert "scores: calibrated (isotonic" in out and "\n  min_df = 2\n" in out


def test_split_is_seeded_and_disjoint():
    a_train, a_valid = split_indices(100, 0.1, seed=3)
    b_train, b_valid = split_indices(100, 0.1, seed=3)
    assert np.array_equal(a_valid, b_valid) and len(a_valid) == 10
    assert sorted(np.r_[a_train, a_valid].tolist()) == list(range(100))
    assert not np.array_equal(a_valid, split_indices(100, 0.1, seed=4)[1])
