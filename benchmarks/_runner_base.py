"""What every benchmark child process shares: the exit code of a missing library, the timer, the
shared matrices' loader and top-k helpers. numpy/scipy and the standard library only, so that the
peers' interpreter (benchmarks/.venv-peers) imports it too.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp



EXIT_NOT_INSTALLED = 3


class NotInstalled(Exception):
    """The library's import failed: the table says "not installed" instead of a traceback."""


def topk_from_csr(P: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Best-first top-k (indices -1 padded, scores) per row of a sparse score matrix, vectorised."""
    P = sp.csr_matrix(P)
    n = P.shape[0]
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(P.indptr))
    order = np.lexsort((P.indices, -P.data, rows))  # rows, then score desc, then label id
    rank = np.arange(order.size) - P.indptr[rows[order]]
    keep = rank < k
    idx = np.full((n, k), -1, dtype=np.int32)
    sc = np.zeros((n, k), dtype=np.float32)
    idx[rows[order][keep], rank[keep]] = P.indices[order][keep]
    sc[rows[order][keep], rank[keep]] = P.data[order][keep]
    return idx, sc


def padded_topk(idx: np.ndarray, sc: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """A library's top-k as (n, k) int32 / float32: a model with fewer labels than k gives them all (xmtc caps
    the width at its labels), the ranks past them are -1 with score 0, i.e. misses."""
    idx, sc = np.asarray(idx), np.asarray(sc)
    if idx.ndim != 2 or idx.shape[1] > k or sc.shape != idx.shape:
        raise RuntimeError(f"predictions of shape {idx.shape} / {sc.shape}, expected (n, {k}) both")
    pad = ((0, 0), (0, k - idx.shape[1]))
    return np.pad(idx, pad, constant_values=-1).astype(np.int32), np.pad(sc, pad).astype(np.float32)


def _pairs_to_topk(preds: list, k: int) -> tuple[np.ndarray, np.ndarray]:
    """[(label, score), ...] per row -> padded arrays, re-sorted best first to be safe."""
    idx = np.full((len(preds), k), -1, dtype=np.int32)
    sc = np.zeros((len(preds), k), dtype=np.float32)
    for i, row in enumerate(preds):
        row = sorted(row, key=lambda p: (-p[1], p[0]))[:k]
        for j, (label, score) in enumerate(row):
            idx[i, j] = label
            sc[i, j] = score
    return idx, sc


def _load(work: Path, keys=("X_train", "Y_train", "X_test"), texts: bool = False) -> dict:
    """The shared matrices a library needs (csr float32) and, for text learners, the raw texts."""
    out = {}
    for key in keys:
        m = sp.load_npz(work / f"{key}.npz").tocsr().astype(np.float32)
        m.sort_indices()
        out[key] = m
    if texts:
        for split in ("train", "test"):
            path = work / f"{split}_texts.json"
            if not path.exists():
                raise FileNotFoundError(f"{path}: no texts (a bag-of-words dataset cannot feed a transformer)")
            out[f"{split}_texts"] = json.loads(path.read_text(encoding="utf-8"))
    return out


def _n_test(d: dict) -> int:
    return len(d["test_texts"]) if "test_texts" in d else d["X_test"].shape[0]


# -- one function per library: (data, args) -> (idx, scores, info); sets times via the timer ----------
class Timer:
    def __init__(self):
        self.times: dict[str, float] = {}

    def run(self, name, fn, *a, **kw):
        t0 = time.perf_counter()
        out = fn(*a, **kw)
        self.times[name] = time.perf_counter() - t0
        return out
