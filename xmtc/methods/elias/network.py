"""ELIAS's network (Gupta et al., NeurIPS'22): a learned sparse cluster -> label graph instead of a fixed tree.

The text representation ``phi(x)`` is the encoder's [CLS] state (last layer, or the last ``n_layers``
concatenated; the reference's ``tf_pooler: cls``) or the attention-masked mean of the token states (its
``tf_pooler: mean`` option), with dropout. With C label clusters and an adjacency of at most ``kappa`` labels per cluster:

* cluster scores ``s_c = clamp(alpha * softmax(W_C phi)_c, 0, 1)``;
* edge weights ``s_{c,l} = clamp(beta * softmax_j(a_{c,j}), 0, 1)`` where ``a_{c,.}`` are the learned logits
  of cluster c's kappa edges (row-softmax over the edges of a cluster; in stage 1 every edge of the tree has
  weight 1 and nothing is learned);
* path score of label l through cluster c: ``s_c * s_{c,l}``; a label reached through several of the
  shortlisted clusters keeps its best path (``max_c``);
* final score ``path(l) * sigmoid(w_l . phi + b_l)``, computed only for the top-K paths.

Search (prediction): the ``beam_size`` best clusters, every edge of each, the top-K paths by path score,
then the label classifier on those K. Training adds the clusters of the text's positives (each label's
"parent" = the cluster whose edge to it weighs most) to the beam, fills duplicate slots with random
clusters and, when more than ``beam_size + 5`` remain, samples that many without replacement with
probability proportional to the cluster score (the reference code's rule).

Loss (:func:`~xmtc.methods.elias.loss.elias_loss`, the network's ``training_loss``): ``BCE(final score, y)``
over the top-K shortlist plus ``lambda`` times ``-log(path score)`` of the positives found in the path
shortlist (the paper's L = L_classification + lambda * L_shortlist, reference ``ELIASLoss``).

Adjacency (:mod:`xmtc.methods.elias.adjacency`): an ELL-style sparse matrix, ``adj_index`` (C, kappa) label
ids (-1 = empty slot), the stage-1 tree's clusters and, in stage 2, each cluster's top-``kappa`` labels of
``M^T Y`` from the stage-1 model's beams, with the dense (C, kappa) parameter ``adj_logits`` (a weight
matrix of the index's size, never B x L). The label classifier ``W_L`` (L, h) is a
:class:`~xmtc.neural.heads.RowSparseHead`: a step gathers only the rows of its top-K shortlist.

Deviations from the reference code (nilesh2797/ELIAS, ``nets.py``/``losses.py``), each with its reason:

* the parents of the positives (which cluster teacher forcing adds) are recomputed from the current edge
  weights at every stage-2 step (the code refreshes them once per epoch): the core has no epoch hook, and
  the recomputation costs ``C * kappa``, the size of the adjacency itself;
* stage-2 edge logits: the code starts them at U(0, 1) and keeps only A_approx's sparsity (every edge
  then weighs about ``beta / kappa``, in random order); ``adj_values`` (the estimator's default,
  ``adjacency_init="approx"``) starts them at ``log A_approx`` so that the edge weights begin at
  ``min(1, beta * A_approx / row sum)``: with a few CPU epochs per stage there is no time to recover the
  ordering A_approx already knows. Passing no values is the reference's initialisation;
* labels that no cluster keeps in its top-kappa are unreachable in stage 2 in the code (their parent
  silently becomes cluster 0). :func:`~xmtc.methods.elias.adjacency.add_missing_labels` (the estimator's
  default, ``keep_tree_edges``) gives each such label the edge from its stage-1 cluster instead; when it
  is off, such a label's parent is "none";
* a label reached twice keeps its best path in both stages; the code deduplicates only in stage 2, so in
  its stage 1 a cluster that the random fill draws twice puts its labels twice into the top-K;
* the code's BCE counts padded entries (score 0, target 0) in its mean; so do we (same value), and BCE is
  computed in float32 outside autocast (bf16 logs lose the small scores).

Defaults of the estimator (:class:`xmtc.methods.elias.estimator.ELIAS`) on a CPU budget, measured on
yso-finna-en-2k-20k (19,000 training titles, all-MiniLM-L6-v2, 2 threads, fp32; benchmarks/RESULTS.md):

* heads at 1e-2 in both stages, not the reference's 5e-3: W_L is row-sparse with a lazy Adam (a row moves
  only when shortlisted), unlike the reference's dense optimiser. 2 + 1 epochs at 5e-3: validation P@1 2.5
  after the first epoch, test P@1 21.94 (ELIAS++ 32.44, 695 s); 3 + 1 at 1e-2: 19.6 after the first, test
  32.74 (ELIAS++ **36.98**, 881 s). The earlier 3 + 2 at 5e-3 reached 33.94 / 37.10 in 3,361 / 3,521 s (under
  load);
* 3 stage-1 and 1 stage-2 epochs: what fits in the time PECOS XR-Transformer takes for its one epoch here;
* ``ranker`` on, i.e. ELIAS++ (the paper's variant with a sparse re-ranker): +4.2 P@1 for 70 s here;
* ``head_init="centroid"`` (:meth:`ELIASNetwork.init_from_data`, stage 1): W_C's and W_L's rows start on the
  standardised centroids of their clusters' and labels' texts under the pretrained encoder
  (:mod:`xmtc.neural.head_init`) instead of the reference's random start. 3 + 1 epochs, heads 1e-2: validation
  P@1 32.7 after the first epoch (random start: 19.6), test P@1 34.80 alone / **38.22** with the ranker
  (random: 32.74 / 36.98), R@100 76.69 (73.50), for 65 s more (946 s against 881 s with the ranker).
  ``head_init="random"`` keeps the reference's start.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from ...errors import ConfigError, ModelFormatError
from ...neural.network import LossOut, Network, cls_concat, mean_pooled
from ...neural.heads import RowSparseHead, random_head
from .loss import elias_loss


def _dedup_max(ids, scores):
    """Per row, keep each label id once, with its largest score; other copies become id -1, score 0."""
    s_sorted, o1 = scores.sort(dim=1, descending=True, stable=True)
    i_sorted = ids.gather(1, o1)
    i2, o2 = i_sorted.sort(dim=1, stable=True)     # equal ids together, best score first among them
    dup = torch.zeros_like(i2, dtype=torch.bool)
    dup[:, 1:] = i2[:, 1:] == i2[:, :-1]
    dup_sorted = torch.zeros_like(dup).scatter_(1, o2, dup)
    dup_sorted |= i_sorted < 0
    i_sorted = i_sorted.masked_fill(dup_sorted, -1)
    s_sorted = s_sorted.masked_fill(dup_sorted, 0.0)
    return i_sorted, s_sorted


# -- the network ---------------------------------------------------------------------------------------
class ELIASNetwork(Network):
    """Cluster head W_C (dense), the cluster -> label adjacency, the label classifier W_L (row-sparse)."""

    def __init__(self, hidden: int, n_labels: int, adj_index: np.ndarray, *, stage: int = 1, alpha: float = 10.0,
                 beta: float = 150.0, beam_size: int = 20, shortlist_size: int = 2000, loss_lambda: float = 0.05,
                 extra_train_clusters: int = 5, n_layers: int = 1, pooling: str = "cls", dropout: float = 0.5,
                 seed: int = 0,
                 label_head: tuple[np.ndarray, np.ndarray] | None = None, adj_values: np.ndarray | None = None):
        super().__init__()
        adj_index = np.asarray(adj_index, dtype=np.int64)
        if adj_index.ndim != 2 or adj_index.shape[0] < 1:
            raise ConfigError(f"adjacency index must be (clusters, kappa), got {adj_index.shape}")
        if adj_index.max() >= n_labels:
            raise ConfigError(f"adjacency names label {adj_index.max()}, there are {n_labels}")
        if pooling not in ("cls", "mean"):
            raise ConfigError(f"ELIAS pooling must be cls or mean, got {pooling!r}")
        if stage not in (1, 2):
            raise ConfigError(f"ELIAS stage must be 1 or 2, got {stage}")
        self.hidden, self.n_labels, self.stage = int(hidden), int(n_labels), int(stage)
        self.alpha, self.beta, self.loss_lambda = float(alpha), float(beta), float(loss_lambda)
        self.beam_size, self.shortlist_size = int(beam_size), int(shortlist_size)
        self.extra_train_clusters, self.n_layers = int(extra_train_clusters), int(n_layers)
        self.pooling = pooling
        self.n_clusters, self.kappa = adj_index.shape
        self.dropout = torch.nn.Dropout(dropout)
        d = self.hidden * self.n_layers
        g = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.cluster_head = torch.nn.Linear(d, self.n_clusters)   # torch's default init, as the code
        self.register_buffer("adj_index", torch.from_numpy(adj_index))
        if self.stage == 2:
            if adj_values is None:   # the reference code: U(0, 1) logits, only A_approx's pattern is kept
                logits = torch.rand(adj_index.shape, generator=g)
            else:                    # log of A_approx: the edge weights start at min(1, beta * A / rowsum(A))
                v = np.asarray(adj_values, dtype=np.float64)
                if v.shape != adj_index.shape:
                    raise ConfigError(f"adjacency values {v.shape} do not match the index {adj_index.shape}")
                logits = torch.from_numpy(np.log(np.maximum(v, 1e-30)).astype(np.float32))
            self.adj_logits = torch.nn.Parameter(logits)
        self.register_buffer("parent", torch.full((self.n_labels,), -1, dtype=torch.int64))
        self._refresh_parent()
        W, b = label_head if label_head is not None else random_head(self.n_labels, d, seed=seed + 1)
        self.sparse_heads["labels"] = RowSparseHead(W, b)

    def init_from_data(self, rep, Y, seed: int = 0) -> None:
        """``head_init="centroid"`` (stage 1): W_C's rows on the standardised centroids of their clusters'
        texts and W_L's rows on their labels' (:mod:`xmtc.neural.head_init`), each with its prior bias.
        Under W_C's softmax the prior bias ``logit(p_c)`` is about ``log p_c`` for the small cluster shares
        of a real tree, so an average text starts near the clusters' prior distribution. Labels without a
        cluster (stage 2's unreachable ones) join no cluster's centroid; rows without a text keep their
        random start."""
        from ...neural.head_init import centroid_weights, cluster_membership, set_rows

        col = self.cluster_of_label()
        Y = sp.csr_matrix(Y, dtype=np.float32)
        Yc = Y[:, np.flatnonzero(col >= 0)] if (col < 0).any() else Y
        with torch.no_grad():
            W, b, has = centroid_weights(rep, cluster_membership(Yc, col[col >= 0], self.n_clusters), seed=seed)
            set_rows(self.cluster_head.weight, self.cluster_head.bias, W, b, has)
            W, b, has = centroid_weights(rep, Y, seed=seed)
            head = self.sparse_heads["labels"]
            set_rows(head.weight, head.bias, W, b, has)

    # -- parts -------------------------------------------------------------------------------------
    def text_representation(self, hidden_states, attention_mask):
        if self.pooling == "cls":
            rep = cls_concat(hidden_states, self.n_layers)
        else:
            if not 1 <= self.n_layers <= len(hidden_states) - 1:
                raise ConfigError(f"the encoder has {len(hidden_states) - 1} layers; cannot pool {self.n_layers}")
            rep = torch.cat([mean_pooled(hidden_states[-i], attention_mask)
                             for i in range(1, self.n_layers + 1)], dim=-1)
        return self.dropout(rep)

    def cluster_scores(self, rep):
        """``clamp(alpha * softmax(W_C phi), 0, 1)`` (B, C)."""
        return torch.clamp(self.alpha * F.softmax(self.cluster_head(rep.float()), dim=-1), 0.0, 1.0)

    def edge_weights(self):
        """(C, kappa): 1 on the tree's edges (stage 1), ``clamp(beta * row-softmax(a), 0, 1)`` (stage 2); 0 on
        empty slots."""
        valid = self.adj_index >= 0
        if self.stage == 1:
            return valid.float()
        logits = self.adj_logits.float().masked_fill(~valid, float("-inf"))
        w = torch.clamp(self.beta * F.softmax(logits, dim=-1), 0.0, 1.0)
        return w.masked_fill(~valid, 0.0)

    @torch.no_grad()
    def _refresh_parent(self):
        """parent[l] = the cluster whose edge to l weighs most (-1 if none); ties go to the lower cluster."""
        w = self.edge_weights().reshape(-1)
        ids = self.adj_index.reshape(-1)
        ok = ids >= 0
        w, ids = w[ok], ids[ok]
        clusters = torch.arange(self.n_clusters, device=ids.device).repeat_interleave(self.kappa)[ok]
        best = torch.full((self.n_labels,), -1.0, device=w.device).scatter_reduce(0, ids, w, "amax")
        is_best = w == best[ids]
        parent = torch.full((self.n_labels,), self.n_clusters, dtype=torch.int64, device=ids.device)
        parent.scatter_reduce_(0, ids[is_best], clusters[is_best], "amin")
        parent[parent == self.n_clusters] = -1
        self.parent.copy_(parent)

    def cluster_of_label(self) -> np.ndarray:
        """Each label's parent cluster (-1 for none): the stage-1 tree's assignment in stage 1."""
        return self.parent.detach().cpu().numpy().copy()

    def cluster_shortlist(self, scores, positives=None, generator=None):
        """Top-``beam_size`` clusters (B, b) and their scores; in training (``positives`` given) plus the
        positives' parents, duplicates replaced by random clusters, and at most ``beam_size +
        extra_train_clusters`` kept by sampling proportional to the score."""
        b = min(self.beam_size, self.n_clusters)
        vals, ids = scores.topk(b, dim=1)
        if positives is None:
            return ids, vals
        par = torch.where(positives >= 0, self.parent[positives.clamp_min(0)], torch.full_like(positives, -1))
        ids = torch.cat([par, ids], dim=1)
        srt, order = ids.sort(dim=1, stable=True)
        dup = torch.zeros_like(srt, dtype=torch.bool)
        dup[:, 1:] = srt[:, 1:] == srt[:, :-1]
        dup |= srt < 0
        dup = torch.zeros_like(dup).scatter_(1, order, dup)
        rnd = torch.randint(0, self.n_clusters, ids.shape, device=ids.device, generator=generator)
        ids = torch.where(dup, rnd, ids)
        vals = scores.gather(1, ids)
        cap = b + self.extra_train_clusters
        if ids.shape[1] > cap:
            pick = torch.multinomial(vals.detach().float() + 1e-12, cap, replacement=False, generator=generator)
            ids, vals = ids.gather(1, pick), vals.gather(1, pick)
        return ids, vals

    def paths(self, cluster_ids, cluster_vals):
        """Every edge of the shortlisted clusters: label ids (B, S*kappa) and path scores, each label once
        with its best path, best first (-1 / 0 on empty slots and duplicates)."""
        B = cluster_ids.shape[0]
        ids = self.adj_index[cluster_ids].reshape(B, -1)
        w = self.edge_weights()[cluster_ids]                       # (B, S, kappa)
        path = (cluster_vals.unsqueeze(-1) * w).reshape(B, -1)
        return _dedup_max(ids, path)

    def _top_paths(self, cluster_ids, cluster_vals):
        ids, path = self.paths(cluster_ids, cluster_vals)
        K = min(self.shortlist_size, ids.shape[1])
        top_path, pos = path.topk(K, dim=1)
        top_ids = ids.gather(1, pos)
        return ids, path, top_ids, top_path

    # -- the core's contract ---------------------------------------------------------------------------
    def training_loss(self, rep, Y) -> LossOut:
        """L_classification + lambda * L_shortlist (:func:`~xmtc.methods.elias.loss.elias_loss`)."""
        return elias_loss(self, rep, Y)

    @torch.no_grad()
    def predict(self, rep, k: int):
        """Top-k labels by ``path * sigmoid(w_l . phi + b_l)``, in [0, 1]; -1 / 0 padding."""
        rep = rep.float()
        c_ids, c_vals = self.cluster_shortlist(self.cluster_scores(rep))
        _, _, top_ids, top_path = self._top_paths(c_ids, c_vals)
        head = self.sparse_heads["labels"]
        safe = top_ids.clamp_min(0)
        logit = torch.einsum("bkh,bh->bk", head.weight[safe], rep) + head.bias[safe]
        final = (top_path * torch.sigmoid(logit)).masked_fill(top_ids < 0, -1.0)
        kk = min(k, final.shape[1])
        sc, pos = final.topk(kk, dim=1)
        idx = top_ids.gather(1, pos)
        sc = sc.masked_fill(idx < 0, 0.0).clamp_min(0.0)
        if kk < k:
            idx = torch.cat([idx, idx.new_full((idx.shape[0], k - kk), -1)], 1)
            sc = torch.cat([sc, sc.new_zeros((sc.shape[0], k - kk))], 1)
        return idx, sc

    @torch.no_grad()
    def cluster_beam(self, rep):
        """(ids, scores) of the top-``beam_size`` clusters, no teacher forcing (for the approximate index)."""
        return self.cluster_shortlist(self.cluster_scores(rep.float()))

    # -- storage -------------------------------------------------------------------------------------
    def meta(self) -> dict:
        return {"hidden_size": self.hidden, "n_labels": self.n_labels, "stage": self.stage, "alpha": self.alpha,
                "beta": self.beta, "beam_size": self.beam_size, "shortlist_size": self.shortlist_size,
                "loss_lambda": self.loss_lambda, "extra_train_clusters": self.extra_train_clusters,
                "n_layers": self.n_layers, "pooling": self.pooling, "n_clusters": self.n_clusters, "kappa": self.kappa}

    @classmethod
    def from_arrays(cls, arrays: dict, meta: dict, *, source: str = "model", hidden_size: int | None = None):
        try:
            adj = np.asarray(arrays["dense.adj_index"], dtype=np.int64)
            W = np.asarray(arrays["sparse.labels.weight"], dtype=np.float32)
            b = np.asarray(arrays["sparse.labels.bias"], dtype=np.float32)
            m = {k: meta[k] for k in ("stage", "alpha", "beta", "beam_size", "shortlist_size", "loss_lambda",
                                      "extra_train_clusters", "n_layers", "pooling")}
            hs, n_labels = int(meta["hidden_size"]), int(meta["n_labels"])
        except (KeyError, TypeError) as exc:
            raise ModelFormatError(f"{source}: ELIAS network lacks {exc}") from None
        if hidden_size is not None and hs != hidden_size:
            raise ModelFormatError(f"{source}: network built for hidden size {hs}, the encoder has {hidden_size}")
        if adj.ndim != 2 or adj.shape != (int(meta.get("n_clusters", -1)), int(meta.get("kappa", -1))):
            raise ModelFormatError(f"{source}: adjacency {adj.shape} does not match the meta's clusters x kappa")
        if W.shape[0] != n_labels or (adj.size and adj.max() >= n_labels):
            raise ModelFormatError(f"{source}: label classifier / adjacency do not match the {n_labels} labels")
        try:
            net = cls(hs, n_labels, adj, label_head=(W, b), **m)
        except ConfigError as exc:
            raise ModelFormatError(f"{source}: {exc}") from None
        net.load_dense_sparse(arrays, source)
        return net
