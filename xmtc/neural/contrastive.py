"""Contrastive losses of a text against a pool of label vectors: DEXML's DecoupledSoftmax and InfoNCE.

Notation: a batch of B texts with unit vectors ``q_i``, a pool of P labels with unit vectors ``v_l`` (the
batch's positive labels plus mined hard negatives, :mod:`xmtc.neural.negatives`), scores
``s_il = <q_i, v_l> / tau`` (cosine over a temperature, DEXML's ``tau = 0.05``), ``P_i`` the positives of
text i inside the pool.

**InfoNCE** (``"infonce"``; DEXML's ``softmax`` criterion, the loss of DPR / NGAME's in-batch stage
extended to several positives): every positive competes with *every* pool label, the text's other
positives included::

    loss_i = - 1/|P_i| * sum_{p in P_i} [ s_ip - log sum_{l in pool} exp(s_il) ]

With several positives this is self-contradictory: the softmax of text i sums to one over the pool, so
raising one positive lowers the others, and the optimum of ``sum_p log softmax_p`` puts equal mass
``1 / |P_i|`` on each -- the positives are pushed down against each other.

**DecoupledSoftmax** (``"decoupled"``; Gupta et al., "Dual-encoders for Extreme Multi-label
Classification", ICLR'24, eq. 4, and ``losses.py`` of nilesh2797/DEXML): each positive gets a softmax of
its own whose denominator holds that positive and the pool's *negatives* only -- the text's other
positives are excluded::

    loss_i = - 1/|P_i| * sum_{p in P_i} [ s_ip - log( exp(s_ip) + sum_{l in pool, l not in P_i} exp(s_il) ) ]

so positives no longer compete and each is pushed above the negatives alone. As in DEXML the loss is
averaged over a text's positives and summed over texts divided by B; texts without a positive in the
pool add 0. (DEXML's code masks the excluded entries with a score of -100 after the division by tau;
here they are masked exactly, with a finite -1e4 so that an all-masked row has a zero gradient, not NaN.)
"""

from __future__ import annotations

from ..errors import ConfigError

LOSSES = ("decoupled", "infonce")
_MASKED = -1e4


def contrastive_loss(scores, positive, loss: str = "decoupled"):
    """Mean loss over the batch of ``scores`` (B, P; already divided by the temperature, float32) with
    ``positive`` (B, P) bool marking each text's positives in the pool; see the module docstring."""
    import torch

    positive = positive.to(torch.bool)
    if loss == "decoupled":
        negatives = scores.masked_fill(positive, _MASKED)
        log_neg = torch.logsumexp(negatives, dim=1, keepdim=True)          # (B, 1)
        log_denom = torch.logaddexp(log_neg, scores)                        # (B, P): per positive
    elif loss == "infonce":
        log_denom = torch.logsumexp(scores, dim=1, keepdim=True).expand_as(scores)
    else:
        raise ConfigError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}")
    per = (log_denom - scores).masked_fill(~positive, 0.0)
    n_pos = positive.sum(dim=1).clamp_min(1).to(scores.dtype)
    return (per.sum(dim=1) / n_pos).sum() / max(scores.shape[0], 1)
