"""``learn`` from a few documents, measured as a user meets it: before and after on the same test set.

    python benchmarks/learn_few.py --dataset yso-finna-en-2k-20k [--variants default,no-memory] [--json OUT]

Two cases, each on XR-Linear trained as ``xmtc train`` does (calibrated, refitted on all), saved once and
reloaded for every variant:

* **railways**: the learn guide's example, three titles of a new label ``railways`` learned into the model of
  the whole training set. Reported: test P@1 / P@5 before and after, the test texts whose top-1 / top-5 hold
  ``railways``, and its score for an unrelated title.
* **open**: ``--labels`` (10) labels drawn (``--seed``) among those with at least 3 training and 3 test
  documents; every training document carrying one of them is removed before training, then ``--records`` (3)
  of those removed documents per label (with all their labels) are learned. Reported: test P@1 / P@5 before
  and after; the share of top-5 slots of test texts that do not carry a learned label that the learned labels
  fill; and the share of test texts carrying a learned label that have it in their top 10.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _data import read_tsv  # noqa: E402

import xmtc  # noqa: E402
from xmtc.data.dataset import Dataset, label_matrix  # noqa: E402
from xmtc.models.calibrated_fit import fit_calibrated  # noqa: E402
from xmtc.data.data_root import data_root  # noqa: E402

DATA = data_root()
RAILWAYS = ["Steam locomotives of the Finnish state railways", "Narrow-gauge railways in Finland",
            "Railway stations of Helsinki"]
VARIANTS = {"default": {}, "no-memory": {"memory": False}, "no-few-shot": {"few_shot": False},
            "few-shot-words": {"few_shot": "words"},
            "keep-vocabulary": {"new_words": False}}
ONE_AT_A_TIME = "one-at-a-time"  # a variant of its own: the records learned one by one


def train_model(rows, folder: Path) -> float:
    Y, vocab = label_matrix([list(labels) for labels, _ in rows])
    ds = Dataset([t for _, t in rows], None, Y, vocab)
    model = xmtc.XRLinear()
    t0 = time.perf_counter()
    fit_calibrated(model, ds, progress=False)
    seconds = time.perf_counter() - t0
    model.save(folder)
    return seconds


def topk(model, texts, k):
    idx, sc = model.predict_topk(texts, k)
    names = model.labels_.names
    return [[names[j] for j in row if j >= 0] for row in idx], sc


def precision(pred, gold, k):
    return 100.0 * np.mean([len(set(p[:k]) & set(g)) / k for p, g in zip(pred, gold)])


def learn(folder, texts, labels, variant):
    model = xmtc.load(folder, mmap=False)
    t0 = time.perf_counter()
    if variant == ONE_AT_A_TIME:  # each record in a learn of its own, as POST /learn of each record does
        for text, labs in zip(texts, labels):
            model.learn([text], [labs])
    else:
        model.learn(texts, labels, **VARIANTS[variant])
    return model, time.perf_counter() - t0


def railways_case(train, test, work: Path, variants) -> dict:
    folder = work / "railways"
    out = {"train_s": round(train_model(train, folder), 1)}
    texts, gold = [t for _, t in test], [list(labels) for labels, _ in test]
    before, _ = topk(xmtc.load(folder), texts, 10)
    out["before"] = {"P@1": round(precision(before, gold, 1), 2), "P@5": round(precision(before, gold, 5), 2)}
    for v in variants:
        model, sec = learn(folder, RAILWAYS, [["railways"]] * 3, v)
        pred, _ = topk(model, texts, 10)
        out[v] = {"P@1": round(precision(pred, gold, 1), 2), "P@5": round(precision(pred, gold, 5), 2),
                  "top1_railways": sum(p[:1] == ["railways"] for p in pred),
                  "top5_railways": sum("railways" in p[:5] for p in pred),
                  "mushrooms_score": round(dict(model.predict(["Mushrooms of northern Europe"], k=50)[0])
                                           .get("railways", 0.0), 4),
                  "history_rank": _rank(model, "A history of the Finnish railways", "railways"),
                  "learn_s": round(sec, 2)}
    return out


def _rank(model, text, label):
    names = [n for n, _ in model.predict([text], k=20)[0]]
    return names.index(label) + 1 if label in names else None


def open_case(train, test, work: Path, variants, n_labels: int, records: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    train_count, test_count = _counts(train), _counts(test)
    eligible = sorted(lab for lab, c in train_count.items() if c >= records and test_count.get(lab, 0) >= 3)
    chosen = sorted(rng.choice(eligible, size=n_labels, replace=False).tolist())
    held = set(chosen)
    kept = [r for r in train if not held & set(r[0])]
    learned = []
    for lab in chosen:
        docs = [r for r in train if lab in r[0] and r not in learned]
        learned += [docs[i] for i in sorted(rng.choice(len(docs), size=records, replace=False).tolist())]
    folder = work / "open"
    out = {"labels": chosen, "train_docs": len(kept), "learned_docs": len(learned),
           "train_s": round(train_model(kept, folder), 1)}
    texts, gold = [t for _, t in test], [list(labels) for labels, _ in test]
    before, _ = topk(xmtc.load(folder), texts, 10)
    out["before"] = {"P@1": round(precision(before, gold, 1), 2), "P@5": round(precision(before, gold, 5), 2)}
    carriers = [i for i, g in enumerate(gold) if held & set(g)]
    others = [i for i, g in enumerate(gold) if not held & set(g)]
    for v in variants:
        if v == "retrain":  # the reference: a retrain on the kept and the learned documents
            sec = train_model(kept + learned, work / "retrained")
            model = xmtc.load(work / "retrained")
        else:
            model, sec = learn(folder, [t for _, t in learned], [list(labels) for labels, _ in learned], v)
        pred, scores = topk(model, texts, 10)
        slots = sum(len(held & set(pred[i][:5])) for i in others) / (5.0 * len(others))
        found = np.mean([bool(held & set(gold[i]) & set(pred[i][:10])) for i in carriers])
        # the learned labels' own suggestions (top 10 of every test text): their mean score against their precision,
        # which calibrated scores make equal
        mine = [(float(scores[i][r]), lab in gold[i]) for i in range(len(texts)) for r, lab in enumerate(pred[i])
                if lab in held]
        out[v] = {"P@1": round(precision(pred, gold, 1), 2), "P@5": round(precision(pred, gold, 5), 2),
                  "learned_share_top5_others_%": round(100 * slots, 2),
                  "carriers_with_it_in_top10_%": round(100 * float(found), 2), "carriers": len(carriers),
                  "learned_suggestions_top10": len(mine),
                  "learned_mean_score_%": round(100 * float(np.mean([s for s, _ in mine])), 2) if mine else None,
                  "learned_precision_%": round(100 * float(np.mean([c for _, c in mine])), 2) if mine else None,
                  "learn_s": round(sec, 2)}
    return out


def _counts(rows) -> dict:
    out: dict = {}
    for labels, _ in rows:
        for lab in labels:
            out[lab] = out.get(lab, 0) + 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="yso-finna-en-2k-20k")
    ap.add_argument("--cases", default="railways,open")
    ap.add_argument("--variants", default="default", help=f"comma-separated: {', '.join(VARIANTS)}, {ONE_AT_A_TIME};"
                    " the open case also takes retrain")
    ap.add_argument("--labels", type=int, default=10)
    ap.add_argument("--records", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    train = [(labels, text) for text, labels in zip(*read_tsv(DATA / args.dataset / "train.txt.gz"))]
    test = [(labels, text) for text, labels in zip(*read_tsv(DATA / args.dataset / "test.txt.gz"))]
    variants = [v for v in args.variants.split(",") if v]
    rail_variants = [v for v in variants if v != "retrain"]
    res = {"dataset": args.dataset, "date": time.strftime("%Y-%m-%d %H:%M")}
    with tempfile.TemporaryDirectory() as tmp:
        if "railways" in args.cases:
            res["railways"] = railways_case(train, test, Path(tmp), rail_variants)
            print(json.dumps({"railways": res["railways"]}), flush=True)
        if "open" in args.cases:
            res["open"] = open_case(train, test, Path(tmp), variants, args.labels, args.records, args.seed)
            print(json.dumps({"open": res["open"]}), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
