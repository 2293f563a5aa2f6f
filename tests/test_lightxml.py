"""LightXML and the end-to-end core it runs on (trainer, validation selection, SWA, checkpoints, shell).

Hand-made cases pin the sampling and the score formula to their definitions; the tiny random BERT
(conftest.make_tiny_bert) on real Reuters text shows that training learns, that save -> load keeps
predictions, that the kept epoch is the best validated one and that a killed run resumes exactly.
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
from xmtc.errors import ConfigError  # noqa: E402
from xmtc.models.base import as_label_matrix  # noqa: E402
from xmtc.neural.checkpoint import Checkpoint as TrainingCheckpoint  # noqa: E402
from xmtc.neural.e2e import EndToEndTrainer, TrainSettings, precision_at  # noqa: E402
from xmtc.neural.lightxml import (LightXMLNetwork, candidate_labels, cluster_members,  # noqa: E402
                                  sample_clusters)

from conftest import make_tiny_bert  # noqa: E402

# head_init random: the tiny random BERT's [CLS] barely varies between texts, so standardised centroids
# (the default) are degenerate on it; test_centroid_start_is_what_fit_trains_from covers that path.
FAST = dict(n_threads=2, max_length=32, learning_rate=1e-3, head_learning_rate=5e-3, cluster_size=8, topk=4,
            dropout=0.1, epochs=3, valid_size=0, head_init="random", ranker=False, dense_learning_rate=0.0)


@pytest.fixture(scope="module")
def data(reuters_small):
    (tr, ytr), (te, yte) = reuters_small
    return (tr[:1200], ytr[:1200]), (te[:300], yte[:300])


@pytest.fixture(scope="module")
def encoder_dir(data, tmp_path_factory):
    return make_tiny_bert(tmp_path_factory.mktemp("bert") / "tiny", data[0][0])


@pytest.fixture(scope="module")
def fitted(data, encoder_dir):
    return xmtc.LightXML(encoder=str(encoder_dir), **FAST).fit(*data[0], progress=False)


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


def test_a_step_touches_only_the_candidate_rows_of_the_label_embedding(data, encoder_dir):
    from xmtc.features.encoder import Tokenized, load_encoder

    (tr, ytr), _ = data
    tok, enc = load_encoder(str(encoder_dir))
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


@pytest.mark.parametrize("dense_lr, ratio", [(0.0, 1.0), (1e-3, 0.1)])
def test_dense_layers_step_at_their_own_rate(data, encoder_dir, dense_lr, ratio):
    # Adam's first step moves an entry by lr * g / (|g| + eps), i.e. by ~lr wherever |g| >> eps: the largest
    # move of the dense generator over the largest move of the label rows is dense rate / head rate
    from xmtc.features.encoder import Tokenized, load_encoder

    (tr, ytr), _ = data
    tok, enc = load_encoder(str(encoder_dir))
    Y, _ = as_label_matrix(ytr[:64], None, 64)
    net = LightXMLNetwork(np.arange(Y.shape[1]) % 20, enc.config.hidden_size, n_layers=2, hidden_dim=8, topk=2,
                          dropout=0.0, seed=0)
    gen0, lab0 = net.generator.weight.detach().clone(), net.sparse_heads["labels"].weight.clone()
    s = TrainSettings(epochs=1, batch_size=4, learning_rate=1e-12, head_learning_rate=1e-2,
                      dense_learning_rate=dense_lr, warmup_ratio=0.0, max_grad_norm=0.0)
    EndToEndTrainer(enc, net, Tokenized(tok, tr[:4], 16), Y[:4], s, "cpu").run(progress=False)
    moved_gen = float((net.generator.weight.detach() - gen0).abs().max())
    moved_lab = float((net.sparse_heads["labels"].weight - lab0).abs().max())
    assert moved_lab == pytest.approx(1e-2, rel=1e-3)
    assert moved_gen / moved_lab == pytest.approx(ratio, rel=1e-3)


# -- training on real text -------------------------------------------------------------------------------
def test_lightxml_learns_beyond_the_untrained_model(fitted, data, encoder_dir):
    (tr, ytr), (te, yte) = data
    untrained = xmtc.LightXML(encoder=str(encoder_dir), **{**FAST, "epochs": 1, "learning_rate": 1e-12,
                                                            "head_learning_rate": 1e-12}).fit(tr, ytr, progress=False)
    p, p0 = fitted.evaluate(te, yte)["P@1"], untrained.evaluate(te, yte)["P@1"]
    assert p > p0 + 10, (p, p0)
    losses = [h["loss"] for h in fitted.history_]
    assert losses[-1] < losses[0] * 0.8, losses


def test_scores_lie_in_0_1_and_save_load_keeps_predictions(fitted, data, tmp_path):
    _, (te, _) = data
    idx, sc = fitted.predict_topk(te, 5)
    assert sc.min() >= 0.0 and sc.max() <= 1.0 and (np.diff(sc, axis=1) <= 1e-7).all()
    path = fitted.save(tmp_path / "m")
    again = xmtc.load(path)
    assert isinstance(again, xmtc.LightXML)
    idx2, sc2 = again.predict_topk(te, 5)
    np.testing.assert_array_equal(idx, idx2)
    np.testing.assert_allclose(sc, sc2, rtol=1e-6, atol=1e-7)


def test_the_kept_epoch_is_the_best_on_the_validation_split(data, encoder_dir):
    from xmtc.models.end_to_end import validation_split

    (tr, ytr), _ = data
    m = xmtc.LightXML(encoder=str(encoder_dir), **{**FAST, "valid_size": 0.1, "epochs": 3}).fit(tr, ytr,
                                                                                                 progress=False)
    scores = [h["valid P@1"] for h in m.history_]
    assert m.best_epoch_ == 1 + int(np.argmax(scores))
    _, valid = validation_split(len(tr), 0.1, 0)
    idx, _ = m.predict_topk([tr[i] for i in valid], 5)
    Y, _ = as_label_matrix([ytr[i] for i in valid], m.labels_, len(valid), unknown_labels="ignore")
    assert precision_at(idx, Y, 1) == pytest.approx(max(scores))


def test_validation_split_is_disjoint_seeded_and_sized():
    from xmtc.models.end_to_end import validation_split

    tr, va = validation_split(100, 0.1, 3)
    assert va.size == 10 and tr.size == 90 and not set(tr) & set(va)
    assert validation_split(100, 0.1, 3)[1].tolist() == va.tolist()
    assert validation_split(100, 7, 3)[1].size == 7 and validation_split(100, 0, 3)[1].size == 0
    with pytest.raises(ConfigError):
        validation_split(10, 10, 0)


def test_swa_keeps_the_running_mean_of_the_snapshots(data, encoder_dir):
    from xmtc.features.encoder import Tokenized, load_encoder

    (tr, ytr), _ = data
    tok, enc = load_encoder(str(encoder_dir))
    Y, _ = as_label_matrix(ytr[:32], None, 32)
    net = LightXMLNetwork(np.arange(Y.shape[1]) % 5, enc.config.hidden_size, n_layers=1, hidden_dim=4, topk=2)
    trainer = EndToEndTrainer(enc, net, Tokenized(tok, tr[:32], 16), Y, TrainSettings(epochs=1), "cpu")
    snaps = []
    for shift in (1.0, 2.0, 6.0):
        with torch.no_grad():
            net.generator.bias.fill_(shift)
            net.sparse_heads["labels"].weight.fill_(-shift)
        snaps.append(shift)
        trainer._swa_update()
    mean = float(np.mean(snaps))
    assert trainer.swa["n"] == 3
    torch.testing.assert_close(trainer.swa["arrays"]["network.generator.bias"], torch.full((5,), mean))
    torch.testing.assert_close(trainer.swa["arrays"]["sparse.labels.weight"],
                               torch.full(net.sparse_heads["labels"].weight.shape, -mean))


def test_a_run_killed_mid_training_and_resumed_ends_with_the_same_model(data, encoder_dir, tmp_path, monkeypatch):
    (tr, ytr), (te, _) = data
    params = {**FAST, "epochs": 2, "checkpoint_every": 5, "valid_size": 0.1}
    whole = xmtc.LightXML(encoder=str(encoder_dir), **params).fit(tr[:400], ytr[:400], progress=False)
    real_save = TrainingCheckpoint.save
    calls = {"n": 0}

    def dying_save(self, state):
        real_save(self, state)
        calls["n"] += 1
        if calls["n"] == 3:  # after the third checkpoint: mid-way through epoch 1's second half
            raise KeyboardInterrupt

    monkeypatch.setattr(TrainingCheckpoint, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        xmtc.LightXML(encoder=str(encoder_dir), **params).fit(tr[:400], ytr[:400], progress=False,
                                                               checkpoint_dir=tmp_path / "ck")
    monkeypatch.setattr(TrainingCheckpoint, "save", real_save)
    state = json.loads((tmp_path / "ck" / "state.json").read_text())
    assert state["fingerprint"]
    restored = []
    real_restore = EndToEndTrainer.restore
    monkeypatch.setattr(EndToEndTrainer, "restore", lambda self, st: (restored.append(st["micro"]),
                                                                      real_restore(self, st)))
    resumed = xmtc.LightXML(encoder=str(encoder_dir), **params).fit(tr[:400], ytr[:400], progress=False,
                                                                    checkpoint_dir=tmp_path / "ck", resume=True)
    # the same steps on the same state; two uninterrupted runs in one process already differ in the last
    # float bits (measured: from step 8 on, ~1e-8 relative; the first run of a process differs from the
    # later ones), so losses and scores are compared to float rounding and the rankings exactly
    # 360 training texts, batches of 32: 12 per epoch; saves at steps 5, 10 and the epoch's end (12)
    assert restored == [12]
    assert [h["epoch"] for h in resumed.history_] == [1, 2] and resumed.best_epoch_ == whole.best_epoch_
    for h1, h2 in zip(resumed.history_, whole.history_):
        assert h1 == pytest.approx(h2, rel=1e-5)
    a, b = whole.predict_topk(te, 5), resumed.predict_topk(te, 5)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_allclose(a[1], b[1], rtol=1e-4, atol=1e-6)
    other = {**params, "topk": 3}
    with pytest.raises(ConfigError, match="other data or parameters"):
        xmtc.LightXML(encoder=str(encoder_dir), **other).fit(tr[:400], ytr[:400], progress=False,
                                                             checkpoint_dir=tmp_path / "ck", resume=True)


def test_cli_trains_predicts_and_rejects_unknown_keys(data, encoder_dir, tmp_path, capsys):
    (tr, ytr), (te, _) = data
    train = tmp_path / "train.tsv"
    train.write_text("".join(f"{','.join(y)}\t{t.replace(chr(9), ' ')}\n" for t, y in zip(tr[:300], ytr[:300])))
    test = tmp_path / "test.txt"
    test.write_text("\n".join(t.replace("\n", " ") for t in te[:5]) + "\n")
    out = tmp_path / "m"
    assert main(["train", "--method", "lightxml", str(train), "-o", str(out), "--encoder", str(encoder_dir),
                 "--epochs", "1", "--cluster-size", "8", "--topk", "3", "--max-length", "16", "--quiet"]) == 0
    assert json.loads((out / "manifest.json").read_text())["method"] == "lightxml"
    capsys.readouterr()
    assert main(["predict", str(out), str(test), "-k", "3"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 5
    with pytest.raises(ConfigError):
        xmtc.LightXML(encoder=str(encoder_dir), no_such_key=1)


E2E_DDP_SCRIPT = r"""
import json, sys
import numpy as np, scipy.sparse as sp, torch
sys.path.insert(0, sys.argv[1])
from xmtc.features.encoder import Tokenized, load_encoder
from xmtc.neural.distributed import init_distributed
from xmtc.neural.e2e import EndToEndTrainer, TrainSettings
from xmtc.neural.lightxml import LightXMLNetwork
torch.set_num_threads(1)
ctx = init_distributed()
data = json.load(open(sys.argv[2]))
tok, enc = load_encoder(sys.argv[3])
Y = sp.csr_matrix(np.array(data["Y"], dtype=np.float32))
net = LightXMLNetwork(np.arange(Y.shape[1]) % 6, enc.config.hidden_size, n_layers=2, hidden_dim=8, topk=2,
                      dropout=0.0, seed=0)
s = TrainSettings(epochs=1, batch_size=8, grad_accumulation=int(sys.argv[4]), learning_rate=1e-3,
                  head_learning_rate=1e-2, seed=0)
tr = EndToEndTrainer(enc, net, Tokenized(tok, data["texts"], 16), Y, s, torch.device("cpu"), ctx)
tr.run(False)
json.dump({"losses": tr.losses, "labels": net.sparse_heads["labels"].weight[:6].tolist(),
           "generator": net.generator.weight[:2].tolist(),
           "encoder": enc.embeddings.word_embeddings.weight[5:7].tolist()}, open(sys.argv[5] + f".{ctx.rank}", "w"))
from xmtc.neural.distributed import exit_process
exit_process(0)  # as `xmtc train` ends under torchrun: past the teardown that DDP's gloo threads can abort
"""


@pytest.mark.slow
def test_two_process_gloo_run_equals_one_process_with_the_same_global_batch(data, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tr, ytr), _ = data
    enc_dir = make_tiny_bert(tmp_path / "nodrop", tr[:200], dropout=0.0)  # no random draws after the seed
    Y, _ = as_label_matrix(ytr[:64], None, 64)
    (tmp_path / "data.json").write_text(json.dumps({"texts": tr[:64], "Y": Y.toarray().tolist()}))
    (tmp_path / "run.py").write_text(E2E_DDP_SCRIPT)
    repo = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=repo, PYTHONFAULTHANDLER="1")  # a crash prints every stack
    args = [str(tmp_path / "run.py"), repo, str(tmp_path / "data.json"), str(enc_dir)]
    one = subprocess.run([sys.executable, *args, "2", str(tmp_path / "one")], env=env, capture_output=True,
                         text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                          "29541", *args, "1", str(tmp_path / "two")], env=env, capture_output=True, text=True,
                         timeout=300)
    assert two.returncode == 0, two.stderr[-8000:]
    r1 = json.loads((tmp_path / "one.0").read_text())
    r2 = [json.loads((tmp_path / f"two.{r}").read_text()) for r in (0, 1)]
    # one process, accumulation 2: batches 0,1 | 2,3 | ...; two processes: rank r takes batches r, r+2, ...
    np.testing.assert_allclose(r1["losses"][0::2], r2[0]["losses"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r1["losses"][1::2], r2[1]["losses"], rtol=1e-4, atol=1e-5)
    for part in ("labels", "generator", "encoder"):
        np.testing.assert_allclose(r2[0][part], r2[1][part], rtol=0, atol=0)   # every process holds the same
        np.testing.assert_allclose(r1[part], r2[0][part], rtol=1e-4, atol=1e-6)


def test_served_through_the_annif_api_and_ensembled_like_every_method(fitted, data, tmp_path, capsys):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from xmtc.serve.app import create_app
    from xmtc.serve.config import ServeConfig

    _, (te, yte) = data
    path = fitted.save(tmp_path / "lx")
    idx, sc = fitted.predict_topk(te[:1], 3)
    with TestClient(create_app({"lx": path}, ServeConfig(batch_wait_ms=0.0))) as client:
        r = client.post("/v1/projects/lx/suggest", data={"text": te[0], "limit": 3})
    assert r.status_code == 200
    got = r.json()["results"]
    assert [x["label"] for x in got] == [fitted.labels_.names[i] for i in idx[0]]
    np.testing.assert_allclose([x["score"] for x in got], sc[0], rtol=1e-5)
    test = tmp_path / "test.tsv"
    test.write_text("".join(f"{','.join(y)}\t{t.replace(chr(9), ' ')}\n" for t, y in zip(te[:50], yte[:50])))
    capsys.readouterr()
    assert main(["ensemble", path, path, "--input", str(test), "--evaluate", "--json"]) == 0
    both = json.loads(capsys.readouterr().out)
    alone = fitted.evaluate(te[:50], yte[:50])
    assert both["P@1"] == pytest.approx(alone["P@1"]) and both["P@5"] == pytest.approx(alone["P@5"])


def test_centroid_start_is_what_fit_trains_from(data, encoder_dir):
    """head_init=centroid: with the learning rates ~0 the fitted generator equals centroid_weights of the
    pretrained encoder's representations of the training texts (an independent computation)."""
    from xmtc.features.encoder import Tokenized, load_encoder
    from xmtc.neural.e2e import representations
    from xmtc.neural.head_init import centroid_weights, cluster_membership

    (tr, ytr), _ = data
    params = {**FAST, "head_init": "centroid", "epochs": 1, "learning_rate": 1e-12, "head_learning_rate": 1e-12}
    model = xmtc.LightXML(encoder=str(encoder_dir), **params).fit(tr[:300], ytr[:300], progress=False)
    tokenizer, encoder = load_encoder(str(encoder_dir), torch.device("cpu"))
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
