"""``xmtc split``: seeded train/validation files in the input's format, the split `xmtc train` makes."""

import collections
import gzip
import json

import numpy as np
import pytest
import scipy.sparse as sp

import xmtc
from xmtc.cli import main
from xmtc.cli_parser import build_parser
from xmtc.data import read_dataset
from xmtc.data.split import split_dataset, split_indices

WORDS = ["rail", "bird", "fish", "tree", "boat", "city", "rock", "song", "wind", "snow", "salt", "iron"]


def _docs(n=80, seed=0):
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        labels = sorted({f"L{j}" for j in rng.choice(12, size=rng.integers(1, 4), replace=False)})
        text = f"doc{i} " + " ".join(WORDS[int(x[1:])] for x in labels) + " " + " ".join(rng.choice(WORDS, 4))
        docs.append((labels, text))
    return docs


@pytest.fixture
def tsv_gz(tmp_path):
    path = tmp_path / "data.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for labels, text in _docs():
            fh.write(",".join(labels) + "\t" + text + "\n")
    return path


def test_tsv_gz_parts_are_split_dataset_and_gzipped(tsv_gz, tmp_path, capsys):
    assert main(["split", str(tsv_gz), "--valid", "0.1", "--seed", "0", "-o", str(tmp_path / "out")]) == 0
    assert "72 training documents" in capsys.readouterr().out
    train_path, valid_path = tmp_path / "out.train.txt.gz", tmp_path / "out.valid.txt.gz"
    for p in (train_path, valid_path):
        assert p.read_bytes()[:2] == b"\x1f\x8b"
    want_train, want_valid = split_dataset(read_dataset(tsv_gz), 0.1, seed=0)
    for got, want in ((read_dataset(train_path), want_train), (read_dataset(valid_path), want_valid)):
        assert got.texts == want.texts and got.label_lists() == want.label_lists()
    assert len(want_valid) == 8
    # without -o: FILE less its extension as the prefix; the same seed, the same files
    assert main(["split", str(tsv_gz), "--valid", "0.1", "-q"]) == 0
    assert gzip.decompress((tmp_path / "data.train.txt.gz").read_bytes()) == gzip.decompress(train_path.read_bytes())
    # another seed, another split; a count works as well as a fraction
    assert main(["split", str(tsv_gz), "--valid", "8", "--seed", "1", "-o", str(tmp_path / "s1"), "-q"]) == 0
    other = read_dataset(tmp_path / "s1.valid.txt.gz")
    assert len(other) == 8 and other.texts != want_valid.texts


def test_train_holds_out_the_same_documents(tsv_gz, tmp_path):
    """`xmtc train --valid-size X --valid-seed S` fits on exactly the training part `xmtc split` writes."""
    def accepted(*flags):
        try:
            build_parser(["train"]).parse_args(["train", "f", "-o", "m", *flags])
        except SystemExit:
            return False
        return True

    if not accepted("--valid-size", "0.1", "--valid-seed", "1"):
        pytest.skip("xmtc train has no validation split in this checkout")
    no_refit = ["--refit", "false"] if accepted("--refit", "false") else []  # keep the model fitted on the part
    assert main(["split", str(tsv_gz), "--valid", "0.25", "--seed", "3", "-o", str(tmp_path / "p"), "-q"]) == 0
    assert main(["train", str(tsv_gz), "-o", str(tmp_path / "m"), "--valid-size", "0.25", "--valid-seed", "3",
                 "--n-threads", "1", "-q", *no_refit]) == 0
    model = xmtc.load(tmp_path / "m")
    part = read_dataset(tmp_path / "p.train.txt.gz")
    assert model.n_train_ == len(part) == 60
    counts = collections.Counter(x for row in part.label_lists() for x in row)
    assert {n: int(c) for n, c in zip(model.labels_.names, model.label_counts_) if c} == dict(counts)


def test_jsonl_lines_are_copied_as_they_are(tmp_path):
    path = tmp_path / "d.jsonl"
    lines = [json.dumps({"document_id": f"id{i}", "text": t, "labels": y, "extra": i}) for i, (y, t) in
             enumerate(_docs(30))]
    path.write_text("\n".join(lines) + "\n")
    assert main(["split", str(path), "--valid", "0.2", "--seed", "5", "--train-out", str(tmp_path / "a.jsonl"),
                 "--valid-out", str(tmp_path / "b.jsonl"), "-q"]) == 0
    tr, va = split_indices(30, 0.2, 5)
    assert (tmp_path / "a.jsonl").read_text().splitlines() == [lines[i] for i in tr]
    assert (tmp_path / "b.jsonl").read_text().splitlines() == [lines[i] for i in va]


def test_xc_and_npz_parts(tmp_path):
    rng = np.random.default_rng(0)
    X = sp.random(20, 7, density=0.4, random_state=1, format="csr", dtype=np.float32)
    Y = sp.csr_matrix((rng.random((20, 5)) < 0.3).astype(np.float32))
    from xmtc.data.formats import write_npz, write_xc

    write_xc(tmp_path / "d_xc.txt", X, Y)
    assert main(["split", str(tmp_path / "d_xc.txt"), "--valid", "0.25", "-q"]) == 0
    tr, va = split_indices(20, 0.25, 0)
    for name, rows in (("d_xc.train.txt", tr), ("d_xc.valid.txt", va)):
        assert (tmp_path / name).read_text().splitlines()[0] == f"{len(rows)} 7 5"
        got = read_dataset(tmp_path / name)
        np.testing.assert_allclose(got.X.toarray(), X[rows].toarray())
        np.testing.assert_array_equal(got.Y.toarray(), Y[rows].toarray())
    write_npz(tmp_path / "X.trn.npz", X, Y)
    assert main(["split", str(tmp_path / "X.trn.npz"), "--valid", "0.25", "-q"]) == 0
    for name, rows in (("X.trn.train.npz", tr), ("X.trn.valid.npz", va)):
        got = read_dataset(tmp_path / name)
        np.testing.assert_allclose(got.X.toarray(), X[rows].toarray())
        np.testing.assert_array_equal(got.Y.toarray(), Y[rows].toarray())


def test_split_errors(tsv_gz, tmp_path, capsys):
    for argv, message in ((["--valid", "1.5"], "count"), (["--valid", "80"], "leaves none"),
                          (["--valid", "0.1", "--train-out", str(tsv_gz)], "overwrite the input"),
                          (["--valid", "0.1", "--train-out", str(tmp_path / "x.tsv"), "--valid-out",
                            str(tmp_path / "x.tsv")], "both parts")):
        assert main(["split", str(tsv_gz)] + argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, (argv, err)
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tfine\nno tab here\n")
    assert main(["split", str(bad), "--valid", "0.5", "-o", str(tmp_path / "bad")]) == 2
    assert "bad.tsv:2" in capsys.readouterr().err
    assert not list(tmp_path.glob("bad.*.tsv"))  # nothing written for a broken input
