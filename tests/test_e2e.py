"""The end-to-end core (xmtc.neural.training_loop, xmtc.neural.network, xmtc.models.end_to_end): the trainer's
per-group learning rates, the kept epoch and the validation split, stochastic weight averaging, a killed
run's checkpoint and resume, and a two-process run against one process.

The core needs a network to drive; these tests use LightXML's (a small one on the suite's tiny random BERT,
the ``tiny_bert`` fixture, and real Reuters text). Each method's own network is pinned in its own file.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import xmtc  # noqa: E402
from xmtc.errors import ConfigError  # noqa: E402
from xmtc.models.base import as_label_matrix  # noqa: E402
from xmtc.neural.checkpoint import Checkpoint as TrainingCheckpoint  # noqa: E402
from xmtc.neural.inference import precision_at  # noqa: E402
from xmtc.neural.training_loop import EndToEndTrainer, TrainSettings  # noqa: E402
from xmtc.methods.lightxml.network import LightXMLNetwork  # noqa: E402

from conftest import LIGHTXML_FAST as FAST  # noqa: E402


# -- the trainer's learning rates --------------------------------------------------------------------------
@pytest.mark.parametrize("dense_lr, ratio", [(0.0, 1.0), (1e-3, 0.1)])
def test_dense_layers_step_at_their_own_rate(reuters_1200, tiny_bert, dense_lr, ratio):
    # Adam's first step moves an entry by lr * g / (|g| + eps), i.e. by ~lr wherever |g| >> eps: the largest
    # move of the dense generator over the largest move of the label rows is dense rate / head rate
    from xmtc.features.encoder import Tokenized, load_encoder

    (tr, ytr), _ = reuters_1200
    tok, enc = load_encoder(str(tiny_bert))
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


# -- the kept epoch and the validation split -----------------------------------------------------------
def test_the_kept_epoch_is_the_best_on_the_validation_split(reuters_1200, tiny_bert):
    from xmtc.models.end_to_end import validation_split

    (tr, ytr), _ = reuters_1200
    m = xmtc.LightXML(encoder=str(tiny_bert), **{**FAST, "valid_size": 0.1, "epochs": 3}).fit(tr, ytr,
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


# -- stochastic weight averaging ----------------------------------------------------------------------
def test_swa_keeps_the_running_mean_of_the_snapshots(reuters_1200, tiny_bert):
    from xmtc.features.encoder import Tokenized, load_encoder

    (tr, ytr), _ = reuters_1200
    tok, enc = load_encoder(str(tiny_bert))
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


# -- checkpoints: a killed run resumes to the same model ------------------------------------------------
def test_a_run_killed_mid_training_and_resumed_ends_with_the_same_model(reuters_1200, tiny_bert, tmp_path, monkeypatch):
    (tr, ytr), (te, _) = reuters_1200
    params = {**FAST, "epochs": 2, "checkpoint_every": 5, "valid_size": 0.1}
    whole = xmtc.LightXML(encoder=str(tiny_bert), **params).fit(tr[:400], ytr[:400], progress=False)
    real_save = TrainingCheckpoint.save
    calls = {"n": 0}

    def dying_save(self, state):
        real_save(self, state)
        calls["n"] += 1
        if calls["n"] == 3:  # after the third checkpoint: mid-way through epoch 1's second half
            raise KeyboardInterrupt

    monkeypatch.setattr(TrainingCheckpoint, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        xmtc.LightXML(encoder=str(tiny_bert), **params).fit(tr[:400], ytr[:400], progress=False,
                                                               checkpoint_dir=tmp_path / "ck")
    monkeypatch.setattr(TrainingCheckpoint, "save", real_save)
    state = json.loads((tmp_path / "ck" / "state.json").read_text())
    assert state["fingerprint"]
    restored = []
    real_restore = EndToEndTrainer.restore
    monkeypatch.setattr(EndToEndTrainer, "restore", lambda self, st: (restored.append(st["micro"]),
                                                                      real_restore(self, st)))
    resumed = xmtc.LightXML(encoder=str(tiny_bert), **params).fit(tr[:400], ytr[:400], progress=False,
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
        xmtc.LightXML(encoder=str(tiny_bert), **other).fit(tr[:400], ytr[:400], progress=False,
                                                             checkpoint_dir=tmp_path / "ck", resume=True)


# -- distributed: two processes equal one with the same global batch -----------------------------------
E2E_DDP_SCRIPT = r"""
import json, sys
import numpy as np, scipy.sparse as sp, torch
sys.path.insert(0, sys.argv[1])
from xmtc.features.encoder import Tokenized, load_encoder
from xmtc.neural.distributed import init_distributed
from xmtc.neural.training_loop import EndToEndTrainer, TrainSettings
from xmtc.methods.lightxml.network import LightXMLNetwork
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
def test_two_process_gloo_run_equals_one_process_with_the_same_global_batch(reuters_1200, tiny_bert_builder,
                                                                             tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tr, ytr), _ = reuters_1200
    enc_dir = tiny_bert_builder(tmp_path / "nodrop", tr[:200], dropout=0.0)  # no random draws after the seed
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
