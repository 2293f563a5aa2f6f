"""ALC (xmtc/neural/alc.py): the auxiliary terms on the method's final score, hand-computed cases.

Each test names the bug it catches: a margin on another score than the thresholded one, negatives not the
method's own top-scored non-positives, a scale not relative to the base loss, no warm-up, no per-loss clip.
"""

import math

import numpy as np
import pytest
import scipy.sparse as sps
import torch

from xmtc.errors import ConfigError
from xmtc.models.end_to_end import parse_margins
from xmtc.neural import alc as A


def sig(x):
    return 1.0 / (1.0 + math.exp(-x))


# -- the terms on a hand-made score matrix ---------------------------------------------------------------
def test_log1mexp_is_log_of_one_minus_p():
    p = torch.tensor([1e-9, 0.1, 0.5, 0.9, 1 - 1e-6], dtype=torch.float64)
    assert torch.allclose(A.log1mexp(p.log()), torch.log1p(-p), rtol=1e-9)


def test_hardest_negative_picks_highest_scoring_allowed_candidate():
    scores = torch.tensor([[0.1, 0.9, 0.5, 0.7], [0.5, 0.2, 0.5, 0.0], [1.0, 2.0, 3.0, 4.0]])
    cand = torch.tensor([[True, False, True, True], [True, True, True, False], [False] * 4])
    idx, has = A.hardest_negative(scores, cand)
    assert idx.tolist() == [3, 0, 0] and has.tolist() == [True, True, False]


def test_batch_aware_candidates_are_other_texts_positives():
    pos = torch.tensor([[1, 0, 1, 0], [0, 1, 1, 0], [0, 0, 0, 0]], dtype=torch.bool)
    assert A.batch_aware_candidates(pos).int().tolist() == [[0, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]]


def test_batch_union_rows_own_candidates_and_positives():
    cand = np.array([[4, 2, -1], [2, 0, 4]])
    Y = sps.csr_matrix(np.array([[0, 0, 1, 0, 0], [1, 0, 0, 0, 1]], dtype=np.float32))
    rows, own, pos = A.batch_union(cand, Y)
    assert rows.tolist() == [0, 2, 4]
    assert own.tolist() == [[False, True, True], [True, True, True]]
    assert pos.tolist() == [[False, True, False], [True, False, True]]


# p of 2 texts x 4 labels; text 0: positive 0, own shortlist {0, 1, 2}; text 1: positive 3, shortlist {1, 2, 3}
P = torch.tensor([[0.6, 0.3, 0.7, 0.95], [0.2, 0.55, 0.1, 0.4]], dtype=torch.float64)
POS = torch.tensor([[True, False, False, False], [False, False, False, True]])
OWN = torch.tensor([[True, True, True, False], [False, True, True, True]])


def test_pair_ce_is_the_cross_entropy_of_the_final_score_against_the_top_scored_own_negative():
    # text 0: own non-positives {1: .3, 2: .7} -> 2 (not 3, p .95, outside its shortlist); text 1: {1: .55, 2: .1} -> 1
    got = A.pair_ce(P.log(), POS, OWN & ~POS)
    want = ((-math.log(0.6) - math.log(1 - 0.7)) + (-math.log(0.4) - math.log(1 - 0.55))) / 2
    assert got.item() == pytest.approx(want, rel=1e-12)
    # qb: the other texts' positives -> text 0 against label 3 (.95), text 1 against label 0 (.2)
    got = A.pair_ce(P.log(), POS, A.batch_aware_candidates(POS))
    want = ((-math.log(0.6) - math.log(0.05)) + (-math.log(0.4) - math.log(0.8))) / 2
    assert got.item() == pytest.approx(want, rel=1e-9)


def test_pair_ce_gradient_sits_on_the_positives_and_each_texts_top_scored_negative_only():
    """A random (or any other) choice of negative puts gradient elsewhere: over 8 texts x 12 candidates
    a random pick agrees with the top-scored one everywhere with probability ~1e-7."""
    g = torch.Generator().manual_seed(0)
    logp = (torch.rand(8, 12, generator=g, dtype=torch.float64) * 0.98 + 0.01).log().requires_grad_(True)
    pos = torch.rand(8, 12, generator=g) < 0.15
    pos[:, 0] = True
    own = torch.rand(8, 12, generator=g) < 0.8
    A.pair_ce(logp, pos, own & ~pos).backward()
    expect = pos.clone()
    allowed = own & ~pos
    for i in range(8):
        c = np.flatnonzero(allowed[i].numpy())
        expect[i, c[np.argmax(logp[i, c].detach().numpy())]] = True
    assert torch.equal(logp.grad != 0, expect)


def test_tcm_acts_on_the_final_score_mean_over_violators():
    # positives .6 (< .9) and .4 (< .9): mean .4; negatives >= .5: .7, .95, .55: mean (.2 + .45 + .05) / 3
    got = A.tcm_loss(P, POS, 0.9, 0.5)
    assert got.item() == pytest.approx(0.4 + 0.7 / 3, rel=1e-12)
    assert A.tcm_loss(torch.tensor([[0.95, 0.1]]), torch.tensor([[True, False]]), 0.9, 0.5).item() == 0.0


def test_alc_terms_is_the_weighted_sum():
    total, parts = A.alc_terms(P.log(), POS, OWN, beta=0.7, tcm_weight=2.0, margins=(0.9, 0.5))
    want = 0.7 * (parts["alc_ql"] + parts["alc_qb"]) + 2.0 * parts["tcm"]
    assert total.item() == pytest.approx(want, rel=1e-6)
    assert parts["tcm"] == pytest.approx(0.4 + 0.7 / 3, rel=1e-6)


def test_parse_margins_are_scores_in_0_1():
    assert parse_margins("0.9,0.5") == (0.9, 0.5)
    for bad in ("0.9", "a,b", "0.5,0.9", "1.5,0.2", "0.9,-0.5", "0.9,0.5,0.1"):
        with pytest.raises(ConfigError, match="tcm_margins"):
            parse_margins(bad, "command line")


# -- the hooks: the score ALC acts on is the one predict returns --------------------------------------------
def tiny_lightxml():
    """6 labels in 3 clusters {0,1} {2,3} {4,5}; generator fixed to prefer cluster 0, then 1 (bias 5, 1, 0)."""
    from xmtc.methods.lightxml.network import LightXMLNetwork

    net = LightXMLNetwork(np.array([0, 0, 1, 1, 2, 2]), hidden_size=4, n_layers=1, hidden_dim=3, dropout=0.0,
                          topk=2, seed=0)
    with torch.no_grad():
        net.generator.weight.zero_()
        net.generator.bias.copy_(torch.tensor([5.0, 1.0, 0.0]))
    return net


def tiny_batch():
    rep = torch.tensor([[0.5, -1.0, 0.2, 0.3], [1.0, 0.4, -0.6, 0.1], [-0.3, 0.8, 0.9, -1.2]])
    # text 0: label 3 (cluster 1) -> clusters {1, 0}; text 1: label 5 -> {2, 0}; text 2: labels 0, 1 -> {0, 1}
    Y = sps.csr_matrix(np.array([[0, 0, 0, 1, 0, 0], [0, 0, 0, 0, 0, 1], [1, 1, 0, 0, 0, 0]], dtype=np.float32))
    return rep, Y


def test_lightxml_alc_score_is_the_predicted_score_by_hand():
    net = tiny_lightxml()
    rep, Y = tiny_batch()
    out = net.training_loss(rep, Y)
    logp, rows = net.alc_scores(rep, out, torch.arange(6), A.Tap())
    z = (net.bottleneck(rep)).detach().numpy()
    U = net.sparse_heads["labels"].weight.numpy()
    g = net.generator(rep).detach().numpy()
    for i in range(3):
        for c in range(6):
            want = sig(float(U[c] @ z[i])) * sig(float(g[i, c // 2]))
            assert math.exp(logp[i, c].item()) == pytest.approx(want, rel=1e-5)
    idx, sc = net.predict(rep, 4)                   # what users threshold: the same numbers
    for i in range(3):
        for j in range(4):
            assert sc[i, j].item() == pytest.approx(math.exp(logp[i, idx[i, j]].item()), rel=1e-5)
    assert rows[0][0] == "labels" and rows[0][1].rows.tolist() == list(range(6))


def tiny_cascade(score):
    from xmtc.index.tree import LabelTree
    from xmtc.methods.cascadexml.network import CascadeNetwork

    # 3 levels: 2 -> 4 -> 8 nodes, each node two children
    tree = LabelTree.from_arrays({"level_sizes": np.array([2, 4, 8]),
                                  "parents": np.concatenate([[0, 0], [0, 0, 1, 1], np.arange(8) // 2])})
    net = CascadeNetwork(tree, 4, [(1,), (1,), (1,)], [2, 2], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], score, 0.0, 0,
                         "cls")
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        net.head0.bias.copy_(torch.randn(2, generator=g))
        for t in (1, 2):
            net.sparse_heads[f"level{t}"].bias.copy_(torch.randn(net.sizes[t], generator=g))
    return net


@pytest.mark.parametrize("score", ["parent", "path", "label"])
def test_cascadexml_alc_score_is_the_predicted_score_with_its_biases(score):
    net = tiny_cascade(score)
    g = torch.Generator().manual_seed(1)
    rep = [torch.randn(3, 4, generator=g) for _ in range(3)]
    Y = sps.csr_matrix(np.eye(8, dtype=np.float32)[[1, 4, 6]])
    out = net.training_loss(rep, Y)
    tap = A.Tap()
    logp, rows = net.alc_scores(rep, out, torch.arange(8), tap)
    s = [torch.sigmoid(rep[0] @ net.head0.weight.t() + net.head0.bias)]
    for t in (1, 2):
        h = net.sparse_heads[f"level{t}"]
        s.append(torch.sigmoid(rep[t] @ h.weight.t() + h.bias))
    lab = np.arange(8)
    want = {"label": s[2], "parent": s[2] * s[1][:, lab // 2],
            "path": s[2] * s[1][:, lab // 2] * s[0][:, lab // 4]}[score]
    assert torch.allclose(logp.exp(), want.detach(), rtol=1e-5)
    idx, sc = net.predict(rep, 8)
    for i in range(3):
        for j in range(8):
            if idx[i, j] >= 0:
                assert sc[i, j].item() == pytest.approx(want[i, idx[i, j]].item(), rel=1e-5)
    used = {"label": ["level2"], "parent": ["level2", "level1"], "path": ["level2", "level1"]}[score]
    assert [n for n, _ in rows] == used
    assert set(tap.inputs) == {"text", *used} | ({"head0"} if score == "path" else set())


# -- the scale: relative to the base loss, warm-up, per-loss clip -------------------------------------------
def _with(net, rep, Y, **kw):
    net.attach_alc(A.ALC(**kw))
    return A.with_alc(net, rep, Y, net.training_loss(rep, Y))


def test_with_alc_adds_scale_times_the_base_loss_whatever_the_terms_size():
    """T's value is alc_scale x the base loss: multiplying the terms by 50 changes nothing (a raw sum would)."""
    rep, Y = tiny_batch()
    net = tiny_lightxml()
    base = net.training_loss(rep, Y).loss.item()
    small = _with(net, rep, Y, scale=0.3, clip=0.0)
    big = _with(net, rep, Y, scale=0.3, clip=0.0, beta=50.0, tcm_weight=50.0)
    for out in (small, big):
        assert out.loss.item() == pytest.approx(1.3 * base, rel=1e-6)
        assert out.parts["alc"] == pytest.approx(0.3 * base, rel=1e-6)
    assert big.parts["alc_raw"] == pytest.approx(50 * small.parts["alc_raw"], rel=1e-5)
    # the terms it scales are those of the hook's scores: the candidates' union, own shortlists, positives
    logp, _ = net.alc_scores(rep, net.training_loss(rep, Y), torch.arange(6), A.Tap())
    cand = net.training_loss(rep, Y).candidates
    _, own, pos = A.batch_union(cand, Y)
    raw, _ = A.alc_terms(logp, pos, own)
    assert small.parts["alc_raw"] == pytest.approx(raw.item(), rel=1e-5)


def test_warmup_ramps_the_auxiliary_weight_from_zero_and_counts_batches():
    rep, Y = tiny_batch()
    net = tiny_lightxml()
    base = net.training_loss(rep, Y).loss.item()
    net.attach_alc(A.ALC(scale=0.5, warmup_steps=4, clip=0.0))
    seen = []
    for _ in range(6):
        out = A.with_alc(net, rep, Y, net.training_loss(rep, Y))
        seen.append(out.loss.item() / base - 1.0)
    assert seen == pytest.approx([0.0, 0.125, 0.25, 0.375, 0.5, 0.5], abs=1e-6)
    assert int(net.alc.steps) == 6 and "alc.steps" in net.state_dict()   # checkpointed with the network
    assert [A.warmup_weight(t, 0) for t in (0, 3)] == [1.0, 1.0]


def test_per_loss_clip_caps_the_auxiliary_gradient_at_kappa_times_the_base_gradient():
    """At a large scale the auxiliary gradient on the label rows and on the text side (z, g) is kappa times
    the base loss's there, pointing where the unclipped one points; without the clip it is larger."""
    rep, Y = tiny_batch()
    net = tiny_lightxml()
    out = _with(net, rep, Y, scale=5.0, clip=0.5)
    assert out.parts["ratio_labels"] > 0.5 and out.parts["ratio_text"] > 0.5         # the clip engages
    z, g = out.tensors["z"], out.tensors["g"]
    (_, hb_base), (_, hb_aux) = out.rows
    gz_tot, gg_tot = torch.autograd.grad(out.loss, [z, g], retain_graph=True)
    out2 = net.training_loss(rep, Y)                           # same weights and batch: the base part alone
    gz_b, gg_b = torch.autograd.grad(out2.loss, [out2.tensors["z"], out2.tensors["g"]])
    aux_text = torch.sqrt(((gz_tot - gz_b) ** 2).sum() + ((gg_tot - gg_b) ** 2).sum())
    base_text = torch.sqrt((gz_b ** 2).sum() + (gg_b ** 2).sum())
    assert aux_text.item() == pytest.approx(0.5 * base_text.item(), rel=1e-4)
    out.loss.backward()
    assert hb_aux.w.grad.norm().item() == pytest.approx(0.5 * hb_base.w.grad.norm().item(), rel=1e-5)
    # the same batch without the clip: the auxiliary gradient on the rows is larger, in the same direction
    free = _with(net, rep, Y, scale=5.0, clip=0.0)
    free.loss.backward()
    g_free = free.rows[1][1].w.grad
    assert g_free.norm().item() > hb_aux.w.grad.norm().item() * 1.5
    assert torch.allclose(g_free * out.parts["clip_labels"], hb_aux.w.grad, rtol=1e-4, atol=1e-7)
    assert out.parts["ratio_labels"] == pytest.approx(g_free.norm().item() / hb_base.w.grad.norm().item(), rel=1e-4)


def test_cascadexml_alc_sends_clipped_gradient_to_both_levels_it_multiplies():
    net = tiny_cascade("parent")
    g = torch.Generator().manual_seed(1)
    rep = [torch.randn(3, 4, generator=g, requires_grad=True) for _ in range(3)]
    Y = sps.csr_matrix(np.eye(8, dtype=np.float32)[[1, 4, 6]])
    net.attach_alc(A.ALC(scale=2.0, clip=0.25))
    out = A.with_alc(net, rep, Y, net.training_loss(rep, Y))
    assert {"ratio_text", "ratio_level2", "ratio_level1"} <= set(out.parts)
    out.loss.backward()
    by = {}
    for name, hb in out.rows:
        by.setdefault(name, []).append(hb)
    for name in ("level1", "level2"):
        base_hb, aux_hb = by[name]
        na = torch.sqrt((aux_hb.w.grad ** 2).sum() + (aux_hb.b.grad ** 2).sum()).item()
        nb = torch.sqrt((base_hb.w.grad ** 2).sum() + (base_hb.b.grad ** 2).sum()).item()
        assert 0 < na <= 0.25 * nb * (1 + 1e-5)
    assert rep[2].grad is not None and rep[1].grad is not None


def test_network_without_the_hook_refuses_alc():
    from xmtc.neural.network import LossOut, Network

    with pytest.raises(ConfigError, match="does not support the ALC"):
        Network().alc_scores(None, None, None, None)
    lx = tiny_lightxml()
    lx.attach_alc(A.ALC())
    rep, Y = tiny_batch()
    with pytest.raises(ConfigError, match="candidate labels"):
        A.with_alc(lx, rep, Y, LossOut(torch.zeros(())))


def test_cli_flags_parse_and_unknown_keys_are_errors(tmp_path):
    from xmtc.cli import main
    from xmtc.cli_parser import build_parser
    from xmtc.config import build_config, config_from_args
    from xmtc.methods.lightxml.estimator import LightXMLConfig

    argv = ["train", "x.tsv", "-o", str(tmp_path / "m"), "--method", "lightxml", "--alc", "true",
            "--alc-scale", "0.2", "--alc-warmup", "0.5", "--alc-clip", "0.25", "--alc-weight", "0.25",
            "--tcm-weight", "2", "--tcm-margins", "0.8,0.3"]
    cfg = config_from_args(LightXMLConfig, build_parser(argv).parse_args(argv))
    assert (cfg.alc, cfg.alc_scale, cfg.alc_warmup, cfg.alc_clip, cfg.alc_weight, cfg.tcm_weight,
            cfg.tcm_margins) == (True, 0.2, 0.5, 0.25, 0.25, 2.0, "0.8,0.3")
    assert LightXMLConfig().alc is False
    with pytest.raises(ConfigError, match="unknown parameter.*'alc_wieght'"):
        build_config(LightXMLConfig, {"alc": True, "alc_wieght": 1.0})
    with pytest.raises(ConfigError, match="tcm_margins"):
        build_config(LightXMLConfig, {"tcm_margins": "0.2,0.9"})
    data = tmp_path / "x.tsv"
    data.write_text("a\tsome text\n")
    assert main(["train", str(data), "-o", str(tmp_path / "m"), "--method", "lightxml",
                 "--tcm-margins", "0.9"]) == 2


# -- in training ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def yso_tiny(tmp_path_factory):
    from conftest import DATA, make_tiny_bert, read_tsv_sample

    d = DATA / "yso-finna-en-2k-20k"
    if not d.exists():
        pytest.skip("shared data not available")
    texts, labels = read_tsv_sample(d / "train.txt.gz", 160)
    enc = make_tiny_bert(tmp_path_factory.mktemp("bert") / "tiny", texts, hidden=16)
    return texts, labels, enc


def _fit(yso_tiny, method="lightxml", **kw):
    from xmtc.methods.cascadexml.estimator import CascadeXML
    from xmtc.methods.lightxml.estimator import LightXML

    texts, labels, enc = yso_tiny
    common = dict(encoder=str(enc), max_length=16, epochs=1, batch_size=16, valid_size=0, n_threads=1, seed=3)
    if method == "cascadexml":
        m = CascadeXML(branching=4, max_leaf_size=8, topk="4", head_init="random", ranker=False, **common, **kw)
    else:
        # random start: on the tiny random BERT the centroid start saturates (see xmtc/neural/head_init.py)
        m = LightXML(hidden_dim=8, n_layers=2, topk=4, cluster_size=8, head_init="random", ranker=False, **common,
                     **kw)
    return m.fit(texts, labels, progress=False)


@pytest.mark.parametrize("method", ["lightxml", "cascadexml"])
def test_alc_in_training_scale_zero_changes_nothing_and_the_first_batch_pays_exactly_the_scale(
        yso_tiny, tmp_path, method):
    """10 batches of 16 (one loss-curve point each): at alc_scale 0 the run is the plain run bit for bit; without
    warm-up the first batch's logged loss is (1 + alc_scale) x the plain one (same weights at step 0); with a
    one-epoch warm-up the first batch pays nothing; the model differs and the saved one keeps no ALC state."""
    from xmtc.models.base import load

    texts = yso_tiny[0][:40]
    plain = _fit(yso_tiny, method)
    zero = _fit(yso_tiny, method, alc=True, alc_scale=0.0)
    on = _fit(yso_tiny, method, alc=True, alc_warmup=0.0, alc_scale=0.4)
    warm = _fit(yso_tiny, method, alc=True, alc_warmup=1.0, alc_scale=0.4)
    p_plain, s_plain = plain._predict_batch(texts, 5)
    p_zero, s_zero = zero._predict_batch(texts, 5)
    p_on, s_on = on._predict_batch(texts, 5)
    assert np.array_equal(p_plain, p_zero) and np.array_equal(s_plain, s_zero)
    assert plain.loss_curve_ == zero.loss_curve_ and len(plain.loss_curve_) == 10
    assert on.loss_curve_[0] == pytest.approx(1.4 * plain.loss_curve_[0], rel=1e-4)
    assert warm.loss_curve_[0] == pytest.approx(plain.loss_curve_[0], rel=1e-6)
    assert warm.loss_curve_[5] > plain.loss_curve_[5] * 1.1
    assert not np.allclose(s_plain, s_on)
    assert on.network_.alc is None
    assert not any(k.startswith("dense.alc") for k in on.network_.arrays())
    on.save(tmp_path / "m")
    p_l, s_l = load(tmp_path / "m")._predict_batch(texts, 5)
    assert np.array_equal(p_l, p_on) and np.allclose(s_l, s_on, atol=1e-6)


def test_alc_is_refused_by_a_method_without_the_hook(yso_tiny):
    from xmtc.methods.aplc.estimator import APLC

    texts, labels, enc = yso_tiny
    with pytest.raises(ConfigError, match="does not support the ALC"):
        APLC(encoder=str(enc), max_length=16, epochs=1, batch_size=16, valid_size=0, n_threads=1, alc=True,
             ranker=False).fit(texts[:32], labels[:32], progress=False)


def test_benchmark_inspection_reads_the_predicted_top1_and_its_two_factors(yso_tiny):
    """benchmarks/alc.py's separation figures (why ALC does or does not lift CascadeXML's coverage@P90) read
    the score users threshold: under each rule the top-1 and its score are what ``predict`` returns, the
    parent rule's score is the label factor x the parent factor, and "right" is the label being a positive.
    A helper that read another score, swapped the factors or misaligned texts would report another model."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from alc import _auc, cascade_top1

    texts, labels, _ = yso_tiny
    model = _fit(yso_tiny, "cascadexml")
    vocab = model.labels_.index
    rows = [[vocab[x] for x in ls if x in vocab] for ls in labels[:40]]
    Y = sps.csr_matrix((np.ones(sum(map(len, rows)), dtype=np.float32),
                        (np.repeat(np.arange(40), [len(r) for r in rows]), np.concatenate(rows).astype(int))),
                       shape=(40, len(vocab)))
    for rule in ("parent", "path", "label"):
        model.set_params(score=rule)
        idx, sc = model._predict_batch(texts[:40], 1)
        score, f_label, f_parent, right = cascade_top1(model, texts[:40], Y)[rule]
        assert np.allclose(score, sc[:, 0], atol=1e-6)
        assert np.array_equal(right, np.asarray(Y[np.arange(40), idx[:, 0]]).ravel() > 0)
        if rule == "parent":
            assert np.allclose(score, f_label * f_parent, atol=1e-6) and not np.allclose(score, f_label)
        if rule == "label":
            assert np.allclose(score, f_label, atol=1e-6)
    # the separation figure: 1 when every right top-1 outscores every wrong one, 0.5 for a tie, 0 reversed
    ok = np.array([True, False, True, False])
    assert _auc(np.array([0.9, 0.1, 0.8, 0.2]), ok) == 1.0
    assert _auc(np.array([0.5, 0.5, 0.5, 0.5]), ok) == 0.5
    assert _auc(np.array([0.1, 0.9, 0.2, 0.8]), ok) == 0.0
