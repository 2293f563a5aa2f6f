"""-1 padding of a shortlist in :class:`xmtc.neural.heads.RowSparseHead` (issue 32).

A gathered row gets a LazyAdam step even at zero gradient (its moments decay, its weight moves by
m / sqrt(v)), so padding must not gather any row: before the fix, ``gather`` turned -1 into row 0, and
label 0's row was stepped whenever a padded shortlist was trained, whether label 0 was in it or not.

The expected results are a dense reference of one step, written out in numpy: every score ``W_l . e + b_l``
of the shortlist's real entries, the squared hinge of :func:`xmtc.neural.losses.shortlist_loss`, its
gradient summed into a dense (K, h) array, and SparseAdam's rule on the rows the shortlists name. The
inputs are multiples of 1/4, the betas 1/2 and the learning rate 1/2, so every intermediate is exact or
rounded once, and the head must agree with the reference bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")

from xmtc.neural.heads import LazyAdam, RowSparseHead, merge_row_grads  # noqa: E402
from xmtc.neural.losses import shortlist_loss  # noqa: E402
from xmtc.neural.shortlist import build_shortlist, children_csr  # noqa: E402

K, H = 8, 3
PARENT = np.array([0, 0, 1, 1, 2, 2, 3, 3])          # 8 labels under 4 parents
LR, BETAS, EPS = 0.5, (0.5, 0.5), 0.25


def _quarters(rng, shape):
    return (rng.integers(-4, 5, size=shape) / 4).astype(np.float32)


def _start(seed=0):
    rng = np.random.default_rng(seed)
    return _quarters(rng, (K, H)), _quarters(rng, K), _quarters(rng, (2, H))


def _shortlist(prev_topk, positives):
    """ids / targets / weights of ``build_shortlist`` for 2 texts with one positive label each."""
    mass = sp.csr_matrix((np.ones(2, np.float32), ([0, 1], positives)), shape=(2, K))
    return build_shortlist(np.asarray(prev_topk), mass, children_csr(PARENT, 4))


class Dense:
    """The reference: W, b and the Adam moments as dense numpy arrays; a step touches the shortlists' rows."""

    def __init__(self, W, b):
        self.W, self.b = W.copy(), b.copy()
        self.mw, self.vw = np.zeros_like(W), np.zeros_like(W)
        self.mb, self.vb = np.zeros_like(b), np.zeros_like(b)
        self.t = 0

    def gradient(self, emb, ids, targets, weights):
        GW, GB = np.zeros_like(self.W), np.zeros_like(self.b)
        B, S = ids.shape
        loss = np.float32(0.0)
        for i in range(B):
            for j in range(S):
                lab = ids[i, j]
                if lab < 0:                                    # padding: no score, no loss, no gradient
                    continue
                s = self.W[lab] @ emb[i] + self.b[lab]
                y, w = targets[i, j], weights[i, j]
                margin = max(np.float32(0.0), np.float32(1.0) - y * s)
                loss += margin * margin * w / B
                d = np.float32(-2.0) * margin * y * w / B      # d loss / d s
                GW[lab] += d * emb[i]
                GB[lab] += d
        return loss, GW, GB

    def step(self, emb, ids, targets, weights):
        loss, GW, GB = self.gradient(emb, ids, targets, weights)
        rows = np.unique(ids[ids >= 0])
        self.t += 1
        b1, b2 = BETAS
        c1, c2 = np.float32(1 - b1 ** self.t), np.float32(1 - b2 ** self.t)
        for P, M, V, G in ((self.W, self.mw, self.vw, GW), (self.b, self.mb, self.vb, GB)):
            g = G[rows]
            M[rows] = np.float32(b1) * M[rows] + np.float32(1 - b1) * g
            V[rows] = np.float32(b2) * V[rows] + np.float32(1 - b2) * g * g
            P[rows] = P[rows] - np.float32(LR) * ((M[rows] / c1) / (np.sqrt(V[rows] / c2) + np.float32(EPS)))
        return loss, rows


def _head_step(head, opt, emb, ids, targets, weights):
    hb = head.gather(torch.from_numpy(ids))
    loss = shortlist_loss(hb.score(torch.from_numpy(emb)), torch.from_numpy(targets), torch.from_numpy(weights))
    loss.backward()
    opt.step(*merge_row_grads([hb.grads()]))
    return float(loss.detach()), hb


def _assert_same(head, opt, ref):
    for got, want in ((head.weight, ref.W), (head.bias, ref.b), (opt.m_w, ref.mw), (opt.v_w, ref.vw),
                      (opt.m_b, ref.mb), (opt.v_b, ref.vb)):
        np.testing.assert_array_equal(got.numpy(), want)


def test_a_padding_free_step_equals_the_dense_reference_bit_for_bit():
    W, b, emb = _start()
    ids, targets, weights = _shortlist([[0, 1], [0, 2]], [3, 5])
    assert (ids >= 0).all() and ids.tolist() == [[0, 1, 2, 3], [0, 1, 4, 5]]
    head, ref = RowSparseHead(W.copy(), b.copy()), Dense(W, b)
    opt = LazyAdam(head, lr=LR, betas=BETAS, eps=EPS)
    loss, hb = _head_step(head, opt, emb, ids, targets, weights)
    want_loss, rows = ref.step(emb, ids, targets, weights)
    assert hb.rows.tolist() == rows.tolist() == [0, 1, 2, 3, 4, 5]
    assert loss == want_loss
    _assert_same(head, opt, ref)
    assert (head.weight[6:] == torch.from_numpy(W[6:])).all()          # rows 6, 7: not in any shortlist
    assert (head.weight[:6] != torch.from_numpy(W[:6])).any(1).all()   # the shortlisted rows all moved


def test_a_padded_step_leaves_row_0_its_bias_and_its_adam_moments_alone():
    """Step 1 trains label 0 (so its moments are not zero); step 2's shortlists are -1 padded and do not
    name label 0: row 0's weight, bias and moments must stay bit-identical, and the rest equal the
    reference."""
    W, b, emb = _start(1)
    head, ref = RowSparseHead(W.copy(), b.copy()), Dense(W, b)
    opt = LazyAdam(head, lr=LR, betas=BETAS, eps=EPS)
    ids, targets, weights = _shortlist([[0, 1], [0, 2]], [3, 5])
    _head_step(head, opt, emb, ids, targets, weights)
    ref.step(emb, ids, targets, weights)
    saved = [t[0].clone() for t in (head.weight, head.bias, opt.m_w, opt.v_w, opt.m_b, opt.v_b)]
    assert opt.m_w[0].abs().sum() > 0 and opt.v_b[0] > 0

    ids, targets, weights = _shortlist([[1, 2], [3, -1]], [3, 7])
    assert ids.tolist() == [[2, 3, 4, 5], [6, 7, -1, -1]]              # padded, and label 0 is not there
    assert weights[1, 2:].tolist() == [0, 0] and targets[1, 2:].tolist() == [0, 0]
    loss, hb = _head_step(head, opt, emb, ids, targets, weights)
    want_loss, rows = ref.step(emb, ids, targets, weights)
    assert hb.rows.tolist() == rows.tolist() == [2, 3, 4, 5, 6, 7]     # padding gathers no row
    assert loss == want_loss
    after = [t[0] for t in (head.weight, head.bias, opt.m_w, opt.v_w, opt.m_b, opt.v_b)]
    for a, s in zip(after, saved):
        assert torch.equal(a, s)
    _assert_same(head, opt, ref)


@pytest.mark.parametrize("path", ["score", "weights"])
def test_padded_positions_add_no_score_or_gradient_to_any_row(path):
    """Whatever an (unmasked) loss does with them, padded positions score 0 and have no gradient path to a
    row or to the text: each row's gradient is the one its real entries give. ``score`` is the path of
    CascadeXML / ELIAS / XR-Transformer, ``weights`` / ``biases`` the one of LightXML's bias-free logits."""
    W, b, emb = _start(2)
    head, ref = RowSparseHead(W.copy(), b.copy()), Dense(W, b)
    ids = np.array([[2, 5, -1], [-1, 5, -1]])
    pad = torch.from_numpy(ids < 0)
    e = torch.from_numpy(emb).requires_grad_(True)
    hb = head.gather(torch.from_numpy(ids))
    if path == "score":
        scores = hb.score(e)
    else:
        w, bias = hb.weights(), hb.biases()
        assert tuple(w.shape) == (2, 3, H) and (w[pad] == 0).all() and (bias[pad] == 0).all()
        scores = torch.einsum("bsh,bh->bs", w, e) + bias
    assert scores[pad].tolist() == [0, 0, 0]
    # every position, padding included, as a squared-hinge term with target 1 and weight 1
    (((1.0 - scores).clamp_min(0) ** 2).sum() / 2).backward()
    rows, gw, gb = hb.grads()
    _, GW, GB = ref.gradient(emb, ids, np.ones(ids.shape, np.float32), np.ones(ids.shape, np.float32))
    assert rows.tolist() == [2, 5]
    np.testing.assert_array_equal(gw.numpy(), GW[[2, 5]])
    np.testing.assert_array_equal(gb.numpy(), GB[[2, 5]])
    want_e = np.zeros_like(emb)
    for i, j in zip(*np.nonzero(ids >= 0)):
        s = W[ids[i, j]] @ emb[i] + b[ids[i, j]]
        want_e[i] += np.float32(-2.0) * max(np.float32(0.0), 1 - s) / 2 * W[ids[i, j]]
    np.testing.assert_array_equal(e.grad.numpy(), want_e)


def test_an_all_padding_shortlist_gathers_no_row_and_scores_zero():
    W, b, emb = _start(3)
    head = RowSparseHead(W.copy(), b.copy())
    opt = LazyAdam(head, lr=LR, betas=BETAS, eps=EPS)
    hb = head.gather(torch.full((2, 3), -1))
    assert hb.rows.numel() == 0 and tuple(hb.w.shape) == (0, H)
    e = torch.from_numpy(emb).requires_grad_(True)
    scores = hb.score(e)
    assert scores.shape == (2, 3) and (scores == 0).all()
    (scores.sum() + e.sum()).backward()
    opt.step(*merge_row_grads([hb.grads()]))
    np.testing.assert_array_equal(head.weight.numpy(), W)
    assert opt.t == 1                                     # the step still counts (bias correction, DDP)


def test_lightxml_a_padded_candidate_list_without_label_0_does_not_gather_row_0():
    """LightXML's candidates are the top clusters' members, -1 padded for the smaller clusters: the label
    rows of its step are the real candidates, and padded candidates add nothing to the loss."""
    pytest.importorskip("transformers")
    from xmtc.methods.lightxml.network import LightXMLNetwork

    col = np.array([0, 1, 1, 2, 2, 2])                    # cluster 0 = {0}, 1 = {1, 2}, 2 = {3, 4, 5}
    net = LightXMLNetwork(col, hidden_size=4, n_layers=1, hidden_dim=3, topk=2, dropout=0.0, seed=1)
    rep = torch.from_numpy(np.random.default_rng(0).normal(size=(2, 4)).astype(np.float32))
    Y = sp.csr_matrix((np.ones(4, np.float32), ([0, 0, 1, 1], [1, 3, 2, 4])), shape=(2, 6))
    out = net.training_loss(rep, Y)                       # true clusters 1 and 2 come first (top 2)
    cand = np.asarray(out.candidates)
    assert (cand < 0).any() and not (cand == 0).any()
    (name, hb), = out.rows
    assert name == "labels" and hb.rows.tolist() == [1, 2, 3, 4, 5]
    out.loss.backward()
    U = net.sparse_heads["labels"].weight.numpy().astype(np.float64)
    z = (rep @ net.bottleneck.weight.t() + net.bottleneck.bias).detach().numpy().astype(np.float64)
    s = np.einsum("bsd,bd->bs", U[np.maximum(cand, 0)], z)
    t = np.take_along_axis(Y.toarray(), np.maximum(cand, 0), 1)
    per = np.maximum(s, 0) - s * t + np.log1p(np.exp(-np.abs(s)))
    assert out.parts["labels"] == pytest.approx(per[cand >= 0].mean(), rel=1e-5)
