"""What a new user hits first, each replayed: the command lines of issue 34's list of rough edges.

The model is XR-Linear on a slice of the bundled yso-finna-en sample, calibrated as `xmtc train` does,
so these tests run on a fresh clone without the shared data.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys

import pytest

import xmtc
from xmtc.cli import main
from xmtc.data import sample_path

N_TRAIN = 1500


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("edges")
    with gzip.open(sample_path("train"), "rt", encoding="utf-8") as fh:
        lines = fh.readlines()
    (d / "train.txt").write_text("".join(lines[::len(lines) // N_TRAIN][:N_TRAIN]), encoding="utf-8")
    with gzip.open(sample_path("test"), "rt", encoding="utf-8") as fh:
        (d / "test.txt").write_text("".join(fh.readlines()[:300]), encoding="utf-8")
    (d / "texts.txt").write_text("a history of finland\n\n日本の歴史\nbirds of lapland\n", encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def model_dir(files):
    out = files / "model"
    assert main(["train", str(files / "train.txt"), "-o", str(out), "--label-file", str(sample_path("labels")),
                 "--max-leaf-size", "16", "-q"]) == 0
    return out


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("xmtc: error: ")
    return err


def test_evaluate_k_zero_is_a_one_line_error(model_dir, files, capsys):
    assert main(["evaluate", str(model_dir), str(files / "test.txt"), "-k", "0", "-q"]) == 2
    assert "k must be a positive integer, got 0" in one_line_error(capsys)
    assert main(["ensemble", str(model_dir), "--input", str(files / "test.txt"), "--evaluate", "-k", "0", "-q"]) == 2
    assert "k must be a positive integer" in one_line_error(capsys)


@pytest.mark.parametrize("threshold", ["2", "-0.5", "nan"])
def test_threshold_of_calibrated_scores_is_a_probability(model_dir, files, threshold, capsys):
    assert main(["predict", str(model_dir), str(files / "texts.txt"), "--threshold", threshold, "-q"]) == 2
    assert "threshold must be" in one_line_error(capsys)
    assert main(["evaluate", str(model_dir), str(files / "test.txt"), "--threshold", threshold, "-q"]) == 2
    one_line_error(capsys)


def test_raw_scores_take_any_finite_threshold(model_dir, files, capsys):
    assert main(["predict", str(model_dir), str(files / "texts.txt"), "--threshold", "0.5", "-q"]) == 0
    assert main(["predict", str(model_dir), str(files / "texts.txt"), "--raw-scores", "--threshold", "2", "-q"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 8 and all(row["labels"] == [] for row in rows[4:])


@pytest.mark.parametrize("level", ["info", "Debug", "warning", "error"])
def test_log_level_in_any_case(model_dir, level, capsys):
    assert main(["info", str(model_dir), "--log-level", level]) == 0


def test_labels_find_without_a_match_says_so(model_dir, capsys):
    assert main(["labels", "find", str(model_dir), "blockchain"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "no label matches 'blockchain'" in err


def test_info_labels_line_reads_as_a_sentence(model_dir, capsys):
    assert main(["info", str(model_dir)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("labels:"))
    assert re.fullmatch(r"labels: [\d,]+ \([\d,]+ with training documents; with display names\)", line), line


def test_unreadable_text_gets_no_labels_everywhere(model_dir, files, capsys):
    """An empty line and a Japanese title: no labels and the warning from the CLI, none from Python, as the REST
    API (which drops zero scores) answers."""
    assert main(["predict", str(model_dir), str(files / "texts.txt"), "-q"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [len(r["labels"]) for r in rows] == [5, 0, 0, 5]
    assert all(r["known_words"] == 0 and "no suggestion" in r["warning"] for r in rows[1:3])
    model = xmtc.load(model_dir)
    assert [len(p) for p in model.predict(["a history of finland", "", "   ", "日本の歴史"])] == [5, 0, 0, 0]
    assert main(["ensemble", str(model_dir), str(model_dir), "--input", str(files / "texts.txt"), "-q"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [len(r["labels"]) for r in rows] == [5, 0, 0, 5]


def test_rest_api_agrees_on_unreadable_text(model_dir):
    pytest.importorskip("fastapi", reason="the serve extra (fastapi) is not installed")
    from fastapi.testclient import TestClient

    from xmtc.serve.app import create_app

    with TestClient(create_app({"yso": str(model_dir)})) as client:
        for text in ("日本の歴史", "..."):
            answer = client.post("/v1/projects/yso/suggest", data={"text": text, "limit": 5}).json()
            assert answer["results"] == [] and "no suggestion" in answer["warning"]


def _train_few(files, tmp_path, stderr):
    few = tmp_path / "few.txt"
    few.write_text("".join((files / "train.txt").read_text(encoding="utf-8").splitlines(True)[:400]), encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "xmtc", "train", str(few), "-o", str(tmp_path / "m"),
                           "--log-level", "INFO", "--max-leaf-size", "16", "--valid-size", "0"],
                          stdout=subprocess.DEVNULL, stderr=stderr, timeout=300)


def test_log_lines_do_not_run_into_progress_bars(files, tmp_path):
    """`xmtc train --log-level INFO` on a terminal, bars on: every log line starts a line of its own on stderr."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a bar needs columns to draw in
    try:
        proc = _train_few(files, tmp_path, follower)
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal's other end is closed: all of it read
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
    stderr = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0, stderr
    assert "linear levels" in stderr  # bars were drawn
    stamp = re.compile(r"\d\d:\d\d:\d\d xmtc")
    logged = 0
    for segment in re.split(r"[\r\n]", stderr):
        for match in stamp.finditer(segment):
            assert match.start() == 0, f"a log line inside a bar's line: {segment!r}"
            logged += 1
    assert logged >= 5


def test_a_log_file_gets_log_lines_and_no_bars(files, tmp_path):
    """stderr to a file (a pipe, a CI log): the command draws no bar, whose redraws would fill it with carriage
    returns; the log lines are all there."""
    log_file = tmp_path / "train.log"
    with open(log_file, "wb") as fh:
        assert _train_few(files, tmp_path, fh).returncode == 0
    text = log_file.read_text(encoding="utf-8")
    assert "\r" not in text and "linear levels" not in text
    assert "saved xr-linear model" in text and text.count("\n") >= 5


def test_train_on_a_handful_of_documents_says_the_scores_are_raw(files, tmp_path, capsys):
    few = tmp_path / "few.txt"
    few.write_text("".join((files / "train.txt").read_text(encoding="utf-8").splitlines(True)[:60]), encoding="utf-8")
    assert main(["train", str(few), "-o", str(tmp_path / "m"), "-q"]) == 0
    err = capsys.readouterr().err
    assert "raw, not calibrated" in err and "60 training documents are fewer than the 200" in err
    assert main(["train", str(files / "train.txt"), "-o", str(tmp_path / "m2"), "-q", "--max-leaf-size", "16"]) == 0
    assert "raw, not calibrated" not in capsys.readouterr().err


def test_a_missing_analyzer_library_is_named_without_blaming_the_data(files, tmp_path, monkeypatch, capsys):
    """libvoikko whose native library is absent: its constructor raises, and its __del__ then fails on the
    half-built instance; neither that nor 'cannot train on it' may reach the user."""
    import gc
    import types

    class Voikko:
        def __init__(self, language):
            raise OSError("libvoikko.so.1: cannot open shared object file")

        def __del__(self):
            self.handle  # as libvoikko's terminate() on an instance whose library never loaded

    fake = types.ModuleType("libvoikko")
    fake.Voikko, fake.VoikkoException = Voikko, type("VoikkoException", (Exception,), {})
    monkeypatch.setitem(sys.modules, "libvoikko", fake)
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    assert main(["train", str(files / "train.txt"), "-o", str(tmp_path / "m"), "--analyzer", "voikko(fi)", "-q"]) == 2
    gc.collect()
    assert [u.object for u in unraisable] == []  # "Exception ignored in: <function Voikko.__del__ ...>"
    err = capsys.readouterr().err
    assert err.startswith("xmtc: error: analyzer voikko(fi) needs libvoikko") and err.count("\n") == 1, err
    assert "cannot train on it" not in err and str(files / "train.txt") not in err


def test_a_very_long_text_is_cut_with_one_warning(model_dir, tmp_path, monkeypatch, capsys):
    from xmtc.data.text_limit import DEFAULT_MAX_CHARS
    from xmtc.serve.config import ServeConfig

    assert DEFAULT_MAX_CHARS == ServeConfig().max_body_bytes  # what the REST API takes whole, the CLI takes whole
    long_text = "birds of lapland and the history of finnish railways " * 200
    path = tmp_path / "long.txt"
    path.write_text(f"short title\n{long_text}\n{long_text}\n", encoding="utf-8")
    monkeypatch.setenv("XMTC_MAX_TEXT_CHARS", "1000")
    assert main(["predict", str(model_dir), str(path), "-k", "3"]) == 0
    out, err = capsys.readouterr()
    warnings = [line for line in err.splitlines() if "XMTC_MAX_TEXT_CHARS" in line]
    assert len(warnings) == 1 and "2 texts over 1,000 characters" in warnings[0]
    assert f"line 2: 1,000 of {len(long_text):,} characters read" in warnings[0]
    rows = [json.loads(line) for line in out.splitlines()]
    cut = xmtc.load(model_dir).predict([long_text[:1000]], k=3)[0]
    assert rows[1]["labels"] == [label for label, _ in cut]
    monkeypatch.setenv("XMTC_MAX_TEXT_CHARS", "lots")
    assert main(["predict", str(model_dir), str(path), "-q"]) == 2
    assert "XMTC_MAX_TEXT_CHARS must be a number" in one_line_error(capsys)


def test_the_data_location_is_a_setting(tmp_path):
    """XMTC_DATA moves the shared data the tests read (conftest's DATA, read when pytest starts); where it holds
    nothing, the tests are skipped saying where they looked, and pytest's header says it too."""
    import os
    from pathlib import Path

    tests = Path(__file__).resolve().parent
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import conftest;"
            " print(conftest.DATA); print(conftest.SKIP_NO_DATA); print(conftest.pytest_report_header(None))")
    env = dict(os.environ, XMTC_DATA=str(tmp_path / "nowhere"))
    proc = subprocess.run([sys.executable, "-c", code, str(tests)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    data, reason, header = proc.stdout.splitlines()
    assert data == str(tmp_path / "nowhere")
    assert reason.startswith(f"shared data not available at {tmp_path / 'nowhere'}") and "XMTC_DATA" in reason
    assert header.startswith(f"shared data: {tmp_path / 'nowhere'} (absent")


def test_an_empty_input_predicts_nothing(model_dir, tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    assert main(["predict", str(model_dir), str(empty), "-q"]) == 0
    assert main(["ensemble", str(model_dir), str(model_dir), "--input", str(empty), "-q"]) == 0
    assert capsys.readouterr().out == ""
    model = xmtc.load(model_dir)
    assert model.predict([]) == []
    idx, scores = model.predict_topk([], 3)
    assert idx.shape == scores.shape == (0, 3)


def test_an_empty_file_is_not_evaluated_calibrated_or_split(model_dir, tmp_path, capsys):
    """Every metric of an empty test file would read 0 and look like a result; a split would write two empty files."""
    empty = tmp_path / "empty.tsv"
    empty.write_text("", encoding="utf-8")
    assert main(["evaluate", str(model_dir), str(empty), "-q"]) == 2
    assert one_line_error(capsys) == f"xmtc: error: {empty}: is empty: no documents to evaluate on"
    assert main(["calibrate", str(model_dir), str(empty), "-q"]) == 2
    assert one_line_error(capsys) == f"xmtc: error: {empty}: is empty: no documents to calibrate on"
    assert main(["split", str(empty), "--valid", "0.1", "-o", str(tmp_path / "part"), "-q"]) == 2
    assert one_line_error(capsys) == f"xmtc: error: {empty}: is empty: no documents to split"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.tsv"]


def test_a_bad_flag_value_names_the_flag(files, tmp_path, capsys):
    assert main(["train", str(files / "train.txt"), "-o", str(tmp_path / "m"), "--n-trees", "abc", "-q"]) == 2
    assert one_line_error(capsys) == "xmtc: error: command line: --n-trees expects int, got 'abc'"
    assert main(["train", str(files / "train.txt"), "-o", str(tmp_path / "m"), "--beam-size", "0", "-q"]) == 2
    assert one_line_error(capsys) == "xmtc: error: command line: --beam-size must be >= 1, got 0"


def test_a_title_given_for_a_file_says_how_to_give_a_text(model_dir, capsys):
    assert main(["predict", str(model_dir), "history of finland", "-q"]) == 2
    assert "echo 'TEXT' | xmtc predict MODEL -" in one_line_error(capsys)
    assert main(["predict", str(model_dir), "missing.txt", "-q"]) == 2
    assert one_line_error(capsys) == "xmtc: error: missing.txt: file not found"


def test_evaluating_on_labels_the_model_does_not_know_says_so(model_dir, tmp_path, capsys):
    other = tmp_path / "other.txt"
    other.write_text("x1\ta history of finland\nx2,x3\tbirds of lapland\n", encoding="utf-8")
    assert main(["evaluate", str(model_dir), str(other), "-q"]) == 0
    err = capsys.readouterr().err
    assert "none of its 3 label occurrences is a label of the model" in err and "every metric will be 0" in err


def test_what_an_unreadable_text_keeps():
    """Blank: nothing. No known word: of a calibrated model, what the label-text route matched (a positive score;
    the model's own guesses were cut to 0); of raw scores, nothing (every entry is a guess)."""
    import numpy as np

    from xmtc.models.topk import drop_unreadable

    idx = np.array([[3, 4, 5], [3, 4, 5], [3, 4, 5]], dtype=np.int32)
    scores = np.array([[0.0, 0.2, 0.0], [0.5, 0.2, 0.1], [0.0, 0.3, 0.0]], dtype=np.float32)
    known = np.array([0.0, 1.0, 0.0])
    texts = ["railway", "history", "  "]
    kept, kept_scores = drop_unreadable(idx, scores, texts, known, calibrated=True)
    assert kept.tolist() == [[4, -1, -1], [3, 4, 5], [-1, -1, -1]]
    assert kept_scores[0].tolist() == pytest.approx([0.2, 0, 0])
    kept, _ = drop_unreadable(idx, scores, texts, known, calibrated=False)
    assert kept.tolist() == [[-1, -1, -1], [3, 4, 5], [-1, -1, -1]]


def test_explain_says_why_it_has_nothing_to_explain(model_dir, capsys):
    assert main(["explain", str(model_dir), "日本の歴史", "-q"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "no label to explain: no word of this text is in the model's vocabulary" in err


@pytest.mark.parametrize("size", ["1.5", "-1"])
def test_an_impossible_validation_size_is_not_blamed_on_the_data(files, tmp_path, size, capsys):
    assert main(["train", str(files / "train.txt"), "-o", str(tmp_path / "m"), "--valid-size", size, "-q"]) == 2
    err = one_line_error(capsys)
    assert "validation size" in err and "cannot train on it" not in err and "train.txt" not in err


def test_a_missing_encoder_is_not_blamed_on_the_data(tmp_path):
    """A setting error (SetupError), which `xmtc train` reports as it is rather than as 'TRAIN_FILE: cannot
    train on it' (the command-line path: test_a_missing_analyzer_library_is_named_without_blaming_the_data)."""
    from xmtc.errors import SetupError
    from xmtc.features.encoder import resolve_encoder_path

    with pytest.raises(SetupError, match="no-such-encoder' not found"):
        resolve_encoder_path(tmp_path / "no-such-encoder")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SetupError, match="no config.json"):
        resolve_encoder_path(tmp_path / "empty")


def test_xmtc_alone_lists_the_commands(capsys):
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "the following arguments are required" not in err
    assert all(f"    {command} " in err for command in ("train", "predict", "evaluate", "demo"))


def test_the_metrics_table_prints_counts_as_counts(capsys):
    from xmtc.cli import _print_metrics

    _print_metrics({"P@1": 30.7812, "docs_unseen": 93.0, "labels_unseen": 86.0}, as_json=False)
    assert capsys.readouterr().out.splitlines() == ["         P@1    30.78", " docs_unseen       93",
                                                    "labels_unseen       86"]
