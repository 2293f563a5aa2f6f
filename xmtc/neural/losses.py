"""Losses of a level head on a batch's shortlist, importance-weighted (XR-Transformer eq. 5 with R̂ of eq. 6).

``per-entry loss * weight``, summed over the shortlist and averaged over the batch's texts; padding
entries carry weight 0. ``squared-hinge`` is ``max(0, 1 - y s)^2`` with y in {-1, +1} (the loss of the
papers and of PECOS's default matcher); ``bce`` is the logistic loss on the same targets.
"""

from __future__ import annotations

from ..errors import ConfigError

LOSSES = ("squared-hinge", "bce")


def shortlist_loss(scores, targets, weights, loss: str = "squared-hinge"):
    """Weighted loss of ``scores`` (B, S) against ``targets`` (B, S; +-1, 0 = padding) with ``weights`` (B, S)."""
    import torch

    if loss == "squared-hinge":
        per = torch.clamp(1.0 - targets * scores, min=0.0) ** 2
    elif loss == "bce":
        per = torch.nn.functional.binary_cross_entropy_with_logits(scores, (targets > 0).to(scores.dtype),
                                                                   reduction="none")
    else:
        raise ConfigError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}")
    return (per * weights).sum() / weights.shape[0]
