"""``xmtc labels find``: ids <-> names over a saved model's vocabulary, without loading its weights."""

import json

import numpy as np
import pytest

import xmtc
from xmtc.cli import main
from xmtc.commands.labels import find_labels, model_labels
from xmtc.data import LabelVocab, read_dataset


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("labels")
    words = {"p1": "railways", "p2": "railway history", "p3": "birds", "p4": "fishing"}
    rows = []
    rng = np.random.default_rng(0)
    for i in range(60):  # p1 on 30 documents, p2 on 20, p3 on 6, p4 on 4
        lab = ["p1"] * (i < 30) + ["p2"] * (10 <= i < 30) + ["p3"] * (30 <= i < 36) + ["p4"] * (i >= 56)
        text = " ".join(words[x] for x in lab) + " " + " ".join(rng.choice(["a", "b", "c", "d"], 3))
        rows.append(",".join(lab) + "\t" + text + "\n")
    (d / "train.tsv").write_text("".join(rows))
    (d / "labels.tsv").write_text("#id\turi\tprefLabel\tlabel_text\n"
                                  "p1\thttp://ex.org/p1\tRailways\tRailways trains\n"
                                  "p2\thttp://ex.org/p2\tHistory of railways\tHistory of railways\n"
                                  "p3\thttp://ex.org/p3\tBirds\tBirds ornithology\n"
                                  "p4\t\t\t\n")
    ds = read_dataset(d / "train.tsv", label_file=d / "labels.tsv")
    xmtc.XRLinear(n_threads=1).fit(ds.inputs, ds.Y, labels=ds.labels).save(d / "m")
    return d / "m"


def test_model_labels_reads_vocab_and_counts(model_dir):
    vocab, counts = model_labels(model_dir)
    assert vocab == xmtc.load(model_dir).labels_
    assert dict(zip(vocab.names, counts.tolist())) == {"p1": 30, "p2": 20, "p3": 6, "p4": 4}


def test_find_matches_every_field_case_insensitively():
    vocab = LabelVocab(["p1", "p2", "p3", "rail"], display=["Railways", "History of railways", "Birds", ""],
                       texts=["Railways trains", "History of railways", "Birds ornithology", ""],
                       uris=["http://ex.org/p1", "http://ex.org/p2", "http://ex.org/p3", ""])
    counts = np.array([30, 20, 6, 1])
    ids = lambda q, **kw: [r["id"] for r in find_labels(vocab, counts, q, **kw)]  # noqa: E731
    # exact matches (the id "rail") first, then by training count
    assert ids("RAIL") == ["rail", "p1", "p2"]
    assert ids("ornith") == ["p3"]                  # label text only
    assert ids("ex.org/P2") == ["p2"]               # URI
    assert ids("p") == ["p1", "p2", "p3"]           # ids (and URIs)
    assert ids("p3") == ["p3"] and ids("nothing") == []
    assert ids("rail", limit=1) == ["rail"]
    row = find_labels(vocab, counts, "rail")[0]
    assert row == {"id": "rail", "name": None, "uri": None, "train_count": 1, "column": 3, "removed": False}
    assert [r["removed"] for r in find_labels(vocab, counts, "p", removed=np.array([0, 1, 0, 0], bool))] == \
        [False, True, False]


def test_cli_labels_find(model_dir, capsys):
    assert main(["labels", "find", str(model_dir), "railways"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["id", "name", "uri", "train_count"]
    assert out[1].split() == ["p1", "Railways", "http://ex.org/p1", "30"]  # exact name match first
    assert out[2].split() == ["p2", "History", "of", "railways", "http://ex.org/p2", "20"]
    assert len(out) == 3
    assert main(["labels", "find", str(model_dir), "P4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"id": "p4", "name": None, "uri": None, "train_count": 4,
                                                    "column": 3, "removed": False}]
    assert main(["labels", "find", str(model_dir), "http", "--json", "--limit", "1"]) == 0
    captured = capsys.readouterr()
    assert [r["id"] for r in json.loads(captured.out)] == ["p1"] and "2 more matches" in captured.err
    assert main(["labels", "find", str(model_dir), "no such label"]) == 1
    assert capsys.readouterr().out == ""
    assert main(["labels", "find", str(model_dir.parent / "missing"), "x"]) == 2
    assert "model folder not found" in capsys.readouterr().err


def test_cli_labels_list_prints_every_label_and_a_label_file_that_reads_back(model_dir, capsys, tmp_path):
    vocab, counts = model_labels(model_dir)
    assert main(["labels", "list", str(model_dir)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["id", "name", "uri", "train_count"]
    assert [line.split()[0] for line in out[1:]] == ["p1", "p2", "p3", "p4"]  # by training count
    assert out[4].split() == ["p4", "-", "-", "4"]
    assert main(["labels", "list", str(model_dir), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["column"] for r in rows) == list(range(len(vocab)))
    assert {r["id"]: r["train_count"] for r in rows} == dict(zip(vocab.names, counts.tolist()))
    # --tsv is a label file: read with the training file, it gives the model's names, URIs and texts
    assert main(["labels", "list", str(model_dir), "--tsv"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    (tmp_path / "labels.tsv").write_text(captured.out)
    again = read_dataset(model_dir.parent / "train.tsv", label_file=tmp_path / "labels.tsv").labels
    assert again.names == vocab.names
    assert again.display == vocab.display and again.uris == vocab.uris and again.texts == vocab.texts
    with pytest.raises(SystemExit):
        main(["labels", "list", str(model_dir), "--tsv", "--json"])
    assert "not allowed with" in capsys.readouterr().err


def test_cli_labels_list_tsv_of_a_model_without_names_says_so(tmp_path, capsys):
    ds = read_dataset_from_rows(tmp_path, ["a\tred apples", "b\tgreen pears", "a,b\tapples and pears"] * 5)
    xmtc.XRLinear(n_threads=1).fit(ds.inputs, ds.Y, labels=ds.labels).save(tmp_path / "m")
    assert main(["labels", "list", str(tmp_path / "m"), "--tsv"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["#id\turi\tprefLabel\tlabel_text", "a\t\t\t", "b\t\t\t"]
    assert "no label has a name or text" in captured.err


def read_dataset_from_rows(folder, rows):
    (folder / "train.tsv").write_text("\n".join(rows) + "\n")
    return read_dataset(folder / "train.tsv")


def test_cli_labels_list_and_find_mark_removed_labels_and_the_label_file_leaves_them_out(model_dir, capsys, tmp_path):
    (tmp_path / "ids.txt").write_text("p2\n")
    assert main(["labels", "remove", str(model_dir), str(tmp_path / "ids.txt"), "-o", str(tmp_path / "m"), "-q"]) == 0
    capsys.readouterr()
    assert main(["labels", "list", str(tmp_path / "m"), "--json"]) == 0
    assert {r["id"]: r["removed"] for r in json.loads(capsys.readouterr().out)} == \
        {"p1": False, "p2": True, "p3": False, "p4": False}
    assert main(["labels", "list", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["id", "name", "uri", "train_count", "removed"]
    assert out[2].split()[0] == "p2" and out[2].split()[-1] == "yes" and out[1].split()[-1] == "30"
    assert main(["labels", "find", str(tmp_path / "m"), "railways", "--json"]) == 0
    assert [(r["id"], r["removed"]) for r in json.loads(capsys.readouterr().out)] == [("p1", False), ("p2", True)]
    assert main(["labels", "list", str(tmp_path / "m"), "--tsv"]) == 0
    captured = capsys.readouterr()
    assert [line.split("\t")[0] for line in captured.out.splitlines()] == ["#id", "p1", "p3", "p4"]
    assert "1 removed label(s) left out" in captured.err
    # the model without removals has no fifth column
    assert main(["labels", "list", str(model_dir)]) == 0
    assert capsys.readouterr().out.splitlines()[0].split() == ["id", "name", "uri", "train_count"]
