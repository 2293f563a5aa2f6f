"""ELIAS's training objective (Gupta et al., NeurIPS'22): classification BCE plus the shortlist term.

``L = L_classification + lambda * L_shortlist`` (the paper's loss, the reference code's ``ELIASLoss``):

* ``L_classification``: ``BCE(final score, y)`` averaged over the B x K entries of the teacher-forced
  top-K shortlist, the final score being ``path(l) * sigmoid(w_l . phi + b_l)``
  (:mod:`xmtc.methods.elias.network`);
* ``L_shortlist``: ``-log(path score)`` of every positive label that is in the (deduplicated) path
  shortlist, averaged over B x (the batch's largest number of positives). It pulls the positives' paths
  up so that the index (W_C and, in stage 2, the edge logits) learns to retrieve them.

The reference's BCE counts padded entries (score 0, target 0) in its mean; so does this one (same value).
Both terms are computed in float32 outside autocast (bf16 logs lose the small scores); the path term's
log is clamped at ``log 1e-30`` (torch's BCELoss clamps at -100).

Separate from the network (which holds the cluster head, the adjacency, the label classifier and the
search) because the objective is one idea of its own; the network's ``training_loss`` is
:func:`elias_loss`.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from ...neural.network import LossOut


def positives_tensor(Y: sp.csr_matrix, device) -> torch.Tensor:
    """(B, P) label ids of each row's positives, -1 padded (P = the largest row)."""
    Y = sp.csr_matrix(Y)
    counts = np.diff(Y.indptr)
    P = max(1, int(counts.max()) if counts.size else 1)
    out = np.full((Y.shape[0], P), -1, dtype=np.int64)
    pos = np.arange(Y.nnz) - np.repeat(Y.indptr[:-1], counts)
    out[np.repeat(np.arange(Y.shape[0]), counts), pos] = Y.indices
    return torch.from_numpy(out).to(device)


def elias_loss(net, rep, Y) -> LossOut:
    """The loss above of an :class:`~xmtc.methods.elias.network.ELIASNetwork` ``net`` for representations ``rep``
    (B, d) and labels ``Y`` (B, L): stage 2 first refreshes the positives' parent clusters from the current edge
    weights; the label classifier's rows of the top-K shortlist come back for the lazy Adam."""
    rep = rep.float()
    if net.stage == 2:
        net._refresh_parent()
    positives = positives_tensor(Y, rep.device)
    scores = net.cluster_scores(rep)
    c_ids, c_vals = net.cluster_shortlist(scores, positives)
    ids, path, top_ids, top_path = net._top_paths(c_ids, c_vals)
    hb = net.sparse_heads["labels"].gather(top_ids)
    final = top_path * torch.sigmoid(hb.score(rep))
    with torch.no_grad():
        target = ((top_ids.unsqueeze(-1) == positives.unsqueeze(1)) & (top_ids >= 0).unsqueeze(-1)).any(-1)
        hit = (ids.unsqueeze(-1) == positives.unsqueeze(1)) & (positives >= 0).unsqueeze(1)   # (B, N, P)
    with torch.autocast(rep.device.type, enabled=False):
        l_cls = F.binary_cross_entropy(final.float(), target.float())
        # path score of each positive found in the shortlist (0 where it is absent); BCE with target 1 on
        # the found ones (log clamped at log 1e-30; torch's BCELoss clamps at -100)
        pos_path = (hit.float() * path.float().unsqueeze(-1)).amax(dim=1)                  # (B, P)
        found = hit.any(dim=1)
        l_path = -(torch.log(pos_path.clamp_min(1e-30)) * found).sum() / found.numel()
    loss = l_cls + net.loss_lambda * l_path
    return LossOut(loss=loss, rows=[("labels", hb)],
                   parts={"bce": float(l_cls.detach()), "path": float(l_path.detach())},
                   candidates=top_ids)  # the top-K shortlist the classifier's BCE scored (-1 = padding)
