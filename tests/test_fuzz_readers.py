"""Property-based tests of every reader: random and mutated input loads correctly or stops with one line.

Each text reader is checked against a small reference parser written here from the format's rules
(the module doc of :mod:`xmtc.data.formats`): on any byte string, mutated or not, the reader must
either return exactly what the reference reads, or fail with :class:`DataFormatError` on the line
where the reference fails, with a one-line message ``PATH:LINE: problem``. Anything else (another
exception, a wrong line, a different result) is a bug.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from xmtc.config import build_config, load_json_config
from xmtc.data import read_dataset, read_inputs, read_label_file
from xmtc.errors import ConfigError, DataFormatError
from xmtc.models import XRLinearConfig

from scratch import scratch_dir

# XMTC_FUZZ_EXAMPLES=2000 runs the same properties longer
FUZZ = settings(max_examples=int(os.environ.get("XMTC_FUZZ_EXAMPLES", "40")), deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- inputs: documents, their serialisations, and mutations ----------------------------------------
label = st.text(alphabet="abcxyz019_-: é", min_size=1, max_size=6).map(str.strip).filter(bool)
text = st.text(alphabet=st.sampled_from(list("ab c\t\"{}:,é\u2028\x00\\") + ["\r", "\n", "漢"]), max_size=20)
docs = st.lists(st.tuples(st.lists(label, max_size=3), text), min_size=0, max_size=6)


@st.composite
def mutated(draw, data: bytes) -> bytes:
    """``data`` with one to three edits of the kinds that break real files."""
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["truncate", "insert", "delete", "nul", "bad-utf8", "dup-line",
                                     "huge-line", "crlf", "blank-line", "flip"]))
        pos = draw(st.integers(0, len(data)))
        if kind == "truncate":
            data = data[:pos]
        elif kind == "insert":
            data = data[:pos] + draw(st.binary(min_size=1, max_size=4)) + data[pos:]
        elif kind == "delete":
            data = data[:pos] + data[pos + 1:]
        elif kind == "nul":
            data = data[:pos] + b"\x00" + data[pos:]
        elif kind == "bad-utf8":
            data = data[:pos] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xe2\x82", b"\xed\xa0\x80"])) + data[pos:]
        elif kind == "dup-line":
            lines = data.split(b"\n")
            i = draw(st.integers(0, len(lines) - 1))
            data = b"\n".join(lines[:i + 1] + lines[i:])
        elif kind == "huge-line":
            data = data[:pos] + b"w" * 100_000 + data[pos:]
        elif kind == "crlf":
            data = data.replace(b"\n", b"\r\n")
        elif kind == "blank-line":
            data = data[:pos] + b"\n\n" + data[pos:]
        elif kind == "flip" and data:
            i = min(pos, len(data) - 1)
            data = data[:i] + bytes([data[i] ^ (1 << draw(st.integers(0, 7)))]) + data[i + 1:]
    return data


def _write(data: bytes, name: str, gz: bool) -> Path:
    folder = scratch_dir("xmtc-fuzz-")
    path = folder / name
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


def _lines(data: bytes):
    """(line number, text) as the readers split them, or ("error", line) at the first bad UTF-8 line."""
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    for i, raw in enumerate(parts, 1):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            yield i, raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _RefError(i) from None


class _RefError(Exception):
    def __init__(self, line):
        self.line = line


def _labels(field: str, line: int) -> list[str]:
    if not field.strip():
        return []
    names = [n.strip() for n in field.split(",")]
    if any(not n for n in names):
        raise _RefError(line)
    return list(dict.fromkeys(names))


def ref_tsv(data: bytes):
    out = []
    for i, line in _lines(data):
        if "\t" not in line:
            raise _RefError(i)
        head, _, body = line.partition("\t")
        out.append((_labels(head, i), body))
    return out


def ref_jsonl(data: bytes):
    out = []
    for i, line in _lines(data):
        try:
            obj = json.loads(line)
        except ValueError:
            raise _RefError(i) from None
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str) \
                or not isinstance(obj.get("labels"), list) or not all(isinstance(x, str) for x in obj["labels"]):
            raise _RefError(i)
        names = [x.strip() for x in obj["labels"]]
        if any(not x for x in names):
            raise _RefError(i)
        out.append((list(dict.fromkeys(names)), obj["text"]))
    return out


def check_error(exc: DataFormatError, path: Path, line: int | None = None) -> None:
    """The one-line ``PATH[:LINE]: problem`` shape, naming the expected line when one is known."""
    msg = str(exc)
    assert "\n" not in msg and "\r" not in msg, msg
    assert msg.startswith(f"{path}:"), msg
    assert exc.problem, msg
    if line is not None:
        assert exc.line == line, (msg, line)


def check_text_reader(data: bytes, name: str, ref, gz: bool) -> None:
    assume(gz or not data.startswith(b"\x1f\x8b"))  # gzip magic: a (broken) gzip stream, not text
    path = _write(data, name, gz)
    try:
        expected = ref(data)
    except _RefError as e:
        with pytest.raises(DataFormatError) as info:
            read_dataset(path)
        check_error(info.value, path, e.line)
        return
    try:
        ds = read_dataset(path)
    except DataFormatError as exc:
        # the reference accepts it: the reader may only refuse what it documents, with the line
        assert not expected or "no labels" in str(exc), str(exc)
        check_error(exc, path)
        return
    assert ds.texts == [t for _, t in expected]
    assert ds.label_lists() == [sorted(ls, key=ds.labels.index.get) for ls, _ in expected]
    assert sorted(ds.labels.names) == sorted({n for ls, _ in expected for n in ls})


def tsv_bytes(documents) -> bytes:
    return "".join(",".join(ls) + "\t" + t.replace("\n", " ").replace("\r", " ") + "\n"
                   for ls, t in documents).encode("utf-8", "surrogatepass")


def jsonl_bytes(documents) -> bytes:
    return "".join(json.dumps({"text": t, "labels": ls}, ensure_ascii=False) + "\n"
                   for ls, t in documents).encode("utf-8", "surrogatepass")


@FUZZ
@given(st.data(), docs, st.booleans())
def test_tsv_reader_matches_reference_or_names_the_line(data, documents, gz):
    raw = data.draw(mutated(tsv_bytes(documents)))
    assume(not raw.lstrip(b" \r\n").startswith(b"{"))  # content guessing would rightly say JSONL
    check_text_reader(raw, data.draw(st.sampled_from(["d.tsv", "d.txt"])), ref_tsv, gz)


@FUZZ
@given(st.data(), docs, st.booleans())
def test_jsonl_reader_matches_reference_or_names_the_line(data, documents, gz):
    raw = data.draw(mutated(jsonl_bytes(documents)))
    check_text_reader(raw, "d.jsonl", ref_jsonl, gz)


@FUZZ
@given(st.data(), docs)
def test_unmutated_files_load_exactly(data, documents):
    documents = [(ls, t.replace("\n", " ").replace("\r", " ")) for ls, t in documents]
    for name, raw in (("d.tsv", tsv_bytes(documents)), ("d.jsonl", jsonl_bytes(documents))):
        if not documents:
            continue
        ds = read_dataset(_write(raw, name, False))
        assert ds.texts == [t for _, t in documents]
        assert [set(x) for x in ds.label_lists()] == [set(ls) for ls, _ in documents]


# -- XC: header, ids, values --------------------------------------------------------------------------
number = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32).map(repr),
                   st.sampled_from(["nan", "inf", "-inf", "1e999", "0x10", "", "1.5.2"]))
fid = st.one_of(st.integers(0, 6), st.sampled_from([-1, 7, 2**31, 2**63, 10**30]))
lid = st.one_of(st.integers(0, 4), st.sampled_from([-1, 5, 2**31, 2**64, 10**30]))
xc_row = st.tuples(st.lists(lid, max_size=3), st.lists(st.tuples(fid, number), max_size=4))


def ref_xc(data: bytes):
    lines = _lines(data)
    first = next(lines, None)
    if first is None:
        raise _RefError(1)
    parts = first[1].split()
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts):
        raise _RefError(1)
    n_docs, n_feat, n_labels = map(int, parts)
    if n_docs >= 2**31 or n_feat >= 2**31 or n_labels > 50_000_000:  # the documented limits
        raise _RefError(1)
    rows = []
    for i, line in lines:
        tokens = line.split()
        labs = []
        if tokens and ":" not in tokens[0]:
            labs = _labels(tokens[0], i)
            if any(not (x.isascii() and x.isdigit()) or int(x) >= n_labels for x in labs):
                raise _RefError(i)
            tokens = tokens[1:]
        feats = {}
        for tok in tokens:
            f, sep, v = tok.partition(":")
            try:
                j, val = int(f), float(v)
            except ValueError:
                raise _RefError(i) from None
            if not sep or not 0 <= j < n_feat or not math.isfinite(val):
                raise _RefError(i)
            feats[j] = feats.get(j, 0.0) + float(np.float32(val))
        rows.append((labs, feats))
    if len(rows) != n_docs:
        raise _RefError(None)
    return n_feat, n_labels, rows


@FUZZ
@given(st.data(), st.lists(xc_row, max_size=5), st.sampled_from(["ok", "count", "junk", "features", "labels"]))
def test_xc_reader_matches_reference_or_names_the_line(data, rows, header):
    body = "".join(",".join(map(str, ls)) + " " + " ".join(f"{j}:{v}" for j, v in fs) + "\n" for ls, fs in rows)
    head = {"ok": f"{len(rows)} 7 5", "count": f"{len(rows) + 1} 7 5", "junk": "7 5",
            "features": f"{len(rows)} {2**31} 5", "labels": f"{len(rows)} 7 {10**20}"}[header]
    raw = data.draw(mutated((head + "\n" + body).encode()))
    path = _write(raw, "d_xc.txt", False)
    try:
        n_feat, n_labels, expected = ref_xc(raw)
    except _RefError as e:
        with pytest.raises(DataFormatError) as info:
            read_dataset(path, "xc")
        check_error(info.value, path, e.line)
        return
    ds = read_dataset(path, "xc")
    assert ds.X.shape == (len(expected), n_feat) and ds.Y.shape == (len(expected), n_labels)
    for i, (labs, feats) in enumerate(expected):
        assert sorted(ds.Y[i].indices.tolist()) == sorted(int(x) for x in labs)
        row = ds.X[i]
        got = dict(zip(row.indices.tolist(), row.data.tolist()))
        assert set(got) == {j for j, v in feats.items() if v != 0 or j in got}
        for j, v in got.items():
            assert v == pytest.approx(feats[j], rel=1e-5, abs=1e-30)


# -- npz: shapes, values, broken zips --------------------------------------------------------------
def _npz_bytes(M) -> bytes:
    buf = io.BytesIO()
    sp.save_npz(buf, M)
    return buf.getvalue()


@FUZZ
@given(st.data(), st.integers(0, 5), st.integers(0, 5), st.integers(1, 4),
       st.sampled_from(["ok", "nan", "inf", "rows", "bytes", "truncate", "dense", "indices", "wide"]))
def test_npz_reader_loads_what_was_written_or_names_the_file(data, n, m, labels, how):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    X = sp.random(n, max(m, 1), density=0.5, format="csr", dtype=np.float32, random_state=rng)
    Y = sp.random(n, labels, density=0.5, format="csr", random_state=rng)
    Y.data[:] = 1
    folder = scratch_dir("xmtc-fuzz-")
    xp, yp = folder / "X.trn.npz", folder / "Y.trn.npz"
    xb, yb = _npz_bytes(X), _npz_bytes(Y)
    bad = xp
    if how in ("nan", "inf") and X.nnz:
        X2 = X.copy()
        X2.data[data.draw(st.integers(0, X.nnz - 1))] = np.nan if how == "nan" else -np.inf
        xb = _npz_bytes(X2)
    elif how == "rows":
        yb, bad = _npz_bytes(sp.random(n + 1, labels, density=0.5, format="csr")), yp
    elif how == "bytes":
        yb, bad = data.draw(mutated(yb)), yp
    elif how == "truncate":
        xb = xb[:data.draw(st.integers(0, len(xb)))]
    elif how == "dense":
        buf = io.BytesIO()
        np.savez(buf, a=np.arange(3))
        xb = buf.getvalue()
    elif how == "indices" and X.nnz:
        np.savez(buf := io.BytesIO(), format=np.array("csr"), shape=np.array(X.shape), data=X.data,
                 indices=X.indices + 100, indptr=X.indptr)
        xb = buf.getvalue()
    elif how == "wide":  # a header of 10**12 label columns and no data: refused, not allocated
        yb, bad = _npz_bytes(sp.csr_matrix((n, 10**12), dtype=np.float32)), yp
    xp.write_bytes(xb)
    yp.write_bytes(yb)
    try:
        ds = read_dataset(xp)
    except DataFormatError as exc:
        check_error(exc, bad)
        return
    assert (xb, yb) == (_npz_bytes(X), _npz_bytes(Y)) or how == "bytes", "a broken file loaded"
    assert (ds.X != X).nnz == 0
    assert (ds.Y != (Y != 0).astype(np.float32)).nnz == 0


# -- label files -------------------------------------------------------------------------------------
@FUZZ
@given(st.data(), st.lists(st.tuples(label, text.map(lambda t: t.replace("\n", " ").replace("\r", " "))),
                           max_size=5), st.booleans())
def test_label_file_reads_or_names_the_line(data, entries, header):
    lines = (["#id\tprefLabel\tlabel_text"] if header else []) + [f"{i}\t{n}\t{n} alt" for i, n in entries]
    raw = data.draw(mutated(("\n".join(lines) + "\n").encode()))
    path = _write(raw, "labels.txt", data.draw(st.booleans()))
    try:
        info = read_label_file(path)
    except DataFormatError as exc:
        check_error(exc, path)
        return
    assert all(isinstance(k, str) and isinstance(v, tuple) and len(v) == 2 for k, v in info.items())
    if raw == ("\n".join(lines) + "\n").encode() and entries and header:
        for i, n in entries:
            if i.strip() and n.strip() and "\t" not in n:
                assert info[i.strip()][0] in (n.strip(), info[i.strip()][0])


# -- config JSON ----------------------------------------------------------------------------------------
json_value = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=5),
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                      max_size=3), max_leaves=6)
config_keys = st.sampled_from(["beam_size", "n_trees", "cost", "threshold", "max_leaf_size", "seed", "typo_key"])


@FUZZ
@given(st.data(), st.dictionaries(config_keys, json_value, max_size=3))
def test_config_json_builds_or_names_the_file(data, obj):
    raw = data.draw(mutated(json.dumps(obj, allow_nan=True).encode()))
    path = _write(raw, "cfg.json", False)
    try:
        values = load_json_config(path)
        cfg = build_config(XRLinearConfig, values, source=str(path))
    except ConfigError as exc:
        msg = str(exc)
        assert "\n" not in msg and msg.startswith(f"{path}"), msg
        return
    for key, value in values.items():  # what loaded is what the file said (after documented coercion)
        got = getattr(cfg, key)
        assert got == value or (isinstance(value, str) and str(got).lower() == value.strip().lower()) \
            or (isinstance(value, str) and got == type(got)(value)), (key, value, got)


def test_predict_inputs_from_mutated_text_never_crash():
    """Plain text (prediction input) accepts any valid UTF-8 line; the rest is a line-numbered error."""
    path = _write(b"one\n\xff two\n", "in.txt", False)
    with pytest.raises(DataFormatError) as info:
        read_inputs(path)
    check_error(info.value, path, 2)
    path = _write(b"a\x00b\n\nc" + b"x" * 300_000, "in2.txt", False)
    assert read_inputs(path) == ["a\x00b", "", "c" + "x" * 300_000]
