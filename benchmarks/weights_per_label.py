"""How many weights XR-Linear keeps per label, and how many bytes each costs, on scale.py's synthetic corpus.

The inputs of the "What stops at 10M labels" arithmetic in docs/guides/ray.md: one process generates the corpus
of ``benchmarks/_synth.py`` (seed 0, power-law exponent 1), fits ``XRLinear`` at its defaults, counts the
weights of every level, saves the model and measures the folder, the csc and beam-layout arrays per weight,
then loads the saved model again (memory-mapped) and predicts one row. Peak RSS is the process's up to the
end of the fit (data generation included); CPU seconds are the fit's (user + system, all threads), which a
loaded machine stretches less than the wall clock.

    python benchmarks/weights_per_label.py --labels 1000000 --train-docs 500000

The LAST line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labels", type=int, default=200_000)
    ap.add_argument("--train-docs", type=int, default=None, help="default: labels / 2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    n_docs = args.train_docs or args.labels // 2

    import numpy as np
    import scipy.sparse as sp

    import _synth
    import xmtc

    load_start = os.getloadavg()[0]
    spec = _synth.SynthSpec(labels=args.labels, train_docs=n_docs, test_docs=10, seed=args.seed, alpha=1.0)
    X, Y = _synth.generate(spec, "train")
    X, Y = sp.csr_matrix(X, dtype=np.float32), sp.csr_matrix(Y, dtype=np.float32)
    t0, c0 = time.perf_counter(), _cpu_s()
    model = xmtc.XRLinear(n_threads=args.threads).fit(X, Y, progress=False)
    fit_s, fit_cpu_s = time.perf_counter() - t0, _cpu_s() - c0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    trees = model.models_
    per_level = [sum(int(h.levels_[j].n_weights) for h in trees) for j in range(len(trees[0].levels_))]
    n_weights = sum(per_level)
    out = {"labels": args.labels, "train_docs": n_docs, "features": int(X.shape[1]), "trees": len(trees),
           "weights_per_level": per_level, "load_avg_start": round(load_start, 1),
           "fit_s": round(fit_s, 1), "fit_cpu_s": round(fit_cpu_s, 1), "peak_rss_mb_to_fit": round(peak_mb),
           "weights": n_weights, "weights_per_label": round(n_weights / args.labels, 2)}
    with tempfile.TemporaryDirectory(prefix="weights-per-label-") as tmp:
        path = Path(tmp) / "model"
        model.save(path)
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        for layout in ("csc", "beam"):
            arrays = [h.to_arrays(layout=layout) for h in trees]
            out[f"{layout}_bytes_per_weight"] = round(sum(a.nbytes for d in arrays for a in d.values()) / n_weights, 2)
            del arrays
        out["folder_mb"] = round(size / 1e6, 1)
        out["folder_bytes_per_weight"] = round(size / n_weights, 2)
        del model
        t0 = time.perf_counter()
        loaded = xmtc.load(path)
        out["load_s"] = round(time.perf_counter() - t0, 2)
        row = sp.csr_matrix(X[:1])
        t0 = time.perf_counter()
        loaded.predict_topk(row, 5)
        out["first_predict_s"] = round(time.perf_counter() - t0, 3)
    out["load_avg_end"] = round(os.getloadavg()[0], 1)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
