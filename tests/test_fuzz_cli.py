"""The CLI as a user calls it, on a fast sample of broken inputs (scripts/fuzz_cli.py runs more).

Every case is a subprocess on a mutated data file, config or model folder; it must end in a correct
result or exit 2 with one ``xmtc: error: FILE...`` line, with no traceback, no hang and nothing
half-written left behind (see the script's doc for the exact checks).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

def _script(name: str):
    """A script of scripts/ as a module (it is not a package)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fuzz_cli = _script("fuzz_cli")
fuzz_flags = _script("fuzz_flags")


@pytest.mark.slow
def test_cli_on_broken_inputs(shared_data):
    if not (shared_data / "reuters21578-apte90").exists():
        pytest.skip("shared data not available")
    failures: list[str] = []
    counts = fuzz_cli.fuzz(cases=10, seed=2026, data=shared_data, keep=None, timeout=240, log=failures.append)
    failures = [f for f in failures if "FAIL" in f]
    assert not failures, "\n".join(failures)
    assert counts["ok"] + counts["error"] == 10 and counts["error"] > 0


def test_mutations_change_the_input():
    import random
    rng = random.Random(1)
    data = b"a,b\tsome text\nc\tmore\n"
    assert sum(fuzz_cli.mutate_bytes(rng, data) != data for _ in range(50)) >= 45


@pytest.mark.slow
def test_cli_on_broken_flags(shared_data):
    if not (shared_data / "reuters21578-apte90").exists():
        pytest.skip("shared data not available")
    failures: list[str] = []
    counts = fuzz_flags.fuzz(cases=12, seed=2026, data=shared_data, timeout=240, log=failures.append)
    failures = [f for f in failures if "FAIL" in f]
    assert not failures, "\n".join(failures)
    assert counts["pass"] == 12


def test_flag_mutations_use_the_subcommands_own_options():
    import random

    from xmtc.cli_parser import build_parser
    parser = build_parser([])
    argv = ["predict", "M", "in.txt", "-q"]
    opts = fuzz_flags.options(parser, argv)
    assert "--threshold" in opts and "--raw-scores" in opts and "--n-terms" not in opts
    assert "--limit" in fuzz_flags.options(parser, ["labels", "find", "M", "oil"])
    rng = random.Random(3)
    assert all(fuzz_flags.mutate(rng, argv, opts) != argv for _ in range(50))


def test_flag_judge_refuses_tracebacks_and_stray_lines():
    import subprocess

    def proc(code, err):
        return subprocess.CompletedProcess([], code, b"", err.encode())
    usage = "usage: xmtc predict [-h] model_dir input_file\n"
    assert fuzz_flags.judge(["predict"], proc(2, usage + "xmtc predict: error: argument -k: invalid int\n"), 3) is None
    assert fuzz_flags.judge(["predict"], proc(2, "xmtc: error: k must be a positive integer, got 0\n"), 3) is None
    assert fuzz_flags.judge(["predict"], proc(1, "Traceback (most recent call last):\n"), 3) == "traceback"
    assert "not one error line" in fuzz_flags.judge(["predict"], proc(2, "warning\nxmtc: error: x\n"), 3)
    assert fuzz_flags.judge(["predict"], proc(1, "xmtc: internal error: MemoryError\n"), 3).startswith("exit 1")
    assert fuzz_flags.judge(["labels", "find"], proc(1, ""), 3) is None


def test_manifest_edits_reach_every_depth():
    import copy
    import random
    rng = random.Random(5)
    doc = {"format": "xmtc-model", "params": {"beam_size": 10}, "stages": [{"name": "a", "file": "a.json"}],
           "arrays": {"t.safetensors": {"w": ["F32", [3]]}}}
    paths = set()
    for _ in range(200):
        edited = copy.deepcopy(doc)
        where = fuzz_cli.edit_json(rng, edited)
        assert edited != doc or "nothing to edit" in where
        paths.add(where.split("/")[0].split(" ")[0])
    assert {"format", "params", "stages", "arrays"} <= paths
