"""Row-sparse output heads: one linear layer per tree level whose training step touches only shortlisted rows.

A level head holds ``W`` (K, h) and ``b`` (K,) for the K nodes of one tree level (XR-Transformer eq. 5:
the score of node l for text x is ``W_l . phi(x) + b_l``). A batch scores only its shortlist
(:mod:`xmtc.neural.shortlist`), at most a few hundred of the K rows per text, so everything a step does
with the head is kept proportional to that shortlist, never to K:

* **gradient** -- :meth:`RowSparseHead.gather` copies the batch's unique shortlisted rows ``U`` into
  small leaf tensors; autograd produces a dense ``|U| x h`` gradient for them and nothing for the other
  rows. (Indexing a K x h ``nn.Parameter`` instead gives a dense K x h gradient that must be
  allocated, zeroed, clipped and all-reduced every step: what this module did before, and 6 GB of
  traffic per step at K = 10^6, h = 384.) A shortlist's -1 padding is no row: it scores 0, has no
  gradient path and gathers nothing (a gathered row would get a lazy Adam step even at zero gradient).
* **optimiser** -- a lazy Adam (:class:`LazyAdam`, the rule of ``torch.optim.SparseAdam`` and of the
  ``nn.Embedding(sparse=True)`` heads PECOS trains with ``SparseAdam``): the first/second moments and
  the weights of the touched rows are updated, rows outside the shortlist keep their moments and
  weights unchanged. The moments themselves are K x h each (allocated once, like the weights); a
  step reads and writes only ``|U|`` rows of them. Bias correction uses the global step count, as
  SparseAdam does. When every row is touched every step this *is* Adam (tested).
* **DDP traffic** -- the head is not a parameter of the DistributedDataParallel module; after the
  backward pass :func:`merge_row_grads` all-gathers each process's ``(rows, row gradients)`` and sums
  them row by row, so the bytes exchanged are ``world * |U| * (h + 1)`` floats, not ``K * (h + 1)``.
  The same function merges the micro-batches of gradient accumulation.

Measured one training step (h = 384, batch 32, shortlist 200) in ``benchmarks/heads.py``; the figures
are in benchmarks/RESULTS.md ("Row-sparse level heads").

Bootstrapping of a level's head from the previous level (XR-Transformer sec. 4.2, eq. 11) lives in
:mod:`xmtc.methods.xr_transformer.bootstrap`; the losses in :mod:`xmtc.neural.losses`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def random_head(n_nodes: int, hidden: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Small random rows (std 0.1 / sqrt(h)) and zero biases: the ``random`` start of a level head."""
    import torch

    g = torch.Generator().manual_seed(seed)
    W = torch.randn(n_nodes, hidden, generator=g) * (0.1 / np.sqrt(hidden))
    return W.numpy(), np.zeros(n_nodes, dtype=np.float32)


@dataclass
class HeadBatch:
    """The rows of a head one batch uses: ``rows`` (U,) unique node ids, ``w`` (U, h) and ``b`` (U,) leaf
    copies that collect the gradient, ``local`` (B, S) each shortlist entry's position in ``rows``, and
    ``mask`` (B, S) True where the entry is padding.

    Padding has no row: ``rows`` holds the real entries' ids only (a gathered row gets a LazyAdam step even
    at zero gradient). A padded entry's ``local`` is 0, a placeholder to be masked (out of range when every
    entry is padding and ``rows`` is empty): read the entries' rows with :meth:`weights` / :meth:`biases`
    (zeros at padding, no gradient path to any row), not ``w[local]``, wherever the shortlist may be
    padded."""

    rows: object
    w: object
    b: object
    local: object
    mask: object
    padded: bool = False

    def weights(self):
        """(B, S, h): each entry's row of ``w``; zeros at padding."""
        return self._at(self.w)

    def biases(self):
        """(B, S): each entry's bias; 0 at padding."""
        return self._at(self.b)

    def _at(self, t):
        if not self.padded:
            return t[self.local]
        import torch

        # a constant zero row past the last: padding reads it, and its gradient lands there, not in a row
        ext = torch.cat([t, t.new_zeros((1,) + tuple(t.shape[1:]))])
        return ext[self.local.masked_fill(self.mask, t.shape[0])]

    def score(self, emb):
        """Scores (B, S) of the shortlist for embeddings (B, h); padding scores 0."""
        import torch

        w = self.weights().to(emb.dtype)                # (B, S, h)
        out = torch.einsum("bsh,bh->bs", w, emb) + self.biases().to(emb.dtype)
        return out.masked_fill(self.mask, 0.0)

    def grads(self):
        """``(rows, grad_w, grad_b)`` after backward (zeros where autograd produced nothing)."""
        import torch

        gw = self.w.grad if self.w.grad is not None else torch.zeros_like(self.w)
        gb = self.b.grad if self.b.grad is not None else torch.zeros_like(self.b)
        return self.rows, gw, gb


class RowSparseHead:
    """``W`` (K, h) and ``b`` (K,) of one level as plain tensors (not module parameters) + a lazy Adam."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray, device="cpu"):
        import torch

        self.weight = torch.as_tensor(np.ascontiguousarray(weight, dtype=np.float32)).to(device)
        self.bias = torch.as_tensor(np.ascontiguousarray(bias, dtype=np.float32)).to(device)
        if self.weight.ndim != 2 or self.bias.shape != (self.weight.shape[0],):
            raise ValueError(f"head weight {tuple(self.weight.shape)} and bias {tuple(self.bias.shape)} disagree")

    @property
    def n_nodes(self) -> int:
        return int(self.weight.shape[0])

    def gather(self, ids) -> HeadBatch:
        """Leaf copies of the unique rows among ``ids`` (B, S; -1 = padding). Padding gathers no row: with
        none, this is exactly the gather of every entry; with some, only the real entries' rows are copied
        (none at all when every entry is padding); see :class:`HeadBatch` for the padded entries' ``local``."""
        import torch

        mask = ids < 0
        padded = bool(mask.any())
        if not padded:
            rows, inverse = torch.unique(ids, return_inverse=True)
            local = inverse.view(ids.shape)
        else:
            keep = ~mask
            rows, inverse = torch.unique(ids[keep], return_inverse=True)
            local = torch.zeros_like(ids)
            local[keep] = inverse
        w = self.weight.index_select(0, rows).requires_grad_(True)
        b = self.bias.index_select(0, rows).requires_grad_(True)
        return HeadBatch(rows=rows, w=w, b=b, local=local, mask=mask, padded=padded)

    def dense_scores(self, emb):
        """Scores (B, K) of every node (levels small enough to be scored whole; prediction)."""
        return emb @ self.weight.t().to(emb.dtype) + self.bias.to(emb.dtype)

    def numpy(self) -> tuple[np.ndarray, np.ndarray]:
        return self.weight.detach().cpu().numpy().copy(), self.bias.detach().cpu().numpy().copy()


def merge_row_grads(parts, world_size: int = 1, group=None):
    """Sum ``[(rows, grad_w, grad_b), ...]`` row by row over the parts and, under DDP, over processes.

    Returns ``(rows, grad_w, grad_b)`` with unique rows. Under DDP every process receives the same sum,
    divided by ``world_size`` (the average DDP takes of the encoder's gradients); only the rows in
    some process's shortlist travel.
    """
    import torch

    rows = torch.cat([p[0] for p in parts])
    gw = torch.cat([p[1] for p in parts])
    gb = torch.cat([p[2] for p in parts])
    if world_size > 1:
        import torch.distributed as dist

        n = torch.tensor([rows.numel()], device=rows.device)
        sizes = [torch.zeros_like(n) for _ in range(world_size)]
        dist.all_gather(sizes, n, group=group)
        top = int(max(int(s) for s in sizes))
        h = gw.shape[1]
        pad = top - rows.numel()
        packed = torch.cat([torch.cat([gw, gb[:, None]], 1), gw.new_zeros((pad, h + 1))])
        ids = torch.cat([rows, rows.new_zeros(pad)])
        bufs = [torch.empty_like(packed) for _ in range(world_size)]
        id_bufs = [torch.empty_like(ids) for _ in range(world_size)]
        dist.all_gather(bufs, packed, group=group)
        dist.all_gather(id_bufs, ids, group=group)
        allp = torch.cat([b[:int(n)] for b, n in zip(bufs, sizes)])
        rows = torch.cat([b[:int(n)] for b, n in zip(id_bufs, sizes)])
        gw, gb = allp[:, :h] / world_size, allp[:, h] / world_size
    uniq, inv = torch.unique(rows, return_inverse=True)
    if uniq.numel() == rows.numel():
        order = torch.empty_like(inv)
        order[inv] = torch.arange(inv.numel(), device=inv.device)
        return uniq, gw[order], gb[order]
    sw = gw.new_zeros((uniq.numel(), gw.shape[1])).index_add_(0, inv, gw)
    sb = gb.new_zeros(uniq.numel()).index_add_(0, inv, gb)
    return uniq, sw, sb


class LazyAdam:
    """Adam on the rows a step touched (``torch.optim.SparseAdam``'s rule; no weight decay).

    For each touched row r: ``m_r = b1 m_r + (1 - b1) g_r``, ``v_r = b2 v_r + (1 - b2) g_r^2``,
    ``W_r -= lr * (m_r / (1 - b1^t)) / (sqrt(v_r / (1 - b2^t)) + eps)`` with t the global step.
    """

    def __init__(self, head: RowSparseHead, lr: float, betas=(0.9, 0.999), eps: float = 1e-8):
        import torch

        self.head, self.lr, self.betas, self.eps = head, lr, betas, eps
        self.t = 0
        self.m_w = torch.zeros_like(head.weight)
        self.v_w = torch.zeros_like(head.weight)
        self.m_b = torch.zeros_like(head.bias)
        self.v_b = torch.zeros_like(head.bias)

    def step(self, rows, gw, gb, lr: float | None = None) -> None:
        import torch

        lr = self.lr if lr is None else lr
        self.t += 1
        b1, b2 = self.betas
        c1, c2 = 1.0 - b1 ** self.t, 1.0 - b2 ** self.t
        with torch.no_grad():
            for P, M, V, g in ((self.head.weight, self.m_w, self.v_w, gw), (self.head.bias, self.m_b, self.v_b, gb)):
                g = g.to(P.dtype)
                m = M.index_select(0, rows).mul_(b1).add_(g, alpha=1.0 - b1)
                v = V.index_select(0, rows).mul_(b2).addcmul_(g, g, value=1.0 - b2)
                M.index_copy_(0, rows, m)
                V.index_copy_(0, rows, v)
                upd = (m / c1) / ((v / c2).sqrt_().add_(self.eps))
                P.index_add_(0, rows, upd, alpha=-lr)

    def state_dict(self) -> dict:
        return {"t": self.t, "m_w": self.m_w, "v_w": self.v_w, "m_b": self.m_b, "v_b": self.v_b}

    def load_state_dict(self, state: dict) -> None:
        self.t = int(state["t"])
        for k in ("m_w", "v_w", "m_b", "v_b"):
            getattr(self, k).copy_(state[k])
