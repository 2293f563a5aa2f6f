"""Pipes as Unix users expect: ``-`` is stdin/stdout, a pipe or FIFO is read once and in full.

Every case runs the real command in a subprocess with a real pipe, and compares what comes out
with the same command reading the same bytes from a regular file (the route that always worked).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import scipy.sparse as sp

from xmtc.data.io import Source, guess_format
from xmtc.errors import DataFormatError

ROOT = Path(__file__).resolve().parents[1]


def xmtc(*args, stdin: bytes | None = None, cwd=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "xmtc.cli", *map(str, args)], input=stdin, capture_output=True,
                          env=env, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def setup(shared_data, tmp_path_factory):
    src = shared_data / "reuters21578-apte90"
    if not src.exists():
        pytest.skip("shared data not available")
    root = tmp_path_factory.mktemp("pipes")
    train = gzip.open(src / "train.txt.gz", "rt", encoding="utf-8").read().splitlines()[:200]
    test = gzip.open(src / "test.txt.gz", "rt", encoding="utf-8").read().splitlines()[:30]
    (root / "train.tsv").write_text("\n".join(train) + "\n", encoding="utf-8")
    (root / "test.tsv").write_text("\n".join(test) + "\n", encoding="utf-8")
    (root / "texts.txt").write_text("".join(t.split("\t", 1)[1] + "\n" for t in test), encoding="utf-8")
    out = xmtc("train", root / "train.tsv", "-o", root / "M", "-q")
    assert out.returncode == 0, out.stderr
    for name in ("texts.txt", "test.tsv"):  # the file route, once: what every pipe must reproduce
        ref = xmtc("predict", root / "M", root / name, "-q")
        assert ref.returncode == 0 and len(ref.stdout.splitlines()) == 30
        (root / f"{name}.ref").write_bytes(ref.stdout)
    return root


def _ref(root: Path, name: str) -> bytes:
    return (root / f"{name}.ref").read_bytes()


def test_echo_into_dev_stdin_predicts(setup):
    """The bug of the issue: this printed nothing and exited 0."""
    first = (setup / "texts.txt").read_bytes().split(b"\n")[0] + b"\n"
    out = xmtc("predict", setup / "M", "/dev/stdin", "-q", stdin=first)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == _ref(setup, "texts.txt").splitlines()[:1]


@pytest.mark.parametrize("name,gz", [("texts.txt", False), ("test.tsv", True)], ids=["text", "tsv-gzip"])
def test_dash_reads_stdin_like_the_file(setup, name, gz):
    data = (setup / name).read_bytes()
    out = xmtc("predict", setup / "M", "-", "-q", stdin=gzip.compress(data, mtime=0) if gz else data)
    assert out.returncode == 0, out.stderr
    assert out.stdout == _ref(setup, name)


def test_evaluate_and_train_from_stdin(setup, tmp_path):
    out = xmtc("evaluate", setup / "M", "-", "--json", "-q", stdin=(setup / "test.tsv").read_bytes())
    ref = xmtc("evaluate", setup / "M", setup / "test.tsv", "--json", "-q")
    assert out.returncode == 0 and out.stdout == ref.stdout and "P@1" in json.loads(out.stdout)
    out = xmtc("train", "-", "-o", tmp_path / "M2", "-q", stdin=(setup / "train.tsv").read_bytes())
    assert out.returncode == 0, out.stderr
    for name in ("tree-0.safetensors", "labels.json", "featurizer.safetensors"):
        assert (tmp_path / "M2" / name).read_bytes() == (setup / "M" / name).read_bytes()


def test_dash_output_is_stdout_not_a_file(setup, tmp_path):
    out = xmtc("predict", setup / "M", setup / "texts.txt", "-o", "-", "-q", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout == _ref(setup, "texts.txt")
    assert not (tmp_path / "-").exists()
    out = xmtc("predict", setup / "M", setup / "texts.txt", "-o", tmp_path / "p.jsonl", "-q")
    assert (tmp_path / "p.jsonl").read_bytes() == _ref(setup, "texts.txt") and out.stdout == b""


def test_fifo_is_read_once_in_full(setup, tmp_path):
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    data = (setup / "test.tsv").read_bytes()

    def feed():
        with open(fifo, "wb") as fh:  # blocks until the reader opens it; a second open would hang
            fh.write(data)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    out = xmtc("predict", setup / "M", fifo, "-q")
    writer.join(5)
    assert out.returncode == 0, out.stderr
    assert out.stdout == _ref(setup, "test.tsv")


def test_bad_input_on_stdin_is_one_line(setup):
    out = xmtc("predict", setup / "M", "-", "-q", stdin=b"fine\nbroken \xff byte\n")
    assert out.returncode == 2
    assert out.stderr.decode() == "xmtc: error: <stdin>:2: not valid UTF-8 (invalid start byte)\n"
    out = xmtc("evaluate", setup / "M", "-", "-q", stdin=b"a\tb\nno tab here\n")
    assert out.returncode == 2 and out.stderr.decode().startswith("xmtc: error: <stdin>:2: no tab found")


def test_reader_closing_the_pipe_is_not_an_error(setup):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    many = setup / "many.txt"
    many.write_text("oil and wheat\n" * 20000)
    cmd = f"{sys.executable} -m xmtc.cli predict {setup / 'M'} {many} -q | head -n 1"
    out = subprocess.run(["bash", "-c", "set -o pipefail; " + cmd], capture_output=True, env=env, timeout=300)
    assert out.stdout.count(b"\n") == 1 and b"Traceback" not in out.stderr


# -- in process: the format is guessed from lines read ahead, which are then read, not lost --------------
def test_guess_from_a_pipe_keeps_the_lines(tmp_path):
    r, w = os.pipe()
    os.write(w, b"p1\tfirst\np2\tsecond\n")
    os.close(w)
    with open(r, "rb") as fh, Source(f"/dev/fd/{fh.fileno()}") as src:
        assert src.stream
        assert guess_format(src) == "tsv"
        assert list(src) == [(1, "p1\tfirst"), (2, "p2\tsecond")]


def test_npz_from_a_pipe(tmp_path):
    X = sp.csr_matrix([[0, 1.5], [2, 0]], dtype="float32")
    buf = io.BytesIO()
    sp.save_npz(buf, X)
    r, w = os.pipe()
    threading.Thread(target=lambda: (os.write(w, buf.getvalue()), os.close(w)), daemon=True).start()
    from xmtc.data import read_inputs
    with open(r, "rb") as fh:
        got = read_inputs(f"/dev/fd/{fh.fileno()}")
    assert (got != X).nnz == 0
    from xmtc.data import read_dataset
    r, w = os.pipe()
    os.close(w)
    with open(r, "rb") as fh, pytest.raises(DataFormatError, match="carries no labels"):
        read_dataset(f"/dev/fd/{fh.fileno()}", "npz")
