"""LightXML's network (Jiang et al., AAAI'21): a cluster generator and a low-rank label discriminator.

With the text representation ``e`` = the [CLS] states of the encoder's last ``n_layers`` layers,
concatenated, through dropout (sec. 3.2):

* **generator** -- one logit per label cluster, ``g = W_g e + b_g`` (C clusters, the leaves of a
  balanced 2-means tree on PIFA label vectors). Loss: BCE of ``g`` against the clusters holding a
  positive label.
* **dynamic negative sampling** (sec. 3.3) -- each step the candidate clusters are the top
  ``topk`` of ``sigmoid(g) + y_cluster`` (the generator's *current* scores, with the true clusters
  lifted to the top so that they are always sampled); the candidate labels are every label of those
  clusters. The negatives therefore follow the generator as it trains.
* **discriminator** -- a low-rank label head: ``z = W_h e + b_h`` (``hidden_dim``, 300 in the paper),
  label score ``s_l = u_l . z`` with ``u_l`` a row of the label-embedding matrix (L x hidden_dim, no
  bias). Loss: BCE of ``s`` on the candidate labels. The total loss is the sum of the two BCEs and
  both heads and the encoder are trained jointly, end to end.
* **prediction** -- ``sigmoid(s_l) * sigmoid(g_c)`` for the labels of the top ``topk`` clusters
  ``c``; the product lies in [0, 1] and is the score users see.

The label embedding is a :class:`~xmtc.neural.heads.RowSparseHead`: a step gathers only its
candidate rows and the lazy Adam updates only those, so a step costs ``B x topk x cluster_size`` rows,
never L. Its bias row is kept at zero (the paper's ``nn.Embedding`` has none).

Where this differs from the reference code (kongds/LightXML, ``src/model.py``), read for this module:

* positives outside the candidate clusters (a text with more positive clusters than ``topk``): the
  reference overwrites negative candidate slots with them; here they are appended to the text's
  candidates. Both make every positive a candidate; appending keeps the sampled negatives intact.
* the candidate BCE is averaged over real candidates only; the reference pads rows by repeating the
  last candidate and averages over the padding too.
* learning rates: the reference trains everything with one AdamW rate (1e-4, constant); the
  estimator's defaults are a warm-up + linear decay, 1e-4 for the encoder, 1e-2 for the label
  embeddings (row-sparse: the lazy Adam moves a row only when it is a candidate) and 1e-3 for the
  dense generator and bottleneck (``dense_learning_rate``; set all three equal for the reference's
  single rate). The dense rate matters most: Adam moves every entry by about the rate per step, so at
  1e-2 the 1,920 x 300 bottleneck (initialised within +-0.023) is rewritten within a few steps and the
  label embeddings chase it. yso-finna-en-2k-20k, 6,000 titles, 1 epoch, test P@1 on 1,500 titles
  dense at 1e-2 6.27, 3e-4 16.73, 1e-4 16.60, **1e-3 18.73** (label embeddings at 3e-2
  instead: 19.13; encoder at 2e-4: 18.00); at full scale (19,000 titles, 3 epochs) test P@1 32.84 in
  599 s against 30.48 with the dense layers at 1e-2 (validation P@1 per epoch 21.6 / 29.4 / 33.0
  against 8.0 / 18.3 / 30.6); 4 epochs 33.32 in 797 s.
* initialisation (``head_init``): the paper starts the generator and the label embeddings at random
  (``random``, selectable). The default ``centroid`` first encodes the training texts with the
  pretrained encoder and puts each generator row on its cluster's standardised centroid, centres the
  bottleneck on the training texts, and puts each label embedding on its texts' standardised centroid
  in the bottleneck's space (:mod:`xmtc.neural.head_init`). Measured on yso-finna-en-2k-20k, 6,000
  training titles, 1 epoch, all-MiniLM-L6-v2, max length 32, P@1 on 1,500 test titles:
  random start 0.27 ([CLS], dropout 0.5), 0.13 (mean pooling), 0.00 (dropout 0.1) -- the flat label
  prior is 0.33, i.e. one CPU epoch teaches a random start nothing; centroid start 1.93 (dropout 0.5),
  6.13 (dropout 0.1); the centroid start itself, before any step, 9.53. Training from it first loses
  ground (the label embeddings have no bias, so the BCE pushes every candidate down), which is why the
  gain is modest; the centroid classifier on the same pretrained representations alone reaches 25.6.
  At full scale (19,000 titles, 3 epochs, heads at 1e-2): test P@1 29.00 from the centroid start,
  28.04 from a random one; R@100 61.70 against 64.73.
* dropout on the text representation: the paper's 0.5 stays selectable; the estimator's default is 0.1
  because three CPU epochs leave no time for the heavier regularisation. Full scale, centroid start:
  test P@1 30.48 at 0.1 against 29.00 at 0.5, PSP@5 40.04 against 36.92, R@100 64.53
  against 61.70 (validation P@1 after each epoch 8.0 / 18.3 / 30.6 at 0.1, 6.5 / 16.7 / 29.4 at 0.5).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from ...errors import ConfigError, ModelFormatError
from ...index.tree import cluster_members
from ...neural.network import LossOut, Network, cls_concat, mean_pooled
from ...neural.heads import RowSparseHead


def cluster_targets(Y: sp.csr_matrix, cluster_of_label: np.ndarray, n_clusters: int) -> np.ndarray:
    """(B, C) float32: 1 where the text has a positive label in the cluster."""
    Y = sp.csr_matrix(Y)
    out = np.zeros((Y.shape[0], n_clusters), dtype=np.float32)
    rows = np.repeat(np.arange(Y.shape[0]), np.diff(Y.indptr))
    out[rows, cluster_of_label[Y.indices]] = 1.0
    return out


def sample_clusters(g_logits, y_clusters, k: int):
    """LightXML's dynamic negative sampling: the top ``k`` clusters of ``sigmoid(g) + y`` (B, k), so the
    true clusters come first (ties in their sigmoid order) and the generator's current best fill the rest."""
    with torch.no_grad():
        return torch.topk(torch.sigmoid(g_logits.float()) + y_clusters, k, dim=1).indices


def candidate_labels(top_clusters: np.ndarray, members: np.ndarray, Y: sp.csr_matrix | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Candidate label ids (B, S), -1 padded, and their targets (B, S) float32.

    The candidates of a text are the labels of its ``top_clusters`` row (in that order) and, when ``Y``
    is given, any positive label not among them (appended). Targets are 1 for the text's positives.
    """
    B = top_clusters.shape[0]
    cand = members[top_clusters].reshape(B, -1)
    if Y is None:
        return cand, np.zeros(cand.shape, dtype=np.float32)
    Y = sp.csr_matrix(Y)
    n_labels = max(int(members.max()) + 1, Y.shape[1])
    pos_rows = np.repeat(np.arange(B), np.diff(Y.indptr))
    pos_keys = pos_rows * n_labels + Y.indices.astype(np.int64)
    cand_keys = np.arange(B)[:, None] * n_labels + cand
    target = (np.isin(cand_keys, pos_keys) & (cand >= 0)).astype(np.float32)
    missing = ~np.isin(pos_keys, cand_keys[cand >= 0])
    if missing.any():
        extra_rows, extra_labels = pos_rows[missing], Y.indices[missing].astype(np.int64)
        counts = np.bincount(extra_rows, minlength=B)
        width = int(counts.max())
        ext = np.full((B, width), -1, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        order = np.argsort(extra_rows, kind="stable")
        col = np.arange(order.size) - np.repeat(starts, counts)
        ext[extra_rows[order], col] = extra_labels[order]
        cand = np.concatenate([cand, ext], axis=1)
        target = np.concatenate([target, (ext >= 0).astype(np.float32)], axis=1)
    return cand, target


def masked_bce(logits, targets, valid):
    """Mean binary cross-entropy with logits over the ``valid`` entries only."""
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    valid = valid.to(loss.dtype)
    return (loss * valid).sum() / valid.sum().clamp_min(1.0)


class LightXMLNetwork(Network):
    """Generator over label clusters + low-rank label discriminator (see the module docstring)."""

    def __init__(self, cluster_of_label: np.ndarray, hidden_size: int, *, n_layers: int = 5, hidden_dim: int = 300,
                 dropout: float = 0.5, topk: int = 10, pooling: str = "cls", seed: int = 0):
        super().__init__()
        self.cluster_of_label = np.asarray(cluster_of_label, dtype=np.int64)
        self.n_labels = int(self.cluster_of_label.size)
        self.n_clusters = int(self.cluster_of_label.max()) + 1 if self.n_labels else 0
        self.members = cluster_members(self.cluster_of_label, self.n_clusters)
        self.n_layers, self.hidden_dim, self.dropout_p = int(n_layers), int(hidden_dim), float(dropout)
        self.topk = int(min(topk, self.n_clusters))
        self.hidden_size = int(hidden_size)
        if pooling not in ("cls", "mean"):
            raise ConfigError(f"pooling must be cls or mean, got {pooling!r}")
        self.pooling = pooling
        g = torch.Generator().manual_seed(seed)
        d_in = self.n_layers * self.hidden_size
        self.dropout = torch.nn.Dropout(self.dropout_p)
        self.generator = torch.nn.Linear(d_in, self.n_clusters)
        self.bottleneck = torch.nn.Linear(d_in, self.hidden_dim)
        for lin in (self.generator, self.bottleneck):  # seeded like the rest of the run
            bound = 1.0 / np.sqrt(d_in)
            with torch.no_grad():
                lin.weight.copy_(torch.empty(lin.weight.shape).uniform_(-bound, bound, generator=g))
                lin.bias.copy_(torch.empty(lin.bias.shape).uniform_(-bound, bound, generator=g))
        a = np.sqrt(6.0 / (self.n_labels + self.hidden_dim))  # xavier-uniform, as the paper's label embedding
        emb = torch.empty(self.n_labels, self.hidden_dim).uniform_(-a, a, generator=g)
        self.sparse_heads["labels"] = RowSparseHead(emb.numpy(), np.zeros(self.n_labels, dtype=np.float32))
        self._members_t = torch.from_numpy(self.members)

    # -- forward parts ---------------------------------------------------------------------------------
    def text_representation(self, hidden_states, attention_mask):
        if self.pooling == "cls":
            return self.dropout(cls_concat(hidden_states, self.n_layers))
        return self.dropout(torch.cat([mean_pooled(hidden_states[-i], attention_mask)
                                       for i in range(1, self.n_layers + 1)], dim=-1))

    def _label_logits(self, hb, z):
        w = hb.weights().to(z.dtype)                         # (B, S, hidden_dim), 0 at padding; no bias
        return torch.einsum("bsd,bd->bs", w, z)

    def training_loss(self, rep, Y: sp.csr_matrix) -> LossOut:
        g = self.generator(rep).float()                       # (B, C)
        yc = torch.from_numpy(cluster_targets(Y, self.cluster_of_label, self.n_clusters)).to(g.device)
        top = sample_clusters(g, yc, self.topk).cpu().numpy()
        cand, target = candidate_labels(top, self.members, Y)
        head = self.sparse_heads["labels"]
        hb = head.gather(torch.from_numpy(cand).to(head.weight.device))
        z = self.bottleneck(rep)
        logits = self._label_logits(hb, z).float()
        valid = torch.from_numpy(cand >= 0).to(logits.device)
        loss_labels = masked_bce(logits, torch.from_numpy(target).to(logits.device), valid)
        loss_clusters = torch.nn.functional.binary_cross_entropy_with_logits(g, yc)
        return LossOut(loss_labels + loss_clusters, [("labels", hb)],
                       {"labels": float(loss_labels.detach()), "clusters": float(loss_clusters.detach())},
                       candidates=cand, tensors={"z": z, "g": g})

    def predict(self, rep, k: int):
        g = torch.sigmoid(self.generator(rep).float())
        cs, ci = torch.topk(g, self.topk, dim=1)              # (B, topk)
        members = self._members_t.to(ci.device)
        cand = members[ci].reshape(ci.shape[0], -1)           # (B, topk * M)
        cscore = cs.unsqueeze(-1).expand(-1, -1, members.shape[1]).reshape(ci.shape[0], -1)
        z = self.bottleneck(rep).float()
        w = self.sparse_heads["labels"].weight
        s = torch.einsum("bsd,bd->bs", w[cand.clamp_min(0)], z)
        p = torch.sigmoid(s) * cscore
        p = p.masked_fill(cand < 0, -1.0)
        kk = min(k, p.shape[1])
        sc, pos = torch.topk(p, kk, dim=1)
        idx = torch.gather(cand, 1, pos)
        idx = idx.masked_fill(sc < 0, -1)
        return idx, sc.clamp_min(0.0)

    def alc_scores(self, rep, out, label_ids, tap):
        """ALC: ``log p = log sigma(u_c . z_i) + log sigma(g_i,cluster(c))`` (B, C), the log of the score
        ``predict`` returns, from the step's own ``z`` and ``g`` and the label-embedding rows of ``label_ids``."""
        z, g = tap(out.tensors["z"], "text"), tap(out.tensors["g"], "text")
        head = self.sparse_heads["labels"]
        hb = head.gather(label_ids.to(head.weight.device).reshape(1, -1))
        u = tap(hb.w, "labels")[hb.local[0]]
        s = z.float() @ u.float().t()
        clusters = torch.from_numpy(self.cluster_of_label).to(g.device)[label_ids.to(g.device)]
        logp = torch.nn.functional.logsigmoid(s) + torch.nn.functional.logsigmoid(g.float()[:, clusters])
        return logp, [("labels", hb)]

    def init_from_data(self, rep, Y, seed: int = 0) -> None:
        """Generator rows on the standardised centroids of their clusters' texts; the bottleneck's bias
        centres ``z`` on the training texts; label embeddings on the standardised centroids of their
        texts' ``z`` (labels keep no bias, as in the paper). Labels and clusters without a text keep
        their random rows."""
        from ...neural.head_init import centroid_weights, cluster_membership, set_rows

        with torch.no_grad():
            W, b, has = centroid_weights(rep, cluster_membership(Y, self.cluster_of_label, self.n_clusters), seed=seed)
            set_rows(self.generator.weight, self.generator.bias, W, b, has)
            Wh = self.bottleneck.weight.detach().cpu().numpy()
            z = rep @ Wh.T + self.bottleneck.bias.detach().cpu().numpy()
            shift = z.mean(axis=0)
            self.bottleneck.bias -= torch.from_numpy(shift).to(self.bottleneck.bias)
            U, _, has = centroid_weights(z - shift, Y, seed=seed)
            head = self.sparse_heads["labels"]
            set_rows(head.weight, None, U, None, has)  # label embeddings carry no bias (the paper)

    # -- persistence -----------------------------------------------------------------------------------
    def meta(self) -> dict:
        return {"n_labels": self.n_labels, "n_clusters": self.n_clusters, "n_layers": self.n_layers,
                "hidden_dim": self.hidden_dim, "dropout": self.dropout_p, "topk": self.topk, "pooling": self.pooling,
                "hidden_size": self.hidden_size}

    def structure_arrays(self) -> dict[str, np.ndarray]:
        return {"cluster_of_label": self.cluster_of_label}

    @classmethod
    def from_arrays(cls, arrays: dict, meta: dict, *, source: str = "model", hidden_size: int | None = None):
        try:
            col = np.asarray(arrays["cluster_of_label"], dtype=np.int64)
            n_layers, hidden_dim, topk = int(meta["n_layers"]), int(meta["hidden_dim"]), int(meta["topk"])
            dropout, hs = float(meta["dropout"]), int(meta["hidden_size"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFormatError(f"{source}: LightXML network lacks {exc}") from None
        if hidden_size is not None and hs != hidden_size:
            raise ModelFormatError(f"{source}: network built for hidden size {hs}, the encoder has {hidden_size}")
        if col.ndim != 1 or col.size == 0 or col.min() < 0 or col.size != int(meta.get("n_labels", -1)):
            raise ModelFormatError(f"{source}: cluster_of_label does not match the {meta.get('n_labels')} labels")
        net = cls(col, hs, n_layers=n_layers, hidden_dim=hidden_dim, dropout=dropout, topk=topk,
                  pooling=str(meta.get("pooling", "cls")))
        net.load_dense_sparse(arrays, source)
        return net
