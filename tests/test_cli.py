"""The `xmtc` command end to end on a small real sample, and its error paths."""

import gzip
import json
import shutil
import subprocess
import sys

import pytest

from xmtc.cli import main


@pytest.fixture(scope="module")
def files(reuters_small, tmp_path_factory):
    (tr_t, tr_l), (te_t, te_l) = reuters_small
    d = tmp_path_factory.mktemp("cli")
    with gzip.open(d / "train.txt.gz", "wt", encoding="utf-8") as fh:
        for t, l in zip(tr_t, tr_l):
            fh.write(",".join(l) + "\t" + t.replace("\t", " ") + "\n")
    with open(d / "test.jsonl", "w", encoding="utf-8") as fh:
        for t, l in zip(te_t, te_l):
            fh.write(json.dumps({"text": t, "labels": l}) + "\n")
    (d / "texts.txt").write_text("\n".join(t.replace("\n", " ") for t in te_t[:20]) + "\n", encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def model_dir(files):
    out = files / "model"
    (files / "cfg.json").write_text(json.dumps({"method": "xr-linear", "branching": 4, "max_leaf_size": 10}))
    assert main(["train", str(files / "train.txt.gz"), "-o", str(out), "--config", str(files / "cfg.json"),
                 "--max-leaf-size", "8", "--quiet"]) == 0
    return out


def test_train_records_params(model_dir):
    manifest = json.loads((model_dir / "manifest.json").read_text())
    assert manifest["method"] == "xr-linear"
    assert manifest["params"]["branching"] == 4          # from the config file
    assert manifest["params"]["max_leaf_size"] == 8      # the flag beats the file


def test_predict_writes_jsonl_in_input_order(model_dir, files, capsys):
    out = files / "pred.jsonl"
    assert main(["predict", str(model_dir), str(files / "texts.txt"), "-k", "3", "-o", str(out), "-q"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 20
    assert all(set(r) == {"line", "labels", "scores"} and len(r["labels"]) == 3 for r in rows)
    assert [r["line"] for r in rows] == list(range(1, 21))
    assert main(["predict", str(model_dir), str(files / "texts.txt"), "-k", "3", "-q"]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == rows


def test_evaluate_json(model_dir, files, capsys):
    assert main(["evaluate", str(model_dir), str(files / "test.jsonl"), "--json", "-q"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    for key in ("P@1", "P@3", "P@5", "R@5", "nDCG@5", "PSP@5"):
        assert 0.0 <= metrics[key] <= 100.0
    assert metrics["P@1"] > 80.0


def test_k_past_the_labels_is_every_label(model_dir, files, capsys):
    """``-k`` above the model's label count (a fuzzer's 10**12) predicts every label and evaluates with the
    missing ranks as misses, instead of allocating k columns."""
    n_labels = len(json.loads((model_dir / "labels.json").read_text())["names"])
    assert main(["predict", str(model_dir), str(files / "texts.txt"), "-k", str(10**12), "-q"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 20 and max(len(r["labels"]) for r in rows) <= n_labels
    assert main(["evaluate", str(model_dir), str(files / "test.jsonl"), "--json", "-q", "-k", str(10**12)]) == 0
    big = json.loads(capsys.readouterr().out)
    assert main(["evaluate", str(model_dir), str(files / "test.jsonl"), "--json", "-q", "-k", str(n_labels)]) == 0
    full = json.loads(capsys.readouterr().out)
    assert big[f"P@{10**12}"] == pytest.approx(full[f"P@{n_labels}"] * n_labels / 10**12, abs=1e-4)
    assert big[f"R@{10**12}"] == full[f"R@{n_labels}"] and big["P@1"] == full["P@1"]


def test_errors_are_one_line(model_dir, files, capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"branchng": 4}))
    assert main(["train", str(files / "train.txt.gz"), "-o", str(tmp_path / "m"), "--config", str(bad), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "bad.json" in err and "branchng" in err
    broken = tmp_path / "broken"
    shutil.copytree(model_dir, broken)
    (broken / "labels.json").write_text("[]")
    assert main(["predict", str(broken), str(files / "texts.txt"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "labels.json" in err and "checksum" in err
    malformed = tmp_path / "m.tsv"
    malformed.write_text("a,b\tfine text\nno tab on this line\n")
    assert main(["train", str(malformed), "-o", str(tmp_path / "m2"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "m.tsv:2" in err
    assert not (tmp_path / "m2").exists()


def test_help_lists_every_parameter_with_default():
    out = subprocess.run([sys.executable, "-m", "xmtc.cli", "train", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    import dataclasses
    from xmtc.models import XRLinearConfig

    for f in dataclasses.fields(XRLinearConfig):
        assert "--" + f.name.replace("_", "-") in out.stdout
    assert "Children per node of the label tree (k-means clusters per split). (default: 16)" in " ".join(
        out.stdout.split())


def test_python_dash_m_xmtc_is_the_command_line(tmp_path):
    import subprocess
    import sys

    import xmtc

    out = subprocess.run([sys.executable, "-m", "xmtc", "--version"], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == f"xmtc {xmtc.__version__}"
    bad = subprocess.run([sys.executable, "-m", "xmtc", "train", "--no-such-flag"], capture_output=True, text=True,
                         cwd=tmp_path)
    assert bad.returncode == 2 and "xmtc train: error" in bad.stderr  # the command's own usage


@pytest.mark.parametrize("argv", [["train", "T", "-o", "M", "--config"], ["calibrate", "M", "V", "--method"],
                                  ["train", "T", "-o", "M", "--method"]])
def test_a_flag_without_its_value_is_the_commands_own_usage_error(argv, capsys):
    """--method / --config are read once before the parser is built (the method decides the flags); a missing
    value there is the sub-command's usage error, not a second parser's ('cli.py: error:')."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith(f"usage: xmtc {argv[0]} ")
    assert err[-1] == f"xmtc {argv[0]}: error: argument {argv[-1]}: expected one argument"


@pytest.mark.parametrize("argv,flag", [(["train", "T", "-o", "M", "--valid-seed", "-1"], "--valid-seed"),
                                       (["split", "F", "--valid", "0.2", "--seed", "-1"], "--seed"),
                                       (["select", "M", "P", "-o", "S", "--seed", "-1"], "--seed"),
                                       (["demo", "--examples", "-1"], "--examples")])
def test_negative_seeds_and_counts_are_usage_errors(argv, flag, capsys):
    """numpy's generators refuse a negative seed: the parser says so, before anything is read."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        f"xmtc {argv[0]}: error: argument {flag}: expected a whole number >= 0, got '-1'"
