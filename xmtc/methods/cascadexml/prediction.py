"""CascadeXML's prediction (Kharbanda et al., NeurIPS'22): the level cascade read top-down, and the labels' scores.

Prediction runs the network's cascade without teacher forcing (:mod:`xmtc.methods.cascadexml.network`):
level 0 scores every node and keeps its top-``k_0`` by ``s_0``, each following level scores the children
of the kept nodes and keeps the top-``k_t`` of them by ``s_t``, and the labels reached are scored by
``score``:

* ``parent`` (default; the reference code's ``weighted`` scheme): ``s_D(l) * s_{D-1}(parent(l))``;
* ``path``: the product of the level scores along the whole path, ``prod_t s_t(ancestor_t(l))``
  (the probability chain of a tree model);
* ``label``: ``s_D(l)`` alone (the reference's ``level`` scheme).

All three are in [0, 1]. Every level past the first reads only its candidates' rows of its
:class:`~xmtc.neural.heads.RowSparseHead`, so a text costs ``sum_t k_{t-1} * branching`` rows, never L.

Separate from the network because it is the one part that runs on tensors alone, batch by batch on the
device: the network's training step builds its candidates in numpy (teacher forcing), this cascade in
torch, and the network's ``cascade`` / ``predict`` are :func:`cascade` / :func:`top_labels`.
"""

from __future__ import annotations

import torch


def level_scores(net, t: int, rep, ids):
    """sigma(scores) (B, S) of level ``t``'s nodes ``ids`` (B, S; -1 = padding, scored 0) of a
    :class:`~xmtc.methods.cascadexml.network.CascadeNetwork` ``net``."""
    if t == 0:
        return torch.sigmoid(net.head0(rep.to(net.head0.weight.dtype)).float())
    head = net.sparse_heads[f"level{t}"]
    flat = ids.clamp_min(0).reshape(-1)
    w = head.weight.index_select(0, flat).view(*ids.shape, -1)
    b = head.bias.index_select(0, flat).view(ids.shape)
    s = torch.sigmoid(torch.einsum("bsh,bh->bs", w, rep.float()) + b)
    return s.masked_fill(ids < 0, 0.0)


def cascade(net, rep):
    """The prediction cascade of ``net`` for per-level representations ``rep``: per level ``(ids, level scores,
    path scores, parent scores)``, (B, S_t)."""
    B = rep[0].shape[0]
    dev = net.head0.weight.device
    ids = torch.arange(net.sizes[0], device=dev).expand(B, -1)
    s = level_scores(net, 0, rep[0], ids)
    out = [(ids, s, s, torch.ones_like(s))]
    for t in range(1, net.n_levels):
        prev_ids, prev_s, prev_path, _ = out[-1]
        kk = min(net.topk[t - 1], prev_ids.shape[1])
        masked = prev_s.masked_fill(prev_ids < 0, -1.0)
        top_s, pos = torch.topk(masked, kk, dim=1)
        top = prev_ids.gather(1, pos).masked_fill(top_s < 0, -1)
        top_path = prev_path.gather(1, pos)
        children = getattr(net, f"children{t}")
        width = children.shape[1]
        kids = children[top.clamp_min(0)].masked_fill((top < 0).unsqueeze(-1), -1).reshape(B, kk * width)
        parent_s = top_s.clamp_min(0).unsqueeze(-1).expand(B, kk, width).reshape(B, kk * width)
        parent_path = top_path.unsqueeze(-1).expand(B, kk, width).reshape(B, kk * width)
        s = level_scores(net, t, rep[t], kids)
        out.append((kids, s, s * parent_path, parent_s))
    return out


def top_labels(net, rep, k: int):
    """Top-``k`` labels (B, k) and their ``score`` (see the module doc; -1 / 0 padding)."""
    ids, s, path, parent = net.cascade(rep)[-1]
    final = {"parent": s * parent, "path": path, "label": s}[net.score]
    final = final.masked_fill(ids < 0, -1.0)
    kk = min(k, ids.shape[1])
    top_s, pos = torch.topk(final, kk, dim=1)
    top = ids.gather(1, pos).masked_fill(top_s < 0, -1)
    top_s = top_s.clamp_min(0.0)
    if kk < k:
        B = ids.shape[0]
        top = torch.cat([top, top.new_full((B, k - kk), -1)], 1)
        top_s = torch.cat([top_s, top_s.new_zeros((B, k - kk))], 1)
    return top, top_s
