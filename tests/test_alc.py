"""ALC + TCM auxiliary objective (xmtc/neural/alc.py): hand-computed cases."""

import math

import numpy as np
import pytest
import torch

from xmtc.errors import ConfigError
from xmtc.models.end_to_end import parse_margins
from xmtc.neural import alc as A
from xmtc.neural.heads import RowSparseHead


def sp(x):
    return math.log1p(math.exp(x))


def dot_head(d):
    """A linear pair head whose logit is exactly h_q . h_l (weight 1 on the product block, 0 elsewhere)."""
    head = A.PairHead(d)
    with torch.no_grad():
        head.net.weight.zero_()
        head.net.weight[0, 3 * d:] = 1.0
        head.net.bias.zero_()
    return head


# text 0 has label 0, text 1 has label 2; dot scores: text0 [1, .5, 0, -1], text1 [0, .5, 2, 0]
HQ = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
HL = torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.0, 2.0], [-1.0, 0.0]])
POS = torch.tensor([[True, False, False, False], [False, False, True, False]])


def test_pair_features_is_the_four_blocks():
    g = A.pair_features(torch.tensor([1.0, -2.0]), torch.tensor([3.0, 1.0]))
    assert g.tolist() == [1.0, -2.0, 3.0, 1.0, 2.0, 3.0, 3.0, -2.0]


def test_pair_head_scores_broadcast_and_dot_head():
    head = dot_head(2)
    s = A.pair_scores(head, HQ, HL)
    assert torch.allclose(s, HQ @ HL.t())


@pytest.mark.parametrize("hidden", [0, 4])
def test_pair_scores_chunked_equal_pair_by_pair(monkeypatch, hidden):
    torch.manual_seed(0)
    head = A.PairHead(3, hidden=hidden, seed=1)
    hq, hl = torch.randn(5, 3), torch.randn(7, 3)
    whole = A.pair_scores(head, hq, hl)
    ref = torch.stack([torch.stack([head(hq[i], hl[c]) for c in range(7)]) for i in range(5)]).detach()
    assert torch.allclose(whole, ref, atol=1e-5)
    monkeypatch.setattr(A, "_CHUNK_FLOATS", 1)          # one candidate per chunk
    assert torch.allclose(A.pair_scores(head, hq, hl), ref, atol=1e-5)


def test_hardest_negative_picks_highest_scoring_allowed_candidate():
    scores = torch.tensor([[0.1, 0.9, 0.5, 0.7], [0.5, 0.2, 0.5, 0.0], [1.0, 2.0, 3.0, 4.0]])
    cand = torch.tensor([[True, False, True, True], [True, True, True, False], [False] * 4])
    idx, has = A.hardest_negative(scores, cand)
    assert idx.tolist() == [3, 0, 0]           # 0.9 is not a candidate; tie 0.5/0.5 -> lowest index
    assert has.tolist() == [True, True, False]


def test_batch_aware_candidates_are_other_texts_positives():
    pos = torch.tensor([[1, 0, 0, 1], [0, 1, 0, 1], [0, 0, 0, 0]], dtype=torch.bool)
    got = A.batch_aware_candidates(pos)
    assert got.tolist() == [[False, True, False, False],
                            [True, False, False, False],
                            [True, True, False, True]]


def test_ql_loss_hand_computed():
    # negatives of text 0: {1, 2, 3} -> hardest 1 (0.5); of text 1: {0, 1, 3} -> hardest 1 (0.5)
    got = A.ql_loss(dot_head(2), HQ, HL, POS)
    want = ((sp(-1) + sp(0.5)) + (sp(-2) + sp(0.5))) / 2
    assert got.item() == pytest.approx(want, rel=1e-6)


def test_qb_loss_hand_computed():
    # batch-aware negatives: text 0 -> {2} (score 0), text 1 -> {0} (score 0)
    got = A.qb_loss(dot_head(2), HQ, HL, POS)
    want = ((sp(-1) + sp(0.0)) + (sp(-2) + sp(0.0))) / 2
    assert got.item() == pytest.approx(want, rel=1e-6)


def test_ql_loss_counts_each_positive_pair_and_skips_texts_without_negatives():
    # text 0 has positives {0, 1}; its hardest negative among {2, 3} is 2 (score 0)
    # text 1's positives are all candidates but one: negative {3}, score 0
    pos = torch.tensor([[True, True, False, False], [True, True, True, False]])
    got = A.ql_loss(dot_head(2), HQ, HL, pos)
    want = (sp(-1) + sp(0) + sp(-0.5) + sp(0) + sp(0) + sp(0) + sp(-0.5) + sp(0) + sp(-2) + sp(0)) / 5
    assert got.item() == pytest.approx(want, rel=1e-6)
    # a text whose every candidate is positive has no negative: no term at all, and no NaN
    all_pos = torch.ones(2, 4, dtype=torch.bool)
    z = A.ql_loss(dot_head(2), HQ, HL, all_pos)
    assert z.item() == 0.0


def test_tcm_zero_inside_margins():
    hq = torch.tensor([[1.0, 0.0]])
    hl = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]])          # cos 1 (pos), 0, 0.7071 (negs)
    pos = torch.tensor([[True, False, False]])
    assert A.tcm_loss(hq, hl, pos, 0.9, 0.75).item() == 0.0


def test_tcm_value_outside_margins_is_mean_over_violators():
    hq = torch.tensor([[1.0, 0.0]])
    # positives: cos 0.7071 (violates m+=0.9 by 0.19289), cos 1 (fine)
    # negatives: cos 0.8 (violates m-=0.5 by 0.3), cos 0.6 (by 0.1), cos 0 (fine)
    hl = torch.tensor([[1.0, 1.0], [3.0, 0.0], [0.8, 0.6], [0.6, 0.8], [0.0, 5.0]])
    pos = torch.tensor([[True, True, False, False, False]])
    got = A.tcm_loss(hq, hl, pos, 0.9, 0.5)
    want = (0.9 - 1 / math.sqrt(2)) / 1 + (0.3 + 0.1) / 2
    assert got.item() == pytest.approx(want, rel=1e-5)
    got_w = A.tcm_loss(hq, hl, pos, 0.9, 0.5, lambda_pos=2.0, lambda_neg=0.5)
    assert got_w.item() == pytest.approx(2 * (0.9 - 1 / math.sqrt(2)) + 0.5 * 0.2, rel=1e-5)


def test_alc_loss_is_the_weighted_sum_of_its_parts():
    torch.manual_seed(3)
    head = A.PairHead(4, seed=0)
    hq, hl = torch.randn(3, 4), torch.randn(6, 4)
    pos = torch.zeros(3, 6, dtype=torch.bool)
    pos[0, 1] = pos[1, 1] = pos[1, 4] = pos[2, 0] = True
    out = A.alc_loss(hq, hl, pos, head, beta1=0.3, beta2=2.0, tcm_weight=0.7, margins=(0.8, 0.2))
    want = (0.3 * A.ql_loss(head, hq, hl, pos) + 2.0 * A.qb_loss(head, hq, hl, pos)
            + 0.7 * A.tcm_loss(hq, hl, pos, 0.8, 0.2))
    assert out.loss.item() == pytest.approx(want.item(), rel=1e-6)
    assert set(out.parts) == {"alc_ql", "alc_qb", "tcm"}
    only_tcm = A.alc_loss(hq, hl, pos, head, beta1=0.0, beta2=0.0, tcm_weight=1.0, margins=(0.8, 0.2))
    assert set(only_tcm.parts) == {"tcm"}


def test_gradient_reaches_exactly_the_used_label_rows_of_a_row_sparse_head():
    d = 2
    W = np.array([[9, 9], [1, 0], [0.5, 0.5], [0, 2], [-1, 0], [9, 9]], dtype=np.float32)
    sparse = RowSparseHead(W, np.zeros(6, np.float32))
    ids = torch.tensor([[1, 2, 4], [3, 2, 1]])              # shortlists; union rows {1, 2, 3, 4} = HL
    hb = sparse.gather(ids)
    assert hb.rows.tolist() == [1, 2, 3, 4]
    hq = HQ.clone().requires_grad_(True)
    # L_ql only: text 0 uses rows 1 (pos) and 2 (hardest neg), text 1 rows 3 (pos) and 2 -> row 4 unused
    out = A.alc_loss(hq, hb.w, POS, dot_head(d), beta1=1.0, beta2=0.0, tcm_weight=0.0)
    out.loss.backward()
    g = hb.w.grad
    assert g[3].abs().sum().item() == 0.0                  # row 4: neither positive nor hardest negative
    assert all(g[i].abs().sum().item() > 0 for i in (0, 1, 2))
    # d/dh_l of softplus(-q.l)/2 for text 0's positive (row 1, q=[1,0], s=1): -sigmoid(-1) q / 2
    want0 = -torch.sigmoid(torch.tensor(-1.0)) * HQ[0] / 2
    assert torch.allclose(g[0], want0, atol=1e-6)
    assert hq.grad is not None and hq.grad.abs().sum() > 0
    # rows outside the shortlist never enter: the gradient tensor has only the |U| gathered rows
    assert g.shape == (4, d)


def test_tcm_sends_gradient_to_a_violating_negative_row():
    hb = RowSparseHead(HL.numpy(), np.zeros(4, np.float32)).gather(torch.tensor([[0, 1, 2, 3]]))
    out = A.alc_loss(HQ[:1], hb.w, POS[:1], dot_head(2), beta1=0.0, beta2=0.0, tcm_weight=1.0, margins=(0.9, 0.5))
    out.loss.backward()
    # text 0 = [1, 0]: row 0 positive (cos 1, fine), row 1 = [.5, .5] negative with cos .7071 >= .5 (the one
    # violator), rows 2, 3 cos 0 and -1 (fine). d cos / d l = (q^ - cos l^) / |l| = [.7071, -.7071]
    r = 1 / math.sqrt(2)
    assert torch.allclose(hb.w.grad[1], torch.tensor([r, -r]), atol=1e-6)
    assert hb.w.grad[[0, 2, 3]].abs().sum() == 0
    assert out.parts["tcm"] == pytest.approx(r - 0.5, rel=1e-6)


def test_alc_module_and_shape_errors():
    m = A.ALC(2, beta1=1.0, beta2=0.0, tcm_weight=0.0)
    with torch.no_grad():
        m.head.net.weight.copy_(dot_head(2).net.weight)
        m.head.net.bias.zero_()
    assert m(HQ, HL, POS).loss.item() == pytest.approx(A.ql_loss(dot_head(2), HQ, HL, POS).item(), rel=1e-6)
    with pytest.raises(ValueError, match="one d"):
        m(HQ, torch.zeros(4, 3), POS)
    with pytest.raises(ValueError, match="positive_mask"):
        m(HQ, HL, POS[:, :3])


def test_parse_margins():
    assert parse_margins("0.9,0.5") == (0.9, 0.5)
    for bad in ("0.9", "a,b", "0.5,0.9", "1.5,0.2", "0.9,0.5,0.1"):
        with pytest.raises(ConfigError, match="tcm_margins"):
            parse_margins(bad, "command line")


# -- wiring into the end-to-end core -----------------------------------------------------------------------
def tiny_lightxml():
    """6 labels in 3 clusters {0,1} {2,3} {4,5}; generator fixed to prefer cluster 0, then 1 (bias 5, 1, 0)."""
    from xmtc.neural.lightxml import LightXMLNetwork

    net = LightXMLNetwork(np.array([0, 0, 1, 1, 2, 2]), hidden_size=4, n_layers=1, hidden_dim=3, dropout=0.0,
                          topk=2, seed=0)
    with torch.no_grad():
        net.generator.weight.zero_()
        net.generator.bias.copy_(torch.tensor([5.0, 1.0, 0.0]))
    return net


def tiny_batch():
    import scipy.sparse as sp

    rep = torch.tensor([[0.5, -1.0, 0.2, 0.3], [1.0, 0.4, -0.6, 0.1], [-0.3, 0.8, 0.9, -1.2]])
    # text 0: label 3 (cluster 1) -> clusters {1, 0}; text 1: label 5 -> {2, 0}; text 2: labels 0, 1 -> {0, 1}
    Y = sp.csr_matrix(np.array([[0, 0, 0, 1, 0, 0], [0, 0, 0, 0, 0, 1], [1, 1, 0, 0, 0, 0]], dtype=np.float32))
    return rep, Y


def test_batch_union_rows_first_occurrence_and_positives():
    import scipy.sparse as sp

    cand = np.array([[4, 2, -1], [2, 0, 4]])
    Y = sp.csr_matrix(np.array([[0, 0, 1, 0, 0], [1, 0, 0, 0, 1]], dtype=np.float32))
    rows, first, pos = A.batch_union(cand, Y)
    assert rows.tolist() == [0, 2, 4]
    assert first.tolist() == [4, 1, 0]                     # flat positions of the first 0, 2, 4
    assert pos.tolist() == [[False, True, False], [True, False, True]]


def test_with_alc_adds_exactly_the_auxiliary_term_on_a_hand_made_batch():
    net = tiny_lightxml()
    rep, Y = tiny_batch()
    base = net.training_loss(rep, Y)
    cand = np.asarray(base.candidates)
    assert [sorted(set(r[r >= 0].tolist())) for r in cand] == [[0, 1, 2, 3], [0, 1, 4, 5], [0, 1, 2, 3]]
    net.attach_alc(A.ALC(3, beta1=0.7, beta2=1.3, tcm_weight=0.5, margins=(0.8, 0.1), seed=5))
    out = A.with_alc(net, rep, Y, net.training_loss(rep, Y))
    # by hand: union = labels 0..5, vectors = the label-embedding rows, z = the discriminator's projection
    W = net.sparse_heads["labels"].weight
    pos = torch.tensor([[0, 0, 0, 1, 0, 0], [0, 0, 0, 0, 0, 1], [1, 1, 0, 0, 0, 0]], dtype=torch.bool)
    want = A.alc_loss(net.bottleneck(rep), W, pos, net.alc.head, 0.7, 1.3, 0.5, (0.8, 0.1))
    assert (out.loss - base.loss).item() == pytest.approx(want.loss.item(), rel=1e-6)
    assert want.loss.item() > 0.1
    assert {"labels", "clusters", "alc_ql", "alc_qb", "tcm"} <= set(out.parts)
    assert [n for n, _ in out.rows] == ["labels", "labels"]
    out.loss.backward()
    hb_alc = out.rows[1][1]
    assert hb_alc.rows.tolist() == [0, 1, 2, 3, 4, 5]
    assert hb_alc.w.grad is not None and hb_alc.w.grad.abs().sum() > 0
    assert net.alc.head.net.weight.grad.abs().sum() > 0


def test_network_without_the_hook_refuses_alc():
    from xmtc.neural.network import LossOut, Network

    net = Network()
    with pytest.raises(ConfigError, match="does not support the ALC"):
        net.alc_dim()
    lx = tiny_lightxml()
    lx.attach_alc(A.ALC(3))
    rep, Y = tiny_batch()
    with pytest.raises(ConfigError, match="candidate labels"):
        A.with_alc(lx, rep, Y, LossOut(torch.zeros(())))


def test_cli_flags_parse_and_unknown_keys_are_errors(tmp_path):
    from xmtc.cli import build_parser, main
    from xmtc.config import build_config, config_from_args
    from xmtc.models.lightxml import LightXMLConfig

    argv = ["train", "x.tsv", "-o", str(tmp_path / "m"), "--method", "lightxml", "--alc", "true",
            "--alc-weight", "0.25", "--tcm-weight", "2", "--tcm-margins", "0.8,0.3"]
    cfg = config_from_args(LightXMLConfig, build_parser(argv).parse_args(argv))
    assert (cfg.alc, cfg.alc_weight, cfg.tcm_weight, cfg.tcm_margins) == (True, 0.25, 2.0, "0.8,0.3")
    assert LightXMLConfig().alc is False
    with pytest.raises(ConfigError, match="unknown parameter.*'alc_wieght'"):
        build_config(LightXMLConfig, {"alc": True, "alc_wieght": 1.0})
    with pytest.raises(ConfigError, match="tcm_margins"):
        build_config(LightXMLConfig, {"tcm_margins": "0.2,0.9"})
    data = tmp_path / "x.tsv"
    data.write_text("a\tsome text\n")
    assert main(["train", str(data), "-o", str(tmp_path / "m"), "--method", "lightxml",
                 "--tcm-margins", "0.9"]) == 2


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
    from xmtc.models.cascadexml import CascadeXML
    from xmtc.models.lightxml import LightXML

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
def test_alc_in_training_zero_weights_change_nothing_and_nonzero_weights_do(yso_tiny, tmp_path, method):
    from xmtc.models.base import load

    texts = yso_tiny[0][:40]
    plain = _fit(yso_tiny, method)
    zero = _fit(yso_tiny, method, alc=True, alc_weight=0.0, tcm_weight=0.0)
    on = _fit(yso_tiny, method, alc=True)
    p_plain, s_plain = plain._predict_batch(texts, 5)
    p_zero, s_zero = zero._predict_batch(texts, 5)
    p_on, s_on = on._predict_batch(texts, 5)
    # the attached (seeded) pair head leaves the RNG stream and, at weight 0, every update unchanged
    assert np.array_equal(p_plain, p_zero) and np.array_equal(s_plain, s_zero)
    assert plain.loss_curve_ == zero.loss_curve_
    # with weights the loss and the trained model differ
    assert on.loss_curve_[0] > plain.loss_curve_[0]
    assert not np.allclose(s_plain, s_on)
    # the pair head is a training device: not in the saved model, which predicts the same after loading
    assert on.network_.alc is None
    assert not any(k.startswith("dense.alc.") for k in on.network_.arrays())
    on.save(tmp_path / "m")
    p_l, s_l = load(tmp_path / "m")._predict_batch(texts, 5)
    assert np.array_equal(p_l, p_on) and np.allclose(s_l, s_on, atol=1e-6)


# -- the auxiliary terms and their gradient on the label rows, by hand ------------------------------------
def _alc_numpy(q, L, pos, w, b, beta1, beta2, tcm_w, m_pos, m_neg):
    """The module docstring's equations in float64 numpy: (L_ql, L_qb, L_tcm, total) for text vectors ``q``
    (B, d), label vectors ``L`` (C, d), positives ``pos`` (B, C) and a linear pair head (w (4d,), b)."""
    d = q.shape[1]
    w1, w2, w3, w4 = w[:d], w[d:2 * d], w[2 * d:3 * d], w[3 * d:]
    s = (q @ w1)[:, None] + (L @ w2)[None, :] + np.abs(q[:, None] - L[None]) @ w3 + q @ (L * w4).T + b
    softplus = lambda v: np.logaddexp(0.0, v)  # noqa: E731

    def contrast(allowed):
        terms = []
        for i in range(q.shape[0]):
            if not allowed[i].any():
                continue
            n = int(np.flatnonzero(allowed[i])[np.argmax(s[i, allowed[i]])])        # hardest negative
            terms += [softplus(-s[i, p]) + softplus(s[i, n]) for p in np.flatnonzero(pos[i])]
        return float(np.mean(terms)) if terms else 0.0

    ql = contrast(~pos)
    others = (pos.sum(0, keepdims=True) - pos) > 0
    qb = contrast(others & ~pos)
    S = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (L / np.linalg.norm(L, axis=1, keepdims=True)).T
    vp, vn = pos & (S <= m_pos), ~pos & (S >= m_neg)
    tcm = (m_pos - S)[vp].sum() / max(vp.sum(), 1) + (S - m_neg)[vn].sum() / max(vn.sum(), 1)
    return ql, qb, tcm, beta1 * ql + beta2 * qb + tcm_w * tcm


def test_alc_terms_and_their_gradient_on_the_label_rows_equal_the_equations_on_a_hand_batch():
    """On the hand-made LightXML batch, ``with_alc`` adds ``beta1 L_ql + beta2 L_qb + w L_tcm`` whose three
    terms equal a float64 numpy evaluation of the module's equations (hardest negative by pair-head score
    among the non-positives / the other texts' positives, TCM over the violating pairs); the gradient the
    ALC term sends to the label-embedding rows equals the finite-difference gradient of that numpy
    function; and one lazy Adam step on the merged rows (what the trainer does) moves every row by
    ``-lr sign(dL_base/du + dL_alc/du)``."""
    from xmtc.neural.heads import LazyAdam, merge_row_grads

    net = tiny_lightxml()
    rep, Y = tiny_batch()
    net.attach_alc(A.ALC(3, beta1=0.7, beta2=1.3, tcm_weight=0.5, margins=(0.8, 0.1), seed=5))
    base = net.training_loss(rep, Y)
    out = A.with_alc(net, rep, Y, net.training_loss(rep, Y))
    q = net.bottleneck(rep).detach().double().numpy()
    U = net.sparse_heads["labels"].weight.double().numpy().copy()
    pos = Y.toarray() > 0                                   # the union of the candidates is labels 0..5
    w = net.alc.head.net.weight.detach().double().numpy()[0]
    bias = float(net.alc.head.net.bias.detach())
    f = lambda UU: _alc_numpy(q, UU, pos, w, bias, 0.7, 1.3, 0.5, 0.8, 0.1)  # noqa: E731
    ql, qb, tcm, total = f(U)
    assert (out.parts["alc_ql"], out.parts["alc_qb"], out.parts["tcm"]) == (
        pytest.approx(ql, rel=1e-5), pytest.approx(qb, rel=1e-5), pytest.approx(tcm, rel=1e-5, abs=1e-7))
    assert min(ql, qb) > 0.1 and tcm > 0                    # every term takes part
    assert (out.loss - base.loss).item() == pytest.approx(total, rel=1e-5)
    out.loss.backward()
    (_, hb_base), (_, hb_alc) = out.rows
    assert hb_alc.rows.tolist() == [0, 1, 2, 3, 4, 5]
    eps, fd = 1e-6, np.zeros_like(U)
    for r in range(U.shape[0]):
        for c in range(U.shape[1]):
            up, dn = U.copy(), U.copy()
            up[r, c] += eps
            dn[r, c] -= eps
            fd[r, c] = (f(up)[3] - f(dn)[3]) / (2 * eps)
    assert np.abs(fd).max() > 1e-2
    np.testing.assert_allclose(hb_alc.w.grad.double().numpy(), fd, atol=2e-5, rtol=1e-4)
    # the step: both gradients of the label head merged row by row, then lazy Adam's first step
    opt = LazyAdam(net.sparse_heads["labels"], lr=0.01)
    rows, gw, gb = merge_row_grads([hb_base.grads(), hb_alc.grads()])
    g = np.zeros_like(U)
    g[hb_base.rows.numpy()] += hb_base.w.grad.double().numpy()
    g += fd
    opt.step(rows, gw, gb)
    moved = net.sparse_heads["labels"].weight.double().numpy() - U
    big = np.abs(g) > 1e-4
    assert big.sum() > 0.8 * big.size
    np.testing.assert_allclose(moved[big], -0.01 * np.sign(g[big]), rtol=1e-3)


def test_a_batch_without_pairs_gives_a_zero_loss_connected_to_every_input_and_head_parameter():
    """When no text has both a positive and a negative, ``ql_loss`` is 0 but still part of the graph: h_q, h_l
    and every pair-head parameter get a zero gradient (not None), so the optimiser's step and a
    distributed gradient reduction see the same parameters in every batch."""
    head = A.PairHead(2, hidden=3, seed=0)
    h_q = torch.tensor([[1.0, 0.0], [0.0, 1.0]], requires_grad=True)
    h_l = torch.tensor([[0.5, 0.5], [1.0, -1.0]], requires_grad=True)
    z = A.ql_loss(head, h_q, h_l, torch.ones(2, 2, dtype=torch.bool))
    assert z.item() == 0.0
    z.backward()
    for t in [h_q, h_l, *head.parameters()]:
        assert t.grad is not None and torch.count_nonzero(t.grad) == 0
