"""Score calibration on a validation split cut from train: isotonic vs Platt, one band vs per-frequency bands.

    python benchmarks/calibration.py [--dataset yso-finna-en-2k-20k] [--valid 2000] [--seed 0]

Shuffles the training file with the seed, holds out ``--valid`` documents as the validation split,
trains XR-Linear (default parameters) on the rest, then for every calibration variant calibrates a
copy on the validation split (with per-label F1 thresholds) and evaluates on the untouched test
file: P@1, P@5, ECE@5, coverage@P90/P95, F1 at the global F1-optimal threshold and with the per-label
thresholds. "raw" is the uncalibrated model (its F1 threshold also chosen on the validation split).
The last stdout line is one JSON object with every row.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from _data import read_tsv  # noqa: E402
DATA = HERE.parent.parent / "shared" / "data"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="yso-finna-en-2k-20k")
    ap.add_argument("--valid", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import xmtc
    from xmtc.metrics import hits_matrix
    from xmtc.models.base import as_label_matrix
    from xmtc.models.calibration import best_threshold, calibrate

    texts, labels = read_tsv(DATA / args.dataset / "train.txt.gz")
    te_x, te_y = read_tsv(DATA / args.dataset / "test.txt.gz")
    order = np.random.default_rng(args.seed).permutation(len(texts))
    va, tr = order[:args.valid], order[args.valid:]
    print(f"{args.dataset}: {len(tr)} train, {len(va)} validation (cut from train), {len(te_x)} test;"
          f" load {os.getloadavg()[0]:.2f}", file=sys.stderr)
    t0 = time.perf_counter()
    base = xmtc.XRLinear(n_threads=args.threads).fit([texts[i] for i in tr], [labels[i] for i in tr], progress=False)
    print(f"trained in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    va_x, va_y = [texts[i] for i in va], [labels[i] for i in va]

    # raw scores: F1 threshold chosen on the validation split as well
    idx, sc = base.predict_topk(va_x, 10)
    Yva, _ = as_label_matrix(va_y, base.labels_, len(va_x), unknown_labels="extend")
    raw_t = best_threshold(sc[idx >= 0].astype(np.float64), hits_matrix(Yva, idx)[idx >= 0], Yva.nnz)
    rows = {}
    m = base.evaluate(te_x, te_y, threshold=raw_t)
    rows["raw"] = dict(m, **{"F1@T labels": float("nan"), "threshold": raw_t})
    for method in ("isotonic", "platt"):
        for bands in (1, 3):
            model = copy.deepcopy(base)
            cal = calibrate(model, va_x, va_y, method=method, n_bands=bands, thresholds="f1")
            m = model.evaluate(te_x, te_y, threshold=cal.global_threshold)
            m["F1@T labels"] = model.evaluate(te_x, te_y, threshold="labels")["F1@T"]
            m["threshold"] = cal.global_threshold
            rows[f"{method}, {bands} band{'s' if bands > 1 else ''}"] = m
    for support in (10, 30):  # per-label thresholds only for labels with this many validation occurrences
        model = copy.deepcopy(base)
        cal = calibrate(model, va_x, va_y, method="isotonic", n_bands=3, thresholds="f1", min_support=support)
        m = model.evaluate(te_x, te_y, threshold=cal.global_threshold)
        m["F1@T labels"] = model.evaluate(te_x, te_y, threshold="labels")["F1@T"]
        m["threshold"] = cal.global_threshold
        rows[f"isotonic, 3 bands, per-label thresholds from {support} occurrences"] = m
    keys = ("P@1", "P@5", "ECE@5", "coverage@P90", "coverage@P95", "F1@T", "F1@T labels", "threshold")
    print("| scores | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for name, m in rows.items():
        print(f"| {name} | " + " | ".join(f"{m[k]:.3f}" if k == "threshold" else f"{m[k]:.2f}" for k in keys) + " |")
    print(f"load at end {os.getloadavg()[0]:.2f}", file=sys.stderr)
    print(json.dumps({name: {k: round(float(m[k]), 4) for k in keys} for name, m in rows.items()}))


if __name__ == "__main__":
    main()
