"""ALC: auxiliary objectives on the score users threshold, for LightXML and CascadeXML.

Why: a user who automates indexing accepts a model's top suggestion only above one score threshold. How many
documents that threshold lets through at a fixed precision (``coverage@P90``, :mod:`xmtc.metrics`) depends on
whether the scores of different texts and labels live on one scale: a confident wrong top-1 anywhere costs
the threshold its precision everywhere. ALC (Almagro, Ortego, Jiménez 2025) adds auxiliary losses on the
hardest in-batch negatives and a threshold-consistent margin to a method's own loss. The paper's full text
was not reachable; this module is one reading of its abstract, written out so that it can be checked.

**The score.** For a batch of B texts, C is the batch's candidate labels (the union over the batch of what
the method scored: its shortlists, which hold every positive) and ``p_ic`` the method's *final* score of
label c for text i -- the number a user compares with a threshold, bias included:

* LightXML: ``p = sigma(u_c . z_i) * sigma(g_i,cluster(c))`` (discriminator x generator);
* CascadeXML, ``score=parent``: ``p = sigma(w_c . phi_D,i + b_c) * sigma(w_a . phi_D-1,i + b_a)`` with
  ``a`` the parent of c (``path``: the product over every level; ``label``: the first factor alone).

The networks compute ``log p`` (:meth:`xmtc.neural.network.Network.alc_scores`, a sum of log-sigmoids) from
the very tensors their base loss used (LightXML's ``z`` and ``g``, CascadeXML's per-level ``phi``) and the
label heads' rows of C.

**The terms.** ``A = beta * (L_ql + L_qb) + lambda * L_tcm`` with

* hardest negatives by the method's own score (without gradient; ties to the lowest candidate index):
  ``n_i = argmax p_ic`` over ``c`` in text i's own shortlist that is not a positive (for ``L_ql``: the
  label the method would wrongly rank first), and over the other texts' positives that are not positives
  of i (for ``L_qb``, the batch-aware negatives);
* ``L_ql = mean_{(i,p): p positive of i, n_i exists} [-log p_ip - log(1 - p_i,n_i)]``: the pair
  cross-entropy of "match / no match" with the method's final score as the match probability; ``L_qb``
  the same with the batch-aware ``n_i``;
* ``L_tcm`` (Zhang et al., ICLR'24, eq. 3) on ``p`` over all B x C pairs:
  ``mean_{pos, p <= m+} (m+ - p) + mean_{neg, p >= m-} (p - m-)``, each mean over the violating pairs only
  (0 when none violates); with ``m+, m- = 0.9, 0.5`` a positive should clear 0.9 and no negative reach 0.5,
  on the very scale the threshold is set on.

A separate pair head (a classifier on ``[h_q, h_l, |h_q - h_l|, h_q * h_l]``) is not used: the method's own
final score already is a match probability for every (text, label) pair, and a second classifier would
shape the embeddings towards a score nobody thresholds (and, untrained, would pick the negatives at random).

**The scale cannot swamp the base loss.** With ``L`` the method's loss on the batch:

    loss = L + T,   T = w(t) * rho * sg(L) / sg(A) * A,   w(t) = min(1, t / N)

* relative weight: ``T``'s value is ``w(t) * rho * L`` whatever A's size (``sg`` = no gradient);
  ``rho`` = ``alc_scale``; A's gradient direction is kept, its size follows the base loss;
* warm-up: ``w`` ramps from 0 over the first ``N`` training batches (``alc_warmup`` epochs in the
  estimator), so the method's own loss shapes the heads first;
* per-loss clipping: where the auxiliary branch joins the base graph -- the text side (``z`` and ``g``, or
  the ``phi``) and each head's rows -- the norm of T's gradient is capped at ``kappa`` (``alc_clip``) times
  the base loss's gradient norm on the same group, ``grad_T <- grad_T * min(1, kappa |grad_L| / |grad_T|)``.
  Both norms come from two backward passes over the heads only (the encoder is not traversed); the factors
  are applied by a gradient-scaling identity on T's inputs, so the trainer's one backward sends the clipped
  gradient on through the encoder. The global ``max_grad_norm`` then clips a sum whose share from T is at
  most ``kappa / (1 + kappa)`` per group, and the row-wise lazy Adam follows the base loss on the label rows.
  ``kappa = 0`` turns the clip off.

Defaults (estimator): ``rho`` 0.3, ``N`` one epoch, ``kappa`` 0.5, ``beta = lambda = 1``, margins 0.9, 0.5;
set to keep the auxiliary gradient below the base loss's on every group, not tuned on test data.

**What it only sees: the training pairs.** Every term is computed on training batches, so it can only correct
the confident wrong top-1s that occur there. On a network that fits its training texts it has little to do:
CascadeXML (``score=parent``, yso-finna-en-2k-20k, 3 epochs) already lets a P90 threshold accept 58% of its
training texts (0.04% of the test texts), TCM's negative half finds a negative above 0.5 in 0.15-0.3 of a
batch of 32, its positive half's gradient on the logits is ~12x smaller than the pair cross-entropies', and
the clip binds on every group (factors 0.21-0.38), so there ``rho`` does not change the auxiliary gradient
(``benchmarks/alc.py --anatomy``; benchmarks/RESULTS.md). Its coverage@P90 did not move with ALC. At
CascadeXML's defaults, where the linear re-ranker's factor multiplies this score and ``xmtc train`` calibrates
it, ALC lifted coverage@P90 from 1.44 to 1.86 (calibrated) and from 2.26 to 2.92 (raw), P@1 +0.28 / +0.24;
LightXML at its defaults 1.66 -> 2.80 and 1.90 -> 2.56, P@1 +0.10; one run each.

The earlier reading of the abstract (the pair head above; TCM on the cosine of the text vector and the
label row, which is not the thresholded score and ignores the bias; the raw sum ``L + L_ql + L_qb + L_tcm``)
is not kept: its figures are in benchmarks/RESULTS.md, and keeping it selectable would keep a second set of
hooks on every network for a variant measured to cost P@1.

Cost per step: the B x C final scores (one (B, d) x (d, C) product per level read), two head-only backward
passes for the clip norms; C is the batch's shortlist union, never the number of labels.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import nn

__all__ = ["ALC", "Tap", "alc_terms", "batch_aware_candidates", "batch_union", "hardest_negative", "log1mexp",
           "pair_ce", "relative_clip", "tcm_loss", "warmup_weight", "with_alc"]


def log1mexp(x):
    """``log(1 - exp(x))`` for ``x <= 0``, stable at both ends (clamped just below 0)."""
    x = x.clamp_max(-1e-7)
    return torch.where(x > -0.6931, torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def hardest_negative(scores, candidates):
    """Per text, the candidate with the highest score among ``candidates`` (B, C bool).

    Returns ``(idx (B,) long, has (B,) bool)``; ``idx`` is 0 where ``has`` is False. Ties go to the lowest
    index, broken explicitly (which index ``torch.max`` returns among equal values is not documented).
    """
    scores = scores.detach()
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
    counts = pos.sum(dim=0, keepdim=True)
    return ((counts - pos.long()) > 0) & ~pos


def pair_ce(logp, positive_mask, candidates):
    """Mean over positive pairs (i, p) whose text has a negative among ``candidates`` of
    ``-log p_ip - log(1 - p_i,n_i)``, ``n_i`` the candidate of highest ``logp`` (the method's own score)."""
    neg, has = hardest_negative(logp, candidates)
    ti, ci = torch.nonzero(positive_mask.bool() & has[:, None], as_tuple=True)
    if ti.numel() == 0:
        return logp.sum() * 0.0
    return (-logp[ti, ci] - log1mexp(logp[ti, neg[ti]])).mean()


def tcm_loss(p, positive_mask, m_pos: float = 0.9, m_neg: float = 0.5):
    """Threshold-consistent margin (Zhang et al., ICLR'24, eq. 3) on scores ``p`` (B, C) in [0, 1]:
    ``mean_{pos, p<=m+} (m+ - p) + mean_{neg, p>=m-} (p - m-)``; an empty violating set contributes 0."""
    pos = positive_mask.bool()
    vp = pos & (p <= m_pos)
    vn = ~pos & (p >= m_neg)
    lp = ((m_pos - p) * vp).sum() / vp.sum().clamp_min(1)
    ln = ((p - m_neg) * vn).sum() / vn.sum().clamp_min(1)
    return lp + ln


def alc_terms(logp, positive_mask, own_mask, beta: float = 1.0, tcm_weight: float = 1.0,
              margins: tuple[float, float] = (0.9, 0.5)):
    """``A = beta (L_ql + L_qb) + tcm_weight L_tcm`` on log final scores ``logp`` (B, C); ``own_mask`` (B, C)
    marks each text's own shortlist. Returns ``(A, parts)`` (parts: floats ``alc_ql``, ``alc_qb``, ``tcm``)."""
    logp = logp.float()
    pos = positive_mask.bool()
    total, parts = logp.sum() * 0.0, {}
    if beta:
        ql = pair_ce(logp, pos, own_mask.bool() & ~pos)
        qb = pair_ce(logp, pos, batch_aware_candidates(pos))
        total = total + beta * (ql + qb)
        parts.update(alc_ql=float(ql.detach()), alc_qb=float(qb.detach()))
    if tcm_weight:
        tcm = tcm_loss(logp.exp(), pos, margins[0], margins[1])
        total = total + tcm_weight * tcm
        parts["tcm"] = float(tcm.detach())
    return total, parts


def warmup_weight(step: int, warmup_steps: int) -> float:
    """``w(t) = min(1, t / N)`` (1 without warm-up): 0 on the first batch, full from batch N on."""
    return 1.0 if warmup_steps <= 0 else min(1.0, step / warmup_steps)


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; backward multiplies the gradient by ``factors[key]`` (read at backward time)."""

    @staticmethod
    def forward(ctx, x, factors, key):
        ctx.factors, ctx.key = factors, key
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factors.get(ctx.key, 1.0), None, None


class Tap:
    """Where the auxiliary branch reads a tensor of the base graph (or a head's rows), by group: records the
    tensor and returns it through a gradient-scaling identity whose factor :func:`relative_clip` sets."""

    def __init__(self):
        self.inputs: dict[str, list] = {}
        self.factors: dict[str, float] = {}

    def __call__(self, x, group: str):
        self.inputs.setdefault(group, []).append(x)
        return _ScaleGrad.apply(x, self.factors, group)


def _norm(loss, tensors) -> float:
    grads = torch.autograd.grad(loss, tensors, retain_graph=True, allow_unused=True)
    return math.sqrt(sum(float((g.float() ** 2).sum()) for g in grads if g is not None))


def relative_clip(tap: Tap, aux, base, base_rows, kappa: float) -> dict:
    """Set ``tap``'s factors so that ``aux``'s gradient on every group is at most ``kappa`` times ``base``'s.

    A group's reference tensors for ``base`` are the base step's own gathered rows of that head
    (``base_rows``: ``(name, HeadBatch)``) where it has some, else the tapped tensors themselves (shared
    with the base graph). Every norm is taken before any factor is set. Returns ``{group: (|grad aux| /
    |grad base|, factor)}``."""
    norms = {}
    for group, xs in tap.inputs.items():
        refs = [t for name, hb in base_rows if name == group for t in (hb.w, hb.b)] or xs
        norms[group] = (_norm(aux, xs), _norm(base, refs))
    out = {}
    for group, (na, nb) in norms.items():
        ratio = na / nb if nb > 0 else (float("inf") if na > 0 else 0.0)
        factor = 1.0 if na == 0 else min(1.0, kappa * nb / na)
        tap.factors[group] = factor
        out[group] = (ratio, factor)
    return out


class ALC(nn.Module):
    """The auxiliary objective's settings and its batch counter (a buffer, so checkpoints resume the warm-up);
    a method's Network holds one while training with ``alc``. No trained parameters."""

    def __init__(self, scale: float = 0.3, warmup_steps: int = 0, clip: float = 0.5, beta: float = 1.0,
                 tcm_weight: float = 1.0, margins: tuple[float, float] = (0.9, 0.5)):
        super().__init__()
        self.scale, self.warmup_steps, self.clip = float(scale), int(warmup_steps), float(clip)
        self.beta, self.tcm_weight = float(beta), float(tcm_weight)
        self.margins = (float(margins[0]), float(margins[1]))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))


# -- wiring into the end-to-end trainer ------------------------------------------------------------
def batch_union(candidates, Y):
    """The batch's candidate labels as one set: ``(rows (C,) sorted label ids, own (B, C) bool: c is in text
    i's own candidates, positive_mask (B, C) bool from ``Y`` (scipy, B x L))``."""
    import numpy as np

    ids = torch.as_tensor(np.asarray(candidates) if not isinstance(candidates, torch.Tensor) else candidates).long()
    B = ids.shape[0]
    flat = ids.reshape(-1)
    where = torch.nonzero(flat >= 0, as_tuple=True)[0]
    rows, inv = torch.unique(flat[where], return_inverse=True)
    own = torch.zeros((B, rows.numel()), dtype=torch.bool)
    own[where // ids.shape[1], inv] = True
    pos = torch.from_numpy(np.asarray(Y[:, rows.numpy()].todense()) > 0)
    return rows, own, pos


def with_alc(network, rep, Y, out):
    """``out`` (a :class:`xmtc.neural.network.LossOut`) plus ``T`` (module docstring) on this batch.

    ``parts`` gains ``alc_w`` (the warm-up weight), and when T is on: the raw terms, ``alc`` (T's value),
    and per group ``ratio_<group>`` (|grad T| / |grad L| before the clip) and ``clip_<group>`` (the factor)."""
    from ..errors import ConfigError

    alc = network.alc
    if out.candidates is None:
        raise ConfigError(f"{type(network).__name__} does not report its candidate labels; ALC needs them")
    w = warmup_weight(int(alc.steps), alc.warmup_steps)
    with torch.no_grad():
        alc.steps += 1
    if w * alc.scale == 0.0:
        return replace(out, parts={**out.parts, "alc_w": w})
    label_ids, own, pos = batch_union(torch.as_tensor(out.candidates).long().cpu(), Y)
    tap = Tap()
    logp, rows = network.alc_scores(rep, out, label_ids, tap)
    A, parts = alc_terms(logp, pos.to(logp.device), own.to(logp.device), alc.beta, alc.tcm_weight, alc.margins)
    a, base = float(A.detach()), float(out.loss.detach())
    T = A * (w * alc.scale * base / a if a > 1e-12 else 0.0)
    parts.update(alc_w=w, alc_raw=a, alc=float(T.detach()))
    if alc.clip > 0 and a > 1e-12:
        for group, (ratio, factor) in relative_clip(tap, T, out.loss, out.rows, alc.clip).items():
            parts[f"ratio_{group}"], parts[f"clip_{group}"] = ratio, factor
    return replace(out, loss=out.loss + T, rows=list(out.rows) + list(rows), parts={**out.parts, **parts})
