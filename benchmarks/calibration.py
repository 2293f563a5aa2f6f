"""Score calibration on a validation split cut from train: isotonic vs Platt, one band vs per-frequency bands.

    python benchmarks/calibration.py [--dataset yso-finna-en-2k-20k] [--valid 2000] [--seed 0]
    python benchmarks/calibration.py --model DIR      # a saved end-to-end model, on its own validation split

Shuffles the training file with the seed, holds out ``--valid`` documents as the validation split,
trains XR-Linear (default parameters) on the rest, then for every calibration variant calibrates a
copy on the validation split (with per-label F1 thresholds) and evaluates on the untouched test
file: P@1, P@5, ECE@5, coverage@P90/P95, F1 at the global F1-optimal threshold and with the per-label
thresholds. "raw" is the uncalibrated model (its F1 threshold also chosen on the validation split); the
"plain steps" rows fit isotonic steps at their blocks' means instead of Laplace's (h + 1) / (n + 2).
``--model DIR`` loads a model trained by ``xmtc train`` (an end-to-end method: the validation split is the one
it held out, by its ``valid_size`` and ``seed``) instead of training XR-Linear.
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
from xmtc.data.data_root import data_root  # noqa: E402

from _data import read_tsv  # noqa: E402
DATA = data_root()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="yso-finna-en-2k-20k")
    ap.add_argument("--valid", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default=None, help="a saved end-to-end model folder instead of training XR-Linear")
    args = ap.parse_args()

    import xmtc
    from xmtc.metrics import coverage_at_precision, hits_matrix
    from xmtc.models.base import as_label_matrix
    from xmtc.models.predictor import evaluate_predictor
    from xmtc.models.calibration import best_threshold, calibrate

    texts, labels = read_tsv(DATA / args.dataset / "train.txt.gz")
    te_x, te_y = read_tsv(DATA / args.dataset / "test.txt.gz")
    if args.model:
        from xmtc.models.end_to_end import validation_split

        base = xmtc.load(args.model)
        base.calibration_ = None
        tr, va = validation_split(len(texts), base.valid_size, base.seed)
    else:
        order = np.random.default_rng(args.seed).permutation(len(texts))
        va, tr = order[:args.valid], order[args.valid:]
    print(f"{args.dataset}: {len(tr)} train, {len(va)} validation (cut from train), {len(te_x)} test;"
          f" load {os.getloadavg()[0]:.2f}", file=sys.stderr)
    if not args.model:
        t0 = time.perf_counter()
        base = xmtc.XRLinear(n_threads=args.threads).fit([texts[i] for i in tr], [labels[i] for i in tr],
                                                         progress=False)
        print(f"trained in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    va_x, va_y = [texts[i] for i in va], [labels[i] for i in va]

    # one prediction pass per split: every variant calibrates the same raw top 10 (calibrate() predicts the
    # validation split itself; the test split's raw top 10 go through each variant's maps)
    te_idx, te_sc = base.predict_topk(te_x, 10)
    idx, sc = base.predict_topk(va_x, 10)
    Yva, _ = as_label_matrix(va_y, base.labels_, len(va_x), unknown_labels="extend")
    raw_t = best_threshold(sc[idx >= 0].astype(np.float64), hits_matrix(Yva, idx)[idx >= 0], Yva.nnz)
    Yte, _ = as_label_matrix(te_y, base.labels_, len(te_x), unknown_labels="extend")

    def p80(topk) -> float:  # the share a threshold at 80% precision accepts (xmtc.metrics has P90 / P95)
        return coverage_at_precision(topk[1][:, 0], hits_matrix(Yte, topk[0][:, :1])[:, 0], 0.80)

    rows = {}
    m = evaluate_predictor(base, te_x, te_y, (1, 3, 5), False, raw_t, topk=(te_idx, te_sc))
    rows["raw"] = dict(m, **{"F1@T labels": float("nan"), "threshold": raw_t, "coverage@P80": p80((te_idx, te_sc))})

    def calibrated(name: str, **kw) -> None:
        model = copy.copy(base)
        cal = calibrate(model, va_x, va_y, thresholds="f1", **kw)
        topk = cal.apply(te_idx, te_sc)
        m = evaluate_predictor(model, te_x, te_y, (1, 3, 5), False, cal.global_threshold, topk=topk)
        m["F1@T labels"] = evaluate_predictor(model, te_x, te_y, (1, 3, 5), False, "labels", topk=topk)["F1@T"]
        m["threshold"] = cal.global_threshold
        m["coverage@P80"] = p80(topk)
        rows[name] = m

    for method, laplace in (("isotonic", True), ("isotonic", False), ("platt", True)):
        for bands in (1, 3):
            calibrated(f"{method}, {bands} band{'s' if bands > 1 else ''}{'' if laplace else ', plain steps'}",
                       method=method, n_bands=bands, laplace=laplace)
    for support in (10, 30):  # per-label thresholds only for labels with this many validation occurrences
        calibrated(f"isotonic, 3 bands, per-label thresholds from {support} occurrences", method="isotonic",
                   n_bands=3, min_support=support)
    keys = ("P@1", "P@5", "ECE@5", "coverage@P80", "coverage@P90", "coverage@P95", "F1@T", "F1@T labels",
            "threshold")
    print("| scores | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for name, m in rows.items():
        print(f"| {name} | " + " | ".join(f"{m[k]:.3f}" if k == "threshold" else f"{m[k]:.2f}" for k in keys) + " |")
    print(f"load at end {os.getloadavg()[0]:.2f}", file=sys.stderr)
    print(json.dumps({name: {k: round(float(m[k]), 4) for k in keys} for name, m in rows.items()}))


if __name__ == "__main__":
    main()
