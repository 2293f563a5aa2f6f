"""The dual encoder (``--method dual-encoder``): its losses, miner and batcher against their definitions, and
what the tiny random BERT can show -- free vectors start at the text embeddings, labels without documents and
labels added after training are found from their text, bf16 autocast, an exact resume.

Fit / predict / save / load / CLI / calibrate / serve are the registry's contract (tests/test_contract.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import xmtc  # noqa: E402
from xmtc.data import LabelVocab  # noqa: E402
from xmtc.models.base import as_label_matrix  # noqa: E402
from xmtc.neural.contrastive import contrastive_loss  # noqa: E402
from xmtc.neural.negatives import cluster_batches, mine_hard_negatives, sample_negatives, text_keys  # noqa: E402

FAST = dict(max_length=16, label_max_length=8, epochs=1, batch_size=16, n_threads=1, valid_size=0, seed=0)


@pytest.fixture(scope="module")
def data(tsv_sample):
    return tsv_sample("yso-finna-en-2k-20k", "train", 160), tsv_sample("yso-finna-en-2k-20k", "test", 20)


# -- losses ----------------------------------------------------------------------------------------------
def test_decoupled_softmax_matches_the_hand_computed_case():
    # one text, pool (p1, p2, n): positives p1, p2; scores already divided by tau
    a, b, c = 1.0, 2.0, 0.5
    got = contrastive_loss(torch.tensor([[a, b, c]]), torch.tensor([[True, True, False]]), "decoupled")
    # each positive's denominator: itself and the negative only, never the other positive
    want = 0.5 * (-(a - math.log(math.exp(a) + math.exp(c))) - (b - math.log(math.exp(b) + math.exp(c))))
    assert float(got) == pytest.approx(want, rel=1e-6)
    # a second text without positives adds nothing but still counts in the batch mean
    two = contrastive_loss(torch.tensor([[a, b, c], [0.0, 3.0, 1.0]]),
                           torch.tensor([[True, True, False], [False, False, False]]), "decoupled")
    assert float(two) == pytest.approx(want / 2, rel=1e-6)


def test_decoupled_softmax_leaves_a_texts_other_positives_out_of_each_denominator():
    pos = torch.tensor([[True, True, False]])
    low = contrastive_loss(torch.tensor([[1.0, 1.0, 0.0]]), pos, "decoupled")
    high = contrastive_loss(torch.tensor([[1.0, 10.0, 0.0]]), pos, "decoupled")
    # raising the second positive cannot hurt the first one's term (it is not in its denominator)...
    assert float(high) < float(low)
    # ... while under InfoNCE it does: the positives compete in one softmax
    assert float(contrastive_loss(torch.tensor([[1.0, 10.0, 0.0]]), pos, "infonce")) > \
        float(contrastive_loss(torch.tensor([[1.0, 1.0, 0.0]]), pos, "infonce"))
    # and the first positive's gradient does not depend on the second's score
    s = torch.tensor([[1.0, 10.0, 0.0]], requires_grad=True)
    contrastive_loss(s, pos, "decoupled").backward()
    s2 = torch.tensor([[1.0, 1.0, 0.0]], requires_grad=True)
    contrastive_loss(s2, pos, "decoupled").backward()
    assert float(s.grad[0, 0]) == pytest.approx(float(s2.grad[0, 0]), rel=1e-6)


def test_infonce_matches_the_hand_computed_case():
    a, b, c = 1.0, 2.0, 0.5
    got = contrastive_loss(torch.tensor([[a, b, c]]), torch.tensor([[True, True, False]]), "infonce")
    lse = math.log(math.exp(a) + math.exp(b) + math.exp(c))
    assert float(got) == pytest.approx(0.5 * ((lse - a) + (lse - b)), rel=1e-6)


# -- hard negatives ---------------------------------------------------------------------------------------
def test_the_miner_returns_each_texts_highest_scoring_non_positive_labels():
    rng = np.random.default_rng(0)
    T = rng.standard_normal((30, 8)).astype(np.float32)
    V = rng.standard_normal((50, 8)).astype(np.float32)
    T /= np.linalg.norm(T, axis=1, keepdims=True)
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    S = T @ V.T
    # positives: each text's 2nd and 5th best labels (so a miner must skip them)
    order = np.argsort(-S, axis=1)
    rows = np.repeat(np.arange(30), 2)
    cols = order[:, [1, 4]].reshape(-1)
    Y = sp.csr_matrix((np.ones(rows.size, np.float32), (rows, cols)), shape=(30, 50))
    got = mine_hard_negatives(T, V, Y, 6)
    for i in range(30):
        want = [j for j in order[i] if Y[i, j] == 0][:6]
        assert got[i].tolist() == want
    # sampling draws distinct labels from each row's mined ones only
    sample = sample_negatives(got, 3, np.random.default_rng(1))
    assert all(set(s) <= set(g) and len(set(s)) == 3 for s, g in zip(sample.tolist(), got.tolist()))


def test_cluster_batches_group_texts_whose_labels_are_close():
    rng = np.random.default_rng(0)
    groups, per_group, bs = 4, 32, 16
    centres = np.eye(8, dtype=np.float32)[:groups] * 5
    label_group = np.repeat(np.arange(groups), 10)                        # 40 labels, 10 per group
    V = centres[label_group] + 0.3 * rng.standard_normal((40, 8)).astype(np.float32)
    text_group = rng.permutation(np.repeat(np.arange(groups), per_group))  # 128 texts, shuffled
    labels = np.array([rng.choice(np.flatnonzero(label_group == g)) for g in text_group])
    Y = sp.csr_matrix((np.ones(labels.size, np.float32), (np.arange(labels.size), labels)), shape=(128, 40))
    batches = cluster_batches(text_keys(Y, V), bs, np.random.default_rng(1), seed=0)
    assert sorted(np.concatenate(batches).tolist()) == list(range(128)) and len(batches) == 128 // bs
    assert all(len(set(text_group[b].tolist())) == 1 for b in batches)   # a random batcher mixes groups


# -- the network over the tiny BERT ------------------------------------------------------------------------
def _built(tiny_bert, texts, labels, vocab=None, **kw):
    from xmtc.features.encoder import load_encoder

    model = xmtc.DualEncoder(encoder=tiny_bert, **{**FAST, **kw})
    Y, model._fit_vocab = as_label_matrix(labels, vocab, len(texts))
    _, encoder = load_encoder(tiny_bert)
    return model._build_network(model.config, encoder, texts, Y, 1), Y


def test_free_vectors_start_at_the_label_text_embeddings(data, tiny_bert):
    (texts, labels), _ = data
    names = sorted({x for row in labels for x in row})
    vocab = LabelVocab(names + ["p-unused"], texts=[f"subject {n}" for n in names] + ["no document has me"])
    Y, vocab = as_label_matrix(labels, vocab, len(texts))
    net, Y = _built(tiny_bert, texts, Y, vocab)
    e = net.text_embeddings()
    assert net.has_free[:-1].all() and not net.has_free[-1]          # the unused label has no free vector
    np.testing.assert_allclose(net.sparse_heads["free"].weight.numpy()[:-1], e[:-1], atol=1e-6)
    np.testing.assert_allclose(net.label_vectors(), e, atol=1e-6)    # v_l = normalize(e_l + e_l) = e_l
    off, _ = _built(tiny_bert, texts, Y, vocab, free_vectors=False)
    assert "free" not in off.sparse_heads and not off.has_free.any()


def test_a_step_scores_mined_negatives_and_runs_under_bf16_autocast(data, tiny_bert):
    (texts, labels), _ = data
    net, Y = _built(tiny_bert, texts, labels, n_negatives=2, negatives="mined")
    net.mined = np.tile(np.arange(5, 10), (len(texts), 1))
    net.on_batch(np.arange(4))
    pool = net.pool(Y[:4])
    assert set(Y[:4].indices) <= set(pool.tolist()) and len(set(pool.tolist()) & set(range(5, 10))) >= 2
    tok_encoder = net.tower()
    from xmtc.features.encoder import Tokenized
    from xmtc.methods.dual_encoder.estimator import _tokenizer

    batch = Tokenized(_tokenizer(tiny_bert), texts[:4], 16).batch(np.arange(4), "cpu")
    seen = []  # the dtypes the encoder's matrix products ran in (texts and label texts alike)
    hooks = [m.register_forward_hook(lambda m, i, o: seen.append(o.dtype)) for m in tok_encoder.modules()
             if isinstance(m, torch.nn.Linear)]
    with torch.autocast("cpu", dtype=torch.bfloat16):   # the CUDA path's dtypes, on the CPU
        out = tok_encoder(**batch, output_hidden_states=True)
        rep = net.text_representation(out.hidden_states, batch["attention_mask"])
        net.on_batch(np.arange(4))
        loss = net.training_loss(rep, Y[:4])
    for h in hooks:
        h.remove()
    assert set(seen) == {torch.bfloat16} and len(seen) == 2 * len(hooks)  # the text batch and the label pool
    assert loss.loss.dtype == torch.float32 and torch.isfinite(loss.loss)
    loss.loss.backward()
    (_, hb), = loss.rows
    assert hb.w.grad is not None and hb.w.grad.dtype == torch.float32 and torch.isfinite(hb.w.grad).all()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in tok_encoder.parameters())


# -- open label sets ---------------------------------------------------------------------------------------
def test_labels_without_documents_and_labels_added_later_are_found_from_their_text(data, tiny_bert, tmp_path):
    (texts, labels), _ = data
    names = sorted({x for row in labels for x in row})
    vocab = LabelVocab(names + ["p-lonely"], texts=names + ["lighthouses of the baltic coast"])
    Y, _ = as_label_matrix(labels, LabelVocab(names), len(texts))    # Y has no column for p-lonely
    model = xmtc.DualEncoder(encoder=tiny_bert, **FAST).fit(texts, Y, labels=vocab, progress=False)
    assert model.labels_.names[-1] == "p-lonely" and model.label_counts_[-1] == 0
    assert model.predict(["lighthouses of the baltic coast"], 1)[0][0][0] == "p-lonely"
    from xmtc.models.open_labels import add_labels

    assert add_labels(model, LabelVocab(["p-new"], texts=["wooden boats of finland"])) == 1  # `xmtc labels add`
    assert model.labels_.texts[-1] == "wooden boats of finland" and model.label_counts_.shape == (len(vocab) + 1,)
    assert model.predict(["wooden boats of finland"], 1)[0][0][0] == "p-new"
    assert model.add_labels(LabelVocab([names[0]])) == []                      # known labels are left alone
    model.save(tmp_path / "m")
    loaded = xmtc.load(tmp_path / "m")
    assert loaded.predict(["wooden boats of finland"], 1)[0][0][0] == "p-new" and len(loaded.labels_) == len(vocab) + 1


# -- the shared loop's hooks: cluster batches, re-mining, bf16, resume ----------------------------------------
def test_cluster_batching_and_bf16_training_run_through_the_loop(data, tiny_bert):
    (texts, labels), (test, _) = data
    model = xmtc.DualEncoder(encoder=tiny_bert, **{**FAST, "epochs": 2, "batching": "cluster", "negatives": "mined",
                                                     "precision": "bf16", "towers": "two"})
    model.fit(texts, labels, progress=False)
    assert model.network_.mined is not None and model.network_.mined.shape == (len(texts), model.mine_topk)
    idx, sc = model.predict_topk(test, 3)
    assert idx.shape == (len(test), 3) and np.isfinite(sc).all()


def test_a_run_killed_mid_epoch_resumes_to_the_same_model(data, tiny_bert, tmp_path, monkeypatch):
    from xmtc.neural.checkpoint import Checkpoint

    (texts, labels), (test, _) = data
    params = {**FAST, "epochs": 2, "checkpoint_every": 3, "negatives": "mined"}  # + cluster batches (default)
    whole = xmtc.DualEncoder(encoder=tiny_bert, **params).fit(texts, labels, progress=False)
    real_save = Checkpoint.save
    calls = {"n": 0}

    def dying_save(self, state):
        real_save(self, state)
        calls["n"] += 1
        if calls["n"] == 5:  # 10 batches an epoch: saves at 3, 6, 9, 10 (epoch end), 12 -> killed in epoch 2
            raise KeyboardInterrupt

    monkeypatch.setattr(Checkpoint, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        xmtc.DualEncoder(encoder=tiny_bert, **params).fit(texts, labels, progress=False,
                                                            checkpoint_dir=tmp_path / "ck")
    monkeypatch.setattr(Checkpoint, "save", real_save)
    resumed = xmtc.DualEncoder(encoder=tiny_bert, **params).fit(texts, labels, progress=False,
                                                                   checkpoint_dir=tmp_path / "ck", resume=True)
    a, b = whole.predict_topk(test, 5), resumed.predict_topk(test, 5)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_allclose(a[1], b[1], rtol=1e-4, atol=1e-6)
