"""Shared by the serve tests: a small real model with label URIs, and a uvicorn server in a subprocess."""

from __future__ import annotations

import gzip
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

import xmtc
from xmtc.data import LabelVocab, sample_path

ROOT = Path(__file__).resolve().parents[1]


def sample_docs(step: int = 8):
    """Every ``step``-th document of the bundled yso-finna-en sample (sorted by text, so spread out)."""
    texts, labels = [], []
    with gzip.open(sample_path("train"), "rt", encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i % step:
                continue
            lab, text = line.rstrip("\n").split("\t", 1)
            texts.append(text)
            labels.append([x for x in lab.split(",") if x])
    return texts, labels


def learn_split_model(step: int = 12):
    """A small one-tree XR-Linear fitted on the first 80% of ``sample_docs(step)``, for learning the rest:
    ``(model, texts, labels, cut)``."""
    texts, labels = sample_docs(step=step)
    cut = int(len(texts) * 0.8)
    model = xmtc.XRLinear(n_trees=1, max_leaf_size=16, branching=4, n_threads=2)
    model.fit(texts[:cut], labels[:cut], progress=False)
    return model, texts, labels, cut


def update_calls(monkeypatch) -> list[dict]:
    """The keyword arguments of every ``xmtc.linear.update.update`` call from now on (each call still runs)."""
    import xmtc.linear.update as upd

    calls, real = [], upd.update
    monkeypatch.setattr(upd, "update", lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    return calls


def build_model(folder: Path, **params) -> Path:
    texts, labels = sample_docs()
    vocab = LabelVocab(sorted({x for row in labels for x in row})).with_label_file(sample_path("labels"))
    params = {"max_leaf_size": 32, "branching": 8, "n_threads": 1, **params}
    model = xmtc.XRLinear(**params).fit(texts, labels, labels=vocab, progress=False)
    model.save(folder)
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``xmtc serve`` in a subprocess on a free loopback port; stopped with SIGTERM on exit."""

    def __init__(self, *args: str, env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [sys.executable, "-m", "xmtc.cli", "serve", *args, "--port", str(self.port), "-q"]
        self.env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                        **(env or {}))
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "Server":
        self.proc = subprocess.Popen(self.args, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        deadline = time.monotonic() + 180  # generous: a shared machine under load starts slowly
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"xmtc serve exited with {self.proc.returncode}: {self.proc.stdout.read()}")
            try:
                if httpx.get(self.url + "/v1/", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("xmtc serve did not start within 180 s")

    def stop(self, timeout: float = 30) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def __exit__(self, *exc) -> None:
        self.stop()


def write_open_split(d: Path, n_docs: int):
    """The first ``n_docs`` sample titles with a fifth of their labels (seed 0) stripped from them (the titles
    stay), written to ``d/train.tsv``, and the sample label file restricted to the titles' labels to
    ``d/all.tsv``. Returns ``(rows, unseen ids, label file header, its kept lines)``."""
    import numpy as np

    rows = []
    with gzip.open(sample_path("train"), "rt", encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i >= n_docs:
                break
            lab, text = line.rstrip("\n").split("\t", 1)
            rows.append(([x for x in lab.split(",") if x], text))
    labels = sorted({x for lab, _ in rows for x in lab})
    unseen = set(np.random.default_rng(0).choice(labels, size=len(labels) // 5, replace=False).tolist())
    (d / "train.tsv").write_text("".join(",".join(x for x in lab if x not in unseen) + "\t" + t + "\n"
                                         for lab, t in rows), encoding="utf-8")
    with gzip.open(sample_path("labels"), "rt", encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    keep = [ln for ln in lines[1:] if ln.split("\t", 1)[0] in set(labels)]
    (d / "all.tsv").write_text("\n".join([lines[0]] + keep) + "\n", encoding="utf-8")
    return rows, unseen, lines[0], keep
