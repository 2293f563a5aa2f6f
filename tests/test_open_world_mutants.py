"""Tests that pin the open-world parts (issue 32, item 6): each one kills mutants of ``scripts/mutate.py`` that
the module's own tests let through, by comparing with a definition, a hand-computed case or a second
implementation written out here.

Test names carry ``pin_<area>``: the harness's ``-k`` selections (``TARGETS``) pick them by it.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from xmtc.data import LabelVocab

# -- the dual encoder: label vectors, the training step, prediction, labels added -----------------------------
DE_TEXTS = ["history of the finnish railways", "steam locomotives and trains", "birds of lapland in winter",
            "wild mushrooms of the forest", "old maps of helsinki", "the baltic sea and its islands"]
DE_LABELS = [["rail"], ["rail", "steam"], ["birds"], ["fungi"], ["maps"], ["sea", "birds"]]
DE_NAMES = ["birds", "fungi", "maps", "rail", "sea", "steam", "castles"]   # castles: no document
DE_TEXTS_OF = {"birds": "birds", "fungi": "mushrooms and fungi", "maps": "maps and atlases", "rail": "railways",
               "sea": "seas", "steam": "steam engines", "castles": "medieval castles"}


def _unit(a):
    a = np.asarray(a, dtype=np.float64)
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def dual_net(tiny_bert):
    """A dual-encoder network over the tiny BERT (eval mode: no dropout), free vectors moved off their start
    to random vectors, so that ``v_l = normalize(e_l + m_l w_l)`` differs from ``e_l``."""
    pytest.importorskip("torch")
    import torch

    import xmtc
    from xmtc.data.dataset import as_label_matrix
    from xmtc.features.encoder import load_encoder

    vocab = LabelVocab(DE_NAMES, texts=[DE_TEXTS_OF[n] for n in DE_NAMES])
    model = xmtc.DualEncoder(encoder=tiny_bert, max_length=16, label_max_length=8, epochs=1, batch_size=4,
                             n_threads=1, valid_size=0, seed=0, negatives="in-batch", batching="random",
                             temperature=0.05)
    Y, model._fit_vocab = as_label_matrix(DE_LABELS, vocab, len(DE_TEXTS))
    _, encoder = load_encoder(tiny_bert)
    encoder.eval()
    net = model._build_network(model.config, encoder, DE_TEXTS, Y, 1)
    W = np.random.default_rng(0).standard_normal(net.sparse_heads["free"].weight.shape).astype(np.float32)
    with torch.no_grad():
        net.sparse_heads["free"].weight.copy_(torch.from_numpy(W))
    return net, Y, W


def test_pin_dual_label_vectors_add_each_documented_labels_free_vector_to_its_text_embedding(dual_net):
    net, Y, W = dual_net
    assert net.has_free.tolist() == [True] * 6 + [False]                  # castles has no document
    e = _unit(net.text_embeddings())
    m = net.has_free[:, None].astype(np.float64)
    want = _unit(e + m * W)                                               # the module doc's v_l
    np.testing.assert_allclose(net.label_vectors(), want, atol=2e-6)
    np.testing.assert_allclose(net.label_vectors()[-1], e[-1], atol=2e-6)  # no document: v_l = e_l


def test_pin_dual_predict_is_the_top_k_of_one_plus_cosine_over_two(dual_net):
    import torch

    net, Y, W = dual_net
    rep = torch.from_numpy(np.random.default_rng(1).standard_normal((3, W.shape[1])).astype(np.float32)) * 7.0
    net._stale = True
    ids, sc = net.predict(rep, 7)                                         # every label, label 0 included
    V = _unit(net.text_embeddings() + net.has_free[:, None] * W)
    S = _unit(rep.numpy()) @ V.T
    want = np.argsort(-S, axis=1, kind="stable")
    assert ids.numpy().tolist() == want.tolist()
    np.testing.assert_allclose(sc.numpy(), (1 + np.take_along_axis(S, want, 1)) / 2, atol=2e-6)


def test_pin_dual_training_loss_is_the_contrastive_loss_of_cosines_over_the_temperature(dual_net):
    import torch

    from xmtc.neural.contrastive import contrastive_loss

    net, Y, W = dual_net
    rows = np.array([0, 1, 2, 5])
    rep = torch.from_numpy(np.random.default_rng(2).standard_normal((4, W.shape[1])).astype(np.float32)) * 3.0
    net.on_batch(rows)
    out = net.training_loss(rep, Y[rows])
    pool = np.unique(Y[rows].indices)                                     # in-batch: the batch's positives
    assert out.candidates.tolist() == [pool.tolist()] * 4
    v = _unit(net.text_embeddings(pool) + net.has_free[pool, None] * W[pool])
    s = _unit(rep.numpy()) @ v.T / 0.05
    want = contrastive_loss(torch.from_numpy(s).float(), torch.from_numpy(Y[rows][:, pool].toarray() > 0))
    assert float(out.loss.detach()) == pytest.approx(float(want), rel=1e-4)
    (name, hb), = out.rows                                                # the pool's free rows, gathered
    assert name == "free" and hb.w.shape[0] == pool.size
    # a pool of one label is a pool: scored (a lone positive's loss is 0) and reported
    one = net.training_loss(rep[2:3], Y[[2]])
    assert float(one.loss.detach()) == 0.0 and one.candidates.tolist() == [[0]] and len(one.rows) == 1
    # a batch without labels and without mined negatives has nothing to score: a zero loss
    empty = net.training_loss(rep[:2], sp.csr_matrix((2, Y.shape[1]), dtype=np.float32))
    assert float(empty.loss.detach()) == 0.0 and not empty.rows


def test_pin_dual_the_pool_is_the_positives_plus_the_sampled_mined_negatives_label_0_included(dual_net):
    import copy

    from xmtc.neural.negatives import sample_negatives

    net, Y, W = dual_net
    net = copy.copy(net)
    net.negatives, net.n_negatives, net._n_batches = "mined", 2, 0
    net.mined = np.array([[0, 6, -1], [0, 2, 6], [0, 1, 3], [0, -1, -1], [0, 6, 3], [6, 0, -1]])
    rows = np.array([3, 4])                                               # positives fungi (1), maps (2)
    net.on_batch(rows)
    neg = sample_negatives(net.mined[rows], 2, np.random.default_rng([net.seed, 1]))
    want = np.union1d(Y[rows].indices, neg[neg >= 0])
    assert 0 in neg and 0 in want and net.pool(Y[rows]).tolist() == want.tolist()


def test_pin_dual_normalize_rows_gives_unit_rows_and_leaves_zero_rows():
    from xmtc.methods.dual_encoder.network import normalize_rows

    got = normalize_rows(np.array([[0.3, 0.4], [0.0, 0.0], [3.0, 4.0], [0.0, -0.5]]))
    np.testing.assert_allclose(got, [[0.6, 0.8], [0.0, 0.0], [0.6, 0.8], [0.0, -1.0]], rtol=1e-6)
    assert got.dtype == np.float32


def test_pin_dual_settings_are_checked_and_a_network_without_free_vectors_has_no_free_rows():
    from xmtc.methods.dual_encoder.network import DualEncoderNetwork

    for bad in (dict(loss="hinge"), dict(negatives="random"), dict(batching="sorted")):
        with pytest.raises(ValueError, match="bad dual-encoder setting"):
            DualEncoderNetwork(3, 4, free_vectors=None, has_free=np.zeros(3, bool), **bad)
    net = DualEncoderNetwork(3, 4, free_vectors=None, has_free=np.ones(3, bool))
    assert net.free_rows == 0 and net.meta()["free_rows"] == 0 and not net.has_free.any()
    part = DualEncoderNetwork(3, 4, free_vectors=np.ones((2, 4), np.float32), has_free=np.ones(3, bool))
    assert part.free_rows == 2 and part.has_free.tolist() == [True, True, False]  # rows past the fit's labels


def test_pin_dual_a_pool_with_a_label_without_document_uses_its_text_embedding_alone(dual_net):
    import torch

    net, Y, W = dual_net
    castles = DE_NAMES.index("castles")
    pool = np.array([0, castles])
    v, _ = net._pool_vectors(pool, torch.device("cpu"))
    e = _unit(net.text_embeddings(pool))
    np.testing.assert_allclose(v.detach().numpy(), _unit(e + np.array([[1.0], [0.0]]) * W[pool]), atol=1e-4)


def test_pin_dual_a_step_gathers_only_the_pools_free_rows_and_lazy_adam_leaves_row_0_alone(dual_net):
    """A label without a free vector (castles) in the pool must not make row 0 a placeholder: the step's rows
    are the pool's labels *with* a free vector, so LazyAdam leaves the weight and the moments of every other
    row -- row 0 included -- exactly as they were (SparseAdam's rule: an untouched row does not move)."""
    import torch

    from xmtc.neural.heads import LazyAdam, merge_row_grads

    net, Y, W = dual_net
    head, castles = net.sparse_heads["free"], DE_NAMES.index("castles")
    saved = head.weight.clone()
    opt = LazyAdam(head, lr=0.1)
    rep = torch.from_numpy(np.random.default_rng(3).standard_normal((2, W.shape[1])).astype(np.float32))
    try:
        def step(cols):
            Yb = sp.csr_matrix((np.ones(len(cols), np.float32), (np.arange(len(cols)), cols)),
                               shape=(len(cols), Y.shape[1]))
            out = net.training_loss(rep[:len(cols)], Yb)
            out.loss.backward()
            rows = [hb for name, hb in out.rows if name == "free"]
            if rows:
                opt.step(*merge_row_grads([hb.grads() for hb in rows]))
            return [hb.rows.tolist() for hb in rows]

        assert step([0, 1]) == [[0, 1]]            # label 0 (birds) trained: row 0 now has moments
        w0, m0, v0 = head.weight[0].clone(), opt.m_w[0].clone(), opt.v_w[0].clone()
        assert m0.abs().sum() > 0
        assert step([1, castles]) == [[1]]         # fungi and castles: only fungi's row is touched
        assert torch.equal(head.weight[0], w0) and torch.equal(opt.m_w[0], m0) and torch.equal(opt.v_w[0], v0)
        assert step([castles]) == []               # no free vector in the pool: no row at all
        assert torch.equal(head.weight[0], w0) and torch.equal(opt.m_w[0], m0)
    finally:
        with torch.no_grad():
            head.weight.copy_(saved)
        net.tower().zero_grad(set_to_none=True)


def test_pin_dual_labels_added_to_the_network_are_found_under_their_ids(dual_net, tiny_bert):
    import copy

    import torch

    from xmtc.features.encoder import Tokenized
    from xmtc.methods.dual_encoder.estimator import _tokenizer

    net, Y, W = dual_net
    n = len(DE_NAMES)
    texts = [DE_TEXTS_OF[x] for x in DE_NAMES] + ["lighthouses", "wooden boats"]
    tok = Tokenized(_tokenizer(tiny_bert), texts, 8)
    tok1 = Tokenized(_tokenizer(tiny_bert), texts[:-1], 8)
    vec = _unit(np.random.default_rng(3).standard_normal((2, W.shape[1]))).astype(np.float32)
    custom = _unit(np.random.default_rng(4).standard_normal((n, W.shape[1]))).astype(np.float32)

    def fresh(stale: bool):
        c = copy.copy(net)                       # the fixture's index and label list stay as they are
        c.has_free = net.has_free.copy()
        c.refresh_index(custom)                  # an index of other vectors than the weights give
        c._stale = stale
        return c

    def top1(c, q):
        ids, sc = c.predict(torch.from_numpy(np.asarray(q, np.float32)), 1)
        return ids[:, 0].tolist(), sc[:, 0].numpy()

    # an index that is current is added to (and searched) as it is, one label at a time
    a = fresh(False)
    a.add_labels(tok1, vec[:1])
    assert a.n_labels == n + 1 and a.has_free.tolist() == [True] * 6 + [False] * 2
    a.add_labels(tok, vec[1:])
    assert a.n_labels == n + 2 and a.has_free.tolist() == [True] * 6 + [False] * 3
    ids, sc = top1(a, np.vstack([vec, custom[:1]]))
    assert ids == [n, n + 1, 0]
    np.testing.assert_allclose(sc, [1.0, 1.0, 1.0], atol=1e-5)
    # a stale one (weights changed since it was built) is rebuilt from the weights first
    b = fresh(True)
    b.add_labels(tok, vec)
    ids, sc = top1(b, np.vstack([vec, b.label_vectors()[:1]]))
    assert ids == [n, n + 1, 0]
    np.testing.assert_allclose(sc, [1.0, 1.0, 1.0], atol=1e-5)
    # prediction also searches an index rebuilt from the weights once they changed, and the index as it is else
    d = fresh(True)
    ids, sc = top1(d, d.label_vectors()[:1])
    assert ids == [0] and sc[0] == pytest.approx(1.0, abs=1e-5) and not d._stale
    ids, sc = top1(fresh(False), custom[1:2])
    assert ids == [1] and sc[0] == pytest.approx(1.0, abs=1e-5)
    # with nothing new, nothing changes
    c = fresh(False)
    c.add_labels(Tokenized(_tokenizer(tiny_bert), texts[:n], 8), np.zeros((0, W.shape[1]), np.float32))
    assert c.n_labels == n and len(c.index) == n
    with pytest.raises(ValueError, match="2 new labels but 1 vectors"):
        c.add_labels(tok, vec[:1])


# -- kNN voting (PEFA): fit, scores, labels added -------------------------------------------------------------
KNN_TABLE = {   # text -> embedding (before normalisation): the encoder stand-in
    "railway history": [1, 0.1, 0, 0], "steam trains": [0.9, 0.3, 0, 0], "sea birds": [0, 0, 1, 0.2],
    "unlabelled note": [1, 0, 0, 0], "old maps": [0, 1, 0, 0.1],
    "railways": [1, 0, 0.05, 0], "birds": [0, 0, 1, 0], "maps": [0.1, 1, 0, 0], "lighthouses": [0, 0, 0.2, 1],
    "query": [0.8, 0.2, 0.1, 0.3],
}


class _TableEmbedder:
    """The encoder stand-in: each text's unit-length row of ``KNN_TABLE``."""

    dim = 4

    def __init__(self, cfg=None):
        pass

    def load(self, source=None):
        return self

    def embed(self, texts, **_):
        return _unit([KNN_TABLE[t] for t in texts]).astype(np.float32)


def _pefa_by_definition(q, docs, Y, labels, lam, K, P):
    """PEFA's score of every label (module doc of xmtc/methods/knn/estimator.py), dense, written out again."""
    out = np.zeros((len(q), Y.shape[1]))
    for i, x in enumerate(q):
        sims = docs @ x
        for j in np.argsort(-sims, kind="stable")[:K]:
            out[i] += (1 - lam) * max(sims[j], 0.0) / K * Y[j]
        cos = labels @ x
        for c in np.argsort(-cos, kind="stable")[:P]:
            out[i, c] += lam * max(cos[c], 0.0)
    return out


@pytest.fixture()
def knn_fitted(monkeypatch):
    import xmtc.methods.knn.estimator as knn_mod

    monkeypatch.setattr(knn_mod, "TextEmbedder", _TableEmbedder)
    vocab = LabelVocab(["rail", "birds", "maps"], texts=["railways", "birds", "maps"])
    texts = ["railway history", "steam trains", "sea birds", "unlabelled note", "old maps"]
    model = knn_mod.KNN(label_weight=0.4, n_neighbors=2, label_candidates=2, n_threads=1)
    return model.fit(texts, [["rail"], ["rail"], ["birds"], [], ["maps"]], labels=vocab, progress=False), texts


def test_pin_knn_fit_indexes_the_labelled_texts_and_scores_by_the_definition(knn_fitted):
    model, texts = knn_fitted
    # the unlabelled note has no vote to give: it is not among the voters (it would be the query's nearest)
    assert len(model.text_index_) == 4 and model.train_labels_.shape == (4, 3)
    docs = _TableEmbedder().embed([t for t in texts if t != "unlabelled note"])
    Y = np.array([[1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=np.float64)
    want = _pefa_by_definition(_TableEmbedder().embed(["query"]), docs, Y,
                               _TableEmbedder().embed(["railways", "birds", "maps"]), 0.4, 2, 2)
    np.testing.assert_allclose(model.scores(["query"]).toarray(), want, rtol=1e-5, atol=1e-7)


def test_pin_knn_labels_added_are_scored_under_their_own_ids(knn_fitted):
    model, texts = knn_fitted
    before = model.scores(["query", "sea birds"]).toarray()
    model.add_labels(LabelVocab(["rail", "birds", "maps", "light"], texts=["railways", "birds", "maps",
                                                                          "lighthouses"]))
    assert len(model.labels_) == 4 and model.train_labels_.shape == (4, 4) and len(model.label_index_) == 4
    docs = _TableEmbedder().embed([t for t in texts if t != "unlabelled note"])
    Y = np.array([[1, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]], dtype=np.float64)
    labels = _TableEmbedder().embed(["railways", "birds", "maps", "lighthouses"])
    got = model.scores(["query", "sea birds"]).toarray()
    np.testing.assert_allclose(got, _pefa_by_definition(_TableEmbedder().embed(["query", "sea birds"]), docs, Y,
                                                        labels, 0.4, 2, 2), rtol=1e-5, atol=1e-7)
    assert got[0, 3] > 0 and got[0, 3] != before[0, 0]          # the new label scores under id 3, by its text
    idx, _ = model.predict_topk(["query"], 4)
    assert 3 in idx[0].tolist()


def test_pin_knn_either_part_alone_needs_only_its_own_index(monkeypatch):
    import xmtc.methods.knn.estimator as knn_mod
    from xmtc.index.ann import VectorIndex

    emb = _TableEmbedder()
    q = emb.embed(["query"])
    docs, labels = emb.embed(["railway history", "sea birds"]), emb.embed(["railways", "birds", "maps"])
    Y = sp.csr_matrix(np.array([[1, 0, 0], [0, 1, 1]], np.float32))
    only_text = knn_mod.pefa_scores(q, 3, label_weight=1.0, label_index=VectorIndex().build(labels), label_candidates=3)
    np.testing.assert_allclose(only_text.toarray(), np.maximum(labels @ q[0], 0)[None], rtol=1e-6)
    only_vote = knn_mod.pefa_scores(q, 3, label_weight=0.0, text_index=VectorIndex().build(docs), train_labels=Y,
                                    n_neighbors=2)
    np.testing.assert_allclose(only_vote.toarray(), _pefa_by_definition(q, docs, Y.toarray(), labels, 0.0, 2, 0),
                               rtol=1e-6)
    # fitting: label texts alone need no labelled document; the vote alone needs no label text (and one
    # labelled document is enough)
    monkeypatch.setattr(knn_mod, "TextEmbedder", _TableEmbedder)
    texts = ["railway history", "sea birds", "old maps"]
    vocab = LabelVocab(["rail", "birds", "maps"], texts=["railways", "birds", "maps"])
    text_only = knn_mod.KNN(label_weight=1.0, n_threads=1).fit(texts, [[], [], []], labels=vocab, progress=False)
    assert text_only.text_index_ is None and text_only.train_labels_ is None
    np.testing.assert_allclose(text_only.scores(["query"]).toarray(), only_text.toarray(), rtol=1e-6)
    vote_only = knn_mod.KNN(label_weight=0.0, n_neighbors=2, n_threads=1).fit(
        texts, [["rail"], [], []], labels=LabelVocab(["rail", "birds", "maps"]), progress=False)
    assert vote_only.label_index_ is None and len(vote_only.text_index_) == 1
    want = _pefa_by_definition(q, emb.embed(["railway history"]), np.array([[1.0, 0, 0]]), labels, 0.0, 2, 0)
    np.testing.assert_allclose(vote_only.scores(["query"]).toarray(), want, rtol=1e-6)


@pytest.fixture(scope="module")
def dual_model(tiny_bert):
    """A dual encoder fitted on the six texts from label lists and a vocabulary with texts (castles: none of
    the texts carries it), no display names, no URIs."""
    pytest.importorskip("torch")
    import xmtc

    vocab = LabelVocab(DE_NAMES, texts=[DE_TEXTS_OF[n] for n in DE_NAMES])
    return xmtc.DualEncoder(encoder=tiny_bert, max_length=16, label_max_length=8, epochs=1, batch_size=4, n_threads=1,
                            valid_size=0, seed=0).fit(DE_TEXTS, DE_LABELS, labels=vocab, progress=False)


def test_pin_dual_fit_from_label_lists_keeps_the_vocabulary_and_its_label_without_documents(dual_model):
    assert dual_model.labels_.names == DE_NAMES and dual_model.label_counts_.tolist() == [2, 1, 1, 2, 1, 1, 0]
    assert dual_model.network_.has_free.tolist() == [True] * 6 + [False]


def test_pin_dual_label_texts_are_the_text_else_the_display_name_else_the_id():
    from xmtc.methods.dual_encoder.estimator import label_texts

    vocab = LabelVocab(["p0", "p1", "p2"], display=["Zero", "One", ""], texts=["zero text", "", ""])
    assert label_texts(vocab) == ["zero text", "One", "p2"]
    assert label_texts(LabelVocab(["p0", "p1"], display=["Zero", ""])) == ["Zero", "p1"]


def test_pin_dual_labels_added_merge_the_vocabularies_columns(dual_model):
    import copy

    model = copy.copy(dual_model)
    model.network_ = copy.copy(dual_model.network_)
    model.network_.has_free = dual_model.network_.has_free.copy()
    model.network_.refresh_index()
    n = len(DE_NAMES)
    # display names and texts, no URIs; "rail" is known and left alone
    got = model.add_labels(LabelVocab(["rail", "light"], display=["Railways", "Lighthouses"],
                                      texts=["", "lighthouses on the coast"]))
    v = model.labels_
    assert got == ["light"] and v.names == DE_NAMES + ["light"] and v.uris is None
    assert v.display == [""] * n + ["Lighthouses"]
    assert v.texts == [DE_TEXTS_OF[x] for x in DE_NAMES] + ["lighthouses on the coast"]
    # URIs and display names, no texts: the text is the display name, else the id
    got = model.add_labels(LabelVocab(["boats", "ships"], display=["Wooden boats", ""], uris=["u:boats", "u:ships"]))
    v = model.labels_
    assert got == ["boats", "ships"] and v.uris == [""] * (n + 1) + ["u:boats", "u:ships"]
    assert v.display == [""] * n + ["Lighthouses", "Wooden boats", ""]
    assert v.texts[-2:] == ["Wooden boats", "ships"] and len(model.network_.index) == n + 3
    assert model.predict(["lighthouses on the coast"], 1)[0][0][0] == "light"


# -- the label-text route -------------------------------------------------------------------------------------
def test_pin_route_top_cosines_are_the_k_best_rows_best_first():
    from xmtc.models.label_route import _top_cosines

    X = sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]))
    M = sp.csr_matrix(np.array([[0.1, 0.0], [0.5, 0.2], [0.3, 0.9], [0.9, 0.0], [0.0, 0.4], [0.2, 0.0]]))
    pos, val = _top_cosines(X, M, 3)               # 3 of 6 rows: the partial sort, then best first
    assert pos.tolist() == [[3, 1, 2], [2, 4, 1], [-1, -1, -1]]
    np.testing.assert_allclose(val, [[0.9, 0.5, 0.3], [0.9, 0.4, 0.2], [0, 0, 0]], rtol=1e-6)
    pos, val = _top_cosines(X[:1], M[:2], 4)       # fewer rows than k: all of them, then -1 / 0
    assert pos.tolist() == [[1, 0, -1, -1]]
    np.testing.assert_allclose(val, [[0.5, 0.1, 0, 0]], rtol=1e-6)
    # against a full sort of the dense products (random, so no ties), rows without 7 positive products padded
    Xr = sp.random(20, 12, density=0.4, format="csr", random_state=1, dtype=np.float32)
    Mr = sp.random(30, 12, density=0.3, format="csr", random_state=2, dtype=np.float32)
    S = (Xr @ Mr.T).toarray()
    pos, val = _top_cosines(Xr, Mr, 7)
    for i in range(20):
        best = [j for j in np.argsort(-S[i]) if S[i, j] > 0][:7]
        assert pos[i].tolist() == best + [-1] * (7 - len(best))
        np.testing.assert_allclose(val[i][:len(best)], S[i, best], rtol=1e-6)


def test_pin_route_merge_pads_short_lists_to_k():
    from xmtc.models.label_route import merge_topk

    idx, sc = merge_topk(np.array([[4], [-1]]), np.array([[0.5], [0.0]], np.float32),
                         np.array([[7], [2]]), np.array([[0.7], [0.1]], np.float32), 4)
    assert idx.tolist() == [[7, 4, -1, -1], [2, -1, -1, -1]] and idx.dtype == np.int32
    np.testing.assert_allclose(sc, [[0.7, 0.5, 0, 0], [0.1, 0, 0, 0]], rtol=1e-6)


def test_pin_route_adding_keeps_the_routed_ids_and_a_rerouted_label_takes_its_new_text():
    from xmtc.features.tfidf import TfidfFeaturizer
    from xmtc.models.label_route import LabelRoute

    f = TfidfFeaturizer(min_df=1).fit(["steam trains", "bird watching", "old maps", "sea shells", "castles"])
    route = LabelRoute(np.array([5, 9]), f.transform(["steam trains", "bird watching"]), np.array([0.0, 1.0]),
                       np.array([0.5, 0.5]), f)
    route.add([11, 12], ["old maps", "sea shells"])
    assert route.label_ids.tolist() == [5, 9, 11, 12]
    route.add([9], ["castles"])                               # known: re-routed by its new text, moved last
    assert route.label_ids.tolist() == [5, 11, 12, 9]
    ids, _ = route.topk(["castles", "bird watching", "old maps"], 1)
    assert ids[:, 0].tolist() == [9, -1, 11]


def test_pin_route_a_label_whose_text_is_blank_is_not_routed():
    from xmtc.features.tfidf import TfidfFeaturizer
    from xmtc.models.label_route import LabelRoute

    f = TfidfFeaturizer(min_df=1).fit(["alpha beta", "gamma delta", "zeta"])
    Y = sp.csr_matrix(np.array([[1, 0, 0, 0], [0, 1, 0, 0]], dtype=np.float32))
    route = LabelRoute.fit(f, ["alpha beta", "gamma delta", "   ", "zeta"], np.array([3, 3, 0, 0]),
                           ["alpha beta", "gamma delta"], Y)
    assert route.label_ids.tolist() == [3] and route.seen_labels == 2


# -- label-text similarity ------------------------------------------------------------------------------------
def test_pin_label_text_the_texts_each_source_gives():
    from xmtc.methods.label_text.estimator import new_label_texts, resolve_label_texts

    vocab = LabelVocab(["p0", "p1", "p2"], display=["Zero", "One", ""], texts=["zero text", "", ""])
    assert resolve_label_texts(vocab, "file", "label-text") == ["zero text", "One", ""]
    assert resolve_label_texts(vocab, "names", "label-text") == ["zero text", "One", "p2"]
    # documents: each label's training texts joined, in document order; a label without one keeps its name
    texts = ["alpha", "beta", "gamma", "delta"]
    Y = sp.csr_matrix(np.array([[1, 0, 0], [0, 1, 0], [1, 0, 0], [1, 1, 0]], dtype=np.float32))
    assert resolve_label_texts(vocab, "documents", "label-text", texts, Y) == ["alpha gamma delta", "beta delta",
                                                                              "p2"]
    grown = LabelVocab(["p0", "p1", "p2", "p3", "p4"], display=["", "", "", "Three", ""],
                       texts=["zero", "one", "two", "", "four"])
    assert new_label_texts(grown, 2) == ["two", "Three", "four"]
    assert new_label_texts(LabelVocab(["p0", "p1", "p2"], display=["", "One", ""]), 1) == ["One", "p2"]


def test_pin_label_text_top_k_padding_and_label_0(monkeypatch):
    from xmtc.index.ann import VectorIndex
    from xmtc.methods.label_text.estimator import LabelText, finite_topk

    ids, sc = finite_topk(np.array([[0, 2, -1]]), np.array([[0.9, 0.5, -np.inf]]))
    assert ids.tolist() == [[0, 2, -1]] and sc.tolist() == [[pytest.approx(0.9), 0.5, 0.0]] and ids.dtype == np.int32
    # the encoder scorer's dense scores: every label's cosine, label 0 included
    model = LabelText(scorer="encoder", n_threads=1)
    model.labels_ = LabelVocab(["rail", "birds", "maps"], texts=["railways", "birds", "maps"])
    model.embedder_ = _TableEmbedder()
    labels = _TableEmbedder().embed(["railways", "birds", "maps"])
    model.index_ = VectorIndex().build(labels)
    q = _TableEmbedder().embed(["query", "sea birds"])
    np.testing.assert_allclose(model.label_scores(["query", "sea birds"]), q @ labels.T, rtol=1e-5)
    # a label added later is indexed under its own id, after the others
    model.add_labels(LabelVocab(["rail", "birds", "maps", "light"], texts=["railways", "birds", "maps", "lighthouses"]))
    labels = _TableEmbedder().embed(["railways", "birds", "maps", "lighthouses"])
    np.testing.assert_allclose(model.label_scores(["query", "lighthouses"]),
                               _TableEmbedder().embed(["query", "lighthouses"]) @ labels.T, rtol=1e-5, atol=1e-7)
    assert model.predict_topk(["lighthouses"], 1)[0].tolist() == [[3]]


def test_pin_label_text_fit_counts_and_an_empty_batch():
    from xmtc.methods.label_text.estimator import LabelText

    vocab = LabelVocab(["A", "B"], texts=["red apple", "green tree"])
    one = LabelText(ngram_max=1).fit(["red car"], [["A"]], labels=vocab, progress=False)
    assert one.n_train_ == 1 and one.label_counts_.tolist() == [1, 0]
    none = LabelText(ngram_max=1).fit([], [], labels=vocab, progress=False)
    assert none.n_train_ == 1 and none.label_counts_.tolist() == [0, 0]
    idx, sc = one.predict_topk([], 2)
    assert idx.shape == (0, 2) and sc.shape == (0, 2)


# -- the training memory: a reservoir sample (Vitter's algorithm R) ----------------------------------------------
def _reservoir_by_hand(ids: list[int], seen: int, capacity: int, seed: int, draws: int, new: list[int]) -> list[int]:
    """Algorithm R as the module doc states it, one row at a time: the free room first, then row number m (of all
    seen, 1-based) replaces slot floor(u m) when that is below ``capacity``; u from the offer's own stream
    ``default_rng([seed, draws])``."""
    out = list(ids)
    free = max(capacity - len(out), 0)
    out += new[:free]
    rest = new[free:]
    u = np.random.default_rng([seed, draws]).random(len(rest))
    for r, (row, x) in enumerate(zip(rest, u)):
        j = int(np.floor(x * (seen + free + r + 1)))
        if j < capacity:
            out[j] = row
    return out


def test_pin_memory_offers_follow_algorithm_r_on_a_stream_of_their_own():
    from xmtc.models.memory import TrainingMemory

    n = 40
    X = sp.identity(n, dtype=np.float32, format="csr")              # row i is feature i: rows tell who they are
    Y = sp.csr_matrix(np.random.default_rng(0).integers(0, 2, size=(n, 4)).astype(np.float32))
    mem = TrainingMemory.sample(X[:5], Y[:5, :3], capacity=8, seed=7)
    ids, seen = list(range(5)), 5
    Y_ref = Y.toarray()
    Y_ref[:5, 3] = 0                                                  # the first rows were sampled with 3 labels
    for draws, (a, b) in enumerate([(5, 12), (12, 30), (30, 40)]):     # room for 3 of the first offer's 7
        mem.offer(X[a:b], Y[a:b])                                     # the new rows bring a fourth label column
        ids = _reservoir_by_hand(ids, seen, 8, 7, draws, list(range(a, b)))
        seen += b - a
        assert mem.draws == draws + 1 and mem.seen == seen and len(mem) == 8
        assert mem.X.indices.tolist() == ids                          # which rows, in which slots
        np.testing.assert_array_equal(mem.Y.toarray(), Y_ref[ids])
    assert ids != sorted(ids) and set(ids) - set(range(12))           # the later offers did replace rows


# -- open label sets: the route attached at training, masks, a new release of the vocabulary ---------------------
class _RoutedStub:
    """What :mod:`xmtc.models.open_labels` reads of a model that learns labels from documents (no ``add_labels``
    of its own: labels without documents go through the label-text route)."""

    method = "xr-linear"

    def __init__(self, vocab, counts):
        self.labels_, self.label_counts_ = vocab, np.asarray(counts, dtype=np.int64)
        self.calibration_ = None


def test_pin_open_labels_the_route_reads_char_ngrams_fitted_on_label_and_validation_texts():
    from xmtc.features.char_ngrams import CharNgramFeaturizer
    from xmtc.models.open_labels import attach_route

    vocab = LabelVocab(["p0", "p1", "p2"], texts=["railways", "birds", "lighthouses"])
    model = _RoutedStub(vocab, [3, 2, 0])
    valid = ["railway history of finland", "birds of the archipelago"]
    attach_route(model, valid, sp.csr_matrix(np.array([[1, 0, 0], [0, 1, 0]], dtype=np.float32)))
    route = model.label_route_
    assert route.label_ids.tolist() == [2] and route.own_featurizer
    # the idf counts the validation texts too: an n-gram only they have is known, one they share is rarer
    want = CharNgramFeaturizer().fit(["railways", "birds", "lighthouses"] + valid)
    probe = ["the lighthouses of finland", "archipelago birds"]
    np.testing.assert_allclose(route.featurizer.transform(probe).toarray(), want.transform(probe).toarray(),
                               rtol=1e-6)


def test_pin_open_labels_a_removed_label_0_is_masked_and_label_1_is_not():
    from xmtc.models.open_labels import apply_open_labels

    model = _RoutedStub(LabelVocab(["p0", "p1", "p2"]), [1, 1, 1])
    idx = np.array([[0, 1, 2], [1, 0, -1]])
    sc = np.array([[0.9, 0.5, 0.2], [0.8, 0.4, 0.0]], dtype=np.float32)
    model.removed_ = np.array([True, False, False])
    got_i, got_s = apply_open_labels(model, idx, sc, ["a", "b"], 3)
    assert got_i.tolist() == [[1, 2, -1], [1, -1, -1]]
    np.testing.assert_allclose(got_s, [[0.5, 0.2, 0.0], [0.8, 0.0, 0.0]])
    model.removed_ = np.array([False, True, False])
    got_i, _ = apply_open_labels(model, idx, sc, ["a", "b"], 2)
    assert got_i.tolist() == [[0, 2], [0, -1]]


# -- learning: the calibration carried across a learn ----------------------------------------------------------
def _cal(counts, thresholds=None, global_threshold=None, edges=(10.0, 20.0)):
    from types import SimpleNamespace

    return SimpleNamespace(label_counts=np.asarray(counts, dtype=np.int64), edges=np.asarray(edges, dtype=np.float64),
                           thresholds=None if thresholds is None else np.asarray(thresholds, dtype=np.float64),
                           global_threshold=global_threshold)


def test_pin_learning_docs_before_is_n_train_times_the_calibrations_share_of_the_counts():
    from xmtc.models.learning import docs_before

    assert docs_before(None, np.array([3, 1]), 50) == 50.0
    assert docs_before(_cal([1, 0]), np.array([3, 1]), 40) == pytest.approx(40 * 1 / 4)   # one occurrence counted
    assert docs_before(_cal([2, 2]), np.array([1, 0]), 40) == pytest.approx(40 * 4 / 1)   # the model's: one
    assert docs_before(_cal([0, 0]), np.array([1, 0]), 40) == 40.0 == docs_before(_cal([1, 0]), np.array([0, 0]), 40)


def test_pin_learning_carry_calibration_grows_per_label_arrays_only_by_new_labels_and_scales_edges():
    from xmtc.models.learning import carry_calibration

    cal = _cal([4, 2, 0], thresholds=[0.3, 0.5, 0.7], global_threshold=0.4)
    carry_calibration(cal, np.array([5, 2, 1]), 1.0, 3)            # no new label; three times the documents
    assert cal.thresholds.tolist() == [0.3, 0.5, 0.7] and cal.label_counts.tolist() == [5, 2, 1]
    np.testing.assert_allclose(cal.edges, [30.0, 60.0])
    carry_calibration(cal, np.array([5, 2, 1, 1, 0]), 3.0, 3)     # two new labels, the same documents
    assert cal.thresholds.tolist() == [0.3, 0.5, 0.7, 0.4, 0.4] and cal.label_counts.tolist() == [5, 2, 1, 1, 0]
    np.testing.assert_allclose(cal.edges, [30.0, 60.0])
    carry_calibration(cal, np.array([5, 2, 1, 1, 0]), 0.0, 3)     # documents unknown: the edges stay
    np.testing.assert_allclose(cal.edges, [30.0, 60.0])
    median = _cal([1, 1], thresholds=[0.2, 0.6])                    # one new label, no global threshold: the median
    carry_calibration(median, np.array([1, 1, 2]), 2.0, 2)
    assert median.thresholds.tolist() == [0.2, 0.6, pytest.approx(0.4)]


@pytest.fixture(scope="module")
def xr_small():
    import xmtc
    from serve_support import sample_docs

    texts, labels = sample_docs(step=12)
    cut = int(len(texts) * 0.8)
    model = xmtc.XRLinear(n_trees=1, max_leaf_size=16, branching=4, n_threads=2)
    return model.fit(texts[:cut], labels[:cut], progress=False), texts, labels, cut


def test_pin_learning_gives_each_regime_its_objective(xr_small, monkeypatch):
    """Without remembered rows the anchored proximal refit (C / anchor); with a sample of them the fresh labels'
    negatives weigh seen / len each; with all of them the replayed refit at the fit's own C."""
    import copy

    from xmtc.data.dataset import label_matrix
    from xmtc.models.learning import learn_tree_model
    from xmtc.models.memory import TrainingMemory

    model, texts, labels, cut = xr_small
    cfg = model.config
    from serve_support import update_calls

    calls = update_calls(monkeypatch)
    docs, labs = texts[cut:cut + 20], labels[cut:cut + 20]
    X_old = model.transform(texts[:cut])
    Y_old = label_matrix(labels[:cut], model.labels_)[0]
    cold = np.flatnonzero(model.label_counts_ == 0).tolist()

    learn_tree_model(copy.deepcopy(model), docs, labs, anchor=0.5, memory=False)
    kw = calls[-1]
    assert kw["warm"] == "proximal" and kw["replay"] is None and kw["memory"] is None
    assert (kw["C_pos"], kw["C_neg"]) == (pytest.approx(cfg.C_pos / 0.5), pytest.approx(cfg.C_neg / 0.5))
    assert kw["fresh_C"] == (cfg.C_pos, cfg.C_neg) and kw["cold"].tolist() == cold

    sampled = copy.deepcopy(model)
    sampled.memory_ = TrainingMemory.sample(X_old, Y_old, capacity=30, seed=0)
    learn_tree_model(copy.deepcopy(sampled), docs, labs, anchor=2.0, sampled_replay=False)
    kw = calls[-1]
    assert kw["warm"] == "proximal" and kw["replay"] is None and kw["memory"][0].shape[0] == 30
    assert kw["sample"] is None
    assert (kw["C_pos"], kw["C_neg"]) == (pytest.approx(cfg.C_pos / 2), pytest.approx(cfg.C_neg / 2))
    assert kw["fresh_C"] == (cfg.C_pos, pytest.approx(cfg.C_neg * cut / 30))

    # the default with a sample: the 30 rows replayed, the anchor standing for the cut - 30 rows not replayed
    learn_tree_model(sampled, docs, labs, anchor=2.0)
    kw = calls[-1]
    assert kw["warm"] == "proximal" and kw["replay"] is None and kw["sample"][0].shape[0] == 30
    a = 1.0 + (2.0 - 1.0) * (1.0 - 30 / cut)
    assert (kw["C_pos"], kw["C_neg"]) == (pytest.approx(cfg.C_pos / a), pytest.approx(cfg.C_neg / a))
    assert kw["fresh_C"] == (cfg.C_pos, pytest.approx(cfg.C_neg * cut / 30))

    whole = copy.deepcopy(model)
    whole.memory_ = TrainingMemory.sample(X_old, Y_old, capacity=10 ** 6, seed=0)
    learn_tree_model(whole, docs, labs, anchor=2.0)
    kw = calls[-1]
    assert kw["warm"] == "dual" and kw["replay"][0].shape[0] == cut and kw["memory"] is None
    assert (kw["C_pos"], kw["C_neg"]) == (cfg.C_pos, cfg.C_neg)


def test_pin_learning_a_label_matrix_names_its_new_columns(xr_small):
    import copy

    from xmtc.errors import ConfigError
    from xmtc.models.learning import learn_tree_model

    model, texts, labels, cut = xr_small
    L = model.n_labels
    X = texts[cut:cut + 4]
    Y = sp.csr_matrix((np.ones(4, np.float32), ([0, 1, 2, 3], [0, 1, 0, 1])), shape=(4, L))
    same = learn_tree_model(copy.deepcopy(model), X, Y)                # the model's columns only
    assert same.labels_.names == model.labels_.names and same.label_counts_[:2].tolist() == \
        (model.label_counts_[:2] + 2).tolist()
    Y2 = sp.hstack([Y, sp.csr_matrix(np.ones((4, 1), np.float32))], format="csr")
    grown = learn_tree_model(copy.deepcopy(model), X, Y2, labels=model.labels_.extended(["fresh"]))
    assert grown.labels_.names == model.labels_.names + ["fresh"] and grown.label_counts_[-1] == 4
    with pytest.raises(ConfigError, match="must extend"):
        learn_tree_model(copy.deepcopy(model), X, Y2, labels=model.labels_)


def _stub_with_route(vocab, counts, route_texts):
    from xmtc.features.tfidf import TfidfFeaturizer
    from xmtc.models.label_route import LabelRoute

    f = TfidfFeaturizer(min_df=1).fit(route_texts)
    model = _RoutedStub(vocab, counts)
    model.label_route_ = LabelRoute(np.zeros(0, np.int64), sp.csr_matrix((0, f.n_features_), dtype=np.float32),
                                    np.array([0.0, 1.0]), np.array([0.2, 0.8]), f)
    model.removed_ = None
    return model


def test_pin_open_labels_a_release_fills_the_columns_a_model_lacks():
    from xmtc.models.open_labels import add_labels

    # a model with URIs only; the release renames and re-texts p1 (learned from documents: not routed) and adds
    # p3 (first in the file) and p4 (no text: its name is its text)
    model = _stub_with_route(LabelVocab(["p0", "p1", "p2"], uris=["u0", "u1", "u2"]), [2, 1, 0],
                             ["three text", "four", "one text", "five text"])
    changes = add_labels(model, LabelVocab(["p3", "p1", "p4"], display=["Three", "Uno", "Four"],
                                           texts=["three text", "one text", ""]))
    assert (changes.added, changes.updated, changes.unchanged, changes.restored) == (2, 1, 0, 0)
    v = model.labels_
    assert v.names == ["p0", "p1", "p2", "p3", "p4"] and v.display == ["", "Uno", "", "Three", "Four"]
    # a label's text is its text, else its name, never its id (training's rule): p0 and p2 have neither
    assert v.texts == ["", "one text", "", "three text", "Four"] and v.uris == ["u0", "u1", "u2", "", ""]
    route = model.label_route_
    assert route.label_ids.tolist() == [3, 4] and model.label_counts_.tolist() == [2, 1, 0, 0, 0]
    np.testing.assert_allclose(route.M.toarray(), route.featurizer.transform(["three text", "Four"]).toarray())
    # a model with names only; the release gives p1 a URI and adds p5 with a name, a text and a URI
    model = _stub_with_route(LabelVocab(["p0", "p1", "p2"]), [2, 1, 0], ["three text", "four", "five text"])
    changes = add_labels(model, LabelVocab(["p1", "p5"], display=["", "Five"], texts=["", "five text"],
                                           uris=["u1", "u5"]))
    assert (changes.added, changes.updated, changes.unchanged, changes.restored) == (1, 1, 0, 0)
    v = model.labels_
    assert v.display == ["", "", "", "Five"] and v.texts == ["", "", "", "five text"]
    assert v.uris == ["", "u1", "", "u5"] and model.label_route_.label_ids.tolist() == [3]
    # a release of ids only: an id is no text, the added label is not routed and is counted as such
    changes = add_labels(model, LabelVocab(["p6"]))
    assert changes.added == 1 and changes.unrouted == 1
    assert model.labels_.texts[-1] == "" and model.label_route_.label_ids.tolist() == [3]


# -- the tree update: placement, refits, fresh labels against remembered rows ------------------------------------
def _update_inputs(xr_small, n_docs=6):
    from xmtc.data.dataset import label_matrix

    model, texts, labels, cut = xr_small
    cfg = model.config
    solver = dict(C_pos=cfg.C_pos, C_neg=cfg.C_neg, bias=cfg.bias, tol=cfg.tree_tol(1), max_iter=cfg.max_iter,
                  threshold=cfg.threshold, n_threads=1)
    X_old = model.transform(texts[:cut])
    Y_old = label_matrix(labels[:cut], model.labels_)[0]
    X_new = model.transform(texts[cut:cut + n_docs])
    L = model.n_labels
    Y_new = sp.csr_matrix((np.ones(n_docs, np.float32), (np.arange(n_docs), np.full(n_docs, L))), shape=(n_docs, L + 1))
    return model.models_[0], solver, X_old, Y_old, X_new, Y_new


def test_pin_update_a_fresh_label_against_remembered_rows_is_its_cold_fit_on_them(xr_small):
    """Module doc, 4.: fitted as a retrain would fit it, with ``fresh_C``, on its new documents plus the remembered
    rows its parent makes active -- the column a fit of the extended tree on those rows gives it."""
    from xmtc.linear.hierarchy import HierarchicalLinearModel
    from xmtc.linear.update import extended_tree, update

    h, solver, X_old, Y_old, X_new, Y_new = _update_inputs(xr_small)
    L = Y_new.shape[1] - 1
    mem = (X_old[:400], Y_old[:400])
    new, report = update(h, X_new, Y_new, memory=mem, fresh_C=(2.0, 0.5), **solver)
    tree = extended_tree(h, np.array([L]), np.array(report["placement"]))
    Y_mem = sp.csr_matrix(mem[1])
    Y_mem.resize(400, L + 1)
    ref = HierarchicalLinearModel().fit(sp.vstack([mem[0], X_new], format="csr"),
                                        sp.vstack([Y_mem, Y_new], format="csr"), tree.chain, negatives="tfn",
                                        **{**solver, "C_pos": 2.0, "C_neg": 0.5})
    got, want = new.levels_[-1].to_weights()[:, L].toarray(), ref.levels_[-1].to_weights()[:, L].toarray()
    assert np.abs(want).sum() > 0
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_pin_update_reports_and_placement_follow_the_tree(xr_small):
    import time

    from xmtc.linear.update import update

    h, solver, X_old, Y_old, X_new, Y_new = _update_inputs(xr_small)
    L = Y_new.shape[1] - 1
    t0 = time.perf_counter()
    new, report = update(h, X_new, Y_new, **solver)
    assert 0 <= report["seconds"] <= time.perf_counter() - t0 + 5e-4 and report["new_labels"] == 1  # (rounded to ms)
    # the new rows carry the new label only: at level t the refit nodes are the children of its ancestor at level
    # t - 1 (all of the first level's), itself included
    parents = [lv.parent_of for lv in new.levels_]
    chain, node = [], L
    for t in range(len(parents) - 1, -1, -1):
        chain.append(node)
        node = parents[t][node]
    ancestors = chain[::-1]                                       # level 0 .. the label itself
    want = [int(np.sum(parents[t] == (0 if t == 0 else ancestors[t - 1]))) for t in range(len(parents))]
    assert report["refitted"] == want and want[-1] > 1


def test_pin_update_an_old_labels_documents_hang_a_new_label_under_its_cluster(xr_small):
    from xmtc.linear.update import place_new_labels

    model, texts, labels, cut = xr_small
    h = model.models_[0]
    leaf_of = h.levels_[-1].parent_of
    counts = model.label_counts_.copy()
    counts[leaf_of == 0] = 0                                      # a label whose leaf cluster is not the first
    j = int(np.argmax(counts))
    docs = [texts[i] for i in range(cut) if model.labels_.names[j] in labels[i]]
    Y = sp.csr_matrix(np.ones((len(docs), 1), np.float32))
    assert place_new_labels(h, model.transform(docs), Y).tolist() == [leaf_of[j]]


def test_pin_update_cold_own_labels_keep_their_cluster_and_say_no(xr_small):
    from xmtc.linear.update import NEVER, update

    h, solver, X_old, Y_old, X_new, Y_new = _update_inputs(xr_small)
    L = Y_new.shape[1] - 1
    cold = np.array([L - 1, 40])                                  # own labels without a document, none in the rows
    new, report = update(h, X_new, Y_new, cold=cold, memory=(X_old[:200], Y_old[:200]), **solver)
    assert new.levels_[-1].parent_of[cold].tolist() == h.levels_[-1].parent_of[cold].tolist()
    W = new.levels_[-1].to_weights()
    d = X_new.shape[1]
    assert np.abs(W[:d, cold].toarray()).sum() == 0
    np.testing.assert_allclose(W[d, cold].toarray().ravel() * solver["bias"], [NEVER, NEVER])


def test_pin_update_replay_is_checked_and_matcher_aware_negatives_run(xr_small):
    from xmtc.errors import ConfigError
    from xmtc.linear.update import update

    h, solver, X_old, Y_old, X_new, Y_new = _update_inputs(xr_small)
    L = Y_new.shape[1] - 1
    wide = sp.hstack([Y_old[:50], sp.csr_matrix((50, 1), dtype=np.float32)], format="csr")
    with pytest.raises(ConfigError, match="replay set"):
        update(h, X_new, Y_new, warm="dual", replay=(X_old[:50], wide), **solver)
    with pytest.raises(ConfigError, match="replay set"):
        update(h, X_new, Y_new, warm="dual", replay=(X_old[:50], Y_old[:49]), **solver)
    new, _ = update(h, X_new, Y_new, negatives="tfn+man", **solver)
    assert new.n_labels == L + 1


# -- ALC: the margin's boundaries, the ql negatives' pool, a zero scale ------------------------------------------
def test_pin_alc_tcm_counts_a_negative_at_the_margin_and_divides_by_the_violators():
    torch = pytest.importorskip("torch")
    from xmtc.neural.alc import tcm_loss

    p = torch.tensor([[0.5, 0.7, 0.2, 0.8]])
    pos = torch.tensor([[False, False, False, True]])
    # negatives at or above 0.5: 0.5 (violates by 0) and 0.7: mean 0.1; the one positive below 0.9: 0.1
    assert tcm_loss(p, pos, 0.9, 0.5).item() == pytest.approx(0.1 + 0.1, rel=1e-6)


def test_pin_alc_ql_takes_its_negative_from_the_texts_own_shortlist_only():
    torch = pytest.importorskip("torch")
    from xmtc.neural.alc import alc_terms

    logp = torch.tensor([[0.8, 0.3, 0.9]]).log()
    pos, own = torch.tensor([[True, False, False]]), torch.tensor([[True, True, False]])
    _, parts = alc_terms(logp, pos, own, beta=1.0, tcm_weight=0.0)
    # label 2 scores higher but is not in the text's shortlist: the negative is label 1
    assert parts["alc_ql"] == pytest.approx(-np.log(0.8) - np.log(1 - 0.3), rel=1e-6) and parts["alc_qb"] == 0.0


def test_pin_alc_at_scale_zero_the_step_is_the_base_step():
    torch = pytest.importorskip("torch")
    from xmtc.methods.lightxml.network import LightXMLNetwork
    from xmtc.neural import alc as A

    net = LightXMLNetwork(np.array([0, 0, 1, 1, 2, 2]), hidden_size=4, n_layers=1, hidden_dim=3, dropout=0.0, topk=2,
                          seed=0)
    rep = torch.tensor([[0.5, -1.0, 0.2, 0.3], [1.0, 0.4, -0.6, 0.1], [-0.3, 0.8, 0.9, -1.2]])
    Y = sp.csr_matrix(np.array([[0, 0, 0, 1, 0, 0], [0, 0, 0, 0, 0, 1], [1, 1, 0, 0, 0, 0]], dtype=np.float32))
    net.attach_alc(A.ALC(scale=0.0, warmup_steps=0))
    base = net.training_loss(rep, Y)
    out = A.with_alc(net, rep, Y, base)
    assert out.loss is base.loss and list(out.rows) == list(base.rows)      # no auxiliary rows join the step
    assert out.parts == {**base.parts, "alc_w": 1.0} and int(net.alc.steps) == 1


# -- the refit of old nodes: the bias hold and the curvature scale proximal refits only (2026-11-28) ----------------
def _refit_inputs(seed=0, n=60, d=5):
    rng = np.random.default_rng(seed)
    X = sp.csr_matrix(rng.normal(size=(n, d)).astype(np.float32))
    Y = sp.csr_matrix((rng.random(n) < 0.3).astype(np.float32)[:, None])
    w0 = sp.csc_matrix(np.r_[rng.normal(size=d), 0.7].astype(np.float32)[:, None])
    return X, Y, np.zeros(1, dtype=np.int32), sp.csr_matrix(np.ones((n, 1), np.float32)), w0


def test_pin_update_a_dual_refit_is_train_level_itself_whatever_the_curvature():
    """``curvature`` is a *proximal* refit's ``1/2 sum_j h_j (w_j - w_old_j)^2`` (update's docstring) and the bias
    hold is the proximal step's too: a dual refit is the node's full objective, i.e. ``train_level`` with the
    old weights as its start, bit for bit, with or without a curvature."""
    from xmtc.linear.solver import train_level
    from xmtc.linear.update import _refit

    X, Y, parent, active, w0 = _refit_inputs()
    kw = dict(C_pos=0.5, C_neg=0.5, bias=1.0, tol=1e-6, max_iter=10000, threshold=0.0)
    want = train_level(X, Y, parent, active, init=w0, warm="dual", n_threads=1, **kw).toarray()
    h = np.array([1.0, 30.0, 2.0, 300.0, 5.0])
    for curvature in (None, h):
        got = _refit(X, Y, parent, active, w0, "dual", 1, dict(kw), curvature).toarray()
        np.testing.assert_array_equal(got, want)


def test_pin_update_a_proximal_refit_without_bias_holds_nothing_and_is_train_level_itself():
    """``bias=0`` (no bias feature): nothing to hold, so a proximal refit without a curvature is ``train_level``'s
    proximal step, bit for bit; with a curvature ``h`` it is the proximal step on ``x_j / sqrt(h_j)`` from
    ``w_old_j sqrt(h_j)``, mapped back (``_refit``'s docstring), the bias feature still 0."""
    from xmtc.linear.solver import train_level
    from xmtc.linear.update import _refit

    X, Y, parent, active, w0 = _refit_inputs(seed=2)
    kw = dict(C_pos=0.5, C_neg=0.5, bias=0.0, tol=1e-6, max_iter=10000, threshold=0.0)
    want = train_level(X, Y, parent, active, init=w0, warm="proximal", n_threads=1, **kw).toarray()
    np.testing.assert_array_equal(_refit(X, Y, parent, active, w0, "proximal", 1, dict(kw)).toarray(), want)
    h = np.array([1.0, 30.0, 2.0, 300.0, 5.0])
    s = np.sqrt(h)
    Xs = sp.csr_matrix((X.toarray().astype(np.float64) / s).astype(np.float32))
    init = sp.csc_matrix((w0.toarray().astype(np.float64) * np.r_[s, 1.0][:, None]).astype(np.float32))
    scaled = train_level(Xs, Y, parent, active, init=init, warm="proximal", n_threads=1, **kw).toarray()
    np.testing.assert_allclose(_refit(X, Y, parent, active, w0, "proximal", 1, dict(kw), h).toarray(),
                               scaled / np.r_[s, 1.0][:, None], rtol=1e-5, atol=1e-6)


def _assert_curvature(got, want):
    """``got`` is ``want`` on the remembered rows' features and 1 on any past them (words a learn adds to the
    vocabulary, which no remembered row has)."""
    assert got is not None and len(got) >= len(want)
    np.testing.assert_allclose(got[:len(want)], want, rtol=1e-5)
    assert np.all(got[len(want):] == 1.0)


def test_pin_learning_a_curvature_learn_holds_features_by_the_remembered_rows_at_the_fits_C(xr_small, monkeypatch):
    """``curvature=True`` (proximal refits only): ``update`` gets ``h_j = 1 + 2 C_neg (seen / len) sum_i x_ij^2`` over
    the memory as it was before the learn, written out here, and the fit's own C (h stands for the old rows, so
    no anchor divides C); a whole memory refits dual (no h, nothing refused), unless ``whole_memory_refit`` is off;
    without remembered rows there is nothing to count h on."""
    import copy

    from xmtc.data.dataset import label_matrix
    from xmtc.errors import ConfigError
    from xmtc.models.learning import learn_tree_model
    from xmtc.models.memory import TrainingMemory

    model, texts, labels, cut = xr_small
    cfg = model.config
    from serve_support import update_calls

    calls = update_calls(monkeypatch)
    docs, labs = texts[cut:cut + 20], labels[cut:cut + 20]
    X_old = model.transform(texts[:cut])
    Y_old = label_matrix(labels[:cut], model.labels_)[0]

    sampled = copy.deepcopy(model)
    sampled.memory_ = TrainingMemory.sample(X_old, Y_old, capacity=30, seed=0)
    Xm = sampled.memory_.X.toarray().astype(np.float64)
    want = 1.0 + 2.0 * cfg.C_neg * (cut / 30) * (Xm ** 2).sum(axis=0)
    learn_tree_model(sampled, docs, labs, anchor=2.0, curvature=True)
    kw = calls[-1]
    assert kw["warm"] == "proximal" and kw["replay"] is None
    _assert_curvature(kw["curvature"], want)
    assert (kw["C_pos"], kw["C_neg"]) == (cfg.C_pos, cfg.C_neg)
    assert kw["fresh_C"] == (cfg.C_pos, pytest.approx(cfg.C_neg * cut / 30))

    whole = copy.deepcopy(model)
    whole.memory_ = TrainingMemory.sample(X_old, Y_old, capacity=10 ** 6, seed=0)
    learn_tree_model(copy.deepcopy(whole), docs, labs, anchor=2.0, curvature=True)
    kw = calls[-1]
    assert kw["warm"] == "dual" and kw["curvature"] is None and kw["replay"][0].shape[0] == cut
    learn_tree_model(whole, docs, labs, anchor=2.0, curvature=True, whole_memory_refit=False)
    kw = calls[-1]
    assert kw["warm"] == "proximal" and kw["replay"] is None and kw["memory"][0].shape[0] == cut
    Xw = X_old.toarray().astype(np.float64)
    _assert_curvature(kw["curvature"], 1.0 + 2.0 * cfg.C_neg * (Xw ** 2).sum(axis=0))
    assert kw["fresh_C"] == (cfg.C_pos, pytest.approx(cfg.C_neg))

    with pytest.raises(ConfigError, match="curvature needs"):
        learn_tree_model(copy.deepcopy(model), docs, labs, memory=False, curvature=True)
    learn_tree_model(copy.deepcopy(model), docs, labs, memory=False)    # no curvature asked: no rows needed


def test_pin_learning_one_document_with_one_label_is_enough_and_none_is_refused(xr_small):
    """One label occurrence is something to learn (the new label's count becomes 1); zero is refused."""
    import copy

    from xmtc.errors import DataFormatError
    from xmtc.models.learning import learn_tree_model

    model, texts, labels, cut = xr_small
    one = learn_tree_model(copy.deepcopy(model), texts[cut:cut + 1], [["brand-new"]], memory=False)
    assert one.labels_.names[-1] == "brand-new" and one.label_counts_[-1] == 1 and one.n_train_ == model.n_train_ + 1
    with pytest.raises(DataFormatError, match="no document has a label"):
        learn_tree_model(copy.deepcopy(model), texts[cut:cut + 2], [[], []], memory=False)
    with pytest.raises(DataFormatError, match="no documents"):
        learn_tree_model(copy.deepcopy(model), [], [], memory=False)


@pytest.mark.parametrize("anchor", [0, 0.0, -1.0, float("inf"), float("nan"), True, "4"])
def test_pin_learning_anchor_must_be_a_positive_finite_number(xr_small, anchor):
    from xmtc.errors import ConfigError
    from xmtc.models.learning import learn_tree_model

    model, texts, labels, cut = xr_small
    with pytest.raises(ConfigError, match="anchor must be a positive number"):
        learn_tree_model(model, texts[cut:cut + 1], [["x"]], anchor=anchor)     # refused before anything changes


def test_pin_learning_a_label_matrix_of_the_wrong_shape_is_refused_and_new_columns_get_placeholder_names(xr_small):
    """A sparse Y needs a row per document and at least the model's label columns (either wrong is refused);
    its columns past them are named ``<new j>`` (j the column) when no vocabulary names them; stored zeros are
    no labels and other values count as 1."""
    import copy

    from xmtc.errors import DataFormatError
    from xmtc.models.learning import _new_labels

    model, texts, labels, cut = xr_small
    L = model.n_labels
    for shape in [(3, L), (5, L - 1), (3, L + 2)]:
        with pytest.raises(DataFormatError, match="expected 4 rows"):
            _new_labels(model, sp.csr_matrix(shape, dtype=np.float32), None, 4)
    Y = sp.csr_matrix((np.array([2.0, 0.0, 1.0], np.float32), ([0, 1, 2], [0, L, L + 1])), shape=(4, L + 2))
    got, vocab = _new_labels(copy.deepcopy(model), Y, None, 4)
    assert vocab.names == model.labels_.names + [f"<new {L}>", f"<new {L + 1}>"]
    assert got.nnz == 2 and got.toarray()[[0, 2], [0, L + 1]].tolist() == [1.0, 1.0] and got[1].nnz == 0


def test_pin_route_reuse_scores_each_text_batch_once_per_depth_and_label_set(monkeypatch):
    """``reusing_route_topk`` (its docstring): within it, the very texts of an earlier call at a ``k`` no larger
    than that call's are answered from it -- ``_topk`` is not run again, the answer is the first ``k`` columns,
    a copy; other texts, a larger ``k`` or a changed label set (``add``: a new ``M``) are scored anew, and a
    larger ``k`` then serves the smaller ones; nested contexts share the outer memo; outside, every call scores."""
    from xmtc.features.tfidf import TfidfFeaturizer
    from xmtc.models.label_route import LabelRoute, _REUSE, reusing_route_topk

    f = TfidfFeaturizer(min_df=1).fit(["steam trains", "bird watching", "old maps", "sea shells", "steam birds"])
    route = LabelRoute(np.array([5, 9, 11]), f.transform(["steam trains", "bird watching", "steam birds"]),
                       np.array([0.0, 1.0]), np.array([0.2, 0.8]), f)
    calls, real = [], LabelRoute._topk
    monkeypatch.setattr(LabelRoute, "_topk", lambda self, t, k: calls.append((list(t), k)) or real(self, t, k))
    texts = ["steam trains and birds", "bird maps"]
    plain = {k: real(route, texts, k) for k in (1, 2, 3)}
    with reusing_route_topk():
        ids, probs = route.topk(texts, 2)
        assert calls == [(texts, 2)] and np.array_equal(ids, plain[2][0]) and np.array_equal(probs, plain[2][1])
        for k in (2, 1):                                          # the same texts at k <= 2: answered from it
            ids, probs = route.topk(list(texts), k)
            assert np.array_equal(ids, plain[k][0]) and np.array_equal(probs, plain[k][1])
            ids[:] = -7                                           # a copy: the memo is not written through
        assert len(calls) == 1
        ids, _ = route.topk(texts, 3)                             # deeper: scored, and then it serves
        assert calls[-1] == (texts, 3) and np.array_equal(ids, plain[3][0])
        with reusing_route_topk():                                # nested: the same memo
            assert np.array_equal(route.topk(texts, 2)[0], plain[2][0]) and np.array_equal(route.topk(texts, 3)[0],
                                                                                          plain[3][0])
        assert len(calls) == 2 and _REUSE.memo
        route.topk(texts[:1], 1)                                  # other texts: scored
        assert calls[-1] == (texts[:1], 1)
        route.topk(texts, 1)
        assert calls[-1] == (texts, 1) and len(calls) == 4        # the memo holds the last texts only
        route.add([12], ["bird maps"])                            # a new label set: scored, the new label found
        ids, _ = route.topk(texts, 1)
        assert len(calls) == 5 and ids[1, 0] == 12
        assert route.topk(texts, 1)[0][1, 0] == 12 and len(calls) == 5   # ... and that answer serves in turn
    assert _REUSE.memo is None
    route.topk(texts, 1)
    route.topk(texts, 1)
    assert len(calls) == 7                                        # outside: every call scores


# -- the route's inverted-index kernel ---------------------------------------------------------------------------
def test_pin_kernels_stay_inside_their_scratch_arrays_when_a_text_touches_every_label_row(tmp_path):
    """Every label row holds both of a text's n-grams: the first n-gram's postings touch all ``n_rows`` rows, the
    second writes its rows to the scratch list again (kept only on a first touch, so its slot ``n_rows`` is
    written). The kernel (C) must stay inside its arrays -- run in a child process, so that a stray write crashes
    it rather than the test run -- and give the products by hand."""
    import os
    import subprocess
    import sys

    code = """
import numpy as np, scipy.sparse as sp
from xmtc.models.route_kernels import inverted, top_rows
M = sp.csr_matrix(np.array([[1.0, 1.0], [2.0, 1.0], [1.0, 3.0]], np.float32))
pos, val = top_rows(sp.csr_matrix(np.array([[1.0, 0.5]], np.float32)), inverted(M), 3, 4)
assert pos.tolist() == [[1, 2, 0, -1]], pos   # 2.5, 2.5 (a tie: the lower row first), 1.5
assert val.tolist() == [[2.5, 2.5, 1.5, 0.0]], val
pos, val = top_rows(sp.csr_matrix(np.array([[1.0, 0.5]], np.float32)), inverted(M), 3, 0)   # k = 0: no heap
assert pos.shape == (1, 0) and val.shape == (1, 0)
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_pin_update_a_dual_refit_leaves_cold_labels_in_a_touched_cluster_saying_no(xr_small):
    """With the old rows replayed (``warm="dual"``) the documented fresh labels are refitted with the rest, but a
    cold label -- one without a document, old or new -- keeps the ranker that says no (module doc, 4.), also
    where the new rows touch its cluster (so the refit of that cluster's children would reach it)."""
    from xmtc.linear.update import NEVER, update

    h, solver, X_old, Y_old, X_new, Y_new = _update_inputs(xr_small)
    L = Y_new.shape[1] - 1
    _, report = update(h, X_new, Y_new, **solver)
    place = int(report["placement"][0])                             # the new label's leaf cluster
    parent = h.levels_[-1].parent_of[:L]
    cold = np.flatnonzero(parent == place)[:2]                      # own labels there, made cold below
    assert cold.size
    keep = np.ones(Y_old.shape[1], np.float32)
    keep[cold] = 0.0
    Y_old = sp.csr_matrix(Y_old @ sp.diags(keep))
    Y_old.eliminate_zeros()
    new, report = update(h, X_new, Y_new, warm="dual", replay=(X_old, Y_old), cold=cold, **solver)
    assert int(report["placement"][0]) == place
    W = new.levels_[-1].to_weights()
    d = X_new.shape[1]
    assert np.abs(W[:d, cold].toarray()).sum() == 0
    np.testing.assert_allclose(W[d, cold].toarray().ravel() * solver["bias"], [NEVER] * cold.size)
    assert np.abs(W[:d, L].toarray()).sum() > 0                    # the documented new label was fitted


def test_pin_open_labels_a_model_without_a_route_takes_new_texts_of_known_labels_and_refuses_new_labels():
    """A model trained without label texts has no route: a release may re-text or rename its labels (the
    vocabulary changes, nothing is routed), but a label it lacks cannot be added, and the refusal changes
    nothing."""
    from xmtc.errors import ConfigError
    from xmtc.models.open_labels import add_labels

    model = _RoutedStub(LabelVocab(["p0", "p1"], texts=["railways", "birds"]), [0, 2])
    changes = add_labels(model, LabelVocab(["p0", "p1"], display=["Rail", ""], texts=["steam railways", ""]))
    assert (changes.added, changes.updated, changes.unchanged, changes.unrouted) == (0, 1, 1, 0)
    assert model.labels_.texts == ["steam railways", "birds"] and model.labels_.display == ["Rail", ""]
    assert getattr(model, "label_route_", None) is None
    before = model.labels_
    with pytest.raises(ConfigError, match="no label-text route"):
        add_labels(model, LabelVocab(["p0", "p9"], texts=["old railways", "castles"]))
    assert model.labels_ is before


def test_pin_open_labels_a_column_the_model_lacks_starts_empty_and_texts_start_as_the_display_names():
    """``_updated_vocab`` on a model with display names but neither texts nor URIs: a release that re-texts one
    label and gives another a URI fills the texts column with the display names (training's rule, a label's
    text is its name where it has no text) and the URI column with empty cells, the given values in place."""
    from xmtc.models.open_labels import _updated_vocab

    vocab = LabelVocab(["p0", "p1", "p2"], display=["Rail", "Birds", "Maps"])
    got, changes = _updated_vocab(vocab, LabelVocab(["p1", "p0", "p9", "p2"], display=["", "", "Castles", "Maps"],
                                                    uris=["", "u0", "u9", ""], texts=["bird watching", "", "castles", ""]))
    assert got.names == ["p0", "p1", "p2"] and got.display == ["Rail", "Birds", "Maps"]   # p2's name: the same
    assert got.texts == ["Rail", "bird watching", "Maps"] and got.uris == ["u0", "", ""]
    assert changes == {1: {"text"}, 0: {"uri"}}
    # no display names either: the texts column starts empty too
    got, _ = _updated_vocab(LabelVocab(["p0", "p1"]), LabelVocab(["p1"], texts=["birds"]))
    assert got.texts == ["", "birds"] and got.display is None and got.uris is None


def test_pin_kernels_sum_in_the_sorted_column_order_and_take_stored_zeros_but_no_negatives():
    """The module doc's exactness: a text's products are summed in float32 in its sorted n-gram order, whatever
    order its CSR row stores them in (here ``1 + 1 + 2^24 = 2^24 + 2``, where ``2^24 + 1 + 1`` rounds to ``2^24``);
    a stored 0 (in a text or a label row) is no match and no error; a negative value is refused."""
    from xmtc.models.route_kernels import inverted, top_rows

    M = sp.csr_matrix(np.ones((1, 3), np.float32))
    big = np.float32(2 ** 24)
    unsorted = sp.csr_matrix((np.array([big, 1.0, 1.0], np.float32), np.array([2, 0, 1]), np.array([0, 3])),
                             shape=(1, 3))
    assert not unsorted.has_sorted_indices
    pos, val = top_rows(unsorted, inverted(M), 1, 2)
    assert pos.tolist() == [[0, -1]] and val[0, 0] == np.float32(2 ** 24 + 2)
    zero_x = sp.csr_matrix((np.array([0.0, 2.0], np.float32), np.array([0, 1]), np.array([0, 2])), shape=(1, 3))
    zero_m = sp.csr_matrix((np.array([0.0, 3.0], np.float32), np.array([1, 2]), np.array([0, 0, 2])), shape=(2, 3))
    pos, val = top_rows(zero_x, inverted(zero_m), 2, 2)            # row 1 holds a stored 0 at the text's n-gram
    assert pos.tolist() == [[-1, -1]] and val.tolist() == [[0.0, 0.0]]
    pos, val = top_rows(zero_x, inverted(M), 1, 1)
    assert pos.tolist() == [[0]] and val.tolist() == [[2.0]]
    with pytest.raises(ValueError, match="non-negative"):
        inverted(sp.csr_matrix(np.array([[1.0, -0.5]], np.float32)))
    with pytest.raises(ValueError, match="non-negative"):
        top_rows(sp.csr_matrix(np.array([[1.0, -0.5, 0.0]], np.float32)), inverted(M), 1, 1)


# -- learn's in-place edit of the beam layout (637b4d8): the edits update builds -----------------------------------
def test_pin_update_zeroed_empties_exactly_the_flagged_columns():
    """``_zeroed``: ``W`` with the flagged columns emptied (fresh labels start cold), by its definition on the
    dense matrix; no stored zeros left, and nothing flagged leaves ``W`` as it is."""
    from xmtc.linear.update import _zeroed

    W = sp.csc_matrix(np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32))
    flags = np.array([False, True, False, True])
    want = W.toarray()
    want[:, flags] = 0.0
    out = _zeroed(W, flags)
    np.testing.assert_array_equal(out.toarray(), want)
    assert out.nnz == np.count_nonzero(want) == 10 and out.dtype == np.float32
    np.testing.assert_array_equal(_zeroed(W, np.zeros(4, bool)).toarray(), W.toarray())


def test_pin_update_never_is_a_bias_only_column_of_decision_value_never_at_any_bias():
    """``_never``: the nodes given, each with no feature weight and a bias weight whose decision value,
    ``bias * w_d``, is :data:`NEVER` -- whatever the bias (0.5, 3; 1 hides a multiplied or dropped bias);
    without a bias feature nothing at all."""
    from xmtc.linear.update import NEVER, _never

    for bias in (0.5, 1.0, 3.0):
        nodes, cols = _never(np.array([7, 2]), 6, bias)
        assert nodes.tolist() == [7, 2] and cols.shape == (7, 2)
        dense = cols.toarray()
        assert not dense[:6].any()
        np.testing.assert_allclose(bias * dense[6], [NEVER, NEVER], rtol=1e-6)
    nodes, cols = _never(np.array([1]), 3, 0.0)
    assert cols.shape == (4, 1) and not cols.toarray().any()


def test_pin_update_matcher_aware_negatives_follow_the_beam_of_the_updated_levels(xr_small):
    """``negatives="tfn+man"``: level ``t``'s refit set is ``changed_nodes`` of the rows its parents' positives or
    the beam at level ``t - 1`` make active, the beam stepped through the updated levels 0..t-1 (a second
    walk here, over the levels update returned); the report's counts are those sets (the fresh label last).
    A narrow beam (2) so that the beam is not every parent."""
    from xmtc.linear.beam import beam_step, prepare_features, root_beam
    from xmtc.linear.negatives import active_mask
    from xmtc.linear.update import changed_nodes, extended_tree, update

    h, solver, X_old, Y_old, X_new, Y_new = _update_inputs(xr_small)
    L = Y_new.shape[1] - 1
    new, report = update(h, X_new, Y_new, negatives="tfn+man", beam_size=2, **solver)
    tree = extended_tree(h, np.array([L]), np.array(report["placement"]))
    targets = tree.level_targets(Y_new)
    X = prepare_features(X_new, h.n_features)
    ids, sc = root_beam(X.shape[0])
    want, tfn = [], []
    for t, lv in enumerate(new.levels_):
        last = t == len(new.levels_) - 1
        for out, active in ((want, active_mask("tfn+man", t, targets, ids)), (tfn, active_mask("tfn", t, targets))):
            changed = changed_nodes(lv.parent_of, active, targets[t])
            out.append(int(np.setdiff1d(changed, [L]).size + 1) if last else int(changed.size))
        ids, sc = beam_step(X, lv, ids, sc, 2)
    assert report["refitted"] == want
    assert sum(want) > sum(tfn)  # the beam reaches parents the positives do not


def test_pin_update_the_progress_bar_counts_one_step_per_level(xr_small, monkeypatch):
    """``progress=True``: one bar over the levels, advanced once per level and closed."""
    import xmtc.progress
    from xmtc.linear.update import update

    bars = []

    class Bar:
        def __init__(self, enabled, total, **kwargs):
            self.enabled, self.total, self.n, self.closed = enabled, total, 0, False
            bars.append(self)

        def update(self, k):
            self.n += k

        def close(self):
            self.closed = True

    monkeypatch.setattr(xmtc.progress, "progress_bar", Bar)
    h, solver, X_old, Y_old, X_new, Y_new = _update_inputs(xr_small)
    update(h, X_new, Y_new, progress=True, **solver)
    assert len(bars) == 1 and bars[0].enabled is True
    assert bars[0].n == bars[0].total == len(h.levels_) and bars[0].closed
