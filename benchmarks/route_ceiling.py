"""How far the label-text route could reach on an open split: the hidden labels' recall at k of the route's own
ranking among every routed label, before any prior or merge decides which of them enter the top-k.

    python benchmarks/open_split.py yso-finna-en-2k-20k -o OPEN --share 0.2 --seed 0
    xmtc train OPEN/train.tsv.gz -o MODEL --label-file shared/data/yso-finna-en/labels.txt.gz
    python benchmarks/route_ceiling.py MODEL OPEN [--dense] [--json OUT]

Rows (each over the (test text, hidden label) pairs of ``OPEN/unseen.txt``):

* ``route cosine``: the route's character n-gram TF-IDF cosine (what ``predict`` scores routed labels by);
* ``dense``: with ``--dense``, the cosine of all-MiniLM-L6-v2 sentence embeddings of the text and of each routed
  label's text (the zero-shot scorer of the dual encoder and label-text methods), for comparison;
* ``model top-k``: the model's own calibrated top-k (the route merged in by its probabilities), as ``xmtc
  evaluate --unseen-labels`` counts it.

Also printed: the route's top-1 precision over all test texts against the mean probability it gives that
suggestion (how far the prior is from this split's truth), and the mean score of the model's k-th suggestion.
A recall of the route's own ranking below a bar means no prior, however large, meets that bar: the merge can
only admit or refuse what the ranking offers.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import numpy as np

KS = (1, 5, 10, 20, 50, 100)


def recall_at(ranked_ids: np.ndarray, gold: list[set[int]]) -> dict[str, float]:
    """Recall at each of :data:`KS` of ``gold`` label ids (per text) in ``ranked_ids`` (texts x depth, -1 padded)."""
    hits, pairs = np.zeros(len(KS)), 0
    for row, g in zip(ranked_ids, gold):
        for label in g:
            pairs += 1
            where = np.flatnonzero(row == label)
            if where.size:
                hits += where[0] < np.asarray(KS)
    return {f"R@{k}": round(100.0 * h / max(pairs, 1), 2) for k, h in zip(KS, hits)} | {"pairs": pairs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("open_split", help="the folder open_split.py wrote (test.tsv.gz, unseen.txt)")
    ap.add_argument("--dense", action="store_true", help="also rank by all-MiniLM-L6-v2 embeddings (minutes)")
    ap.add_argument("--k", type=int, default=10, help="the model's top-k")
    ap.add_argument("--json")
    args = ap.parse_args()
    from xmtc.models import load

    model = load(args.model)
    route = model.label_route_
    split = Path(args.open_split)
    with gzip.open(split / "test.tsv.gz", "rt", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t", 1) for line in f]
    texts = [text for _, text in rows]
    index = model.labels_.index
    unseen = {index[x] for x in (split / "unseen.txt").read_text().split() if x in index}
    gold = [{index[x] for x in labels.split(",") if x in index} & unseen for labels, _ in rows]
    all_gold = [{index[x] for x in labels.split(",") if x in index} for labels, _ in rows]
    depth = max(KS)
    ids, probs = route.topk(texts, depth)
    out = {"model": args.model, "routed": len(route), "prior_ratio": route.prior_ratio(),
           "rows": {"route cosine": recall_at(ids, gold)}}
    top1_right = np.array([ids[i, 0] in all_gold[i] for i in range(len(texts))])
    out["route top-1 precision"] = round(100.0 * top1_right.mean(), 2)
    out["route top-1 mean probability"] = round(100.0 * float(probs[:, 0].mean()), 3)
    if args.dense:
        from xmtc.features.embedder import EmbedderParams, TextEmbedder

        names = model.labels_
        label_texts = [(names.texts[j] if names.texts else "") or names.display_name(j) for j in route.label_ids]
        embedder = TextEmbedder(EmbedderParams()).load()
        L, T = embedder.embed(label_texts, progress=True), embedder.embed(texts, progress=True)
        S = T @ L.T
        top = np.argsort(-S, axis=1)[:, :depth]
        out["rows"]["dense"] = recall_at(route.label_ids[top], gold)
    idx, scores = model.predict_topk(texts, k=args.k)
    out["rows"][f"model top-{args.k}"] = {k: v for k, v in recall_at(idx, gold).items() if k == "pairs"
                                           or int(k[2:]) <= args.k}
    out[f"model's {args.k}th score, mean"] = round(float(np.mean(scores[:, args.k - 1])), 4)
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
