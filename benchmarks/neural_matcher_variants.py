#!/usr/bin/env python3
"""Where XR-Transformer's neural matcher loses: its variants on one saved ``matcher="neural"`` model.

    python benchmarks/neural_matcher_variants.py MODEL_DIR [--dataset yso-finna-en-2k-20k]

MODEL_DIR is a model benchmarks/methods.py saved (a row listed in ``--ensemble``), fitted on the harness's
label columns. The encoder and the rankers' features stay fixed; for the heads as saved and for heads refit
on the final training embeddings (eq. 11's objective on the eq. 8 shortlist), the rankers are retrained with
MAN from that beam (beam 10) and the test set is predicted with beam 10 and 20, the label score being the
ranker's times the matcher's (product) or the ranker's alone. Prints P@1/3/5 and the share of each test
text's positive clusters (at the matcher's last level) that the beam holds. Figures: benchmarks/RESULTS.md.
"""
import argparse
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
from xmtc.metrics import evaluate  # noqa: E402
from xmtc.linear.cluster_rankers import ClusterRankers  # noqa: E402
from xmtc.methods.xr_transformer.bootstrap import refit_heads  # noqa: E402
from xmtc.methods.xr_transformer.finetune import label_mass, level_positives, node_of_label  # noqa: E402
from xmtc.methods.xr_transformer.matcher import neural_beam  # noqa: E402
from xmtc.data.data_root import data_root  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("model_dir")
ap.add_argument("--dataset", default="yso-finna-en-2k-20k")
ap.add_argument("--data-root", default=str(data_root()))
args = ap.parse_args()
ds = _data.load_dataset(args.data_root, args.dataset)
m = xmtc.load(args.model_dir)
t0 = time.time()
chain = [sp.csr_matrix(C) for C in m._matcher_chain()]
for lv in m.rankers_.levels_:
    p = np.asarray(lv.parent_of)
    chain.append(sp.csr_matrix((np.ones(p.size, np.float32), (np.arange(p.size), p)), shape=(p.size, lv.n_parents)))
print("chain", [C.shape for C in chain], "matcher levels", m.matcher_levels_, flush=True)
# map the model's label ids to the dataset's columns
names = list(m.labels_.names) if hasattr(m.labels_, "names") else list(m.labels_)
col = {n: i for i, n in enumerate(ds.label_names)}
perm = (np.array([col[n] for n in names]) if all(n in col for n in names)
        else np.arange(len(names)))  # fitted on the harness's label columns
Ytr = sp.csr_matrix(ds.Y_train)[:, perm]
Yte = sp.csr_matrix(ds.Y_test)
emb_tr = m.encode(ds.train_texts)
emb_te = m.encode(ds.test_texts)
Xtr = m._concat(m.featurizer_.transform(ds.train_texts), emb_tr)
Xte = m._concat(m.featurizer_.transform(ds.test_texts), emb_te)
print("encoded in", time.time() - t0, flush=True)


def score(ids, sc, tag):
    idx = np.where(ids >= 0, perm[np.maximum(ids, 0)], -1)
    r = evaluate(Yte, (idx, sc), ks=(1, 3, 5))
    print(f"{tag:66s} P@1 {r['P@1']:.2f} P@3 {r['P@3']:.2f} P@5 {r['P@5']:.2f}", flush=True)
    return r


def beam_recall(ids, level, Y):
    anc = node_of_label(chain, level)
    pos = sp.csr_matrix(label_mass(Y, anc, chain[level].shape[0]) != 0, dtype=np.float32)
    hit = 0
    for i in range(ids.shape[0]):
        row = set(pos.indices[pos.indptr[i]:pos.indptr[i + 1]])
        hit += len(row & set(ids[i][ids[i] >= 0].tolist())) / max(1, len(row))
    return 100 * hit / ids.shape[0]


Yte_model = sp.csr_matrix(Yte[:, perm])  # test labels in model columns (labels only in test dropped)
heads = [m.heads_[t] for t in m.matcher_levels_]
start = m.matcher_levels_[-1] + 1
cfg = dict(negatives="tfn+man", beam_size=10, n_threads=2)


def run(heads, tag, beams=(10,), unit=False):
    bi_tr, bs_tr = neural_beam(emb_tr, heads, m.matcher_children_, 10)
    rk = ClusterRankers().fit(Xtr, Ytr, chain, start, bi_tr, bs_tr, **cfg)
    for b in beams:
        bi, bs = neural_beam(emb_te, heads, m.matcher_children_, b)
        print(f"  beam {b}: test recall of positive clusters at level {start - 1}: "
              f"{beam_recall(bi, start - 1, Yte_model):.2f}", flush=True)
        ids, sc = rk.predict_topk(Xte, bi, bs, 5)
        score(ids, sc, f"{tag}, beam {b}")
        if unit:
            ids, sc = rk.predict_topk(Xte, bi, np.ones_like(bs), 5)
            score(ids, sc, f"{tag}, beam {b}, ranker score only")


ids, sc = m.predict_topk(ds.test_texts, k=5)
score(np.asarray(ids), np.asarray(sc), "saved model as is")
run(heads, "stale heads (as trained), rankers refit", beams=(10, 20), unit=True)
# refit every matcher head on the final embeddings (eq. 11's objective on the eq. 8 shortlist)
t1 = time.time()
refit = refit_heads(emb_tr, chain, m.matcher_levels_, level_positives(Ytr, chain), 10, n_threads=2)
print(f"refit in {time.time() - t1:.1f}s", flush=True)
run([refit[t] for t in m.matcher_levels_], "heads refit on final embeddings", beams=(10, 20), unit=True)
