"""ALC: an auxiliary pair-classification objective + the threshold-consistent margin (TCM), for any end-to-end method.

Why: a user who automates indexing accepts a model's top suggestion only above one score threshold. How many
documents that threshold lets through at a fixed precision (``coverage@P90``, :mod:`xmtc.metrics`) depends on
whether scores of different texts and labels live on one scale. ALC (Almagro, Ortego, Jiménez 2025) adds two
objectives to a method's own loss that pull text and label embeddings into such a shared, thresholdable scale.

**What we built.** The paper's full text was not reachable; this module implements one reading of its
abstract, written out here so that it can be checked and changed:

``L = L_base + L_xe + L_tcm`` with ``L_xe = beta1 * L_ql + beta2 * L_qb``.

* ``h_q`` (B, d) is the method's text embedding, ``h_l`` (C, d) the embeddings of the batch's C *candidate
  labels* (the method's label-head rows of the labels the batch scores: for LightXML the union over the
  batch of its shortlists, which contains every positive), and ``positive_mask`` (B, C) marks the pairs
  (text i, candidate c) where c is a label of i.
* **Pair head** (:class:`PairHead`): the pair representation ``Gamma(h_q, h_l) = [h_q, h_l, |h_q - h_l|,
  h_q * h_l]`` (4d; the sentence-pair classifier features of InferSent / Sentence-BERT) is scored by a small
  head -- one linear layer by default, i.e. a two-class (match / no match) softmax written as its logit
  difference -- trained with cross-entropy: a positive pair's target is "match", a negative pair's "no
  match". The head exists only for training (predictions keep the method's own scores); its effect is
  through the gradients it sends into ``h_q`` and ``h_l``.
* **Hardest in-batch negative** (:func:`hardest_negative`): for text i, among a candidate set N_i of
  labels, the label with the *highest pair-head score* ``s(h_q_i, h_l_c)`` (ties: the lowest candidate
  index). The choice is made without gradient (an argmax has none); the chosen pair's score carries it.
  A text whose N_i is empty, or that has no positive among the candidates, contributes nothing.
* ``L_ql`` (:func:`ql_loss`): N_i = the batch's candidate labels that are not positives of i. For every
  positive pair (i, p): ``CE(s_ip, match) + CE(s_i n_i, no match)`` = ``softplus(-s_ip) +
  softplus(s_i n_i)``, averaged over the positive pairs that have a negative.
* ``L_qb`` (:func:`qb_loss`): the same with the *batch-aware* candidate set N_i = the labels that are
  positives of some other text j != i of the batch and not positives of i (the other texts' positives).
* ``L_tcm`` (:func:`tcm_loss`, Zhang et al., ICLR'24, eq. 3 of "Threshold-Consistent Margin Loss for
  Open-World Deep Metric Learning"): on the cosine ``S = cos(h_q_i, h_l_c)`` of every (text, candidate)
  pair, ``lambda+ * mean_{positive pairs with S <= m+} (m+ - S) + lambda- * mean_{negative pairs with
  S >= m-} (S - m-)``; each mean is over the violating pairs only and is 0 when none violates (the
  paper's normalisation). Negative pairs here are all (text, candidate) pairs that are not positives.

Weights: ``beta1 = beta2 = alc_weight`` and ``lambda+ = lambda- = tcm_weight`` in the estimator shell
(:mod:`xmtc.models.end_to_end`); ``--tcm-margins m+,m-`` (default 0.9,0.5, the defaults of the TCM loss in
pytorch-metric-learning; the paper tunes them per data set). The defaults 1 / 1 / 0.9,0.5 are the plain
reading (``L = L_base + L_ql + L_qb + L_tcm``), not weights tuned on our data.

Not built: the issue allows the label text's embedding as ``h_l`` where label texts exist; here ``h_l`` is
always the method's own label-head row (the hook :meth:`xmtc.neural.e2e.Network.alc_vectors`), so ALC
shapes the very vectors the method scores with.

Cost per step: the hardest-negative search scores all B x C pairs with the head, without gradient, in
chunks of bounded memory; the gradient-carrying pair scores are only those of the positive pairs and their
chosen negatives (~ 2 x positives); TCM is one (B, d) x (d, C) product. C is the batch's shortlist union,
never the number of labels L.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "ALC",
    "AlcOut",
    "PairHead",
    "alc_loss",
    "batch_aware_candidates",
    "batch_union",
    "hardest_negative",
    "pair_features",
    "pair_scores",
    "qb_loss",
    "ql_loss",
    "tcm_loss",
    "with_alc",
]

# Floats of one chunk of the gradient-free hardest-negative search: ~2 MB, cache-sized (a (32, 1024, 300)
# chunk ran 7x slower than (32, 64, 300) chunks on the 2-core machine).
_CHUNK_FLOATS = 1 << 19


def pair_features(h_q, h_l):
    """``Gamma(h_q, h_l) = [h_q, h_l, |h_q - h_l|, h_q * h_l]`` on the last axis (inputs broadcast)."""
    h_q, h_l = torch.broadcast_tensors(h_q, h_l)
    return torch.cat([h_q, h_l, (h_q - h_l).abs(), h_q * h_l], dim=-1)


class PairHead(nn.Module):
    """The small pair classifier: ``Gamma`` (4d) -> one logit (match vs no match).

    ``hidden = 0`` (default): one linear layer (Sentence-BERT's classification head reduced to two
    classes). ``hidden > 0``: Linear(4d, hidden) -> tanh -> Linear(hidden, 1).
    """

    def __init__(self, dim: int, hidden: int = 0, seed: int | None = None):
        super().__init__()
        self.dim, self.hidden = int(dim), int(hidden)
        gen_state = None
        if seed is not None:
            gen_state = torch.random.get_rng_state()
            torch.manual_seed(seed)
        if self.hidden > 0:
            self.net = nn.Sequential(nn.Linear(4 * self.dim, self.hidden), nn.Tanh(), nn.Linear(self.hidden, 1))
        else:
            self.net = nn.Linear(4 * self.dim, 1)
        if gen_state is not None:
            torch.random.set_rng_state(gen_state)

    def forward(self, h_q, h_l):
        """Logits of the pairs ``(h_q[..., :], h_l[..., :])`` (broadcast), shape = the broadcast batch shape."""
        return self.net(pair_features(h_q, h_l)).squeeze(-1)


def pair_scores(head: PairHead, h_q, h_l):
    """All B x C pair logits, without gradient, in chunks of C of about ``_CHUNK_FLOATS`` floats.

    For the linear head the four blocks of ``Gamma`` are scored apart: ``w1.h_q + w2.h_l + h_q.(w4*h_l)``
    are matrix products and only ``w3.|h_q - h_l|`` needs the (B, chunk, d) difference; any other head is
    evaluated on the materialised pair features (4x the memory per chunk).
    """
    B, C = h_q.shape[0], h_l.shape[0]
    out = h_q.new_empty((B, C), dtype=torch.float32)
    with torch.no_grad():
        q, lab = h_q.float(), h_l.float()
        if isinstance(head.net, nn.Linear):
            d = head.dim
            w = head.net.weight[0].float()
            w1, w2, w3, w4 = w[:d], w[d:2 * d], w[2 * d:3 * d], w[3 * d:]
            base = (q @ w1)[:, None] + (lab @ w2)[None, :] + q @ (lab * w4).t() + head.net.bias.float()
            step = max(1, _CHUNK_FLOATS // max(B * d, 1))
            for c0 in range(0, C, step):
                hl = lab[c0:c0 + step]
                out[:, c0:c0 + hl.shape[0]] = base[:, c0:c0 + hl.shape[0]] + (q[:, None, :] - hl[None]).abs() @ w3
        else:
            step = max(1, _CHUNK_FLOATS // max(4 * B * head.dim, 1))
            for c0 in range(0, C, step):
                hl = lab[c0:c0 + step]
                out[:, c0:c0 + hl.shape[0]] = head(q[:, None, :], hl[None, :, :]).float()
    return out


def hardest_negative(scores, candidates):
    """Per text, the candidate with the highest score among ``candidates`` (B, C bool).

    Returns ``(idx (B,) long, has (B,) bool)``; ``idx`` is 0 where ``has`` is False. Ties go to the lowest
    index, broken explicitly (which index ``torch.max`` returns among equal values is not documented).
    """
    masked = scores.masked_fill(~candidates, float("-inf"))
    best = masked.max(dim=1, keepdim=True).values
    hit = (masked == best) & candidates
    C = scores.shape[1]
    pos = torch.arange(C, device=scores.device).expand_as(hit)
    idx = torch.where(hit, pos, torch.full_like(pos, C)).min(dim=1).values
    has = candidates.any(dim=1)
    return torch.where(has, idx, torch.zeros_like(idx)), has


def batch_aware_candidates(positive_mask):
    """(B, C) True where candidate c is a positive of some other text j != i and not a positive of i."""
    pos = positive_mask.bool()
    counts = pos.sum(dim=0, keepdim=True)                     # (1, C) texts having c
    return ((counts - pos.long()) > 0) & ~pos


def _contrast(head, h_q, h_l, positive_mask, candidates, scores=None):
    """Mean over positive pairs (i, p) whose text has a negative of softplus(-s_ip) + softplus(s_i n_i)."""
    pos = positive_mask.bool()
    if scores is None:
        scores = pair_scores(head, h_q, h_l)
    neg, has = hardest_negative(scores, candidates)
    ti, ci = torch.nonzero(pos & has[:, None], as_tuple=True)
    if ti.numel() == 0:
        return (h_q.sum() + h_l.sum()) * 0.0 + sum(p.sum() for p in head.parameters()) * 0.0
    s_pos = head(h_q[ti], h_l[ci])
    s_neg = head(h_q[ti], h_l[neg[ti]])
    return (F.softplus(-s_pos) + F.softplus(s_neg)).mean()


def ql_loss(head: PairHead, h_q, h_l, positive_mask, candidate_mask=None, scores=None):
    """``L_ql``: each positive pair against the text's hardest negative among the batch's candidate labels.

    ``candidate_mask`` (B, C), optional: the (text, candidate) pairs that exist (default: every candidate
    is a candidate of every text -- the batch's union).
    """
    cand = ~positive_mask.bool()
    if candidate_mask is not None:
        cand = cand & candidate_mask.bool()
    return _contrast(head, h_q, h_l, positive_mask, cand, scores)


def qb_loss(head: PairHead, h_q, h_l, positive_mask, scores=None):
    """``L_qb``: each positive pair against the text's hardest negative among the other texts' positives."""
    return _contrast(head, h_q, h_l, positive_mask, batch_aware_candidates(positive_mask), scores)


def tcm_loss(h_q, h_l, positive_mask, m_pos: float = 0.9, m_neg: float = 0.5,
             lambda_pos: float = 1.0, lambda_neg: float = 1.0, candidate_mask=None):
    """Threshold-consistent margin loss (Zhang et al., ICLR'24, eq. 3) on the cosine of every (text, label) pair.

    ``lambda_pos * sum_{pos, S<=m+} (m+ - S) / #{pos, S<=m+} + lambda_neg * sum_{neg, S>=m-} (S - m-) /
    #{neg, S>=m-}``; an empty violating set contributes 0.
    """
    S = F.normalize(h_q.float(), dim=-1) @ F.normalize(h_l.float(), dim=-1).t()     # (B, C)
    pos = positive_mask.bool()
    neg = ~pos
    if candidate_mask is not None:
        pos = pos & candidate_mask.bool()
        neg = neg & candidate_mask.bool()
    vp = pos & (S <= m_pos)
    vn = neg & (S >= m_neg)
    lp = ((m_pos - S) * vp).sum() / vp.sum().clamp_min(1)
    ln = ((S - m_neg) * vn).sum() / vn.sum().clamp_min(1)
    return lambda_pos * lp + lambda_neg * ln


@dataclass
class AlcOut:
    loss: object                                   # scalar tensor: beta1 L_ql + beta2 L_qb + L_tcm
    parts: dict = field(default_factory=dict)      # floats: alc_ql, alc_qb, tcm


def alc_loss(h_q, label_vectors, positive_mask, head: PairHead, beta1: float = 1.0, beta2: float = 1.0,
             tcm_weight: float = 1.0, margins: tuple[float, float] = (0.9, 0.5), candidate_mask=None) -> AlcOut:
    """The auxiliary term ``beta1 L_ql + beta2 L_qb + tcm_weight L_tcm`` (module docstring) for one batch.

    ``h_q`` (B, d) text vectors, ``label_vectors`` (C, d) the batch's candidate labels' vectors (gradients
    flow into both), ``positive_mask`` (B, C) bool. The pair-head scores for the negative search are
    computed once and shared by L_ql and L_qb.
    """
    if h_q.ndim != 2 or label_vectors.ndim != 2 or h_q.shape[1] != label_vectors.shape[1]:
        raise ValueError(f"ALC needs h_q (B, d) and label vectors (C, d) of one d; got {tuple(h_q.shape)}"
                         f" and {tuple(label_vectors.shape)}")
    if tuple(positive_mask.shape) != (h_q.shape[0], label_vectors.shape[0]):
        raise ValueError(f"positive_mask {tuple(positive_mask.shape)} is not (B, C) ="
                         f" {(h_q.shape[0], label_vectors.shape[0])}")
    h_q = h_q.float()
    h_l = label_vectors.float()
    total = h_q.new_zeros(())
    parts = {}
    scores = pair_scores(head, h_q, h_l) if (beta1 or beta2) else None
    if beta1:
        l1 = ql_loss(head, h_q, h_l, positive_mask, candidate_mask, scores)
        total = total + beta1 * l1
        parts["alc_ql"] = float(l1.detach())
    if beta2:
        l2 = qb_loss(head, h_q, h_l, positive_mask, scores)
        total = total + beta2 * l2
        parts["alc_qb"] = float(l2.detach())
    if tcm_weight:
        lt = tcm_loss(h_q, h_l, positive_mask, margins[0], margins[1], 1.0, 1.0, candidate_mask)
        total = total + tcm_weight * lt
        parts["tcm"] = float(lt.detach())
    return AlcOut(loss=total, parts=parts)


class ALC(nn.Module):
    """The pair head and the weights of the auxiliary objective; a method's Network holds one when ``--alc``."""

    def __init__(self, dim: int, beta1: float = 1.0, beta2: float = 1.0, tcm_weight: float = 1.0,
                 margins: tuple[float, float] = (0.9, 0.5), hidden: int = 0, seed: int | None = None):
        super().__init__()
        self.head = PairHead(dim, hidden, seed=seed)
        self.beta1, self.beta2, self.tcm_weight = float(beta1), float(beta2), float(tcm_weight)
        self.margins = (float(margins[0]), float(margins[1]))

    def forward(self, h_q, label_vectors, positive_mask, candidate_mask=None) -> AlcOut:
        return alc_loss(h_q, label_vectors, positive_mask, self.head, self.beta1, self.beta2, self.tcm_weight,
                        self.margins, candidate_mask)


# -- wiring into the end-to-end trainer ------------------------------------------------------------
def batch_union(candidates, Y):
    """The batch's candidate labels as one set: ``(rows (C,) sorted label ids, first (C,) flat position
    in candidates of each row's first occurrence, positive_mask (B, C) bool from ``Y`` (scipy, B x L))``."""
    import numpy as np

    ids = torch.as_tensor(np.asarray(candidates) if not isinstance(candidates, torch.Tensor) else candidates)
    flat = ids.reshape(-1).long()
    where = torch.nonzero(flat >= 0, as_tuple=True)[0]
    rows, inv = torch.unique(flat[where], return_inverse=True)
    first = torch.full((rows.numel(),), flat.numel(), dtype=torch.long).scatter_reduce(
        0, inv, where, reduce="amin")
    pos = torch.from_numpy(np.asarray(Y[:, rows.numpy()].todense()) > 0)
    return rows, first, pos


def with_alc(network, rep, Y, out):
    """``out`` (a :class:`xmtc.neural.e2e.LossOut`) plus the ALC term of ``network.alc`` on this batch.

    The candidate labels are the union of ``out.candidates`` (what the method scored for the batch); their
    vectors come from the method's hook ``network.alc_vectors`` (for LightXML the label-embedding rows,
    gathered through its row-sparse head so only those rows receive gradient).
    """
    from dataclasses import replace

    from ..errors import ConfigError

    if out.candidates is None:
        raise ConfigError(f"{type(network).__name__} does not report its candidate labels; ALC needs them")
    ids = torch.as_tensor(out.candidates).long()
    h_q, h_l, rows = network.alc_vectors(rep, ids)
    _label_rows, first, pos = batch_union(ids.cpu(), Y)
    vectors = h_l.reshape(-1, h_l.shape[-1])[first.to(h_l.device)]
    a = network.alc(h_q, vectors, pos.to(h_q.device))
    return replace(out, loss=out.loss + a.loss, rows=list(out.rows) + list(rows), parts={**out.parts, **a.parts})
