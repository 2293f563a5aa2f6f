"""benchmarks/current.py: the current tables at the top of benchmarks/RESULTS.md match the committed JSON.

The block between the ``current-tables`` markers is generated from benchmarks/results/*.json (the spec:
benchmarks/results/current.json); ``--check`` must pass on the committed files and fail as soon as one JSON
value differs from what the block shows.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import current  # noqa: E402


def test_committed_block_matches_the_json(capsys):
    assert current.main(["--check"]) == 0, capsys.readouterr().err


@pytest.fixture()
def copies(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(BENCH / "results", results)
    md = tmp_path / "RESULTS.md"
    shutil.copy(BENCH / "RESULTS.md", md)
    return results, md


def _check(results: Path, md: Path) -> int:
    return current.main(["--check", "--spec", str(results / "current.json"), "--results", str(md)])


def test_a_changed_json_value_makes_the_block_stale(copies, capsys):
    results, md = copies
    assert _check(results, md) == 0
    spec = json.loads((results / "current.json").read_text())
    first = next(t for t in spec["tables"] if t["kind"] == "linear")["files"][0]
    data = json.loads((results / first).read_text())
    xmtc = next(r for r in data["results"] if r["library"] == "xmtc")
    xmtc["metrics"]["P@1"] += 0.5
    (results / first).write_text(json.dumps(data))
    assert _check(results, md) == 1
    assert "stale" in capsys.readouterr().err
    # rewriting the block makes it current again and leaves the log below it as it was
    log_before = md.read_text().split(current.END_LINE, 1)[1]
    assert current.main(["--spec", str(results / "current.json"), "--results", str(md)]) == 0
    assert _check(results, md) == 0
    assert md.read_text().split(current.END_LINE, 1)[1] == log_before


def test_missing_block_is_stale_and_write_inserts_it_after_the_intro(copies):
    results, md = copies
    text = md.read_text()
    start, end = current.find_block(text)
    md.write_text(text[:start] + text[end:].lstrip("\n"))
    assert _check(results, md) == 1
    assert current.main(["--spec", str(results / "current.json"), "--results", str(md)]) == 0
    new = md.read_text()
    assert _check(results, md) == 0
    # the title and its introduction come first, then the block, then the log as before
    without = text[:start] + text[end:].lstrip("\n")
    assert new[:new.index(current.BEGIN)] == without[:current.insertion_point(without)]
    assert new.endswith(without[current.insertion_point(without):])


def test_a_file_named_in_the_spec_but_missing_is_an_error(copies, capsys):
    results, md = copies
    spec = json.loads((results / "current.json").read_text())
    spec["tables"][0]["files"].append("linear-nowhere.json")
    (results / "current.json").write_text(json.dumps(spec))
    assert _check(results, md) == 2
    assert "linear-nowhere.json" in capsys.readouterr().err


def test_transformer_table_takes_its_ratios_from_a_measured_pecos_row_not_a_failed_one():
    """A run whose PECOS row failed (not installed) comes first; the ratios come from the later, measured one."""
    def run(rows):
        return {"machine": {"date": "2026-11-26T00:00:00+00:00", "nproc": 2, "cpu": "x", "ram_gib": 1,
                            "loadavg_at_start": [0, 0, 0]}, "args": {"threads": 2}, "rows": rows}

    metrics = {"P@1": 30.0, "P@3": 20.0, "P@5": 10.0}
    xmtc = {"library": "xr-transformer", "metrics": metrics, "train_s": 50.0, "predict_ms_per_doc": 1.0,
            "peak_rss_mb": 100.0}
    failed = {"library": "pecos-xrt", "problem": "not installed: no venv"}
    pecos = {"library": "pecos-xrt", "metrics": {"P@1": 20.0, "P@3": 10.0, "P@5": 5.0}, "train_s": 200.0,
             "predict_ms_per_doc": 2.0, "peak_rss_mb": 200.0}
    data = {"w.json": {"runs": {"a.json": run([xmtc, failed]), "b.json": run([pecos])}}}
    text, _ = current.render_transformer(data, {})
    row = next(line for line in text.splitlines() if line.startswith("| xmtc xr-transformer"))
    assert "0.25×" in row and "1.50×" in row  # train 50 / 200, P@1 30 / 20
    assert "not installed" not in text
