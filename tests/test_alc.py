"""ALC + TCM auxiliary objective (xmtc/neural/alc.py): hand-computed cases."""

import math

import numpy as np
import pytest
import torch

from xmtc.errors import ConfigError
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


def test_pair_scores_chunked_equal_whole(monkeypatch):
    torch.manual_seed(0)
    head = A.PairHead(3, hidden=4, seed=1)
    hq, hl = torch.randn(5, 3), torch.randn(7, 3)
    whole = A.pair_scores(head, hq, hl)
    monkeypatch.setattr(A, "_CHUNK_PAIRS", 5)          # one candidate per chunk
    assert torch.allclose(A.pair_scores(head, hq, hl), whole)
    ref = torch.stack([torch.stack([head(hq[i], hl[c]) for c in range(7)]) for i in range(5)])
    assert torch.allclose(whole, ref.detach(), atol=1e-6)


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
    assert A.parse_margins("0.9,0.5") == (0.9, 0.5)
    for bad in ("0.9", "a,b", "0.5,0.9", "1.5,0.2"):
        with pytest.raises(ConfigError, match="tcm_margins"):
            A.parse_margins(bad, "command line")
