"""LightXML (xmtc.methods.lightxml.network, xmtc.methods.lightxml.estimator).

Hand-made cases pin the sampling and the score formula to their definitions; the suite's tiny random BERT
(the ``tiny_bert`` fixture) on real Reuters text shows that training learns and that the centroid start is
what fit trains from. The end-to-end core it runs on (trainer, validation selection, SWA, checkpoints,
distributed runs) is tests/test_e2e.py; save -> load, the command line and serving are tests/test_contract.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import xmtc  # noqa: E402
from xmtc.cli import main  # noqa: E402
from xmtc.models.base import as_label_matrix  # noqa: E402
from xmtc.neural.training_loop import EndToEndTrainer, TrainSettings  # noqa: E402
from xmtc.index.tree import cluster_members  # noqa: E402
from xmtc.methods.lightxml.network import LightXMLNetwork, candidate_labels, sample_clusters  # noqa: E402

from conftest import LIGHTXML_FAST as FAST  # noqa: E402


@pytest.fixture(scope="module")
def fitted(reuters_1200, tiny_bert):
    return xmtc.LightXML(encoder=str(tiny_bert), **FAST).fit(*reuters_1200[0], progress=False)


# -- sampling and scoring against their definitions ----------------------------------------------------
def test_cluster_members_and_candidates_with_positives_appended():
    col = np.array([1, 0, 1, 2, 0, 2, 2])          # labels 0..6 in clusters 0..2
    members = cluster_members(col, 3)
    assert members.tolist() == [[1, 4, -1], [0, 2, -1], [3, 5, 6]]
    top = np.array([[1, 0], [2, 1]])
    Y = sp.csr_matrix(np.array([[1, 0, 0, 0, 1, 0, 0],      # both positives inside clusters 1, 0
                                [0, 1, 0, 0, 0, 0, 1]]))    # label 1 (cluster 0) is not a candidate
    cand, target = candidate_labels(top, members, Y)
    assert cand.tolist() == [[0, 2, -1, 1, 4, -1, -1], [3, 5, 6, 0, 2, -1, 1]]
    assert target.tolist() == [[1, 0, 0, 0, 1, 0, 0], [0, 0, 1, 0, 0, 0, 1]]


def test_dynamic_negative_sampling_puts_true_clusters_first_then_the_generators_best():
    g = torch.tensor([[5.0, -1.0, 2.0, 0.0], [-3.0, 4.0, 1.0, 3.0]])
    y = torch.tensor([[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    # row 0: cluster 1 is true (sigmoid(-1) + 1 = 1.27 > sigmoid(5) = 0.99), then 0, 2
    # row 1: cluster 0 is true (1.05), then 1 (0.98), 3 (0.95)
    assert sample_clusters(g, y, 3).tolist() == [[1, 0, 2], [0, 1, 3]]


def test_prediction_is_sigmoid_label_times_sigmoid_cluster_over_the_top_clusters():
    torch.manual_seed(0)
    col = np.array([0, 0, 1, 1, 2, 2, 3])
    net = LightXMLNetwork(col, hidden_size=4, n_layers=1, hidden_dim=3, topk=2, dropout=0.0, seed=1).eval()
    rep = torch.randn(2, 4)
    idx, sc = net.predict(rep, k=4)
    g = torch.sigmoid(net.generator(rep)).detach().numpy()
    z = net.bottleneck(rep).detach().numpy()
    U = net.sparse_heads["labels"].weight.numpy()
    for i in range(2):
        top = np.argsort(-g[i])[:2]
        cands = [lab for c in top for lab in np.flatnonzero(col == c)]
        p = {lab: 1 / (1 + np.exp(-U[lab] @ z[i])) * g[i, col[lab]] for lab in cands}
        want = sorted(p, key=lambda lab: -p[lab])[:4]
        assert idx[i].tolist() == want + [-1] * (4 - len(want))   # fewer candidates than k: padded
        np.testing.assert_allclose(sc[i].detach().numpy()[:len(want)], [p[lab] for lab in want], rtol=1e-5)


def test_a_step_touches_only_the_candidate_rows_of_the_label_embedding(reuters_1200, tiny_bert):
    from xmtc.features.encoder import Tokenized, load_encoder

    (tr, ytr), _ = reuters_1200
    tok, enc = load_encoder(str(tiny_bert))
    Y, vocab = as_label_matrix(ytr[:64], None, 64)
    col = np.arange(Y.shape[1]) % 20       # 27 labels in 20 clusters; one batch of 4 texts, 2 clusters each
    net = LightXMLNetwork(col, enc.config.hidden_size, n_layers=2, hidden_dim=8, topk=2, seed=0)
    before = net.sparse_heads["labels"].weight.clone()
    seen = []
    real = net.training_loss

    def spy(rep, Yb):
        out = real(rep, Yb)
        seen.append(out.rows[0][1].rows.clone())
        return out

    net.training_loss = spy
    trainer = EndToEndTrainer(enc, net, Tokenized(tok, tr[:4], 16), Y[:4], TrainSettings(epochs=1, batch_size=4),
                              "cpu")
    trainer.run(progress=False)
    changed = torch.nonzero((net.sparse_heads["labels"].weight != before).any(1)).flatten()
    assert len(seen) == 1 and set(changed.tolist()) <= set(seen[0].tolist())
    assert changed.numel() > 0 and seen[0].numel() < Y.shape[1]


# -- training on real text -------------------------------------------------------------------------------
def test_lightxml_learns_beyond_the_untrained_model(fitted, reuters_1200, tiny_bert):
    (tr, ytr), (te, yte) = reuters_1200
    untrained = xmtc.LightXML(encoder=str(tiny_bert), **{**FAST, "epochs": 1, "learning_rate": 1e-12,
                                                            "head_learning_rate": 1e-12}).fit(tr, ytr, progress=False)
    p, p0 = fitted.evaluate(te, yte)["P@1"], untrained.evaluate(te, yte)["P@1"]
    assert p > p0 + 10, (p, p0)
    losses = [h["loss"] for h in fitted.history_]
    assert losses[-1] < losses[0] * 0.8, losses


def test_scores_lie_in_0_1(fitted, reuters_1200):
    _, (te, _) = reuters_1200
    idx, sc = fitted.predict_topk(te, 5)
    assert sc.min() >= 0.0 and sc.max() <= 1.0 and (np.diff(sc, axis=1) <= 1e-7).all()


def test_ensembled_with_itself_scores_as_it_does_alone(fitted, reuters_1200, tmp_path, capsys):
    _, (te, yte) = reuters_1200
    path = fitted.save(tmp_path / "lx")
    test = tmp_path / "test.tsv"
    test.write_text("".join(f"{','.join(y)}\t{t.replace(chr(9), ' ')}\n" for t, y in zip(te[:50], yte[:50])))
    capsys.readouterr()
    assert main(["ensemble", path, path, "--input", str(test), "--evaluate", "--json"]) == 0
    both = json.loads(capsys.readouterr().out)
    alone = fitted.evaluate(te[:50], yte[:50])
    assert both["P@1"] == pytest.approx(alone["P@1"]) and both["P@5"] == pytest.approx(alone["P@5"])


def test_centroid_start_is_what_fit_trains_from(reuters_1200, tiny_bert):
    """head_init=centroid: with the learning rates ~0 the fitted generator equals centroid_weights of the
    pretrained encoder's representations of the training texts (an independent computation)."""
    from xmtc.features.encoder import Tokenized, load_encoder
    from xmtc.neural.inference import representations
    from xmtc.neural.head_init import centroid_weights, cluster_membership

    (tr, ytr), _ = reuters_1200
    params = {**FAST, "head_init": "centroid", "epochs": 1, "learning_rate": 1e-12, "head_learning_rate": 1e-12}
    model = xmtc.LightXML(encoder=str(tiny_bert), **params).fit(tr[:300], ytr[:300], progress=False)
    tokenizer, encoder = load_encoder(str(tiny_bert), torch.device("cpu"))
    net = model.network_
    rep = representations(encoder, net, Tokenized(tokenizer, tr[:300], FAST["max_length"]))
    Y, _ = as_label_matrix(ytr[:300], model.labels_, 300)
    W, b, has = centroid_weights(rep, cluster_membership(Y, net.cluster_of_label, net.n_clusters))
    assert has.all()
    got = net.generator.weight.detach().numpy()
    np.testing.assert_allclose(got[has], W[has], rtol=1e-3, atol=1e-3 * np.abs(W).max())


# -- the training step against a hand computation: what the loss is fed ----------------------------------
def _np_bce(logits, targets):
    logits, targets = np.asarray(logits, np.float64), np.asarray(targets, np.float64)
    return np.maximum(logits, 0) - logits * targets + np.log1p(np.exp(-np.abs(logits)))


def test_training_step_feeds_the_generators_top3_of_20_clusters_and_their_labels_to_the_bce():
    """``training_loss`` samples the candidate clusters as the top 3 of ``sigmoid(g) + y`` over 20 clusters
    (the true clusters first, then the generator's current best: not random ones), scores every label of
    them with targets = the text's positives, and its loss is BCE(labels) + BCE(clusters) of the paper.
    A random choice of the negative clusters coincides with the expected 1-2 per text with probability
    below 1 / C(19, 2)^4."""
    C, per, h = 20, 3, 4
    col = np.repeat(np.arange(C), per)                       # labels 3c, 3c+1, 3c+2 in cluster c
    net = LightXMLNetwork(col, hidden_size=h, n_layers=1, hidden_dim=5, dropout=0.0, topk=3, seed=1)
    rng = np.random.default_rng(7)
    Wg = rng.normal(size=(C, h)).astype(np.float32)
    bg = rng.normal(size=C).astype(np.float32)
    with torch.no_grad():
        net.generator.weight.copy_(torch.from_numpy(Wg))
        net.generator.bias.copy_(torch.from_numpy(bg))
    rep = rng.normal(size=(4, h)).astype(np.float32)
    # text 0: label 5 (cluster 1); 1: labels 30, 59 (clusters 10, 19); 2: labels 0, 1 (cluster 0); 3: none
    Y = sp.csr_matrix((np.ones(5, np.float32), ([0, 1, 1, 2, 2], [5, 30, 59, 0, 1])), shape=(4, C * per))
    out = net.training_loss(torch.from_numpy(rep), Y)

    g = rep.astype(np.float64) @ Wg.T + bg                    # (B, C) generator logits
    yc = np.zeros((4, C))
    yc[Y.nonzero()[0], col[Y.nonzero()[1]]] = 1
    key = 1 / (1 + np.exp(-g)) + yc
    top = np.argsort(-key, axis=1, kind="stable")[:, :3]
    assert np.all(-np.diff(np.sort(key, 1)[:, ::-1][:, :4], axis=1) > 1e-4)   # no tie at the cut
    cand = np.asarray(out.candidates)
    expect = np.stack([np.concatenate([np.arange(c * per, c * per + per) for c in row]) for row in top])
    np.testing.assert_array_equal(cand, expect)           # each text: 9 labels, true clusters first
    Yd = Y.toarray()
    target = np.take_along_axis(Yd, expect, axis=1)
    assert target.sum() == Yd.sum()                         # every positive is a candidate
    # the loss: BCE of s = u_l . (W_h e + b_h) on the candidates + BCE of g on the cluster targets
    U = net.sparse_heads["labels"].weight.numpy().astype(np.float64)
    z = rep.astype(np.float64) @ net.bottleneck.weight.detach().numpy().T.astype(np.float64) \
        + net.bottleneck.bias.detach().numpy()
    s = np.einsum("bsd,bd->bs", U[expect], z)
    want_labels, want_clusters = _np_bce(s, target).mean(), _np_bce(g, yc).mean()
    assert out.parts["labels"] == pytest.approx(want_labels, rel=1e-5)
    assert out.parts["clusters"] == pytest.approx(want_clusters, rel=1e-5)
    assert out.loss.item() == pytest.approx(want_labels + want_clusters, rel=1e-5)
    # the label rows gathered for the gradient are exactly the candidates
    (name, hb), = out.rows
    assert name == "labels" and sorted(hb.rows.tolist()) == sorted(set(expect.ravel().tolist()))


def test_every_positive_outside_the_sampled_clusters_is_appended_once_in_label_order():
    """``candidate_labels`` appends each text's positives that lie outside its candidate clusters, every one of
    them, in increasing label order and in that text's row (several texts with several such positives: a
    packing that mixes rows would drop or misplace some)."""
    members = cluster_members(np.repeat(np.arange(6), 2), 6)      # cluster c holds labels 2c, 2c+1
    top = np.array([[0], [1], [2], [3]])
    Y = sp.csr_matrix((np.ones(11, np.float32),
                       ([0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2], [1, 4, 7, 11, 2, 9, 10, 0, 6, 8, 10])), shape=(4, 12))
    cand, target = candidate_labels(top, members, Y)
    assert cand.tolist() == [[0, 1, 4, 7, 11, -1], [2, 3, 9, 10, -1, -1], [4, 5, 0, 6, 8, 10],
                             [6, 7, -1, -1, -1, -1]]
    assert target.tolist() == [[0, 1, 1, 1, 1, 0], [1, 0, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1], [0] * 6]


def test_swa_is_on_by_default_as_in_the_reference_code():
    """kongds/LightXML trains with --swa in every configuration; the shared shell's default stays off."""
    from xmtc.models.end_to_end import EndToEndParams

    assert xmtc.LightXML().config.swa is True and xmtc.LightXML().config.train_settings().swa is True
    assert EndToEndParams().swa is False and xmtc.CascadeXML().config.swa is False
