"""``xmtc demo`` in-process on a slice of the bundled sample: the fast suite's test of xmtc/demo.py.

The whole demo (every title of the sample, ~10 s of CPU) runs as a subprocess in test_docs (getting-started.md).
"""

from __future__ import annotations

import numpy as np

import xmtc
from xmtc import demo
from xmtc.cli import main
from xmtc.data.split import subset


def test_demo_trains_evaluates_shows_examples_and_saves(tmp_path, monkeypatch, capsys):
    real = demo.read_dataset

    def first_rows(path, *args, **kwargs):   # the sample's first 800 training / 150 test titles
        ds = real(path, *args, **kwargs)
        return subset(ds, np.arange(min(len(ds), 800 if "train" in str(path) else 150)))

    monkeypatch.setattr(demo, "read_dataset", first_rows)
    assert main(["demo", "-q", "--examples", "2", "-o", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    assert "yso-finna-en sample: 800 training and 150 test book titles" in out
    for key in ("P@1", "P@5", "nDCG@5", "ECE@5"):
        assert key in out
    assert out.count("    predicted: ") == 2 and out.count("    true:      ") == 2
    assert "model saved to" in out
    pred = xmtc.load(tmp_path / "m").predict(["history of the finnish railways"], k=3)
    assert len(pred) == 1 and len(pred[0]) == 3
