"""The console script ends with ``os._exit`` after flushing (xmtc.cli.entry): nothing it wrote may be lost and
its exit status must be main's. A fast exit that skipped the flush would lose what print() left in the buffer
of a piped stdout (evaluate --json)."""

from __future__ import annotations

import subprocess
import sys

from xmtc.cli import main
from xmtc.data import sample_path


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xmtc", *args], input=stdin, capture_output=True, text=True,
                          timeout=300)


def test_piped_predictions_arrive_whole_and_the_status_is_mains(tmp_path):
    import gzip

    lines = gzip.open(sample_path("train"), "rt", encoding="utf-8").read().splitlines()[:1500]
    train = tmp_path / "train.tsv"
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["train", str(train), "-o", str(tmp_path / "m"), "-q", "--n-threads", "1"]) == 0
    texts = "\n".join(line.split("\t", 1)[1] for line in lines) + "\n"
    got = _run("predict", str(tmp_path / "m"), "-", "-k", "3", "-q", stdin=texts)
    assert got.returncode == 0, got.stderr
    out = got.stdout.splitlines()
    assert len(out) == 1500 and out[-1].startswith('{"line": 1500,')  # > 64 KiB through a pipe, none lost
    metrics = _run("evaluate", str(tmp_path / "m"), str(train), "--json", "-q")  # print()ed: left in stdout's buffer
    assert metrics.returncode == 0 and '"P@1"' in metrics.stdout, metrics.stderr
    bad = _run("predict", str(tmp_path / "nowhere"), "-", stdin="x\n")
    assert bad.returncode == 2 and "model folder not found" in bad.stderr


def test_entry_flushes_both_streams_before_the_fast_exit_and_passes_mains_status(monkeypatch):
    """entry() with main and os._exit replaced: what main left unflushed is flushed before os._exit(rc); with Ray
    loaded the normal exit runs instead (its handlers stop the local cluster it started)."""
    import io

    import xmtc.cli as cli

    events = []

    class Stream(io.StringIO):
        def __init__(self, name):
            super().__init__()
            self.name = name

        def flush(self):
            events.append(("flush", self.name))

    class Exited(Exception):
        pass

    def fake_exit(rc):
        events.append(("exit", rc))
        raise Exited

    monkeypatch.setattr(cli, "main", lambda: 3)
    monkeypatch.setattr(cli.os, "_exit", fake_exit)
    monkeypatch.setattr(sys, "stdout", Stream("stdout"))
    monkeypatch.setattr(sys, "stderr", Stream("stderr"))
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    monkeypatch.delitem(sys.modules, "torch.distributed", raising=False)
    try:
        cli.entry()
    except Exited:
        pass
    assert events[-1] == ("exit", 3) and {("flush", "stdout"), ("flush", "stderr")} <= set(events[:-1])
    events.clear()
    monkeypatch.setitem(sys.modules, "ray", object())
    try:
        cli.entry()
    except SystemExit as exc:
        assert exc.code == 3 and events == []
