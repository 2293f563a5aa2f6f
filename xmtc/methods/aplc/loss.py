"""APLC-XLNet's training loss (Ye et al., ICML'20): binary cross-entropy over the head and the touched tail clusters.

With the head's logits ``u`` (``c_0`` head labels, then one node per tail cluster) and a touched tail
cluster i's logits ``z_i`` (:mod:`xmtc.methods.aplc.network`), the loss per text n, then the mean over the
batch, is binary cross-entropy over

* every head label;
* for each tail cluster holding a positive of n: every label of the cluster, on the product
  probability ``p(V_i) * sigmoid(z_ij)`` (the node learns through the products; its own term is
  dropped);
* for each tail cluster without a positive of n: the node only, ``-log(1 - p(V_i))`` (the labels of
  the cluster count as negatives through their node and are not scored);

divided by the number of terms, ``N_n = c_0 + sum_i (|V_i| if n has a positive in V_i else 1)``.
This is the loss of the reference code (huiyegit/APLC_XLNet, ``code/Adapative_label_clusters.py``).
``log p(j)`` of a tail label is ``logsigmoid(u) + logsigmoid(z)`` and ``log(1 - p)`` a stable
:func:`log1mexp`, instead of the reference's ``BCELoss`` on the product clamped at -100: the same loss
away from the clamp, no saturation when both factors are near 0 or 1.

**Cost of a step**: the head (``c_0 + C`` rows, every text: the method scores every head label) and,
for each tail cluster, only the texts with a positive there times its ``|V_i|`` labels. A tail
cluster's label matrix is a :class:`~xmtc.neural.heads.RowSparseHead` (``tail1``, ``tail2``, ...)
gathered only in steps where some text of the batch has a positive in it; untouched clusters cost
nothing (no gradient, no optimiser work).

Separate from the network (which holds the layers, the label probabilities and the prediction) because
the objective, its normalisation and its numerics are one idea of their own; the network's
``training_loss`` is :func:`aplc_loss`.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import torch

from ...neural.network import LossOut

_LN2 = math.log(2.0)


def log1mexp(a):
    """``log(1 - exp(a))`` for ``a <= 0``, accurate at both ends, finite gradients (a is clamped just
    below 0, where the loss would be infinite)."""
    a = a.clamp(max=-1e-30)
    near = a > -_LN2
    hi = torch.where(near, a, torch.full_like(a, -1.0))
    lo = torch.where(near, torch.full_like(a, -1.0), a)
    return torch.where(near, torch.log(-torch.expm1(hi)), torch.log1p(-torch.exp(lo)))


def aplc_loss(net, rep, Y: sp.csr_matrix) -> LossOut:
    """The normalised BCE above of an :class:`~xmtc.methods.aplc.network.APLCNetwork` ``net`` for representations
    ``rep`` (B, d) and labels ``Y`` (B, L); the rows of every tail cluster (none for an untouched one) come back
    for the lazy Adam."""
    B = rep.shape[0]
    dev = rep.device
    rows, ranks, cluster = net.batch_targets(Y)
    u = net.head(rep).float()                                   # (B, c_0 + C)
    head_t = np.zeros((B, net.n_head), dtype=np.float32)
    sel = cluster == 0
    head_t[rows[sel], ranks[sel]] = 1.0
    per_text = torch.nn.functional.binary_cross_entropy_with_logits(
        u[:, :net.n_head], torch.from_numpy(head_t).to(dev), reduction="none").sum(1)
    touched = np.zeros((B, net.n_tail), dtype=bool)
    touched[rows[~sel], cluster[~sel] - 1] = True
    touched_t = torch.from_numpy(touched).to(dev)
    nodes = u[:, net.n_head:]
    # clusters without a positive: the node alone, -log(1 - sigmoid(u)) = softplus(u)
    node_loss = (torch.nn.functional.softplus(nodes) * (~touched_t)).sum(1)
    sizes = np.diff(net.bounds)[1:]
    n_terms = net.n_head + np.where(touched, sizes[None, :], 1).sum(1)
    tail_loss = torch.zeros(B, device=dev)
    used = []
    for i in range(1, net.n_tail + 1):
        docs = np.flatnonzero(touched[:, i - 1])
        name = f"tail{i}"
        head = net.sparse_heads[name]
        n_i, lo = int(sizes[i - 1]), int(net.bounds[i])
        # an untouched cluster is gathered with no row: nothing to compute or update, but every step
        # (and under DDP every process) still takes part in the head's gradient merge and lazy Adam
        # step count
        ids = torch.arange(n_i if docs.size else 0, device=head.weight.device)[None, :]
        hb = head.gather(ids)
        used.append((name, hb))
        if docs.size == 0:
            continue
        docs_t = torch.from_numpy(docs).to(dev)
        z = net._tail_logits(i, rep.index_select(0, docs_t), hb.w, hb.b).float()      # (n, |V_i|)
        target = np.zeros((docs.size, n_i), dtype=np.float32)
        pos = cluster == i
        local = np.searchsorted(docs, rows[pos])
        target[local, ranks[pos] - lo] = 1.0
        target_t = torch.from_numpy(target).to(dev)
        logp = torch.nn.functional.logsigmoid(nodes.index_select(0, docs_t)[:, i - 1:i]) \
            + torch.nn.functional.logsigmoid(z)
        bce = -(target_t * logp + (1.0 - target_t) * log1mexp(logp)).sum(1)
        tail_loss = tail_loss.index_add(0, docs_t, bce)
    total = (per_text + node_loss + tail_loss) / torch.from_numpy(n_terms.astype(np.float32)).to(dev)
    loss = total.mean()
    return LossOut(loss, used, {"head": float((per_text / net.n_head).mean().detach()),
                                "touched_clusters": float(touched.any(0).sum())})
