"""Transformer methods on a tiny randomly initialised BERT: end to end, shortlist, bootstrapping, resume, DDP.

The encoder is conftest's tiny random BERT (2 layers, hidden 32) with a word-level WordPiece vocabulary made
from the sample's own texts, so nothing is downloaded and a fit takes seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import xmtc  # noqa: E402
from xmtc.cli import main  # noqa: E402
from xmtc.errors import ConfigError, ModelFormatError  # noqa: E402
from xmtc.methods.xr_transformer.bootstrap import bootstrap_inherit, bootstrap_linear  # noqa: E402
from xmtc.neural.heads import LazyAdam, RowSparseHead, merge_row_grads  # noqa: E402
from xmtc.neural.losses import shortlist_loss  # noqa: E402
from xmtc.neural.shortlist import build_shortlist, children_csr  # noqa: E402

FAST = dict(max_leaf_size=20, branching=8, n_threads=2, batch_size=32, max_length=16, seed=0,
            head_learning_rate=5e-3, learning_rate=1e-3, matcher="neural")


@pytest.fixture(scope="module")
def sample(tsv_sample):
    return tsv_sample("yso-finna-en-2k-20k", "train", 800), tsv_sample("yso-finna-en-2k-20k", "test", 200)


@pytest.fixture(scope="module")
def encoder_dir(sample, tiny_bert_builder, tmp_path_factory):
    # an encoder of this sample's own words (no unknown tokens), which the figures of this file were measured on
    return tiny_bert_builder(tmp_path_factory.mktemp("bert") / "tiny", sample[0][0])


@pytest.fixture(scope="module")
def fitted(sample, encoder_dir):
    (texts, labels), _ = sample
    return xmtc.XRTransformer(encoder=str(encoder_dir), **FAST).fit(texts, labels, progress=False)


@pytest.fixture(scope="module")
def fitted_linear(sample, encoder_dir):
    """The default matcher (linear) on a tree the nearest rule cuts: L / max_leaf_size ~ 10 lies between the
    fine-tuning tree's levels of 8 and 64 clusters, nearer 8."""
    (texts, labels), _ = sample
    n_labels = len({x for ls in labels for x in ls})
    params = {**FAST, "matcher": "linear", "max_leaf_size": -(-n_labels // 10)}
    return xmtc.XRTransformer(encoder=str(encoder_dir), **params).fit(texts, labels, progress=False)


# -- shortlist and heads against their definitions ------------------------------------------------------
def test_shortlist_equals_eq8_on_a_hand_made_tree():
    # level t-1 has 3 nodes; level t has 6 nodes with parents [0, 0, 1, 1, 2, 2]
    children = children_csr(np.array([0, 0, 1, 1, 2, 2]), 3)
    prev_topk = np.array([[0, -1], [2, -1]])
    # doc 0 has 2 labels under node 4 and 1 under node 0 (positive parents 0 and 2);
    # doc 1 has 1 label under node 3 (positive parent 1)
    mass = sp.csr_matrix(np.array([[1, 0, 0, 0, 2, 0], [0, 0, 0, 1, 0, 0]], dtype=np.float32))
    prev_pos = sp.csr_matrix(np.array([[1, 0, 1], [0, 1, 0]], dtype=np.float32))
    ids, targets, weights = build_shortlist(prev_topk, mass, children, neg_weight=0.5, prev_positive=prev_pos)
    # eq. 8: doc 0: children({0} ∪ {0, 2}) = {0, 1, 4, 5}; doc 1: children({2} ∪ {1}) = {2, 3, 4, 5}
    # (node 5, the sibling of the positive node 4, is a negative of doc 0 although no top-k led there)
    assert ids.tolist() == [[0, 1, 4, 5], [2, 3, 4, 5]]
    assert targets.tolist() == [[1, -1, 1, -1], [-1, 1, -1, -1]]
    # positive weight = n_pos * share: doc 0 has 2 positive nodes with shares 1/3 and 2/3; negatives alpha
    np.testing.assert_allclose(weights, [[2 / 3, 0.5, 4 / 3, 0.5], [0.5, 1.0, 0.5, 0.5]], rtol=1e-6)
    ids0, t0, w0 = build_shortlist(None, mass, children)
    assert ids0.tolist() == [list(range(6))] * 2 and (w0 > 0).all()


def test_rankers_features_equal_scipys_stack_of_tfidf_and_normalised_embedding():
    from xmtc.index.pifa import normalize_rows
    from xmtc.features.concat import concat_features

    rng = np.random.default_rng(0)
    X = sp.random(500, 40, density=0.1, format="csr", dtype=np.float32, random_state=1)
    X = sp.csr_matrix(X.multiply((np.arange(500) % 9 != 3)[:, None]))  # some empty TF-IDF rows
    X.eliminate_zeros()
    E = rng.standard_normal((500, 7)).astype(np.float32)
    E[5] = 0.0      # an all-zero embedding stays zero
    E[7, 2] = 0.0   # a single exact zero is not stored
    ref = sp.hstack([X, sp.csr_matrix(normalize_rows(E) * np.float32(0.5))], format="csr", dtype=np.float32)
    got = concat_features(X, E, 0.5, rows_per_chunk=64)  # several chunks, the last one partial
    assert got.shape == ref.shape and got.has_canonical_format
    for a in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(got, a), getattr(ref, a))


def test_inherit_bootstrap_copies_the_parents_rows():
    rng = np.random.default_rng(0)
    W_parent, b_parent = rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=3).astype(np.float32)
    W, b = bootstrap_inherit(W_parent, b_parent, np.array([2, 0, 0, 1]))
    np.testing.assert_array_equal(W, W_parent[[2, 0, 0, 1]])
    np.testing.assert_array_equal(b, b_parent[[2, 0, 0, 1]])


def test_linear_bootstrap_is_the_optimum_of_eq11_on_the_eq8_shortlist():
    from scipy.optimize import minimize

    from xmtc.linear.solver import primal_objective

    rng = np.random.default_rng(0)
    n, h = 60, 4
    E = rng.normal(size=(n, h)).astype(np.float32)
    parent_of = np.array([0, 0, 1, 1, 2, 2])
    P = sp.csr_matrix((rng.random((n, 6)) < 0.2).astype(np.float32))           # positives of level t
    prev_pos = sp.csr_matrix((P @ children_csr(parent_of, 3).T) > 0, dtype=np.float32)
    prev_topk = rng.integers(-1, 3, size=(n, 1))
    W, b = bootstrap_linear(E, P, parent_of, 3, prev_topk, prev_pos, neg_weight=0.5, tol=1e-6, max_iter=2000)
    for k in range(6):
        p = parent_of[k]
        rows = np.flatnonzero((prev_topk[:, 0] == p) | (prev_pos.toarray()[:, p] > 0))   # eq. 8 for node k
        y = np.where(P.toarray()[rows, k] > 0, 1.0, -1.0)
        X = sp.csr_matrix(E[rows])
        f = lambda wb: primal_objective(X, y, wb[:h], wb[h], 1.0, 0.5, 1.0)  # noqa: E731
        ref = minimize(f, np.zeros(h + 1), method="L-BFGS-B", options={"ftol": 1e-14, "gtol": 1e-10}).x
        assert f(np.r_[W[k], b[k]]) == pytest.approx(f(ref), rel=1e-5, abs=1e-6)
        np.testing.assert_allclose(np.r_[W[k], b[k]], ref, atol=2e-3)
        # a different training set (every text) gives a different optimum: the shortlist matters
        everything = bootstrap_linear(E, P, parent_of, 3, None, None, neg_weight=0.5, tol=1e-6, max_iter=2000)
        if k == 0:
            assert np.abs(everything[0] - W).max() > 1e-2


def test_bootstrap_rules_are_explicit():
    from xmtc.methods.xr_transformer.bootstrap import start_head

    kw = dict(n_nodes=4, hidden=3, seed=0, parent_of=np.array([0, 0, 1, 1]), n_parents=2,
              prev_head=(np.ones((2, 3), np.float32), np.zeros(2, np.float32)))
    with pytest.raises(ConfigError, match="inherit"):
        start_head("inherit", 3, 1, **kw)               # level 2 was skipped
    W, _ = start_head("inherit", 2, 1, **kw)
    assert W.shape == (4, 3) and (W == 1).all()
    W1, _ = start_head("linear", 0, None, **kw)            # first level: random, logged
    W2, _ = start_head("random", 0, None, **kw)
    np.testing.assert_array_equal(W1, W2)


def test_row_sparse_head_scores_the_shortlist_and_grads_only_its_rows():
    head = RowSparseHead(np.arange(12.0).reshape(4, 3), np.ones(4))
    emb = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]], requires_grad=True)
    hb = head.gather(torch.tensor([[3, 0], [1, -1]]))
    scores = hb.score(emb)
    assert scores.tolist() == [[10.0, 1.0], [10.0, 0.0]]  # W[3]·e0 + 1, W[0]·e0 + 1, W[1]·e1 + 1, padding 0
    assert hb.rows.tolist() == [0, 1, 3] and tuple(hb.w.shape) == (3, 3)   # row 2 is not even copied
    scores.sum().backward()
    rows, gw, gb = hb.grads()
    np.testing.assert_array_equal(gw.numpy(), [[1, 0, 0], [0, 1, 1], [1, 0, 0]])  # d score / d W_r = e
    np.testing.assert_array_equal(gb.numpy(), [1, 1, 1])
    targets = torch.tensor([[1.0, -1.0], [-1.0, 0.0]])
    weights = torch.tensor([[1.0, 2.0], [0.5, 0.0]])
    # squared hinge: max(0, 1 - y s)^2 -> [0, 4, 121, -], weighted and summed over 2 documents
    assert shortlist_loss(scores, targets, weights).item() == pytest.approx((0 + 2 * 4 + 0.5 * 121) / 2)


def test_merge_row_grads_sums_rows_over_micro_batches():
    a = (torch.tensor([1, 4]), torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([1.0, 2.0]))
    b = (torch.tensor([0, 4]), torch.tensor([[5.0, 6.0], [7.0, 8.0]]), torch.tensor([3.0, 4.0]))
    rows, gw, gb = merge_row_grads([a, b])
    assert rows.tolist() == [0, 1, 4]
    assert gw.tolist() == [[5, 6], [1, 2], [10, 12]] and gb.tolist() == [3, 1, 6]


def test_lazy_adam_is_adam_when_every_row_is_touched_and_leaves_other_rows_alone():
    rng = np.random.default_rng(0)
    W0, b0 = rng.normal(size=(5, 3)).astype(np.float32), rng.normal(size=5).astype(np.float32)
    head = RowSparseHead(W0, b0)
    opt = LazyAdam(head, lr=0.01)
    Wt, bt = torch.nn.Parameter(torch.from_numpy(W0.copy())), torch.nn.Parameter(torch.from_numpy(b0.copy()))
    ref = torch.optim.Adam([Wt, bt], lr=0.01)
    all_rows = torch.arange(5)
    for _ in range(4):
        gw, gb = torch.from_numpy(rng.normal(size=(5, 3)).astype(np.float32)), torch.randn(5)
        opt.step(all_rows, gw, gb)
        Wt.grad, bt.grad = gw.clone(), gb.clone()
        ref.step()
    np.testing.assert_allclose(head.weight.numpy(), Wt.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(head.bias.numpy(), bt.detach().numpy(), rtol=1e-5, atol=1e-6)
    before = head.weight.clone()
    opt.step(torch.tensor([1, 3]), torch.ones(2, 3), torch.ones(2))
    changed = (head.weight != before).any(1).tolist()
    assert changed == [False, True, False, True, False]


def test_neural_beam_equals_hand_computed_l3_hinge_products():
    from xmtc.methods.xr_transformer.matcher import neural_beam, top_k

    # level 0: 2 nodes; level 1: 4 nodes, parents [0, 0, 1, 1]; embedding dimension 1
    W0, b0 = np.array([[1.0], [0.5]], np.float32), np.zeros(2, np.float32)
    W1, b1 = np.array([[2.0], [0.0], [1.0], [-1.0]], np.float32), np.zeros(4, np.float32)
    ch = children_csr(np.array([0, 0, 1, 1]), 2)
    emb = np.array([[0.5]], np.float32)
    f = lambda s: np.exp(-max(0.0, 1.0 - s) ** 3)  # noqa: E731
    ids, sc = neural_beam(emb, [(W0, b0), (W1, b1)], [None, ch], beam_size=2)
    expect = sorted([(f(0.5) * f(1.0), 0), (f(0.5) * f(0.0), 1), (f(0.25) * f(0.5), 2), (f(0.25) * f(-0.5), 3)],
                    key=lambda t: -t[0])[:2]
    assert ids.tolist() == [[i for _, i in expect]]
    np.testing.assert_allclose(sc[0], [s for s, _ in expect], rtol=1e-6)
    # ties go to the smaller id; padding where fewer candidates exist
    i, s = top_k(np.array([[1.0, 3.0, 3.0, -np.inf]], np.float32), None, 5)
    assert i.tolist() == [[1, 2, 0, -1, -1]]


# -- end to end ------------------------------------------------------------------------------------------
def test_xr_transformer_trains_every_level_and_predicts(fitted, sample):
    _, (texts, labels) = sample
    assert sorted(fitted.heads_) == list(range(len(fitted.tree_sizes_)))  # every level fine-tuned
    first_level = fitted.loss_curves_[0]
    assert first_level[-1] < first_level[0]
    assert fitted.matcher == "neural" and fitted.matcher_levels_ == list(range(len(fitted.tree_sizes_) - 1))
    emb = fitted.encode(texts[:7])
    assert emb.shape == (7, 32) and emb.dtype == np.float32 and np.isfinite(emb).all()


def test_neural_matcher_follows_its_heads_and_ignores_the_linear_matcher(fitted, sample, monkeypatch):
    from xmtc.linear.hierarchy import HierarchicalLinearModel

    _, (texts, _) = sample
    monkeypatch.setattr(HierarchicalLinearModel, "predict_topk",
                        lambda *a, **k: pytest.fail("the linear matcher was used"))
    idx, sc = fitted.predict_topk(texts[:50], 5)
    m = fitted.matcher_levels_[-1]
    assert m == len(fitted.tree_sizes_) - 2   # one ranker level: the labels, children of the matcher's clusters
    parent_of = fitted.rankers_.levels_[-1].parent_of
    c = parent_of[idx[0, 0]]                  # the cluster of text 0's best label
    W, b = fitted.heads_[m]
    saved = W[c].copy(), b[c].copy()
    try:
        # push that cluster's head row far down: every label under it must leave text 0's predictions
        W[c], b[c] = 0.0, -100.0
        idx2, _ = fitted.predict_topk(texts[:50], 5)
    finally:
        W[c], b[c] = saved
    under = set(np.flatnonzero(parent_of == c).tolist())
    assert idx[0, 0] in under and not set(idx2[0].tolist()) & under
    # restored: the same predictions again
    np.testing.assert_array_equal(fitted.predict_topk(texts[:50], 5)[0], idx)


@pytest.mark.parametrize("combine", ["product", "ranker"])
def test_neural_matcher_explanation_equals_the_margins_computed_by_hand(fitted, sample, combine, monkeypatch):
    """The ranker's margin on [tfidf, emb], plus (product only) the matcher margins emb @ W[c] + b[c] up the path."""
    _, (texts, _) = sample
    monkeypatch.setattr(fitted, "matcher_combine", combine)
    expl = fitted.explain(texts[:3], k=3, n_terms=100_000)
    assert len(fitted.rankers_.levels_) == 1  # the labels are the children of the matcher's clusters
    level = fitted.rankers_.levels_[0]
    W = level.to_weights().toarray().astype(np.float64)
    n_tfidf = fitted.featurizer_.n_features_
    emb = fitted.encode(texts[:3]).astype(np.float64)
    X = fitted.transform(texts[:3]).toarray().astype(np.float64)
    parents = []  # each matcher level's parent of every node, from its (n_parents, n_nodes) children matrix
    for C in fitted.matcher_children_:
        coo = C.tocoo()
        parents.append(coo.row[np.argsort(coo.col)])
    idx, sc = fitted.predict_topk(texts[:3], 3)
    for i, row in enumerate(expl):
        assert [e["label"] for e in row] == [fitted.labels_.names[j] for j in idx[i] if j >= 0]
        for e in row:
            j = fitted.labels_.index[e["label"]]
            ranker = X[i] @ W[:-1, j] + level.bias * W[-1, j]
            node, matcher, matcher_bias = int(level.parent_of[j]), 0.0, 0.0
            for t, parent in zip(reversed(fitted.matcher_levels_), reversed(parents)):
                Wm, bm = fitted.heads_[t]
                matcher += emb[i] @ Wm[node].astype(np.float64) + float(bm[node])
                matcher_bias += float(bm[node])
                node = int(parent[node])
            if combine == "ranker":  # the matcher only chose the candidates
                matcher = matcher_bias = 0.0
            terms = {t["term"]: t["weight"] for t in e["terms"]}
            assert e["margin"] == pytest.approx(ranker + matcher, rel=1e-4, abs=1e-5)
            assert terms["[embedding]"] == pytest.approx(X[i, n_tfidf:] @ W[n_tfidf:-1, j] + matcher - matcher_bias,
                                                         rel=1e-4, abs=1e-5)
            assert sum(terms.values()) + e["bias"] == pytest.approx(e["margin"], rel=1e-4, abs=1e-5)


def _neural_parts(model, texts):
    """Hand-made pieces of a neural-matcher prediction: beam (ids, scores), label parents, l3-hinge ranker scores."""
    from xmtc.methods.xr_transformer.matcher import neural_beam

    emb = model.encode(texts)
    heads = [model.heads_[t] for t in model.matcher_levels_]
    ids, sc = neural_beam(emb, heads, model.matcher_children_, model.beam_size, post_processor="l3-hinge")
    level = model.rankers_.levels_[-1]
    W = level.to_weights().toarray().astype(np.float64)
    X = model.transform(texts).toarray().astype(np.float64)
    margins = X @ W[:-1] + level.bias * W[-1]
    return ids, sc, np.asarray(level.parent_of), np.exp(-np.maximum(0.0, 1.0 - margins) ** 3)


@pytest.mark.parametrize("combine", ["ranker", "product"])
def test_matcher_combine_orders_the_beams_labels_as_defined(fitted, sample, combine, monkeypatch):
    """ranker: l3-hinge of the ranker margin alone; product: that times the matcher's beam score."""
    _, (texts, _) = sample
    monkeypatch.setattr(fitted, "matcher_combine", combine)
    texts = texts[:20]
    ids, sc, parent_of, ranker = _neural_parts(fitted, texts)
    idx, scores = fitted.predict_topk(texts, 5)
    for i in range(len(texts)):
        beam = {int(c): float(s) for c, s in zip(ids[i], sc[i]) if c >= 0}
        cand = np.flatnonzero(np.isin(parent_of, list(beam)))
        expect = ranker[i, cand] * (np.array([beam[int(parent_of[j])] for j in cand]) if combine == "product" else 1.0)
        top = np.argsort(-expect, kind="stable")[:5]
        np.testing.assert_allclose(scores[i], expect[top], rtol=1e-4, atol=1e-6)
        assert set(idx[i][scores[i] > scores[i][-1] + 1e-5].tolist()) <= set(cand[top].tolist())


def test_linear_matcher_defaults_rank_by_the_ranker_on_leaves_of_about_max_leaf_size_labels():
    model = xmtc.XRTransformer()
    assert (model.matcher, model.matcher_combine, model.ranker_leaves) == ("linear", "ranker", "nearest")
    assert model._label_score() == "ranker" and xmtc.XRLinear()._label_score() == "product"


def test_ranker_leaves_cut_the_fine_tuning_tree_at_the_level_nearest_l_over_max_leaf_size():
    from xmtc.index.tree import LabelTree

    # [16, 256, 1994] as yso-finna-en-2k-20k's full tree: 1994 / 100 = 19.9 labels' worth of leaves; 16 is nearer
    p0, p1 = np.zeros(16, int), np.repeat(np.arange(16), 16)
    p2 = np.sort(np.r_[np.arange(256), np.random.default_rng(0).integers(0, 256, 1994 - 256)])
    tree = LabelTree.from_parents([p0, p1, p2])
    model = xmtc.XRTransformer(max_leaf_size=100)
    cut = model._ranker_tree(tree, model.config)
    assert cut.level_sizes == [16, 1994]
    np.testing.assert_array_equal(cut.parents[-1], p1[p2])  # each label under its level-0 ancestor
    np.testing.assert_array_equal(cut.parents[0], p0)
    # 1994 / 8 = 249 leaves wanted: 256 is nearer, the tree stays; so it does with finest or one cluster level
    model.set_params(max_leaf_size=8)
    assert model._ranker_tree(tree, model.config) is tree
    model.set_params(max_leaf_size=100, ranker_leaves="finest")
    assert model._ranker_tree(tree, model.config) is tree
    flat = LabelTree.from_parents([np.zeros(16, int), p1])
    assert xmtc.XRTransformer()._ranker_tree(flat, xmtc.XRTransformer().config) is flat


def test_linear_matcher_ranks_its_beams_labels_by_their_ranker_score_alone(fitted_linear, sample):
    """Leaves at the 8-cluster level; the top-k are the beam clusters' labels by l3-hinge of their own margin."""
    _, (texts, _) = sample
    texts = texts[:20]
    m = fitted_linear
    hm = m.models_[0]
    n_labels = m.tree_sizes_[-1]
    assert m.tree_sizes_ == [8, 64, n_labels] and hm.level_sizes == [8, n_labels]
    X = m.transform(texts).toarray().astype(np.float64)
    Xb = np.hstack([X, np.full((len(texts), 1), hm.bias)])
    W0, W1 = (W.toarray().astype(np.float64) for W in hm.weights)
    f = lambda s: np.exp(-np.maximum(0.0, 1.0 - s) ** 3)  # noqa: E731
    clusters, labels = f(Xb @ W0), f(Xb @ W1)
    parent = hm.chain[1].indices
    idx, scores = m.predict_topk(texts, 5)
    product = hm.predict_topk(m.transform(texts), 5, beam_size=m.beam_size)[1]
    for i in range(len(texts)):
        beam = np.argsort(-clusters[i], kind="stable")[:m.beam_size]
        cand = np.flatnonzero(np.isin(parent, beam))
        top = cand[np.argsort(-labels[i, cand], kind="stable")[:5]]
        np.testing.assert_allclose(scores[i], labels[i, top], rtol=1e-4, atol=1e-6)
        assert set(idx[i][scores[i] > scores[i][-1] + 1e-5].tolist()) <= set(top.tolist())
    assert not np.allclose(product, scores)  # PECOS's product orders them differently


def test_matcher_heads_are_eq11_refit_on_the_final_embeddings(fitted, sample):
    """Every matcher head equals the solver's eq. 11 optimum on the finished encoder's training embeddings."""
    from xmtc.methods.xr_transformer.bootstrap import bootstrap_linear
    from xmtc.methods.xr_transformer.finetune import level_positives
    from xmtc.methods.xr_transformer.matcher import head_beam_step

    from xmtc.features.encoder import Tokenized, encode
    from xmtc.neural.frozen import FrozenPrefix, effective_frozen_layers

    (texts, labels), _ = sample
    assert fitted.matcher_heads == "refit"
    # the training embeddings as fit made them: the upper layers on the frozen layers' cached output
    k = effective_frozen_layers(fitted.encoder_, fitted.frozen_layers)
    assert k == 1  # the default (3) on conftest's 2-layer encoder
    tok = Tokenized(fitted.tokenizer_, texts, fitted.max_length)
    frozen = FrozenPrefix(fitted.encoder_, k, tok, "cpu", fitted.precision, batch_size=fitted.encode_batch_size)
    try:
        emb = encode(fitted.encoder_, tok, pooling=fitted.pooling, batch_size=fitted.encode_batch_size,
                     precision=fitted.precision, frozen=frozen)
    finally:
        frozen.release()
    chain = [sp.csr_matrix(C) for C in fitted._matcher_chain()]
    p = np.asarray(fitted.rankers_.levels_[-1].parent_of)
    chain.append(sp.csr_matrix((np.ones(p.size), (np.arange(p.size), p)), shape=(p.size, chain[-1].shape[0])))
    rows = [[fitted.labels_.index[x] for x in ls] for ls in labels]
    Y = sp.csr_matrix((np.ones(sum(map(len, rows))), np.concatenate(rows), np.cumsum([0] + [len(r) for r in rows])),
                      shape=(len(texts), len(fitted.labels_.names)))
    pos = level_positives(Y, chain)
    W0, b0 = bootstrap_linear(emb, pos[0], chain[0].indices, 1, None, None, n_threads=2)
    np.testing.assert_allclose(fitted.heads_[0][0], W0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fitted.heads_[0][1], b0, rtol=1e-5, atol=1e-6)
    top0, _ = head_beam_step(emb, W0, b0, None, None, None, fitted.shortlist_topk)
    W1, b1 = bootstrap_linear(emb, pos[1], chain[1].indices, chain[1].shape[1], top0, pos[0], n_threads=2)
    np.testing.assert_allclose(fitted.heads_[1][0], W1, rtol=1e-5, atol=1e-6)
    # the label level was fine-tuned, not refit: it is no matcher level
    assert 2 not in fitted.matcher_levels_ and fitted.heads_[2][0].shape[0] == chain[2].shape[0]


@pytest.mark.parametrize("learning_rate", [1e-3, 0.0])
def test_fine_tuning_descends_the_level_objective_through_the_encoder(tiny_bert_builder, tmp_path, learning_rate):
    """The level's head frozen (its rate 0), the same eight texts every step, no dropout: whatever lowers the
    eq. 5 loss is the encoder's own update. At rate 0 the loss stays where it started (the control)."""
    from xmtc.features.encoder import Tokenized, load_encoder
    from xmtc.methods.xr_transformer import finetune
    from xmtc.neural.distributed import DistContext

    texts = [f"text number {w} about {v}" for w, v in zip("abcdefgh", "ijklmnop")]
    enc_dir = tiny_bert_builder(tmp_path / "bert", texts, hidden=16, dropout=0.0)
    tokenizer, encoder = load_encoder(str(enc_dir), torch.device("cpu"))
    tok = Tokenized(tokenizer, texts, 16)
    rng = np.random.default_rng(3)
    mass = sp.csr_matrix(np.eye(8, 4, dtype=np.float32)[:, [0, 1, 2, 3]] + np.eye(8, 4, k=-4, dtype=np.float32))
    head = RowSparseHead(rng.normal(scale=0.3, size=(4, 16)).astype(np.float32), np.zeros(4, np.float32))
    settings = finetune.FinetuneSettings(epochs=30, batch_size=8, head_learning_rate=0.0, learning_rate=learning_rate,
                                         max_grad_norm=0.0, pooling="mean", warmup_ratio=0.0, weight_decay=0.0,
                                         precision="fp32")
    trainer = finetune.LevelTrainer(encoder, head, tok, mass, None, None, children_csr(np.zeros(4, np.int64), 1),
                                    settings, torch.device("cpu"), DistContext(), "level1", rng_seed=0)
    assert len(trainer.batches) == 30 and all(sorted(b.tolist()) == list(range(8)) for b in trainer.batches)
    trainer.run(progress=False)
    first, last = trainer.losses[0], trainer.losses[-1]
    if learning_rate:
        assert last < 0.8 * first, (first, last)  # measured 4.21 -> 3.01
    else:
        assert last == pytest.approx(first, rel=1e-5)


def test_finetune_sample_fine_tunes_on_a_subset_and_ranks_on_every_text(sample, encoder_dir, monkeypatch):
    from xmtc.methods.xr_transformer import finetune

    (texts, labels), (test_texts, test_labels) = sample
    embedded = []
    real = finetune.embed_all
    monkeypatch.setattr(finetune, "embed_all", lambda enc, tok, *a, **kw: embedded.append(len(tok)) or real(enc, tok, *a, **kw))
    model = xmtc.XRTransformer(encoder=str(encoder_dir), finetune_sample=320, **FAST).fit(
        texts, labels, progress=False)
    # 320 texts at batch 32: ten optimisation steps per level, where the whole set would take 25
    assert {len(c) for c in model.loss_curves_.values()} == {10}
    # each level embeds the sample for its top-k; the rankers' features embed every text
    assert embedded == [320] * len(model.loss_curves_) + [len(texts)]
    assert model.predict_topk(test_texts, k=5)[0].shape == (len(test_texts), 5)


@pytest.mark.slow
def test_tree_shape_coarse_epochs_and_the_topk_positives_shortlist(sample, encoder_dir, monkeypatch):
    from xmtc.index.tree import level_splits
    from xmtc.methods.xr_transformer import finetune

    (texts, labels), _ = sample
    calls = []
    real = finetune.build_shortlist
    monkeypatch.setattr(finetune, "build_shortlist",
                        lambda topk, *a, prev_positive=None, **kw: calls.append((topk is None, prev_positive is None))
                        or real(topk, *a, prev_positive=prev_positive, **kw))
    model = xmtc.XRTransformer(encoder=str(encoder_dir), finetune_sample=320, tree_shape="binary",
                               shortlist="topk+positives", coarse_epochs=0.5, **{**FAST, "max_leaf_size": 30}
                               ).fit(texts, labels, progress=False)
    n_labels = model.tree_sizes_[-1]
    splits = level_splits(n_labels, 8, 30, "binary")
    assert splits != level_splits(n_labels, 8, 30, "full")  # the sample's label count tells the shapes apart
    assert model.tree_sizes_ == [int(np.prod(splits[:i + 1])) for i in range(len(splits))] + [n_labels]
    # 320 texts, batch 32: half an epoch (5 steps) at each coarse level, a whole one (10) at the last
    depth = len(model.tree_sizes_)
    assert [len(model.loss_curves_[t]) for t in range(depth)] == [5] * (depth - 1) + [10]
    # first level: every node (no top-k, no parents); later levels: top-k children, never positive parents
    assert calls[:5] == [(True, True)] * 5 and len(calls) == 5 * (depth - 1) + 10
    assert set(calls[5:]) == {(False, True)}
    calls.clear()
    xmtc.XRTransformer(encoder=str(encoder_dir), finetune_sample=320, **FAST).fit(texts, labels, progress=False)
    assert set(calls[10:]) == {(False, False)}  # eq. 8: the positive parents are expanded too


def test_the_encoder_is_saved_as_safetensors_and_checked_on_load(fitted, tmp_path):
    path = fitted.save(tmp_path / "m")
    assert (Path(path) / "encoder" / "model.safetensors").is_file()
    assert not list(Path(path).rglob("*.bin")) and not list(Path(path).rglob("*.pkl"))
    (Path(path) / "encoder" / "model.safetensors").write_bytes(b"corrupt")
    with pytest.raises(xmtc.ModelFormatError, match="checksum"):
        xmtc.load(path)


def test_each_indexer_gives_a_different_tree_on_real_label_texts(sample, encoder_dir, shared_data):
    from xmtc.data import label_matrix
    from xmtc.features.encoder import Tokenized, load_encoder
    from xmtc.index.kmeans import build_label_tree
    from xmtc.methods.xr_transformer.config import XTransformerConfig

    (texts, labels), _ = sample
    Y, vocab = label_matrix(labels)
    vocab = vocab.with_label_file(shared_data / "yso-finna-en" / "labels.txt.gz")
    model = xmtc.XTransformer(encoder=str(encoder_dir), **FAST)
    cfg = model.config
    X = cfg.tfidf().make_featurizer().fit_transform(texts)
    tokenizer, encoder = load_encoder(encoder_dir)
    tok = Tokenized(tokenizer, texts, cfg.max_length)
    parents = {}
    for indexer in ("pifa-tfidf", "pifa-neural", "text-emb"):
        emb = model._label_embeddings(X, Y, vocab, XTransformerConfig(**dict(model.get_params(), indexer=indexer)),
                                      tok, tokenizer, encoder, "cpu")
        tree = build_label_tree(emb, branching=8, max_leaf_size=20, seed=0)
        parents[indexer] = tree.parents[-1]
    names = list(parents)
    for i in range(3):
        for j in range(i + 1, 3):
            assert not np.array_equal(parents[names[i]], parents[names[j]]), (names[i], names[j])


def test_x_transformer_fine_tunes_one_cluster_level_and_needs_label_texts_for_text_emb(sample, encoder_dir):
    (texts, labels), (test_texts, _) = sample
    model = xmtc.XTransformer(encoder=str(encoder_dir), **FAST).fit(texts, labels, progress=False)
    assert list(model.heads_) == [len(model.tree_sizes_) - 2]  # the leaf clusters only
    assert model.matcher_levels_ == [len(model.tree_sizes_) - 2]
    assert model.predict_topk(test_texts, 5)[0].shape == (len(test_texts), 5)
    with pytest.raises(ConfigError, match="label texts"):
        xmtc.XTransformer(encoder=str(encoder_dir), indexer="text-emb", **FAST).fit(texts, labels, progress=False)


def test_each_ensemble_mode_equals_hand_computed_scores():
    from xmtc.data import LabelVocab
    from xmtc.models.ensemble import Ensemble

    class Member:
        def __init__(self, idx, sc):
            self.idx, self.sc = np.array(idx), np.array(sc, dtype=np.float32)
            self.labels_ = LabelVocab(["a", "b", "c", "d"])
            self.label_counts_ = np.ones(4)
            self.n_train_ = 4

        def predict_topk(self, X, k, progress=False):
            return self.idx[:, :k], self.sc[:, :k]

    A = Member([[0, 2, -1]], [[2.0, -1.0, 0.0]])
    B = Member([[2, 3, 1]], [[0.5, 0.25, -3.0]])
    sig = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    expect = {
        "average": {0: 2.0 / 2, 2: (-1.0 + 0.5) / 2, 3: 0.25 / 2, 1: -3.0 / 2},
        "rank-average": {0: 1 / 2, 2: (1 / 2 + 1) / 2, 3: (1 / 2) / 2, 1: (1 / 3) / 2},
        "sigmoid-average": {0: sig(2.0) / 2, 2: (sig(-1.0) + sig(0.5)) / 2, 3: sig(0.25) / 2, 1: sig(-3.0) / 2},
    }
    for combine, scores in expect.items():
        idx, sc = Ensemble([A, B], combine=combine, k_each=3).predict_topk(["x"], 4)
        order = sorted(scores, key=lambda l: (-scores[l], l))
        assert idx[0].tolist() == order, combine
        np.testing.assert_allclose(sc[0], [scores[l] for l in order], rtol=1e-6, err_msg=combine)


def test_transformer_configs_have_no_tree_count():
    """One fine-tuned encoder and tree: n_trees is no parameter of theirs (not one they inherit and refuse)."""
    for cls in (xmtc.XRTransformer, xmtc.XTransformer):
        assert "n_trees" not in cls().get_params()
        with pytest.raises(ConfigError, match="n_trees"):
            cls(n_trees=1)


def test_a_model_saved_before_these_parameters_loads_as_it_was_trained(fitted, sample, tmp_path):
    """A manifest with n_trees = 1 and no matcher_heads / matcher_combine: fine-tuned heads, scores multiplied."""
    _, (texts, _) = sample
    path = Path(fitted.save(tmp_path / "m"))
    manifest = json.loads((path / "manifest.json").read_text())
    params = manifest["params"]
    params["n_trees"] = 1
    del params["matcher_heads"], params["matcher_combine"], params["ranker_leaves"]
    (path / "manifest.json").write_text(json.dumps(manifest))
    old = xmtc.load(path)
    assert (old.matcher_heads, old.matcher_combine) == ("fine-tuned", "product") and "n_trees" not in old.get_params()
    assert old.ranker_leaves == "finest"
    fitted_product = fitted.set_params(matcher_combine="product")
    try:
        np.testing.assert_allclose(old.predict_topk(texts[:20], 5)[1], fitted_product.predict_topk(texts[:20], 5)[1],
                                   rtol=1e-5, atol=1e-6)
    finally:
        fitted.set_params(matcher_combine="ranker")
    params["n_trees"] = 2
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelFormatError, match="n_trees"):
        xmtc.load(path)


def test_a_linear_matcher_model_saved_before_ranker_leaves_predicts_with_the_product(fitted_linear, sample, tmp_path):
    """Its linear model holds its own tree; without ranker_leaves in the manifest it was scored by the product."""
    _, (texts, _) = sample
    path = Path(fitted_linear.save(tmp_path / "m"))
    manifest = json.loads((path / "manifest.json").read_text())
    del manifest["params"]["ranker_leaves"]
    (path / "manifest.json").write_text(json.dumps(manifest))
    old = xmtc.load(path)
    assert (old.matcher_combine, old.ranker_leaves) == ("product", "finest")
    hm = fitted_linear.models_[0]
    expect = hm.predict_topk(fitted_linear.transform(texts[:20]), 5, beam_size=fitted_linear.beam_size)
    got = old.predict_topk(texts[:20], 5)
    np.testing.assert_array_equal(got[0], expect[0])
    np.testing.assert_allclose(got[1], expect[1], rtol=1e-5, atol=1e-6)
    assert xmtc.load(fitted_linear.save(tmp_path / "new")).matcher_combine == "ranker"


def test_missing_encoder_says_how_to_provide_one(sample, tmp_path):
    (texts, labels), _ = sample
    with pytest.raises(ConfigError, match="Nothing is downloaded"):
        xmtc.XRTransformer(encoder=str(tmp_path / "nope")).fit(texts, labels, progress=False)


def test_a_run_killed_mid_level_and_resumed_ends_with_the_same_model(sample, encoder_dir, tmp_path, monkeypatch):
    import xmtc.methods.xr_transformer.finetune as ft

    (texts, labels), (test_texts, _) = sample
    texts, labels = texts[:400], labels[:400]
    # one thread: with two, torch's CPU reductions already differ in the last bits between two plain runs
    params = dict(FAST, checkpoint_every=3, n_threads=1)
    straight = xmtc.XRTransformer(encoder=str(encoder_dir), **params).fit(texts, labels, progress=False)
    real = ft.LevelTrainer._optimizer_step
    seen = []

    def killed(self, *a, **kw):
        seen.append(self.name)
        if len(seen) == 13 + 8:  # the 9th step of level 2 (level 1 has 13 steps): after its checkpoint at step 6
            raise KeyboardInterrupt("simulated kill")
        return real(self, *a, **kw)

    ckpt = tmp_path / "ckpt"
    monkeypatch.setattr(ft.LevelTrainer, "_optimizer_step", killed)
    with pytest.raises(KeyboardInterrupt):
        xmtc.XRTransformer(encoder=str(encoder_dir), **params).fit(texts, labels, progress=False, checkpoint_dir=ckpt)
    from safetensors.torch import load_file

    from xmtc.neural.checkpoint import unflatten

    state = unflatten(json.loads((ckpt / "state.json").read_text())["state"], load_file(str(ckpt / "state.safetensors")))
    assert state["done"] == [0] and state["partial"]["level"] == 1 and state["partial"]["trainer"]["step"] == 6
    monkeypatch.setattr(ft.LevelTrainer, "_optimizer_step", real)
    resumed = xmtc.XRTransformer(encoder=str(encoder_dir), **params).fit(texts, labels, progress=False,
                                                                           checkpoint_dir=ckpt, resume=True)
    for level in straight.heads_:
        np.testing.assert_array_equal(resumed.heads_[level][0], straight.heads_[level][0])
    for (n1, p1), (n2, p2) in zip(straight.encoder_.state_dict().items(), resumed.encoder_.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2), n1
    assert resumed.loss_curves_ == straight.loss_curves_
    np.testing.assert_array_equal(resumed.predict_topk(test_texts, 5)[0], straight.predict_topk(test_texts, 5)[0])
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.txt").write_text("not a checkpoint")
    with pytest.raises(ConfigError, match="not an xmtc checkpoint"):
        xmtc.XRTransformer(encoder=str(encoder_dir), **FAST).fit(texts, labels, progress=False,
                                                                 checkpoint_dir=precious)
    assert (precious / "thesis.txt").read_text() == "not a checkpoint"
    with pytest.raises(ConfigError, match="other data or parameters"):
        xmtc.XRTransformer(encoder=str(encoder_dir), **dict(params, seed=1)).fit(
            texts, labels, progress=False, checkpoint_dir=ckpt, resume=True)


def test_cli_train_predict_encode(sample, encoder_dir, tmp_path, capsys):
    (texts, labels), (test_texts, test_labels) = sample
    train = tmp_path / "train.tsv"
    train.write_text("".join(",".join(l) + "\t" + t + "\n" for t, l in zip(texts[:300], labels[:300])))
    test = tmp_path / "test.tsv"
    test.write_text("".join(",".join(l) + "\t" + t + "\n" for t, l in zip(test_texts, test_labels)))
    args = ["--encoder", str(encoder_dir), "--max-leaf-size", "20", "--branching", "8", "--max-length", "16",
            "--epochs", "1", "--batch-size", "32", "-q"]
    assert main(["train", str(train), "-o", str(tmp_path / "a"), "--method", "xr-transformer", "--matcher", "linear",
                 *args]) == 0
    assert json.loads((tmp_path / "a" / "manifest.json").read_text())["params"]["matcher"] == "linear"
    assert main(["encode", str(tmp_path / "a"), str(test), "-o", str(tmp_path / "emb.npy"), "-q"]) == 0
    emb = np.load(tmp_path / "emb.npy", allow_pickle=False)
    assert emb.shape == (len(test_texts), 32)
    assert main(["ensemble", str(tmp_path / "a"), str(tmp_path / "a"), "--input", str(test), "-k", "3", "-q"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    # a text with no known word scores 0 everywhere, which an ensemble (as Annif) treats as no suggestion
    assert len(rows) == len(test_texts) and all(len(r["labels"]) == 3 or r.get("known_words") == 0 for r in rows)
    assert sum(len(r["labels"]) == 3 for r in rows) > len(rows) // 2


DDP_SCRIPT = r"""
import json, os, sys
import numpy as np, scipy.sparse as sp, torch
sys.path.insert(0, sys.argv[1])
from xmtc.features.encoder import Tokenized, load_encoder
from xmtc.neural.distributed import init_distributed
from xmtc.methods.xr_transformer.finetune import FinetuneSettings, LevelTrainer, label_mass
from xmtc.neural.heads import RowSparseHead, random_head
from xmtc.neural.shortlist import children_csr
torch.set_num_threads(1)
ctx = init_distributed()
data = json.load(open(sys.argv[2]))
tok, enc = load_encoder(sys.argv[3])
enc.train()
t = Tokenized(tok, data["texts"], 16)
Y = sp.csr_matrix(np.array(data["Y"], dtype=np.float32))
acc = int(sys.argv[4])
s = FinetuneSettings(batch_size=8, grad_accumulation=acc, learning_rate=1e-3, head_learning_rate=1e-2, seed=0)
K = Y.shape[1]
head = RowSparseHead(*random_head(K, enc.config.hidden_size, 0))
tr = LevelTrainer(enc, head, t, label_mass(Y, np.arange(K), K), None, None, children_csr(np.zeros(K, int), 1), s,
                  torch.device("cpu"), ctx, "level", rng_seed=5)
tr.batches = tr.batches[:8] if not ctx.active else tr.batches[:4]
tr.total_steps = 4
tr.run(False)
json.dump({"losses": tr.losses, "head": head.weight[:5].tolist()}, open(sys.argv[5] + f".{ctx.rank}", "w"))
from xmtc.neural.distributed import exit_process, joined
print(f"[joined:{joined()}]")
exit_process(0)  # leaves the group, flushes, and ends the worker past the teardown DDP's gloo threads can abort
print("[not reached]")
"""


@pytest.mark.slow
def test_two_process_gloo_run_equals_one_process_with_the_same_global_batch(sample, tiny_bert_builder, tmp_path):
    # the tiny encoder without dropout, so both runs draw nothing at random after the seed
    (texts, labels), _ = sample
    enc_dir = tiny_bert_builder(tmp_path / "nodrop", texts[:200], dropout=0.0)
    from xmtc.data import label_matrix

    Y, _ = label_matrix(labels[:64])
    Y = Y[:, :40]
    (tmp_path / "data.json").write_text(json.dumps({"texts": texts[:64], "Y": Y.toarray().tolist()}))
    (tmp_path / "run.py").write_text(DDP_SCRIPT)
    repo = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=repo, PYTHONFAULTHANDLER="1")  # a crash prints every stack
    args = [str(tmp_path / "run.py"), repo, str(tmp_path / "data.json"), str(enc_dir)]
    one = subprocess.run([sys.executable, *args, "2", str(tmp_path / "one")], env=env, capture_output=True,
                         text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                          "29533", *args, "1", str(tmp_path / "two")], env=env, capture_output=True, text=True,
                         timeout=300)
    assert two.returncode == 0, two.stderr[-8000:]
    # both ranks joined through the library and ended through exit_process, output flushed
    assert two.stdout.count("[joined:True]") == 2 and "[not reached]" not in two.stdout, two.stdout[-2000:]
    r1 = json.loads((tmp_path / "one.0").read_text())
    r2 = [json.loads((tmp_path / f"two.{r}").read_text()) for r in (0, 1)]
    # one process, accumulation 2: batches 0,1 | 2,3 | ...; two processes: rank r takes batches r, r+2, ...
    np.testing.assert_allclose(r1["losses"][0::2], r2[0]["losses"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r1["losses"][1::2], r2[1]["losses"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r2[0]["head"], r2[1]["head"], rtol=0, atol=0)   # the all-reduced rows agree
    np.testing.assert_allclose(r1["head"], r2[0]["head"], rtol=1e-4, atol=1e-6)


def test_training_loops_switch_on_deterministic_cpu_kernels_and_restore_the_setting(monkeypatch):
    """The cheap half of test_same_seed_same_model_with_two_threads (slow: two whole fits): both training loops
    run under torch's deterministic kernels on the CPU, only there, and leave the caller's setting as it was."""
    from xmtc.methods.xr_transformer import finetune
    from xmtc.neural import training_loop as e2e
    from xmtc.neural.reproducible import deterministic_cpu_ops

    assert not torch.are_deterministic_algorithms_enabled()
    with deterministic_cpu_ops("cpu"):
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    assert not torch.are_deterministic_algorithms_enabled()
    with deterministic_cpu_ops("meta"):   # any non-CPU device: left alone
        assert not torch.are_deterministic_algorithms_enabled()
    for trainer in (finetune.LevelTrainer, e2e.EndToEndTrainer):
        seen = []
        monkeypatch.setattr(trainer, "_run",
                            lambda self, *a, **k: seen.append(torch.are_deterministic_algorithms_enabled()))
        fake = object.__new__(trainer)
        fake.device = torch.device("cpu")
        trainer.run(fake, False)
        assert seen == [True], trainer
        assert not torch.are_deterministic_algorithms_enabled()


@pytest.mark.slow
def test_same_seed_same_model_with_two_threads(sample, encoder_dir, tmp_path):
    """Two fits with one seed in one process, 2 threads: identical folders (without deterministic CPU kernels
    the encoder, heads and rankers differed from run to run: xmtc/neural/reproducible.py)."""
    import hashlib

    import torch

    (texts, labels), _ = sample
    params = {**FAST, "matcher": "linear", "epochs": 1, "n_threads": 2}
    files = []
    for name in ("a", "b"):
        xmtc.XRTransformer(encoder=str(encoder_dir), **params).fit(texts[:400], labels[:400], progress=False).save(
            tmp_path / name)
        files.append({p.relative_to(tmp_path / name).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                      for p in sorted((tmp_path / name).rglob("*")) if p.is_file()})
    assert files[0] == files[1]
    assert not torch.are_deterministic_algorithms_enabled()  # the setting is restored after training


# -- a fine-tuning step against a hand computation: the shortlist, targets, weights and loss it is fed ----
def test_level_trainer_step_feeds_its_batchs_eq8_shortlist_and_eq6_weights_to_the_loss(tiny_bert_builder, tmp_path,
                                                                                        monkeypatch):
    """One ``LevelTrainer`` step scores, for each text of its batch, children(its top-k parent ∪ its positive
    parents) (eq. 8, the batch's own rows of ``prev_topk`` / ``prev_positive``), with targets +-1 and
    weights ``|P_i| R_il / ||R_i||_1`` / alpha (eq. 6), and its loss is the weighted squared hinge of eq. 5 on
    ``W_l . phi(x) + b_l``; the lazy Adam's first step then moves exactly the shortlisted rows with a
    non-zero gradient, each entry by ``-lr sign(dL/dW)``."""
    from xmtc.features.encoder import Tokenized, embed, load_encoder
    from xmtc.methods.xr_transformer import finetune
    from xmtc.neural.distributed import DistContext

    texts = [f"text number {w} about {v}" for w, v in zip("abcdefgh", "ijklmnop")]
    enc_dir = tiny_bert_builder(tmp_path / "bert", texts, hidden=16, dropout=0.0)
    tokenizer, encoder = load_encoder(str(enc_dir), torch.device("cpu"))
    tok = Tokenized(tokenizer, texts, 16)
    parent_of = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3])          # 4 parents, 12 nodes
    children = children_csr(parent_of, 4)
    rng = np.random.default_rng(2)
    mass = sp.csr_matrix(rng.integers(0, 3, size=(8, 12)) * (rng.random((8, 12)) < 0.15), dtype=np.float32)
    mass = mass.toarray()
    mass[0, 4], mass[0, 10] = 2.0, 1.0                                   # text 0: two positive nodes
    mass = sp.csr_matrix(mass)
    prev_pos = sp.csr_matrix((mass @ children.T) > 0, dtype=np.float32)
    prev_topk = rng.integers(0, 4, size=(8, 1))
    W0, b0 = (rng.normal(scale=0.3, size=(12, 16)).astype(np.float32), rng.normal(scale=0.3, size=12).astype(np.float32))
    head = RowSparseHead(W0.copy(), b0.copy())                          # (shares memory with its input)
    settings = finetune.FinetuneSettings(epochs=1, batch_size=8, neg_weight=0.5, head_learning_rate=0.1,
                                         learning_rate=0.0, max_grad_norm=0.0, pooling="mean", warmup_ratio=0.0,
                                         precision="fp32")
    trainer = finetune.LevelTrainer(encoder, head, tok, mass, prev_topk, prev_pos, children, settings,
                                    torch.device("cpu"), DistContext(), "level1", rng_seed=0)
    ids = trainer.batches[0]
    assert len(trainer.batches) == 1 and sorted(ids.tolist()) == list(range(8))
    with torch.no_grad():
        emb = embed(encoder, tok.batch(ids, torch.device("cpu")), "mean").double().numpy()
    seen = []
    real = finetune.shortlist_loss

    def spy(scores, targets, weights, loss="squared-hinge"):
        out = real(scores, targets, weights, loss)
        seen.append((targets.numpy().copy(), weights.numpy().copy(), float(out.detach())))
        return out

    monkeypatch.setattr(finetune, "shortlist_loss", spy)
    trainer.run(progress=False)
    (targets, weights, loss), = seen
    # by hand, text by text in batch order
    M, P = mass.toarray(), prev_pos.toarray()
    want_t, want_w, want_ids = np.zeros_like(targets), np.zeros_like(weights), []
    for r, i in enumerate(ids):
        expand = {int(prev_topk[i, 0])} | set(np.flatnonzero(P[i]).tolist())
        nodes = sorted(n for n in range(12) if parent_of[n] in expand)
        want_ids.append(nodes)
        for c, n in enumerate(nodes):
            want_t[r, c] = 1.0 if M[i, n] > 0 else -1.0
            want_w[r, c] = (M[i] > 0).sum() * M[i, n] / M[i].sum() if M[i, n] > 0 else 0.5
    np.testing.assert_array_equal(targets, want_t)
    np.testing.assert_allclose(weights, want_w, rtol=1e-6)
    loss_hand, grad = 0.0, np.zeros((12, 16))
    for r, nodes in enumerate(want_ids):
        for c, n in enumerate(nodes):
            s = emb[r] @ W0[n] + b0[n]
            m = max(0.0, 1.0 - want_t[r, c] * s)
            loss_hand += want_w[r, c] * m ** 2 / len(ids)
            grad[n] += want_w[r, c] * 2 * m * -want_t[r, c] * emb[r] / len(ids)
    assert loss == pytest.approx(loss_hand, rel=1e-5)
    moved = head.weight.numpy() - W0
    shortlisted = sorted(set(n for nodes in want_ids for n in nodes))
    untouched = np.setdiff1d(np.arange(12), shortlisted)
    assert np.all(moved[untouched] == 0)
    big = np.abs(grad) > 1e-4
    np.testing.assert_allclose(moved[big], -0.1 * np.sign(grad[big]), rtol=1e-3)


def test_shortlist_rows_of_different_lengths_are_padded_with_id_minus_1_and_weight_0():
    """``build_shortlist`` pads short rows with id -1, target 0 and weight 0: a padded slot must name no node
    (a real id there would gather that node's row into the step and let the lazy Adam move it)."""
    children = children_csr(np.array([0, 0, 1, 1, 1, 2]), 3)
    mass = sp.csr_matrix(np.array([[1, 0, 0, 0, 0, 0], [0, 0, 1, 0, 0, 1]], dtype=np.float32))
    ids, targets, weights = build_shortlist(np.array([[0], [1]]), mass, children, neg_weight=0.25)
    assert ids.tolist() == [[0, 1, -1, -1], [2, 3, 4, 5]]
    assert targets.tolist() == [[1, -1, 0, 0], [1, -1, -1, 1]]
    np.testing.assert_allclose(weights, [[1.0, 0.25, 0, 0], [1.0, 0.25, 0.25, 1.0]])
    hb = RowSparseHead(np.eye(6, 2, dtype=np.float32), np.zeros(6, np.float32)).gather(torch.from_numpy(ids))
    assert hb.mask.tolist() == [[False, False, True, True], [False] * 4]


def test_linear_bootstrap_refuses_a_zero_negative_weight():
    """eq. 11's solver takes alpha as its negative cost; alpha = 0 would train every node on its positives
    alone, so ``bootstrap_linear`` rejects it with its own message."""
    E = np.ones((2, 3), np.float32)
    with pytest.raises(ConfigError, match="bootstrap 'linear' needs neg_weight > 0"):
        bootstrap_linear(E, sp.csr_matrix(np.eye(2, 2, dtype=np.float32)), np.array([0, 0]), 1, None, None,
                         neg_weight=0.0)


def test_linear_bootstrap_under_a_single_parent_trains_every_node_on_every_text():
    """With no shortlist (``prev_topk`` and ``prev_positive`` None) every text trains every node: under a
    single parent that is the same as a top-1 naming that parent for every text."""
    rng = np.random.default_rng(1)
    E = rng.normal(size=(12, 3)).astype(np.float32)
    P = sp.csr_matrix((rng.random((12, 4)) < 0.3).astype(np.float32))
    parent_of = np.zeros(4, dtype=np.int64)
    W, b = bootstrap_linear(E, P, parent_of, 1, None, None, tol=1e-6, max_iter=500)
    W1, b1 = bootstrap_linear(E, P, parent_of, 1, np.zeros((12, 1), dtype=np.int64), None, tol=1e-6, max_iter=500)
    np.testing.assert_array_equal(W, W1)
    np.testing.assert_array_equal(b, b1)
    assert np.abs(W).max() > 1e-3


@pytest.mark.parametrize("loss", ["squared-hinge", "bce"])
def test_shortlist_loss_is_the_weighted_sum_per_text_of_eq5_by_hand(loss):
    """``shortlist_loss``: ``sum_{i,l} w_il loss(y_il, s_il) / B`` with the squared hinge
    ``max(0, 1 - y s)^2`` or the logistic loss ``log(1 + exp(-y s))``; padding (target 0, weight 0) adds 0."""
    s = np.array([[0.5, -2.0, 3.0], [1.5, 0.2, 9.0]])
    y = np.array([[1.0, -1.0, 1.0], [-1.0, 1.0, 0.0]])
    w = np.array([[2.0, 0.5, 1.0], [1.0, 0.25, 0.0]])
    per = np.maximum(0, 1 - y * s) ** 2 if loss == "squared-hinge" else np.log1p(np.exp(-y * s))
    want = (w * per * (y != 0)).sum() / 2
    got = shortlist_loss(torch.tensor(s), torch.tensor(y), torch.tensor(w), loss)
    assert got.item() == pytest.approx(want, rel=1e-9)
