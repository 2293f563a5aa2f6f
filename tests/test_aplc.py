"""APLC-XLNet (xmtc.methods.aplc.network, .label_split, .loss, .estimator): the label split, the probabilities and
the loss on hand-computed cases, exact pruned / beam prediction against scoring every label, and the estimator end to
end on a tiny random BERT (and a tiny random XLNet) with a small real sample."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import xmtc  # noqa: E402
from xmtc.cli import main  # noqa: E402
from xmtc.errors import ConfigError  # noqa: E402
from xmtc.methods.aplc.label_split import default_tail_clusters, frequency_split  # noqa: E402
from xmtc.methods.aplc.loss import log1mexp  # noqa: E402
from xmtc.methods.aplc.network import APLCNetwork  # noqa: E402

FAST = dict(max_length=16, epochs=3, batch_size=32, learning_rate=1e-3, head_learning_rate=1e-2, n_threads=1,
            seed=0, valid_size=0.1)


# -- the label split ------------------------------------------------------------------------------------
def test_frequency_split_on_a_hand_made_case():
    counts = np.array([5, 1, 9, 1, 3, 7, 0, 2])
    # by count, most frequent first; the two labels seen once keep id order (1 before 3)
    order, bounds = frequency_split(counts, n_tail=1)
    assert order.tolist() == [2, 5, 0, 4, 7, 1, 3, 6]
    assert bounds.tolist() == [0, 4, 8]                      # head and one tail of equal label counts
    assert frequency_split(counts, n_tail=3)[1].tolist() == [0, 2, 4, 6, 8]
    # equal shares of the 28 occurrences: the head holds 9 + 7 = 16 >= 14, i.e. two labels
    assert frequency_split(counts, n_tail=1, split="occurrences")[1].tolist() == [0, 2, 8]
    assert frequency_split(counts, cutoffs=[3, 5])[1].tolist() == [0, 3, 5, 8]
    # head_share: the head takes 3/4 of the labels (6), two tails split the other 2
    assert frequency_split(counts, n_tail=2, head_share=0.75)[1].tolist() == [0, 6, 7, 8]
    assert frequency_split(counts, n_tail=3, head_share=0.99)[1].tolist() == [0, 5, 6, 7, 8]   # one label each
    for bad in ([0], [5, 5], [6, 3], [8]):
        with pytest.raises(ConfigError, match="cutoffs"):
            frequency_split(counts, cutoffs=bad)


def test_default_rule_reproduces_the_reference_cluster_counts():
    # the reference's run scripts: EURLex, AmazonCat, Wiki10 -> 1 tail; Wiki500k -> 2; Amazon670k -> 3
    refs = {3956: 1, 13330: 1, 30938: 1, 501070: 2, 670091: 3}
    assert {L: default_tail_clusters(L) for L in refs} == refs
    assert frequency_split(np.ones(1994), n_tail=0)[1].tolist() == [0, 997, 1994]


# -- probabilities and loss on a hand-computed case ------------------------------------------------------
def hand_network():
    """4 labels; rank -> label id: [2, 0, 3, 1]; head = ranks 0-1, one tail cluster = ranks 2-3.

    For x = e_1 (summary size 4): head logits (rank 0, rank 1, node) = (1, -2, 0); the tail projection
    gives P x = (3, -1), LayerNorm -> (1, -1), ReLU -> (1, 0), label rows (2, 5) and (-1, 7) -> z = (2, -1).
    """
    net = APLCNetwork(np.array([2, 0, 3, 1]), np.array([0, 2, 4]), 4, summary_size=4, div_value=2.0)
    with torch.no_grad():
        net.head.weight.zero_()
        net.head.weight[:, 0] = torch.tensor([1.0, -2.0, 0.0])
        net.tail_proj[0][0].weight.zero_()
        net.tail_proj[0][0].weight[:, 0] = torch.tensor([3.0, -1.0])
        net.sparse_heads["tail1"].weight.copy_(torch.tensor([[2.0, 5.0], [-1.0, 7.0]]))
    return net


def sig(v):
    return 1.0 / (1.0 + math.exp(-v))


def test_tail_probability_is_node_times_conditional_on_a_hand_computed_case():
    net = hand_network().eval()
    x = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    P = net.label_probabilities(x)[0].tolist()
    # label 2 = head rank 0, label 0 = head rank 1; labels 3, 1 = tail: p(node) * sigmoid(z)
    expected = [sig(-2), 0.5 * sig(-1), sig(1), 0.5 * sig(2)]
    assert P == pytest.approx(expected, abs=1e-5)
    assert expected == pytest.approx([0.11920, 0.13447, 0.73106, 0.44040], abs=1e-5)
    idx, sc = net.predict(x, 6)                                # pruned (default): same, padded past L
    assert idx[0].tolist() == [2, 3, 1, 0, -1, -1]
    assert sc[0].tolist() == pytest.approx([sig(1), 0.5 * sig(2), 0.5 * sig(-1), sig(-2), 0, 0], abs=1e-5)


def test_loss_equals_the_normalised_bce_of_the_reference_on_a_hand_computed_case():
    net = hand_network()
    x = torch.tensor([[1.0, 0.0, 0.0, 0.0]] * 2)
    Y = sp.csr_matrix(np.array([[0, 0, 0, 1],                 # a tail positive (label 3): cluster scored whole
                                [0, 0, 1, 0]], dtype=np.float32))  # a head positive: tail seen through its node
    out = net.training_loss(x, Y)
    text0 = (-math.log(1 - sig(1)) - math.log(1 - sig(-2))          # head labels, both negative
             - math.log(0.5 * sig(2)) - math.log(1 - 0.5 * sig(-1))) / 4   # 2 head + 2 tail labels
    text1 = (-math.log(sig(1)) - math.log(1 - sig(-2))
             - math.log(1 - 0.5)) / 3                                       # 2 head labels + the node
    assert float(out.loss.detach()) == pytest.approx((text0 + text1) / 2, rel=1e-5)
    assert [name for name, _ in out.rows] == ["tail1"] and out.rows[0][1].w.shape == (2, 2)
    out.loss.backward()
    assert out.rows[0][1].w.grad is not None and out.rows[0][1].w.grad.abs().sum() > 0


def test_only_the_tail_clusters_a_batch_touches_are_gathered():
    counts = np.arange(30, 0, -1)                              # label j seen 30 - j times: rank = id
    order, bounds = frequency_split(counts, cutoffs=[10, 20])
    net = APLCNetwork(order, bounds, 8)
    x = torch.randn(3, 8)
    def gathered(Y):
        return {name: tuple(hb.w.shape) for name, hb in net.training_loss(x, Y).rows}

    # every head takes part in every step (DDP merges and lazy Adam counts), untouched ones with no row
    assert gathered(sp.csr_matrix(([1, 1], ([0, 2], [3, 9])), shape=(3, 30))) == {"tail1": (0, 4), "tail2": (0, 2)}
    second = sp.csr_matrix(([1, 1], ([0, 1], [3, 25])), shape=(3, 30))
    assert gathered(second) == {"tail1": (0, 4), "tail2": (10, 2)}          # d / 2 = 4, d / 2^2 = 2


def test_prior_biases_start_every_probability_at_its_training_frequency():
    # 5 labels, ids = ranks; head = labels 0-1, one tail cluster = labels 2-4; 4 texts
    Y = sp.csr_matrix(np.array([[1, 0, 1, 0, 0],
                                [1, 1, 0, 0, 0],
                                [0, 0, 1, 1, 0],
                                [1, 0, 0, 0, 0]], dtype=np.float32))
    net = APLCNetwork(np.arange(5), np.array([0, 2, 5]), 4, bias=True)
    with torch.no_grad():                 # zero weights: the probabilities are the biases alone
        for p in net.parameters():
            if p.ndim == 2:
                p.zero_()
        net.sparse_heads["tail1"].weight.zero_()
    net.set_prior(Y)
    P = net.eval().label_probabilities(torch.zeros(1, 4))[0]
    # head: 3/4 and 1/4 of the texts; node: 2 of 4 texts touch the tail; tail labels: 2, 1, 0 of those 2
    expected = [0.75, 0.25, 0.5 * 1.0, 0.5 * 0.5, 0.5 * 0.0]
    assert P.tolist() == pytest.approx(expected, abs=1e-4)


def test_log1mexp_matches_the_definition_and_stays_finite():
    a = torch.tensor([-1e-6, -0.1, -0.69, -0.7, -3.0, -40.0], dtype=torch.float64, requires_grad=True)
    y = log1mexp(a)
    ref = torch.log(1 - torch.exp(a.detach()))
    assert torch.allclose(y.detach()[:-1], ref[:-1], rtol=1e-9)
    assert float(y[-1]) == pytest.approx(-math.exp(-40.0), rel=1e-9)
    y.sum().backward()
    assert torch.isfinite(a.grad).all()
    assert torch.isfinite(log1mexp(torch.zeros(1, requires_grad=True))).all()


# -- prediction: pruned and beam against scoring every label ----------------------------------------------
def random_network(seed=0):
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(30, generator=g).numpy()
    net = APLCNetwork(order, np.array([0, 6, 12, 20, 30]), 16, div_value=1.5).eval()
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
        for h in net.sparse_heads.values():
            h.weight.copy_(torch.randn(h.weight.shape, generator=g))
        net.head.weight[6:] -= 1.0          # some confident "no" nodes, so that pruning has work to skip
    return net, torch.randn(64, 16, generator=g)


def test_pruned_and_full_beam_predictions_equal_scoring_every_label(monkeypatch):
    net, x = random_network()
    k = 5
    P = net.label_probabilities(x)
    ref_s, ref_i = torch.topk(P, k, dim=1)
    scored = []
    real = APLCNetwork._tail_logits
    monkeypatch.setattr(APLCNetwork, "_tail_logits", lambda self, i, r, w, b=None: scored.append(r.shape[0]) or real(self, i, r, w, b))
    for beam in (0, 4, 9):                                    # 0 = every cluster; 4 = C clusters; 9 > C
        net.predict_mode, net.predict_beam = "pruned", beam
        scored.clear()
        idx, sc = net.predict(x, k)
        assert torch.equal(idx, ref_i) and torch.allclose(sc, ref_s, atol=1e-7), beam
        assert sum(scored) < 4 * x.shape[0], "pruning skipped no cluster"   # exact, and cheaper
    net.predict_mode = "full"
    idx, sc = net.predict(x, k)
    assert torch.equal(idx, ref_i) and torch.allclose(sc, ref_s)


def test_a_narrow_beam_scores_only_each_texts_best_clusters():
    net, x = random_network(1)
    net.predict_beam = 1
    idx, sc = net.predict(x, 5)
    nodes = torch.sigmoid(net.head(x))[:, 6:]
    best = nodes.argmax(1) + 1
    rank = torch.from_numpy(net.rank)
    cluster = torch.bucketize(rank[idx], torch.from_numpy(net.bounds), right=True) - 1
    assert bool(((cluster == 0) | (cluster == best[:, None])).all())
    full = torch.topk(net.label_probabilities(x), 5, dim=1)[1]
    assert not torch.equal(idx, full)                     # with 4 clusters, a beam of 1 does miss labels


# -- the estimator on a tiny random BERT (n_threads 1: the suite shares the machine) ------------------------------------------------------------------
@pytest.fixture(scope="module")
def sample(tsv_sample):
    """Reuters newswire: 90 Zipf-distributed labels (APLC's case: a few frequent ones, many rare)."""
    return tsv_sample("reuters21578-apte90", "train", 400), tsv_sample("reuters21578-apte90", "test", 200)


@pytest.fixture(scope="module")
def fitted(sample, tiny_bert):
    (texts, labels), _ = sample
    # bias=False is the reference's layer: every probability starts at 0.5, so the loss has far to fall
    return xmtc.APLC(encoder=str(tiny_bert), n_tail_clusters=2, bias=False, **FAST).fit(texts, labels,
                                                                                       progress=False)


def test_loss_decreases_and_the_split_follows_the_training_frequencies(fitted, sample):
    from xmtc.models.end_to_end import validation_split

    curve = fitted.loss_curve_
    assert curve[-1] < 0.5 * curve[0], curve
    net = fitted.network_
    L = len(fitted.labels_)
    c0 = round(0.75 * L)                                    # head_share 0.75; the rest halved between 2 tails
    assert net.n_tail == 2 and net.bounds.tolist() == [0, c0, c0 + (L - c0) // 2, L]
    assert net.pooling == "mean"
    # the split is made on the training part (the validation texts left out): counts never rise along it
    (texts, labels), _ = sample
    rows, _ = validation_split(len(texts), FAST["valid_size"], FAST["seed"])
    counts = np.zeros(len(fitted.labels_), dtype=int)
    for r in rows:
        for name in labels[r]:
            counts[fitted.labels_.index[name]] += 1
    assert np.all(np.diff(counts[net.order]) <= 0)


def test_trained_model_beats_the_untrained_one(fitted, sample, tiny_bert, monkeypatch):
    from xmtc.neural import training_loop as e2e

    _, (texts, labels) = sample
    monkeypatch.setattr(e2e.EndToEndTrainer, "run", lambda self, *a, **k: {"history": [], "best_epoch": 0,
                                                                          "loss_curve": []})
    untrained = xmtc.APLC(encoder=str(tiny_bert), n_tail_clusters=2, bias=False, **FAST).fit(*sample[0],
                                                                                            progress=False)
    p_trained, p_untrained = fitted.evaluate(texts, labels)["P@1"], untrained.evaluate(texts, labels)["P@1"]
    assert p_trained > p_untrained, (p_trained, p_untrained)


def test_save_load_identical_predictions_in_both_modes(fitted, sample, tmp_path):
    _, (texts, _) = sample
    path = fitted.save(tmp_path / "m")
    loaded = xmtc.load(path)
    assert isinstance(loaded, xmtc.APLC) and loaded.network_.bounds.tolist() == fitted.network_.bounds.tolist()
    i1, s1 = fitted.predict_topk(texts, 5)
    i2, s2 = loaded.predict_topk(texts, 5)
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_allclose(s1, s2, rtol=1e-5, atol=1e-6)
    loaded.network_.predict_mode = "full"
    i3, s3 = loaded.predict_topk(texts, 5)
    np.testing.assert_array_equal(i1, i3)
    np.testing.assert_allclose(s1, s3, rtol=1e-5, atol=1e-6)


def test_prediction_settings_changed_after_fit_reach_the_network_and_its_folder(fitted, sample, tmp_path):
    _, (texts, _) = sample
    model = xmtc.load(fitted.save(tmp_path / "m"))
    k = len(model.labels_)                      # every label: the tail clusters' labels are in the lists
    exact, _ = model.predict_topk(texts, k)
    model.set_params(predict_beam=1)            # each text's best tail cluster only: the other one's labels go
    assert model.network_.predict_beam == 1
    narrow, _ = model.predict_topk(texts, k)
    assert (narrow >= 0).sum() < (exact >= 0).sum()  # a setting that never reached the network changes nothing
    again = xmtc.load(model.save(tmp_path / "m2"))
    assert again.predict_beam == 1 and again.network_.predict_beam == 1
    np.testing.assert_array_equal(again.predict_topk(texts, k)[0], narrow)


def test_bad_cutoffs_are_config_errors(sample, tiny_bert):
    (texts, labels), _ = sample
    with pytest.raises(ConfigError, match="cutoffs"):
        xmtc.APLC(encoder=str(tiny_bert), cutoffs="10,x")
    with pytest.raises(ConfigError, match="cutoffs"):
        xmtc.APLC(encoder=str(tiny_bert), cutoffs="100000", **FAST).fit(texts[:50], labels[:50], progress=False)


def test_cli_train_method_aplc(sample, tiny_bert, tmp_path, capsys):
    (texts, labels), (test_texts, test_labels) = sample
    train = tmp_path / "train.tsv"
    train.write_text("".join(",".join(l) + "\t" + t + "\n" for t, l in zip(texts[:200], labels[:200])))
    test = tmp_path / "test.tsv"
    test.write_text("".join(",".join(l) + "\t" + t + "\n" for t, l in zip(test_texts[:50], test_labels[:50])))
    assert main(["train", str(train), "-o", str(tmp_path / "a"), "--method", "aplc", "--encoder", str(tiny_bert),
                 "--max-length", "16", "--epochs", "1", "--cutoffs", "10", "--div-value", "4", "-q"]) == 0
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["method"] == "aplc" and manifest["params"]["cutoffs"] == "10"
    model = xmtc.load(tmp_path / "a")
    assert model.network_.bounds[1] == 10 and model.network_.tail_dims == [8]     # 32 / 4
    assert main(["predict", str(tmp_path / "a"), str(test), "-k", "3", "-q"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(rows) == 50 and all(len(r["labels"]) == 3 for r in rows)


# -- XLNet (the paper's encoder) loads through the core -------------------------------------------------------
def make_tiny_xlnet(folder: Path, texts, vocab_size: int = 2000) -> Path:
    """A random 2-layer XLNet with a word-level unigram tokenizer built from the sample (nothing downloaded)."""
    import collections
    import re

    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import XLNetConfig, XLNetModel, XLNetTokenizerFast

    counts = collections.Counter(w for t in texts for w in re.findall(r"\w+", t.lower()))
    special = ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"]
    vocab = [(s, 0.0) for s in special] + [("\u2581" + w, -1.0 - i) for i, (w, _) in
                                           enumerate(counts.most_common(vocab_size))]
    vocab += [(c, -50.0) for c in sorted({c for t in texts for c in t.lower()} - {" "})]
    tok = Tokenizer(models.Unigram(vocab, unk_id=0))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.post_processor = processors.TemplateProcessing(single="$A <sep> <cls>", pair="$A <sep> $B <sep> <cls>",
                                                       special_tokens=[("<sep>", 4), ("<cls>", 3)])
    fast = XLNetTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                              sep_token="<sep>", pad_token="<pad>", cls_token="<cls>", mask_token="<mask>")
    torch.manual_seed(0)
    XLNetModel(XLNetConfig(vocab_size=len(vocab), d_model=32, n_layer=2, n_head=2, d_inner=64)).save_pretrained(
        str(folder))
    fast.save_pretrained(str(folder))
    return folder


def test_xlnet_loads_through_the_core_and_pools_its_cls_token(sample, tmp_path):
    (texts, labels), (test_texts, _) = sample
    enc = make_tiny_xlnet(tmp_path / "xlnet", texts)
    model = xmtc.APLC(encoder=str(enc), **{**FAST, "epochs": 1}).fit(texts[:200], labels[:200], progress=False)
    assert type(model.encoder_).__name__ == "XLNetModel" and model.network_.pooling == "last"
    # the token pooled is <cls>, the last real token of every text under right padding
    tokenized = model._tokenize(test_texts[:8])
    assert all(tokenized.ids_of(i)[-1] == model.tokenizer_.cls_token_id for i in range(8))
    i1, s1 = model.predict_topk(test_texts, 5)
    i2, s2 = xmtc.load(model.save(tmp_path / "m")).predict_topk(test_texts, 5)
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_allclose(s1, s2, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_ddp_training_with_batches_touching_different_tail_clusters(sample, tiny_bert, tmp_path):
    """Two processes whose batches touch different tail clusters still merge the same heads each step
    (a process skipping a head's all-gather would leave the other waiting until the timeout)."""
    import os
    import subprocess
    import sys

    (texts, labels), _ = sample
    train = tmp_path / "train.tsv"
    train.write_text("".join(",".join(l) + "\t" + t + "\n" for t, l in zip(texts[:96], labels[:96])))
    repo = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=repo, PYTHONFAULTHANDLER="1")  # a crash prints every stack
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                          "29547", "-m", "xmtc.cli", "train", str(train), "-o", str(tmp_path / "m"), "--method", "aplc",
                          "--encoder", str(tiny_bert), "--max-length", "16", "--epochs", "1", "--batch-size", "4",
                          "--n-tail-clusters", "3", "--valid-size", "0", "-q"], env=env, capture_output=True, text=True,
                         timeout=240)
    assert run.returncode == 0, run.stderr[-8000:]
    assert xmtc.load(tmp_path / "m").network_.n_tail == 3


# -- the training step against a hand computation: which clusters each text is scored on, and the loss ---
def test_training_step_scores_each_text_on_the_head_and_only_its_own_positive_tail_clusters():
    """``training_loss`` with 3 tail clusters, biases and LayerNorm projections equals the numpy computation
    of the reference's normalised BCE: every head label; for each tail cluster holding a positive of the
    text, every label of it on ``log sigma(u_node) + log sigma(z)``; for the other clusters the node alone
    (``softplus(u_node)``); divided per text by its number of terms. Only the clusters some text touches
    are gathered, whole."""
    L, d = 12, 8
    order = np.array([4, 9, 0, 11, 2, 7, 1, 10, 5, 3, 8, 6])       # rank -> label id
    net = APLCNetwork(order, np.array([0, 3, 6, 9, 12]), d, summary_size=d, div_value=1.5, bias=True, seed=3)
    rng = np.random.default_rng(8)
    with torch.no_grad():
        net.head.weight.copy_(torch.tensor(rng.normal(size=(6, d)), dtype=torch.float32))
        net.head.bias.copy_(torch.tensor(rng.normal(size=6), dtype=torch.float32))
        for i in range(3):
            lin = net.tail_proj[i][0]
            lin.weight.copy_(torch.tensor(rng.normal(size=tuple(lin.weight.shape)), dtype=torch.float32))
            h = net.sparse_heads[f"tail{i + 1}"]
            h.weight.copy_(torch.tensor(rng.normal(size=tuple(h.weight.shape)), dtype=torch.float32))
            h.bias.copy_(torch.tensor(rng.normal(size=3), dtype=torch.float32))
    x = rng.normal(size=(4, d))
    # text 0: label 11 (rank 3, cluster 1); text 1: labels 4 (head) and 3 (rank 9, cluster 3);
    # text 2: label 9 (head) only; text 3: labels 2 and 5 (ranks 4 and 8: clusters 1 and 2)
    Y = sp.csr_matrix((np.ones(6, np.float32), ([0, 1, 1, 2, 3, 3], [11, 4, 3, 9, 2, 5])), shape=(4, L))
    out = net.training_loss(torch.tensor(x, dtype=torch.float32), Y)

    rank = np.argsort(order)
    lsig = lambda v: -np.logaddexp(0.0, -v)  # noqa: E731
    u = x @ net.head.weight.detach().numpy().T.astype(np.float64) + net.head.bias.detach().numpy()
    want, n_terms = [], []
    for i in range(4):
        pos_ranks = {int(rank[l]) for l in Y[i].indices}
        head_y = np.array([r in pos_ranks for r in range(3)], float)
        terms = list(-(head_y * lsig(u[i, :3]) + (1 - head_y) * lsig(-u[i, :3])))
        for c in range(3):
            ranks_c = range(3 + 3 * c, 6 + 3 * c)
            if not pos_ranks & set(ranks_c):
                terms.append(-lsig(-u[i, 3 + c]))                     # the node alone: -log(1 - p(V))
                continue
            p = x[i] @ net.tail_proj[c][0].weight.detach().numpy().T.astype(np.float64)
            t = np.maximum((p - p.mean()) / np.sqrt(p.var() + 1e-5), 0.0)
            w, bb = net.sparse_heads[f"tail{c + 1}"].numpy()
            logp = lsig(u[i, 3 + c]) + lsig(t @ w.T.astype(np.float64) + bb)
            y = np.array([r in pos_ranks for r in ranks_c], float)
            terms += list(-(y * logp + (1 - y) * np.log(-np.expm1(logp))))
        want.append(np.sum(terms) / len(terms))
        n_terms.append(len(terms))
    assert n_terms == [3 + 3 + 1 + 1, 3 + 1 + 1 + 3, 3 + 1 + 1 + 1, 3 + 3 + 3 + 1]      # N_n per text
    assert out.loss.item() == pytest.approx(np.mean(want), rel=1e-5)
    assert {name: int(hb.rows.numel()) for name, hb in out.rows} == {"tail1": 3, "tail2": 3, "tail3": 3}
    # a batch touching only cluster 1 gathers no row of clusters 2 and 3
    one = net.training_loss(torch.tensor(x[:1], dtype=torch.float32), Y[:1])
    assert {name: int(hb.rows.numel()) for name, hb in one.rows} == {"tail1": 3, "tail2": 0, "tail3": 0}
