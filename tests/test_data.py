"""Behaviour of xmtc.data: readers, writers, format guessing, label vocabularies and label files.

Every file is a few lines written to tmp_path; errors are checked for the ``path:LINE: problem`` shape.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from xmtc.data import (Dataset, LabelVocab, guess_format, label_matrix, read_dataset, read_inputs,
                       read_label_file, sample_path, write_dataset)
from xmtc.data.data_root import data_root, missing_reason
from xmtc.errors import DataFormatError, ModelFormatError

DATA = data_root()  # the same place conftest.py looks


# -- helpers ----------------------------------------------------------------------------------------
def put(path: Path, content: str | bytes, gz: bool = False) -> Path:
    data = content.encode("utf-8") if isinstance(content, str) else content
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


def raises_at(path, line, fragment, fn, *args, **kwargs) -> DataFormatError:
    """``fn`` raises DataFormatError reading 'path:line: ...fragment...' (or 'path: ...' if line is None)."""
    with pytest.raises(DataFormatError) as info:
        fn(*args, **kwargs)
    exc = info.value
    msg = str(exc)
    where = f"{path}:{line}: " if line is not None else f"{path}: "
    assert msg.startswith(where), msg
    assert fragment in msg, msg
    assert exc.path == os.fspath(path) and exc.line == line
    return exc


def dense(M) -> np.ndarray:
    return np.asarray(M.toarray())


# Three ways a file may arrive: plain, gzip named .gz, gzip with a plain name (magic bytes decide).
ENCODINGS = [("data.txt", False), ("data.txt.gz", True), ("data.txt", True)]


# -- readers on good input --------------------------------------------------------------------------
TSV = ("p3,p4\tlight reading\r\n"          # CRLF line end is not part of the text
       "p4\tpoetry\twith a tab\n"          # only the first tab separates labels from text
       "\tno labels here\n"                # document without labels: kept, empty row
       " p5 , p3,p3\t\n"                   # empty text kept; spaces stripped; repeated label once
       "p2\tÄänikirja – ünïcode\n")


@pytest.mark.parametrize("name,gz", ENCODINGS)
def test_read_tsv(tmp_path, name, gz):
    path = put(tmp_path / name, TSV, gz)
    assert guess_format(path) == "tsv"
    ds = read_dataset(path)
    assert ds.texts == ["light reading", "poetry\twith a tab", "no labels here", "", "Äänikirja – ünïcode"]
    assert ds.X is None and ds.inputs is ds.texts
    assert ds.labels.names == ["p2", "p3", "p4", "p5"]        # sorted, whatever the order in the file
    assert dense(ds.Y).tolist() == [[0, 1, 1, 0],
                                    [0, 0, 1, 0],
                                    [0, 0, 0, 0],
                                    [0, 1, 0, 1],
                                    [1, 0, 0, 0]]
    assert ds.Y.dtype == np.float32 and ds.Y.nnz == 6 and set(ds.Y.data) == {1.0}
    assert len(ds) == 5 and ds.path == str(path)
    assert ds.label_lists() == [["p3", "p4"], ["p4"], [], ["p3", "p5"], ["p2"]]
    assert read_inputs(path) == ds.texts


@pytest.mark.parametrize("name,gz", [("d.jsonl", False), ("d.jsonl.gz", True), ("d.txt", True)])
def test_read_jsonl(tmp_path, name, gz):
    lines = [{"text": "first", "labels": ["b", "a"]},
             {"text": "", "labels": ["a", " a ", "a"]},       # empty text kept; repeat counted once
             {"text": "ünï\ncode \"quoted\"", "labels": []},   # no labels: kept, empty row
             {"labels": ["c"], "text": "keys in any order", "extra": 1}]
    path = put(tmp_path / name, "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in lines), gz)
    assert guess_format(path) == "jsonl"
    ds = read_dataset(path)
    assert ds.texts == ["first", "", "ünï\ncode \"quoted\"", "keys in any order"]
    assert ds.labels.names == ["a", "b", "c"]
    assert dense(ds.Y).tolist() == [[1, 1, 0], [1, 0, 0], [0, 0, 0], [0, 0, 1]]
    assert ds.Y.nnz == 4


def test_read_inputs_jsonl_without_labels(tmp_path):
    path = put(tmp_path / "in.jsonl", '{"text": "a"}\n{"text": "b", "labels": ["x"]}\n')
    assert read_inputs(path) == ["a", "b"]
    raises_at(path, 1, "missing 'labels'", read_dataset, path)


XC = ("4 6 5\n"
      "0,3 0:1 2:0.5\n"
      "1:2 5:1.25\n"          # no label field: a document without labels
      "4\n"                   # labels, no features
      "3,3 4:1 4:2 1:0.25\n")  # repeated label once; repeated feature summed; features unsorted


@pytest.mark.parametrize("name,gz", ENCODINGS)
def test_read_xc(tmp_path, name, gz):
    path = put(tmp_path / name, XC, gz)
    assert guess_format(path) == "xc"
    ds = read_dataset(path)
    assert ds.texts is None and ds.inputs is ds.X
    assert ds.X.shape == (4, 6) and ds.X.dtype == np.float32
    assert dense(ds.X).tolist() == [[1, 0, 0.5, 0, 0, 0],
                                    [0, 2, 0, 0, 0, 1.25],
                                    [0, 0, 0, 0, 0, 0],
                                    [0, 0.25, 0, 0, 3, 0]]
    assert ds.labels.names == ["0", "1", "2", "3", "4"]  # XC ids are the columns, unused ones included
    assert dense(ds.Y).tolist() == [[1, 0, 0, 1, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1], [0, 0, 0, 1, 0]]
    X = read_inputs(path)
    assert sp.issparse(X) and dense(X).tolist() == dense(ds.X).tolist()


def _save_npz(path: Path, M) -> Path:
    sp.save_npz(path, sp.csr_matrix(M))
    return path


def test_read_npz(tmp_path):
    X = np.array([[0.5, 0, 2], [0, 0, 0], [1.25, 3, 0]])
    Y = np.array([[1, 0, 0, 2], [0, 0, 0, 0], [0, 1, 0, 1]])       # any non-zero is a label
    xpath = _save_npz(tmp_path / "X.trn.npz", X)
    _save_npz(tmp_path / "Y.trn.npz", Y)
    assert guess_format(xpath) == "npz"
    ds = read_dataset(xpath)
    assert ds.texts is None and ds.X.dtype == np.float32
    assert dense(ds.X).tolist() == X.tolist()
    assert ds.labels.names == ["0", "1", "2", "3"]
    assert dense(ds.Y).tolist() == [[1, 0, 0, 1], [0, 0, 0, 0], [0, 1, 0, 1]]
    # prediction input needs no labels file
    (tmp_path / "Y.trn.npz").unlink()
    assert dense(read_inputs(xpath)).tolist() == X.tolist()


def test_write_npz_replaces_the_pair_or_neither(tmp_path, monkeypatch):
    from xmtc.data import formats

    xpath = tmp_path / "X.trn.npz"
    formats.write_npz(xpath, sp.csr_matrix(np.eye(2)), sp.csr_matrix(np.eye(2, 3)))
    before = (xpath.read_bytes(), (tmp_path / "Y.trn.npz").read_bytes())
    real = sp.save_npz
    calls = []

    def fail_on_y(fh, M, compressed=True):
        calls.append(M.shape)
        if len(calls) == 2:
            raise OSError("disk full")
        real(fh, M, compressed=compressed)

    monkeypatch.setattr(formats.sp, "save_npz", fail_on_y)
    with pytest.raises(OSError, match="disk full"):
        formats.write_npz(xpath, sp.csr_matrix(np.ones((3, 2))), sp.csr_matrix(np.ones((3, 3))))
    assert (xpath.read_bytes(), (tmp_path / "Y.trn.npz").read_bytes()) == before  # the old pair, intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["X.trn.npz", "Y.trn.npz"]  # no temporaries left


def test_read_npz_stored_zero_is_not_a_label(tmp_path):
    xpath = _save_npz(tmp_path / "X.npz", np.eye(2))
    Y = sp.csr_matrix((np.array([1.0, 0.0]), np.array([0, 1]), np.array([0, 1, 2])), shape=(2, 2))
    assert Y.nnz == 2  # an explicitly stored zero
    sp.save_npz(tmp_path / "Y.npz", Y)
    assert dense(read_dataset(xpath).Y).tolist() == [[1, 0], [0, 0]]


@pytest.mark.parametrize("name,gz", ENCODINGS)
def test_read_plain_text_lines(tmp_path, name, gz):
    path = put(tmp_path / name, "first text\n\nthird, with comma\n", gz)
    assert guess_format(path) == "text"
    assert read_inputs(path) == ["first text", "", "third, with comma"]   # blank line: an empty text
    raises_at(path, 1, "no labels found", read_dataset, path)


def test_read_inputs_forced_text_format_keeps_tabs(tmp_path):
    path = put(tmp_path / "in.tsv", "a\tb\nc\n")
    assert read_inputs(path, "text") == ["a\tb", "c"]


def test_gzip_named_gz_but_plain_reads(tmp_path):
    path = put(tmp_path / "plain.tsv.gz", "x\tnot really gzipped\n")
    assert read_dataset(path).texts == ["not really gzipped"]


# -- format guessing --------------------------------------------------------------------------------
@pytest.mark.parametrize("name,fmt", [("a.npz", "npz"), ("X.trn.NPZ", "npz"), ("a.npz.gz", "npz"),
                                      ("a.jsonl", "jsonl"), ("a.JSONL.gz", "jsonl"), ("a.ndjson", "jsonl"),
                                      ("a.json", "jsonl")])
def test_guess_format_by_name_needs_no_file(tmp_path, name, fmt):
    assert guess_format(tmp_path / name) == fmt


@pytest.mark.parametrize("content,fmt", [("\n\n3 4 5\n0 1:1\n", "xc"),
                                         ("2 4 5\n1,4 0:0.5 3:1\n 2:1\n", "xc"),
                                         ("1 0 3\n", "xc"),  # a header alone: an empty XC file
                                         ("1984 2001 2010\nnovels of three decades\n", "text"),
                                         ("1984 2001 2010\n1999 was a year\n", "text"),
                                         ('{"text": "a", "labels": []}\n', "jsonl"),
                                         ("\n  \nlab\ttext\n", "tsv"),
                                         ("just words\n", "text"),
                                         ("", "text")])
@pytest.mark.parametrize("gz", [False, True])
def test_guess_format_by_content(tmp_path, content, fmt, gz):
    assert guess_format(put(tmp_path / "data", content, gz)) == fmt


def test_guess_format_explicit(tmp_path):
    path = put(tmp_path / "a.jsonl", "x\ty\n")
    assert guess_format(path, "tsv") == "tsv"
    assert read_dataset(path, "tsv").texts == ["y"]
    raises_at(path, None, "unknown format 'csv'", guess_format, path, "csv")


# -- readers on malformed input: every error names the file and the line ----------------------------
TSV_BAD = [
    ("a\tok\nno tab here\n", 2, "no tab found"),
    ("a\tok\n\nb\tok\n", 2, "blank line"),
    ("a\tok\nb\tok\na,,b\tthree\n", 3, "empty label name"),
    ("a,\tok\n", 1, "empty label name"),
]


@pytest.mark.parametrize("content,line,problem", TSV_BAD)
@pytest.mark.parametrize("gz", [False, True])
def test_tsv_malformed(tmp_path, content, line, problem, gz):
    path = put(tmp_path / "bad.tsv", content, gz)
    raises_at(path, line, problem, read_dataset, path, "tsv")


JSONL_BAD = [
    ("", "blank line"),
    ('{"text": "a", "labels": [}', "invalid JSON"),
    ('["a", ["b"]]', "expected a JSON object"),
    ('"just a string"', "expected a JSON object"),
    ('{"labels": ["a"]}', "missing 'text'"),
    ('{"text": 5, "labels": ["a"]}', "'text' must be a string"),
    ('{"text": null, "labels": ["a"]}', "'text' must be a string"),
    ('{"text": "a"}', "missing 'labels'"),
    ('{"text": "a", "labels": "a"}', "'labels' must be a list of strings"),
    ('{"text": "a", "labels": [1]}', "'labels' must be a list of strings"),
    ('{"text": "a", "labels": null}', "'labels' must be a list of strings"),
    ('{"text": "a", "labels": ["a", " "]}', "empty label name"),
    ('{"text": "a", "labels": ["a"], "document_id": true}', "'document_id' must be a string or an integer"),
    ('{"text": "a", "labels": ["a"], "document_id": 1.5}', "'document_id' must be a string or an integer"),
]


@pytest.mark.parametrize("bad,problem", JSONL_BAD)
def test_jsonl_malformed(tmp_path, bad, problem):
    good = '{"text": "fine", "labels": ["a"]}\n'
    path = put(tmp_path / "bad.jsonl", good + good + bad + "\n" + good)
    raises_at(path, 3, problem, read_dataset, path)


XC_BAD = [
    ("3 4\n0 1:1\n", 1, "expected header"),
    ("a b c\n", 1, "expected header"),
    ("1 2 3 4\n", 1, "expected header"),
    ("", 1, "empty file"),
    ("2 4 3\n0 1:1\n1 2\n", 3, "'2' is not 'id:value'"),
    ("2 4 3\n0 1:1\n1 x:1\n", 3, "'x:1' is not 'id:value'"),
    ("2 4 3\n0 1:1\n1 1:abc\n", 3, "'1:abc' is not 'id:value'"),
    ("2 4 3\n0 1:1\n1 1:1 4:1\n", 3, "'4:1': id must lie in [0, 4)"),
    ("2 4 3\n0 1:1\n-1:1\n", 3, "'-1:1': id must lie in [0, 4)"),
    ("2 4 3\n0 1:1\n1 2:nan\n", 3, "value is not a finite number"),
    ("2 4 3\n0 1:1\n1 2:-inf\n", 3, "value is not a finite number"),
    ("2 4 3\n0 1:1\n3 1:1\n", 3, "label '3' is not an id in [0, 3)"),
    ("2 4 3\n0 1:1\nx 1:1\n", 3, "label 'x' is not an id"),
    ("2 4 3\n0 1:1\n\u00b2 1:1\n", 3, "is not an id"),     # '²'.isdigit() is True, int('²') fails
    ("2 4 3\n0 1:1\n0,,1 1:1\n", 3, "empty label name"),
]


@pytest.mark.parametrize("content,line,problem", XC_BAD)
def test_xc_malformed(tmp_path, content, line, problem):
    path = put(tmp_path / "bad_xc.txt", content)
    raises_at(path, line, problem, read_dataset, path, "xc")


@pytest.mark.parametrize("content,problem", [("3 4 3\n0 1:1\n1 2:1\n", "header says 3 documents, the file has 2"),
                                             ("1 4 3\n0 1:1\n1 2:1\n", "header says 1 documents, the file has 2")])
def test_xc_wrong_document_count(tmp_path, content, problem):
    path = put(tmp_path / "bad_xc.txt", content)
    raises_at(path, None, problem, read_dataset, path, "xc")


def test_npz_malformed(tmp_path):
    xpath = _save_npz(tmp_path / "X.tst.npz", np.eye(3))
    ypath = tmp_path / "Y.tst.npz"
    raises_at(ypath, None, "file not found", read_dataset, xpath)
    _save_npz(ypath, np.eye(2, 4))
    raises_at(ypath, None, "has 2 rows but X.tst.npz has 3", read_dataset, xpath)
    put(ypath, b"PK\x03\x04 this is not really a zip file")
    raises_at(ypath, None, "not a scipy sparse .npz file", read_dataset, xpath)
    np.savez(ypath, a=np.arange(3))                         # an npz, but not a sparse matrix
    raises_at(ypath, None, "not a scipy sparse .npz file", read_dataset, xpath)
    put(xpath, b"garbage")
    raises_at(xpath, None, "not a scipy sparse .npz file", read_dataset, xpath)
    _save_npz(xpath, sp.csr_matrix(np.array([[np.nan, 1.0]])))
    raises_at(xpath, None, "NaN or infinite", read_dataset, xpath)
    nox = _save_npz(tmp_path / "feats.npz", np.eye(2))
    raises_at(nox, None, "must contain 'X'", read_dataset, nox)


@pytest.mark.parametrize("gz", [False, True])
def test_invalid_utf8_names_the_exact_line(tmp_path, gz):
    # far beyond the decoder's first chunk, so the line must be found, not guessed
    lines = [f"lab\tdocument number {i}".encode() for i in range(1, 2001)]
    lines[1499] = b"lab\tbroken \xc3\x28 byte"
    path = put(tmp_path / "bad.tsv", b"\n".join(lines) + b"\n", gz)
    raises_at(path, 1500, "not valid UTF-8", read_dataset, path)
    raises_at(path, 1500, "not valid UTF-8", read_inputs, path)


def test_invalid_utf8_at_end_and_in_other_formats(tmp_path):
    path = put(tmp_path / "cut.tsv", b"a\tok\nb\tends inside a character \xe2\x82")
    raises_at(path, 2, "not valid UTF-8", read_dataset, path)
    path = put(tmp_path / "bad.jsonl", b'{"text": "ok", "labels": []}\n{"text": "\xff", "labels": []}\n')
    raises_at(path, 2, "not valid UTF-8", read_dataset, path)
    path = put(tmp_path / "bad_xc.txt", b"2 3 3\n0 1:1\n\xff 1:1\n")
    raises_at(path, 3, "not valid UTF-8", read_dataset, path, "xc")


def test_truncated_gzip_names_the_line_where_data_stops(tmp_path):
    data = gzip.compress("".join(f"lab\ttext number {i}\n" for i in range(3000)).encode(), mtime=0)
    cut = data[:len(data) // 2]
    complete = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(cut).count(b"\n")
    assert 0 < complete < 3000
    path = put(tmp_path / "cut.tsv.gz", cut)
    raises_at(path, complete + 1, "cannot read", read_dataset, path)
    # only the trailer missing: every line read, the error is after the last one
    path = put(tmp_path / "cut2.tsv.gz", gzip.compress(b"a\tx\nb\ty\n", mtime=0)[:-4])
    raises_at(path, 3, "cannot read", read_dataset, path, "tsv")


def test_missing_file_and_folder(tmp_path):
    missing = tmp_path / "nope.tsv"
    raises_at(missing, None, "file not found", read_dataset, missing)
    raises_at(missing, None, "file not found", read_dataset, missing, "tsv")
    raises_at(missing, None, "file not found", read_inputs, missing, "text")
    raises_at(missing, None, "file not found", read_label_file, missing)
    raises_at(tmp_path, None, "is a folder", read_dataset, tmp_path)
    raises_at(tmp_path, None, "is a folder", read_dataset, tmp_path, "xc")


# -- unknown labels against a model's vocabulary -----------------------------------------------------
@pytest.fixture
def eval_file(tmp_path):
    return put(tmp_path / "test.tsv", "p2\tone\np1,zz\ttwo\naa,p2\tthree\n")


def test_unknown_labels_error_names_the_line(eval_file):
    model = LabelVocab(["p2", "p1"])
    raises_at(eval_file, 2, "unknown label 'zz'", read_dataset, eval_file, labels=model)


def test_unknown_labels_ignore(eval_file):
    model = LabelVocab(["p2", "p1"])                      # model order is kept, not re-sorted
    ds = read_dataset(eval_file, labels=model, unknown_labels="ignore")
    assert ds.labels.names == ["p2", "p1"]
    assert dense(ds.Y).tolist() == [[1, 0], [0, 1], [1, 0]]


def test_unknown_labels_extend(eval_file):
    model = LabelVocab(["p2", "p1"], display=["two", "one"])
    ds = read_dataset(eval_file, labels=model, unknown_labels="extend")
    assert ds.labels.names == ["p2", "p1", "aa", "zz"]   # new columns after the model's, sorted
    assert dense(ds.Y).tolist() == [[1, 0, 0, 0], [0, 1, 0, 1], [1, 0, 1, 0]]
    assert [ds.labels.display_name(j) for j in range(4)] == ["two", "one", "aa", "zz"]
    assert model.names == ["p2", "p1"]                   # the model's vocabulary is not changed


def test_unknown_labels_bad_choice(eval_file, tmp_path):
    with pytest.raises(DataFormatError, match="unknown_labels must be one of"):
        read_dataset(eval_file, labels=LabelVocab(["p1"]), unknown_labels="drop")
    xpath = _save_npz(tmp_path / "X.npz", np.eye(2))
    _save_npz(tmp_path / "Y.npz", np.eye(2, 3))
    with pytest.raises(DataFormatError, match="unknown_labels must be one of"):
        read_dataset(xpath, labels=LabelVocab(["0"]), unknown_labels="drop")


def test_unknown_labels_npz(tmp_path):
    xpath = _save_npz(tmp_path / "X.npz", np.eye(3))
    _save_npz(tmp_path / "Y.npz", np.array([[1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 1]]))
    model = LabelVocab(["0", "1"])
    raises_at(tmp_path / "Y.npz", None, "has 4 label columns, the model has 2", read_dataset, xpath, labels=model)
    ds = read_dataset(xpath, labels=model, unknown_labels="ignore")
    assert ds.labels.names == ["0", "1"] and dense(ds.Y).tolist() == [[1, 0], [0, 0], [0, 1]]
    ds = read_dataset(xpath, labels=model, unknown_labels="extend")
    assert ds.labels.names == ["0", "1", "2", "3"]
    assert dense(ds.Y).tolist() == [[1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 1]]
    # fewer columns than the model: padded with empty columns
    ds = read_dataset(xpath, labels=LabelVocab([str(j) for j in range(6)]))
    assert ds.Y.shape == (3, 6) and dense(ds.Y)[:, :4].tolist() == [[1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 1]]


def test_label_matrix_in_memory():
    Y, vocab = label_matrix([["b", "a", "b"], [], ["c"]])
    assert vocab.names == ["a", "b", "c"]
    assert dense(Y).tolist() == [[1, 1, 0], [0, 0, 0], [0, 0, 1]] and Y.nnz == 3
    with pytest.raises(DataFormatError) as info:
        label_matrix([["a"], ["q"]], LabelVocab(["a"]))
    assert str(info.value) == "input line 2: unknown label 'q' (not among the model's 1 labels)"


# -- writers: round trips, atomicity ----------------------------------------------------------------
def _text_dataset() -> Dataset:
    Y, vocab = label_matrix([["p3", "p1"], [], ["p2"], ["p1"]])
    texts = ["first", "", "ünïcode \"quoted\" and\ttab", "last one"]
    return Dataset(texts, None, Y, vocab)


@pytest.mark.parametrize("name,fmt", [("out.tsv", "tsv"), ("out.txt.gz", "tsv"), ("out.jsonl", "jsonl"),
                                      ("out.jsonl.gz", "jsonl"), ("anything.dat", "jsonl")])
def test_round_trip_text_formats(tmp_path, name, fmt):
    ds = _text_dataset()
    path = tmp_path / name
    write_dataset(path, ds, fmt if name == "anything.dat" else None)
    assert guess_format(path) == fmt
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == name.endswith(".gz")
    back = read_dataset(path)
    assert back.texts == ds.texts
    assert back.labels.names == ds.labels.names
    assert dense(back.Y).tolist() == dense(ds.Y).tolist()
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]     # no temporary files left


def test_jsonl_round_trip_keeps_newlines_tsv_flattens_them(tmp_path):
    Y, vocab = label_matrix([["a"]])
    ds = Dataset(["two\nlines\r\nhere"], None, Y, vocab)
    write_dataset(tmp_path / "o.jsonl", ds)
    assert read_dataset(tmp_path / "o.jsonl").texts == ["two\nlines\r\nhere"]
    write_dataset(tmp_path / "o.tsv", ds)
    assert read_dataset(tmp_path / "o.tsv").texts == ["two lines  here"]


def _feature_dataset(names: list[str]) -> Dataset:
    """6 documents, 9 features; every label used; doc 4 has no features, doc 5 no labels."""
    rng = np.random.default_rng(7)
    dense_x = (rng.random((6, 9)) * 3.7).astype(np.float32)    # values that need all of float32's digits
    dense_x[rng.random((6, 9)) < 0.6] = 0
    dense_x[4] = 0
    dense_x[0, 0] = 1.0
    rows = [[0, 1], [1], [2, 0], [len(names) - 1], [0, len(names) - 1], []]
    dense_y = np.zeros((6, len(names)), dtype=np.float32)
    for i, row in enumerate(rows):
        dense_y[i, row] = 1
    return Dataset(None, sp.csr_matrix(dense_x), sp.csr_matrix(dense_y), LabelVocab(names))


def test_round_trip_xc(tmp_path):
    # columns whose names are ids out of numeric order: the file keeps the ids, not the columns
    ds = _feature_dataset(["0", "10", "2", "7"])
    for name in ("out_xc.txt", "out_xc.txt.gz"):
        path = tmp_path / name
        write_dataset(path, ds)
        assert guess_format(path) == "xc"
        header = gzip.open(path, "rt").readline() if name.endswith(".gz") else path.read_text().split("\n")[0]
        assert header.split() == ["6", "9", "11"]                        # labels are ids up to 10
        back = read_dataset(path)
        assert back.labels.names == [str(j) for j in range(11)]           # XC ids are the columns
        assert back.label_lists() == ds.label_lists()
        assert back.X.dtype == np.float32 and back.X.shape == ds.X.shape
        assert np.array_equal(dense(back.X), dense(ds.X))                  # exact, not 6 digits
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out_xc.txt", "out_xc.txt.gz"]


def test_xc_writer_rejects_label_names_that_are_not_ids(tmp_path):
    ds = _feature_dataset(["a", "b", "c"])
    out = tmp_path / "out_xc.txt"
    raises_at(out, None, "label 'a' cannot be written to XC", write_dataset, out, ds)
    assert list(tmp_path.iterdir()) == []


def test_round_trip_npz(tmp_path):
    ds = _feature_dataset(["0", "1", "2", "3"])
    path = tmp_path / "X.trn.npz"
    write_dataset(path, ds)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["X.trn.npz", "Y.trn.npz"]
    back = read_dataset(path)
    assert back.labels.names == ds.labels.names
    assert dense(back.Y).tolist() == dense(ds.Y).tolist()
    assert np.array_equal(dense(back.X), dense(ds.X))


def test_round_trip_real_xc_lines(tmp_path):
    src = DATA / "mulan-bibtex" / "train_xc.txt.gz"
    if not src.exists():
        pytest.skip(missing_reason())
    with gzip.open(src, "rt", encoding="utf-8") as fh:
        header = fh.readline().split()
        body = [fh.readline() for _ in range(30)]
    path = put(tmp_path / "bib_xc.txt", f"30 {header[1]} {header[2]}\n" + "".join(body))
    ds = read_dataset(path)
    write_dataset(tmp_path / "again_xc.txt", ds)
    back = read_dataset(tmp_path / "again_xc.txt")
    assert back.labels.names == ds.labels.names
    assert (back.Y != ds.Y).nnz == 0 and (back.X != ds.X).nnz == 0


def test_gzip_output_is_byte_identical(tmp_path):
    ds = _text_dataset()
    write_dataset(tmp_path / "a.tsv.gz", ds)
    write_dataset(tmp_path / "b.tsv.gz", ds)
    a, b = (tmp_path / "a.tsv.gz").read_bytes(), (tmp_path / "b.tsv.gz").read_bytes()
    assert a == b and b".tmp" not in a
    write_dataset(tmp_path / "a.tsv.gz", ds)
    assert (tmp_path / "a.tsv.gz").read_bytes() == a


@pytest.mark.parametrize("name", ["old.tsv", "old.tsv.gz"])
def test_failed_write_keeps_the_old_file(tmp_path, name):
    path = put(tmp_path / name, "old\tcontent\n", gz=name.endswith(".gz"))
    before = path.read_bytes()
    Y, vocab = label_matrix([["fine"], ["fine"], ["bad,label"]])
    ds = Dataset(["one", "two", "three"], None, Y, vocab)
    raises_at(path, 3, "label 'bad,label' cannot be written to TSV", write_dataset, path, ds)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_write_dataset_wrong_kind(tmp_path):
    text_ds, feat_ds = _text_dataset(), _feature_dataset(["0", "1", "2"])
    raises_at(tmp_path / "o.tsv", None, "features only", write_dataset, tmp_path / "o.tsv", feat_ds)
    raises_at(tmp_path / "o.jsonl", None, "features only", write_dataset, tmp_path / "o.jsonl", feat_ds)
    raises_at(tmp_path / "o_xc.txt", None, "texts only", write_dataset, tmp_path / "o_xc.txt", text_ds)
    raises_at(tmp_path / "X.npz", None, "texts only", write_dataset, tmp_path / "X.npz", text_ds)
    raises_at(tmp_path / "o.txt", None, "cannot write format 'text'", write_dataset, tmp_path / "o.txt",
              text_ds, "text")
    assert list(tmp_path.iterdir()) == []


# -- LabelVocab --------------------------------------------------------------------------------------
def test_label_vocab_basics():
    vocab = LabelVocab(["p3", "p4", "p5"], display=["light reading", "", "entertainment"])
    assert len(vocab) == 3 and vocab.index == {"p3": 0, "p4": 1, "p5": 2}
    assert [vocab.display_name(j) for j in range(3)] == ["light reading", "p4", "entertainment"]
    assert LabelVocab(["a"]).display_name(0) == "a"
    with pytest.raises(DataFormatError, match="label 'p4' appears twice"):
        LabelVocab(["p3", "p4", "p5", "p4"])
    with pytest.raises(DataFormatError, match="2 label display names for 3 labels"):
        LabelVocab(["a", "b", "c"], display=["x", "y"])
    with pytest.raises(DataFormatError, match="1 label texts for 2 labels"):
        LabelVocab(["a", "b"], texts=["x"])


def test_label_vocab_extended():
    vocab = LabelVocab(["b", "a"], display=["B", "A"], texts=["bee", "ay"])
    assert vocab.extended(["a", "b"]) is vocab
    ext = vocab.extended(["a", "z", "c"])
    assert ext.names == ["b", "a", "z", "c"] and ext.index["c"] == 3
    assert ext.display == ["B", "A", "", ""] and ext.texts == ["bee", "ay", "", ""]
    assert ext.display_name(2) == "z"
    assert vocab.names == ["b", "a"]
    assert LabelVocab(["x"]).extended(["y"]).display is None


def test_label_vocab_json_round_trip():
    for vocab in (LabelVocab(["p3", "p4"]), LabelVocab(["p3", "p4"], display=["x", ""], texts=["xt", "yt"])):
        obj = json.loads(json.dumps(vocab.to_json()))
        back = LabelVocab.from_json(obj)
        assert back == vocab and back.names == vocab.names
        assert back.display == vocab.display and back.texts == vocab.texts
    assert LabelVocab(["a"]) != LabelVocab(["a"], display=["A"])
    assert LabelVocab(["a", "b"]) != LabelVocab(["b", "a"])


@pytest.mark.parametrize("obj", [None, [], "names", {}, {"names": "ab"}, {"names": ["a", "a"]},
                                 {"names": [1, 2]}, {"names": [["x"]]},
                                 {"names": ["a"], "display": ["x", "y"]},
                                 {"names": ["a"], "display": 5},
                                 {"names": ["a", "b"], "display": "xy"},
                                 {"names": ["a"], "texts": [None]}])
def test_label_vocab_from_json_garbage(obj):
    with pytest.raises(ModelFormatError, match="label vocabulary"):
        LabelVocab.from_json(obj)


# -- label files -------------------------------------------------------------------------------------
YSO_HEADER = "#id\turi\tprefLabel\tlabel_text(pref+alt)\tn_docs"


def _yso_label_lines(n_plain: int = 3) -> list[str]:
    """The real header and first rows of yso-finna-en's label file, plus its first row whose label
    text differs from the preferred label (alternative labels appended)."""
    src = DATA / "yso-finna-en" / "labels.txt.gz"
    if not src.exists():
        pytest.skip(missing_reason())
    out: list[str] = []
    with gzip.open(src, "rt", encoding="utf-8") as fh:
        out.append(fh.readline().rstrip("\n"))
        for line in fh:
            parts = line.rstrip("\n").split("\t")
            if len(out) <= n_plain or parts[2] != parts[3]:
                out.append(line.rstrip("\n"))
            if len(out) > n_plain and parts[2] != parts[3]:
                break
    return out


def test_read_label_file_yso_header(tmp_path):
    lines = _yso_label_lines()
    assert lines[0] == YSO_HEADER
    path = put(tmp_path / "labels.txt.gz", "\n".join(lines) + "\n", gz=True)
    info = read_label_file(path)
    rows = [line.split("\t") for line in lines[1:]]
    assert len(info) == len(rows) >= 4
    for row in rows:
        assert info[row[0]] == (row[2], row[3])      # (prefLabel, label_text): not uri, not n_docs
    assert info["p3"] == ("light reading", "light reading")
    differing = rows[-1]
    assert differing[2] != differing[3] and differing[3].startswith(differing[2])
    vocab = LabelVocab(["p4", "p3", "p999999"]).with_label_file(path)
    assert vocab.display_name(1) == "light reading" and vocab.display_name(2) == "p999999"
    assert vocab.texts[1] == "light reading" and vocab.texts[2] == ""


def test_read_label_file_header_layout_details(tmp_path):
    path = put(tmp_path / "l.tsv", "# ID\tname\tcount\n\np1\tFirst\t3\n# a comment\np2\t\t4\n")
    assert read_label_file(path) == {"p1": ("First", "First"), "p2": ("", "")}   # no text column: the name
    path = put(tmp_path / "l2.tsv", "#uri\tid\ttext\nu1\tp1\tsome text\n")
    assert read_label_file(path) == {"p1": ("", "some text")}
    path = put(tmp_path / "short.tsv", YSO_HEADER + "\np3\turi\tname\ttext\t1\np4\turi\tname\n")
    raises_at(path, 3, "expected 5 tab-separated columns", read_label_file, path)


def test_read_label_file_reuters_layout(tmp_path):
    path = put(tmp_path / "labels.txt", "acq\t1650\t719\nalum\t35\t23\nmoney-fx\t538\t179\n")
    assert read_label_file(path) == {"acq": ("", ""), "alum": ("", ""), "money-fx": ("", "")}
    vocab = LabelVocab(["acq", "alum"]).with_label_file(path)
    assert [vocab.display_name(j) for j in range(2)] == ["acq", "alum"]     # numbers are not names
    path = put(tmp_path / "named.txt", "p1\tFirst name\t12\tfirst text\np2\t7\tSecond\n")
    assert read_label_file(path) == {"p1": ("First name", "first text"), "p2": ("Second", "Second")}
    path = put(tmp_path / "noid.txt", "p1\tx\n\tname\n")
    raises_at(path, 2, "empty label id", read_label_file, path)


def test_read_label_file_reuters_real_lines(tmp_path):
    src = DATA / "reuters21578-apte90" / "labels.txt.gz"
    if not src.exists():
        pytest.skip(missing_reason())
    with gzip.open(src, "rt", encoding="utf-8") as fh:
        lines = [fh.readline() for _ in range(3)]
    path = put(tmp_path / "labels.txt.gz", "".join(lines), gz=True)
    ids = [line.split("\t")[0] for line in lines]
    assert read_label_file(path) == {i: ("", "") for i in ids}


def test_read_label_file_mulan_one_column(tmp_path):
    path = put(tmp_path / "labels.txt", "TAG_2005\nTAG_2006\nTAG_apple\n", gz=True)
    assert read_label_file(path) == {"0": ("TAG_2005", "TAG_2005"), "1": ("TAG_2006", "TAG_2006"),
                                     "2": ("TAG_apple", "TAG_apple")}
    vocab = LabelVocab(["0", "2"]).with_label_file(path)
    assert [vocab.display_name(j) for j in range(2)] == ["TAG_2005", "TAG_apple"]
    raises_at(path, None, "lists 3 label names in id order, but the data uses label id 3",
              read_label_file, path, ["0", "3"])


def test_read_label_file_bad_bytes(tmp_path):
    path = put(tmp_path / "labels.txt", b"p1\tgood\np2\tbad \xff name\n")
    raises_at(path, 2, "not valid UTF-8", read_label_file, path)
    path = put(tmp_path / "cut.txt.gz", gzip.compress(b"p1\tgood\np2\tok\n", mtime=0)[:-4])
    raises_at(path, 3, "cannot read", read_label_file, path)


# -- the bundled sample ------------------------------------------------------------------------------
def test_sample_files():
    for part in ("train", "test", "labels"):
        path = sample_path(part)
        assert path.is_file() and path.read_bytes()[:2] == b"\x1f\x8b"
    with pytest.raises(ValueError, match="sample part must be one of"):
        sample_path("valid")


def test_sample_reads_with_display_names():
    train = read_dataset(sample_path("train"), label_file=sample_path("labels"))
    assert len(train) == 37466 and len(train.labels) == 1000
    assert train.labels.names == sorted(train.labels.names)
    assert all(train.labels.display) and all(train.labels.texts)
    assert all(train.labels.display_name(j) != name for j, name in enumerate(train.labels.names))
    assert min(np.diff(train.Y.indptr)) >= 1 and train.Y.getnnz(axis=0).min() >= 1
    test = read_dataset(sample_path("test"), labels=train.labels)
    assert len(test) == 4000 and test.labels is train.labels


# -- label URIs (kept for Annif's API in xmtc serve) -------------------------------------------------
def test_label_vocab_keeps_uris_from_the_label_file(tmp_path):
    from xmtc.data.labels import read_label_uris

    lines = _yso_label_lines()
    path = put(tmp_path / "labels.txt.gz", "\n".join(lines) + "\n", gz=True)
    rows = [line.split("\t") for line in lines[1:]]
    assert read_label_uris(path) == {row[0]: row[1] for row in rows}
    vocab = LabelVocab(["p4", "p3", "p999999"]).with_label_file(path)
    assert vocab.uris == ["http://www.yso.fi/onto/yso/p4", "http://www.yso.fi/onto/yso/p3", ""]
    assert vocab.uri(1) == "http://www.yso.fi/onto/yso/p3" and vocab.uri(2) == "p999999"   # no URI: the id
    back = LabelVocab.from_json(json.loads(json.dumps(vocab.to_json())))
    assert back == vocab and back.uris == vocab.uris
    assert vocab.extended(["z"]).uris == vocab.uris + [""]
    with pytest.raises(DataFormatError, match="2 label URIs for 3 labels"):
        LabelVocab(["a", "b", "c"], uris=["x", "y"])
    with pytest.raises(ModelFormatError, match="'uris' must be a list of strings"):
        LabelVocab.from_json({"names": ["a"], "uris": [3]})


def test_label_files_without_a_uri_column_give_no_uris(tmp_path):
    from xmtc.data.labels import read_label_uris

    reuters = put(tmp_path / "labels.txt", "acq\t1650\t719\nalum\t35\t23\n")
    named = put(tmp_path / "l.tsv", "# ID\tname\tcount\np1\tFirst\t3\n")
    for path in (reuters, named):
        assert read_label_uris(path) == {}
        vocab = LabelVocab(["acq", "p1"]).with_label_file(path)
        assert vocab.uris is None and vocab.uri(0) == "acq" and "uris" not in vocab.to_json()
    short = put(tmp_path / "short.tsv", "#id\tname\turi\np1\tFirst\n")
    raises_at(short, 2, "expected 3 tab-separated columns", read_label_uris, short)


@pytest.mark.parametrize("name,content", [
    ("train.tsv", "p1,p2\ttrains and boats\np1\ttrains\n"),
    ("train.jsonl", '{"text": "trains and boats", "labels": ["p1", "p2"]}\n{"text": "trains", "labels": ["p1"]}\n'),
    ("train.txt", "2 3 2\n0,1 0:1.0 2:0.5\n0 1:1.0\n"),       # Extreme Classification bag of words
    ("train", "p1,p2\ttrains and boats\np1\ttrains\n"),       # no extension: the format is guessed
])
def test_a_training_file_saved_with_a_utf8_bom_reads_as_without_it(tmp_path, name, content):
    (tmp_path / "plain").mkdir(), (tmp_path / "bom").mkdir()
    plain = put(tmp_path / "plain" / name, content)
    bom = put(tmp_path / "bom" / name, b"\xef\xbb\xbf" + content.encode("utf-8"))
    a, b = read_dataset(plain), read_dataset(bom)
    assert b.labels.names == a.labels.names and "\ufeff" not in "".join(b.labels.names)
    assert b.texts == a.texts and (b.Y != a.Y).nnz == 0
    assert (a.X is None and b.X is None) or (a.X != b.X).nnz == 0
