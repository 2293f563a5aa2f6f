"""benchmarks/train_command.py: the phase table read from `xmtc train --log-level INFO`, the arrival-timed
child runner and the variant options (the PECOS side needs the peers' venv, which CI does not build)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import train_command as tc  # noqa: E402

# `xmtc train` on yso-finna-en-2k-20k before the shared TF-IDF and the fold-in (two full fits), as captured,
# progress bars included (a record may follow a bar on the same line)
OLD_LOG = (
    "17:44:32 xmtc: read 20000 training documents with 1994 labels in 0.5s\n"
    "17:44:32 xmtc.models.calibrated_fit: holding out 2000 of 20000 documents (seed 0) to calibrate the scores on\n"
    "17:44:37 xmtc.methods.xr_linear.estimator: TF-IDF: 18000 documents -> 32996 features in 4.1s\n"
    "17:44:37 xmtc.methods.xr_linear.estimator: label trees [[2, 32, 1994], [2, 32, 1994]] built in 0.8s\n"
    "linear levels:   0%|          | 0/3 [00:00<?, ?level/s]\rlinear levels:   0%|   | 0/3 [00:00<?, ?level/s, "
    "nodes=2, pairs=18000]17:44:38 xmtc.linear.hierarchy: level 1/3: 2 nodes, 18000 training (instance, parent) "
    "pairs, 52332 weights, 0.5s\n"
    "17:44:40 xmtc.linear.hierarchy: hierarchical linear model: levels [2, 32, 1994] trained in 2.7s\n"
    "17:44:40 xmtc.methods.xr_linear.estimator: tree 1/2: levels [2, 32, 1994], linear models 2.7s\n"
    "17:44:42 xmtc.methods.xr_linear.estimator: tree 2/2: levels [2, 32, 1994], linear models 2.3s\n"
    "17:44:42 xmtc.methods.xr_linear.estimator: trained XR-Linear on 18000 documents, 32996 features, 1994 labels "
    "in 10.0s\n"
    "17:44:47 xmtc.models.calibrated_fit: calibrated the scores on 2000 validation documents in 4.4s: ECE@5 7.56% "
    "raw -> 0.46% (in-sample); validation P@1 29.95\n"
    "17:44:47 xmtc.models.calibrated_fit: fitting again on all 20000 documents; the score maps carry over\n"
    "17:44:47 xmtc.methods.xr_linear.estimator: TF-IDF: 20000 documents -> 36397 features in 0.2s\n"
    "17:44:47 xmtc.methods.xr_linear.estimator: label trees [[2, 32, 1994], [2, 32, 1994]] built in 0.4s\n"
    "17:44:49 xmtc.methods.xr_linear.estimator: tree 1/2: levels [2, 32, 1994], linear models 2.0s\n"
    "17:44:52 xmtc.methods.xr_linear.estimator: tree 2/2: levels [2, 32, 1994], linear models 2.1s\n"
    "17:44:52 xmtc.methods.xr_linear.estimator: trained XR-Linear on 20000 documents, 36397 features, 1994 labels "
    "in 4.7s\n"
    "17:44:52 xmtc: saved xr-linear model to /tmp/m2k (20.0s in all)\n"
)


def _rows(rows):
    return {r["key"]: r for r in rows}


def test_phases_of_a_captured_log_two_full_fits():
    rows = tc.phase_table(tc.events_from_log(OLD_LOG), arrival=False)
    by = _rows(rows)
    assert [r["key"] for r in rows if r["depth"] == 0] == ["read", "fit1", "calibration", "refit"]
    assert by["read"]["s"] == pytest.approx(0.5)
    assert by["fit1"]["s"] == pytest.approx(10.0) and "18,000 docs" in by["fit1"]["label"]
    assert by["fit1.tfidf"]["s"] == pytest.approx(4.1)  # inside the fit: its parts add up to no more than 10.0
    assert by["fit1.trees"]["s"] == pytest.approx(0.8)
    assert by["fit1.linear"]["s"] == pytest.approx(5.0) and "2 trees" in by["fit1.linear"]["label"]
    assert [by[f"fit1.linear.tree{j}"]["s"] for j in (1, 2)] == pytest.approx([2.7, 2.3])
    assert by["fit1.other"]["s"] == pytest.approx(0.1)
    assert by["calibration"]["s"] == pytest.approx(4.4)
    assert by["refit"]["s"] == pytest.approx(4.7) and "20,000 docs" in by["refit"]["label"]
    assert by["refit.tfidf"]["s"] == pytest.approx(0.2)
    assert by["refit.linear"]["s"] == pytest.approx(4.1)
    assert "startup" not in by and "unaccounted" not in by  # no arrival times, no gaps


def test_phases_by_arrival_shared_tfidf_and_fold_in_add_up_to_the_wall():
    # (arrival, stderr text) chunks: a record split across two chunks, a progress bar before another
    chunks = [
        (1.30, "12:00:01 xmtc: read 7770 training documents with 90 labels in 0.1s\n"),
        (1.31, "12:00:01 xmtc.models.calibrated_fit: holding out 777 of 7770 documents (seed 0) to calibrate\n"),
        (3.41, "12:00:03 xmtc.methods.xr_linear.estimator: TF-IDF: 7770 documents -> 110889 features in 2.1s\n"),
        (3.42, "12:00:03 xmtc.methods.xr_linear.estimator: label trees [[90]] built in 0.0s\n"),
        (4.00, "linear levels:   0%|    | 0/1\r"),
        (4.90, "linear levels: 100%|####| 1/1\r12:00:04 xmtc.methods.xr_linear.estimator: tree 1/1: levels [90], "),
        (4.91, "linear models 1.5s\n12:00:04 xmtc.methods.xr_linear.estimator: trained XR-Linear on 6993 documents,"
               " 110889 features, 90 labels in 1.5s\n"),
        (5.95, "12:00:05 xmtc.models.calibrated_fit: calibrated the scores on 777 validation documents in 1.0s: x\n"),
        (5.96, "12:00:05 xmtc.models.calibrated_fit: learning the 777 validation documents into the model; x\n"),
        (6.16, "12:00:06 xmtc.models.learning: tree 0: learned 777 documents, 0 new labels, refitted nodes per level"
               " [90] in 0.2s\n"),
        (6.17, "12:00:06 xmtc.models.calibrated_fit: folded in on all 7770 documents in 0.2s\n"),
        (6.30, "12:00:06 xmtc: saved xr-linear model to /tmp/m (5.0s in all)\n"),
    ]
    events = tc.log_events(chunks)
    assert [e["t"] for e in events][5] == pytest.approx(4.91)  # the split record: its later chunk's arrival
    wall = 6.70
    rows = tc.phase_table(events, wall)
    by = _rows(rows)
    assert [r["key"] for r in rows if r["depth"] == 0] == [
        "startup", "read", "tfidf", "fit1", "calibration", "refit", "after_fit", "exit", "unaccounted"]
    assert by["startup"]["s"] == pytest.approx(1.2)  # read's arrival less its 0.1 s
    assert by["tfidf"]["s"] == pytest.approx(2.1)  # ended before the fit began (4.91 - 1.5)
    assert "fit1.tfidf" not in by and by["fit1.linear"]["s"] == pytest.approx(1.5)
    assert "fold" in by["refit"]["label"] and by["refit.learn0"]["s"] == pytest.approx(0.2)
    assert by["after_fit"]["s"] == pytest.approx(6.30 - 6.17)
    assert by["exit"]["s"] == pytest.approx(wall - 6.30)
    assert sum(r["s"] for r in rows if r["depth"] == 0) == pytest.approx(wall)


def test_run_timed_gives_arrival_times_exit_code_and_cpu(tmp_path):
    code = ("import sys, time; print('12:00:00 xmtc: first', file=sys.stderr, flush=True); time.sleep(0.3); "
            "print('12:00:00 xmtc: second', file=sys.stderr, flush=True); sys.exit(3)")
    res = tc.run_timed([sys.executable, "-c", code], tmp_path / "child.log", timeout=60)
    assert res["rc"] == 3 and not res["timed_out"]
    events = tc.log_events(res["chunks"])
    assert [e["msg"] for e in events] == ["first", "second"]
    assert events[1]["t"] - events[0]["t"] >= 0.25
    assert res["wall_s"] >= events[1]["t"] and res["cpu_s"] > 0 and res["peak_rss_mb"] > 1
    assert "second" in (tmp_path / "child.log").read_text()


def test_run_timed_kills_at_the_timeout(tmp_path):
    res = tc.run_timed([sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "c.log", timeout=0.5)
    assert res["timed_out"] and res["rc"] != 0 and res["wall_s"] < 10


def test_variants_pair_args_with_labels():
    ap = argparse.ArgumentParser()
    args = argparse.Namespace(xmtc_args=["", "--refit false"], label=["defaults"])
    vs = tc.parse_variants(ap, args)
    assert [(v["label"], v["args"], v["slug"]) for v in vs] == [
        ("defaults", [], "defaults"), ("--refit false", ["--refit", "false"], "refit-false")]
    assert tc.parse_variants(ap, argparse.Namespace(xmtc_args=None, label=None))[0]["args"] == []
