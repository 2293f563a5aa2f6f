"""benchmarks/gpu_suite.sh: its options, and a dry run on the CPU that must produce the merged table."""

import gzip
import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "benchmarks" / "gpu_suite.sh"


def _run(*args, timeout=60):
    return subprocess.run(["bash", str(SUITE), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_unknown_options_and_a_bad_budget_are_refused_in_one_line():
    proc = _run("--bogus", "1")
    assert proc.returncode == 2 and proc.stderr.strip() == "gpu_suite.sh: unknown option --bogus (see --help)"
    proc = _run("--budget", "40m", "--encoder", "x")
    assert proc.returncode == 2 and "--budget must be whole seconds" in proc.stderr
    assert _run("--help").stdout.startswith("# Every neural method's benchmark")


@pytest.mark.slow
def test_a_cpu_dry_run_writes_one_table_with_a_row_per_finished_method(tiny_bert, tmp_path):
    from xmtc.data import sample_path

    data = tmp_path / "data" / "sample"
    data.mkdir(parents=True)
    for split, n in (("train", 300), ("test", 60)):
        with gzip.open(sample_path(split), "rt", encoding="utf-8") as src, \
                gzip.open(data / f"{split}.txt.gz", "wt", encoding="utf-8") as dst:
            for i, line in zip(range(n), src):
                dst.write(line)
    out = tmp_path / "out"
    proc = _run("--data-root", str(data.parent), "--dataset", "sample", "--encoder", tiny_bert, "--out", str(out),
                "--device", "cpu", "--threads", "1", "--budget", "400", "--methods", "lightxml,no-such-method",
                timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    table = (out / "gpu-suite.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| xmtc ")}
    assert set(rows) == {"xmtc lightxml", "xmtc no-such-method"}
    float(rows["xmtc lightxml"].split("|")[6])  # a measured R@100, not the dash of a row without results
    assert "unknown method" in rows["xmtc no-such-method"]
    assert "lightxml: done" in (out / "gpu-suite.log").read_text()
    assert [r["method"] for r in json.loads((out / "gpu-lightxml.json").read_text())["rows"]] == ["lightxml"]
