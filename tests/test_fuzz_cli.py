"""The CLI as a user calls it, on a fast sample of broken inputs (scripts/fuzz_cli.py runs more).

Every case is a subprocess on a mutated data file, config or model folder; it must end in a correct
result or exit 2 with one ``xmtc: error: FILE...`` line, with no traceback, no hang and nothing
half-written left behind (see the script's doc for the exact checks).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location("fuzz_cli", Path(__file__).resolve().parents[1] / "scripts" / "fuzz_cli.py")
fuzz_cli = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(fuzz_cli)


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
