#!/usr/bin/env python3
"""XR-Transformer's linear stage on one saved model: prediction beams, label scores, trees of the rankers.

    python benchmarks/xrt_linear_stage.py RUN_DIR WHAT[,WHAT...] [POST_PROCESSORS]

RUN_DIR holds ``model/`` (an XR-Transformer saved with ``matcher="linear"``, fitted on the harness's label columns
of yso-finna-en-2k-20k, e.g. by ``XRTransformer(...).fit(ds.train_texts, ds.Y_train).save(RUN_DIR / "model")``);
the fine-tuned embeddings of the train and test texts are cached there (``emb.npz``). The encoder stays fixed;
WHAT picks the variants: ``pred`` (the saved linear model at beams 10-50, l3-hinge / sigmoid / noop), ``alone``
(its labels ordered by their ranker's score alone), ``refit`` (the linear stage trained again as saved),
``manB`` (MAN from a beam of B), ``tree-SHAPE-BRANCHING-LEAF-B`` (a new PIFA tree for the linear stage),
``dropB`` / ``drop-NEG-B`` (the fine-tuning tree without its last cluster level, i.e. ``ranker_leaves="nearest"``
on [16, 256, L]), ``flat`` (one-vs-all rankers). Prints one JSON row per (variant, beam, label score) with
P@1/3/5, R@100, the share of the test positives whose leaf cluster the beam holds, and predict ms/doc (encoding
+ TF-IDF + beam search); linear fits print wall and CPU seconds. Figures: benchmarks/RESULTS.md.
"""
import json
import os
import sys
import time
from pathlib import Path
import numpy as np
import scipy.sparse as sp
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))
import _data  # noqa: E402

import xmtc  # noqa: E402
from xmtc.index.kmeans import build_label_tree  # noqa: E402
from xmtc.index.pifa import pifa  # noqa: E402
from xmtc.linear.beam import beam_step, prepare_features, root_beam  # noqa: E402
from xmtc.linear.hierarchy import HierarchicalLinearModel  # noqa: E402
from xmtc.metrics import evaluate  # noqa: E402

d = Path(sys.argv[1]); what = sys.argv[2].split(",")
PPS = tuple(sys.argv[3].split(",")) if len(sys.argv) > 3 else ("l3-hinge", "noop", "sigmoid")
DATA = os.environ.get("XMTC_DATA_ROOT", str(HERE.parent.parent / "shared" / "data"))
ds = _data.load_dataset(DATA, "yso-finna-en-2k-20k")
L = ds.Y_train.shape[1]
m = xmtc.load(d / "model")
m.n_threads = 2
cache = d / "emb.npz"
t0 = time.perf_counter()
if cache.exists():
    z = np.load(cache); emb_tr, emb_te, enc_te_s = z["tr"], z["te"], float(z["enc_te_s"])
else:
    t1 = time.perf_counter(); emb_te = m.encode(ds.test_texts); enc_te_s = time.perf_counter() - t1
    emb_tr = m.encode(ds.train_texts)
    np.savez(cache, tr=emb_tr, te=emb_te, enc_te_s=enc_te_s)
t1 = time.perf_counter(); Xte_tfidf = m.featurizer_.transform(ds.test_texts); Xte = m._concat(Xte_tfidf, emb_te)
feat_te_s = time.perf_counter() - t1
Xtr_tfidf = m.featurizer_.transform(ds.train_texts); Xtr = m._concat(Xtr_tfidf, emb_tr)
print(f"encode test {enc_te_s:.1f}s featurize+concat test {feat_te_s:.2f}s; setup {time.perf_counter()-t0:.0f}s; load {os.getloadavg()}", flush=True)
n_te = Xte.shape[0]
Yte_known = sp.csr_matrix(ds.Y_test)[:, :L]

def leaf_recall(model, X, b, pp="l3-hinge"):
    """share of the test texts' known positives whose leaf cluster the label-level beam holds"""
    lv = model.levels_
    Xp = prepare_features(X, lv[0].n_features)
    ids, sc = root_beam(Xp.shape[0])
    for level in lv[:-1]:
        ids, sc = beam_step(Xp, level, ids, sc, b, post_processor=pp, n_threads=2)
    parent = lv[-1].parent_of
    Yc = Yte_known.tocoo()
    hit = (ids[Yc.row] == parent[Yc.col][:, None]).any(axis=1)
    labels_in = np.diff(lv[-1].child_ptr)[np.maximum(ids, 0)] * (ids >= 0)
    return 100 * hit.mean(), labels_in.sum(1).mean()

def ranker_alone(model, X, k, b, last_pp):
    """matcher levels as usual (l3-hinge products); the labels ordered by their ranker's score alone"""
    lv = model.levels_
    Xp = prepare_features(X, lv[0].n_features)
    ids, sc = root_beam(Xp.shape[0])
    for level in lv[:-1]:
        ids, sc = beam_step(Xp, level, ids, sc, b, n_threads=2)
    return beam_step(Xp, lv[-1], ids, np.where(ids >= 0, 1.0, 0.0).astype(np.float32), k, post_processor=last_pp,
                     n_threads=2)

rows = []
def run(model, tag, beams=(10, 20, 30, 50), pps=("l3-hinge",), extra=None):
    for pp in pps:
        for b in beams:
            t1 = time.perf_counter()
            if pp.startswith("alone-"):
                idx, sc = ranker_alone(model, Xte, 100, b, pp[6:])
            else:
                idx, sc = model.predict_topk(Xte, k=100, beam_size=b, post_processor=pp, n_threads=2)
            bs = time.perf_counter() - t1
            r = evaluate(ds.Y_test, (idx, sc), ks=(1, 3, 5, 100))
            rec, nlab = leaf_recall(model, Xte, b, pp if not pp.startswith("alone") else "l3-hinge")
            row = {"variant": tag, "beam": b, "pp": pp, **{k: round(r[k], 2) for k in ("P@1", "P@3", "P@5", "R@100")},
                   "leaf_recall": round(rec, 2), "labels_in_beam": round(nlab, 1),
                   "beam_ms_doc": round(1e3 * bs / n_te, 3),
                   "predict_ms_doc": round(1e3 * (bs + enc_te_s + feat_te_s) / n_te, 3), **(extra or {})}
            rows.append(row); print(json.dumps(row), flush=True)

base = m.models_[0]
print("linear tree", base.level_sizes, flush=True)
if "alone" in what:
    run(base, "saved", beams=(10, 20, 30), pps=("alone-l3-hinge", "alone-noop"))
if "pred" in what:
    run(base, "saved", pps=("l3-hinge", "sigmoid"))
    run(base, "saved", beams=(10,), pps=("noop",))

def fit_linear(tree, b_train, tag, neg="tfn+man"):
    t1 = time.perf_counter(); c1 = time.process_time()
    hm = HierarchicalLinearModel().fit(Xtr, ds.Y_train, tree, negatives=neg, beam_size=b_train, n_threads=2,
                                       threshold=m.threshold, tol=m.tol, C_pos=m.C_pos, C_neg=m.C_neg, bias=m.bias)
    fs = time.perf_counter() - t1
    print(f"{tag}: linear fit {fs:.1f}s, cpu {time.process_time() - c1:.1f}s, levels {hm.level_sizes}, load {os.getloadavg()}", flush=True)
    return hm, fs

if "refit" in what:  # same tree, same settings: the saved linear stage again (sanity + its time)
    hm, fs = fit_linear(base.chain, 10, "refit-b10")
    run(hm, "refit same tree, MAN beam 10", beams=(10, 20), extra={"linear_fit_s": round(fs, 1)})
for w in what:
    if w.startswith("man"):  # wider MAN beam on the same tree
        bt = int(w[3:])
        hm, fs = fit_linear(base.chain, bt, f"man{bt}")
        run(hm, f"same tree, MAN beam {bt}", beams=(10, 20, 30), extra={"linear_fit_s": round(fs, 1)})
    if w.startswith("tree"):  # a different tree for the linear stage: treeSHAPE-BRANCH-LEAF-MANBEAM
        _, shape, br, leaf, bt = w.split("-")
        t1 = time.perf_counter()
        lab = pifa(Xtr_tfidf, ds.Y_train)
        tree = build_label_tree(lab, branching=int(br), max_leaf_size=int(leaf), seed=0, max_iter=m.kmeans_max_iter,
                                n_threads=2, shape=shape)
        ts = time.perf_counter() - t1
        print(f"{w}: tree {tree.level_sizes} in {ts:.1f}s", flush=True)
        hm, fs = fit_linear(tree, int(bt), w)
        run(hm, f"linear tree {shape} {tree.level_sizes}, MAN beam {bt}", beams=(10, 20), pps=("l3-hinge", "noop"),
            extra={"linear_fit_s": round(fs, 1), "tree_s": round(ts, 1)})
    if w.startswith("drop"):  # the fine-tuning tree without its middle level: [16, L]; dropB or drop-NEG-B
        ch = base.chain
        C = sp.csr_matrix(ch[2] @ ch[1]); C.data[:] = 1
        tree = [ch[0], C]
        parts = w.split("-")
        neg, bt = (parts[1], int(parts[2])) if len(parts) == 3 else ("tfn+man", int(w[4:] or 10))
        hm, fs = fit_linear(tree, bt, w, neg=neg)
        run(hm, f"fine-tuning tree without level 2 {hm.level_sizes}, {neg} MAN beam {bt}", beams=(5, 10, 16),
            pps=PPS, extra={"linear_fit_s": round(fs, 1)})
    if w == "flat":  # one-vs-all rankers: every label against every text
        tree = [sp.csr_matrix(np.ones((L, 1), dtype=np.float32))]
        hm, fs = fit_linear(tree, 10, w, neg="tfn")
        run(hm, "flat one-vs-all", beams=(10,), pps=("l3-hinge", "noop"), extra={"linear_fit_s": round(fs, 1)})
out = d / f"analyze-{'_'.join(what)}.json"
out.write_text(json.dumps(rows, indent=1))
