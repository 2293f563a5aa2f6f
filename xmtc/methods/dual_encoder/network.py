"""The dual encoder of the embedding family (NGAME, DEXA, DEXML): texts and labels in one vector space.

* **text vector** ``q(x) = normalize(mean_pool(E(x)))``: the masked mean of the encoder's last token
  states, L2-normalised (what sentence encoders such as all-MiniLM-L6-v2 are trained to give).
* **label vector** ``v_l = normalize(e_l + m_l w_l)`` with ``e_l = normalize(mean_pool(E'(t_l)))`` the
  embedding of the label's text ``t_l`` (its label-file text, else its name) and ``w_l`` a free per-label
  vector (DEXA's auxiliary vector, NGAME's classifier half) that exists only for labels with training
  documents (``m_l = 1``) and starts at ``e_l`` under the pretrained encoder. ``E' = E`` (one shared
  encoder, NGAME's and DEXML's default) or a second copy of it (``towers = "two"``). A label known only by
  its text -- from the label file, or added after training -- has ``v_l = e_l``: it is retrievable with no
  training document.
* **score** ``<q(x), v_l>``, top-k through :class:`xmtc.index.ann.VectorIndex` over the label vectors; the
  score users see is ``(1 + cos) / 2`` in [0, 1] (same order; positive, as the re-ranker's combiner needs).
* **training step**: the pool of labels is the batch's positives -- with cluster-grouped batches (NGAME, the
  estimator's default) the labels of similar texts, hard negatives of each other -- plus, with
  ``negatives = "mined"`` (DEXML), ``n_negatives`` hard negatives per text sampled from its mined top
  ``mine_topk`` (:mod:`xmtc.neural.negatives`; both re-done with the current encoder before each epoch);
  the pool's label texts go through the encoder with the batch (their gradient
  trains it), and the loss is DEXML's DecoupledSoftmax or InfoNCE over the pool at temperature ``tau``
  (:mod:`xmtc.neural.contrastive`, where the equations are). The free vectors are a
  :class:`~xmtc.neural.heads.RowSparseHead` (its bias unused): a step gathers the pool's rows only.

The label index is rebuilt from the current weights when predictions are asked for after a training
step (the validation of each epoch) and once more after training (:meth:`refresh_index`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from ...errors import ModelFormatError
from ...neural.contrastive import LOSSES, contrastive_loss
from ...neural.heads import RowSparseHead
from ...neural.negatives import cluster_batches, mine_hard_negatives, sample_negatives, text_keys
from ...neural.network import LossOut, Network, mean_pooled

NEGATIVES = ("mined", "in-batch")
BATCHINGS = ("random", "cluster")


def normalize_rows(a: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(a, axis=1, keepdims=True)
    return (a / np.where(norms > 0, norms, 1.0)).astype(np.float32)


class DualEncoderNetwork(Network):
    """Label vectors, the contrastive step and ANN prediction over a text encoder (see the module doc).

    ``free_vectors`` (rows, d) or None: the free vectors' start (rows = the labels at fit time);
    ``has_free`` (n_labels,) bool: which labels use theirs. The encoder and the tokenized label texts are
    attached with :meth:`attach` (the encoder is the estimator's, not a part of this module's state)."""

    def __init__(self, n_labels: int, hidden_size: int, *, free_vectors: np.ndarray | None, has_free: np.ndarray,
                 loss: str = "decoupled", temperature: float = 0.05, negatives: str = "mined", n_negatives: int = 1,
                 mine_topk: int = 20, batching: str = "random", seed: int = 0):
        super().__init__()
        if loss not in LOSSES or negatives not in NEGATIVES or batching not in BATCHINGS:
            raise ValueError(f"bad dual-encoder setting: loss {loss!r}, negatives {negatives!r}, batching {batching!r}")
        self.n_labels, self.hidden_size = int(n_labels), int(hidden_size)
        self.loss, self.temperature = loss, float(temperature)
        self.negatives, self.n_negatives, self.mine_topk = negatives, int(n_negatives), int(mine_topk)
        self.batching, self.seed = batching, int(seed)
        self.has_free = np.asarray(has_free, dtype=bool).copy()
        if self.has_free.shape != (self.n_labels,):
            raise ValueError(f"has_free has shape {self.has_free.shape}, expected ({self.n_labels},)")
        self.free_rows = 0 if free_vectors is None else int(free_vectors.shape[0])
        if free_vectors is not None:
            self.sparse_heads["free"] = RowSparseHead(free_vectors, np.zeros(self.free_rows, dtype=np.float32))
        self.has_free[self.free_rows:] = False
        self.label_tower = None   # a module of its own with towers="two"; else the shared encoder is used
        self._shared = ()         # (encoder,): a tuple, so that torch does not make it a submodule
        self.label_tok = None     # Tokenized label texts, label id order
        self.index = None         # VectorIndex over the label vectors
        self._stale = True        # weights changed since the index was built
        self.mined: np.ndarray | None = None
        self._rows: np.ndarray | None = None
        self._n_batches = 0
        self.precision, self.encode_batch_size, self.n_threads = "auto", 128, 0

    # -- wiring ----------------------------------------------------------------------------------------
    def attach(self, encoder, label_tok, *, label_tower=None, precision: str = "auto", encode_batch_size: int = 128,
               n_threads: int = 0) -> "DualEncoderNetwork":
        """Give the network its text encoder (shared with the labels unless ``label_tower``) and the
        tokenized label texts (``len == n_labels``)."""
        if len(label_tok) != self.n_labels:
            raise ValueError(f"{len(label_tok)} label texts for {self.n_labels} labels")
        self._shared = (encoder,)
        if label_tower is not None:
            self.label_tower = label_tower
        self.label_tok = label_tok
        self.precision, self.encode_batch_size, self.n_threads = precision, int(encode_batch_size), int(n_threads)
        return self

    def tower(self):
        return self.label_tower if self.label_tower is not None else self._shared[0]

    def _device(self):
        return next(self.tower().parameters()).device

    # -- vectors -----------------------------------------------------------------------------------------
    def text_representation(self, hidden_states, attention_mask):
        return mean_pooled(hidden_states[-1], attention_mask)

    def text_embeddings(self, label_ids: np.ndarray | None = None, tokenized=None) -> np.ndarray:
        """(n, d) float32 unit vectors ``e_l`` of label texts (eval mode, no gradient): of ``label_ids`` of
        the attached labels (default all), or of another ``tokenized`` set of texts."""
        from ...features.encoder import encode

        tok = self.label_tok if tokenized is None else tokenized
        e = encode(self.tower(), tok, label_ids, pooling="mean", batch_size=self.encode_batch_size,
                   device=self._device(), precision=self.precision)
        return normalize_rows(e)

    def label_vectors(self) -> np.ndarray:
        """(n_labels, d) float32 unit vectors ``v_l`` under the current weights."""
        e = self.text_embeddings()
        if "free" in self.sparse_heads:
            rows = np.flatnonzero(self.has_free)
            e[rows] += self.sparse_heads["free"].weight.detach().float().cpu().numpy()[rows]
        return normalize_rows(e)

    def refresh_index(self, vectors: np.ndarray | None = None) -> None:
        """Rebuild the label index from ``vectors`` (default: :meth:`label_vectors` now)."""
        from ...index.ann import VectorIndex

        vectors = self.label_vectors() if vectors is None else vectors
        self.index = VectorIndex(metric="ip", n_threads=self.n_threads).build(vectors)
        self._stale = False

    def add_labels(self, label_tok, vectors: np.ndarray) -> None:
        """Labels appended after training: their tokenized texts (all labels, old then new) and their
        vectors (text embeddings; they have no free vector), added to the index under their ids."""
        m = len(label_tok) - self.n_labels
        if m != len(vectors) or m < 0:
            raise ValueError(f"{m} new labels but {len(vectors)} vectors")
        if self.index is None or self._stale:
            self.refresh_index()
        self.index.add(vectors, np.arange(self.n_labels, self.n_labels + m))
        self.has_free = np.concatenate([self.has_free, np.zeros(m, dtype=bool)])
        self.n_labels += m
        self.label_tok = label_tok

    def _pool_vectors(self, pool: np.ndarray, device):
        """Unit vectors (P, d) of the pool's labels with gradient (encoder and free rows) and the
        ``(head name, HeadBatch)`` rows used."""
        batch = self.label_tok.batch(pool, device)
        out = self.tower()(**batch)
        e = torch.nn.functional.normalize(mean_pooled(out.last_hidden_state, batch["attention_mask"]).float(), dim=-1)
        free = self.has_free[pool] if "free" in self.sparse_heads else np.zeros(pool.size, dtype=bool)
        if not free.any():
            return e, []
        # only the pool's labels with a free vector are gathered: a label without one adds nothing, and no
        # stand-in row may join the step (a gathered row gets a LazyAdam update even at zero gradient)
        head = self.sparse_heads["free"]
        hb = head.gather(torch.from_numpy(pool[free]).to(head.weight.device)[None, :])
        at = torch.from_numpy(np.flatnonzero(free)).to(e.device)
        w = e.new_zeros(e.shape).index_copy(0, at, hb.w[hb.local[0]].to(e.device, e.dtype))
        return torch.nn.functional.normalize(e + w, dim=-1), [("free", hb)]

    # -- training ----------------------------------------------------------------------------------------
    def on_batch(self, ids) -> None:
        self._rows = np.asarray(ids, dtype=np.int64)
        self._n_batches += 1

    def pool(self, Y: sp.csr_matrix) -> np.ndarray:
        """The batch's label pool: its positives plus the mined negatives sampled for its rows, sorted."""
        parts = [np.asarray(Y.indices, dtype=np.int64)]
        if self.negatives == "mined" and self.mined is not None and self._rows is not None and self.n_negatives:
            rng = np.random.default_rng([self.seed, self._n_batches])
            neg = sample_negatives(self.mined[self._rows], self.n_negatives, rng)
            parts.append(neg[neg >= 0])
        return np.unique(np.concatenate(parts))

    def training_loss(self, rep, Y: sp.csr_matrix) -> LossOut:
        Y = sp.csr_matrix(Y)
        self._stale = True
        q = torch.nn.functional.normalize(rep.float(), dim=-1)
        pool = self.pool(Y)
        if pool.size == 0:
            return LossOut(q.sum() * 0.0)
        v, rows = self._pool_vectors(pool, q.device)
        # the scores and the loss in fp32 even under bf16 autocast: cos / tau at tau = 0.05 spans +-20, where
        # bf16's 8-bit mantissa would round a logit by up to 0.06
        with torch.autocast(q.device.type, enabled=False):
            scores = (q.float() @ v.float().t()) / self.temperature
            positive = torch.from_numpy(Y[:, pool].toarray() > 0).to(q.device)
            loss = contrastive_loss(scores, positive, self.loss)
        return LossOut(loss, rows, {self.loss: float(loss.detach())},
                       candidates=np.broadcast_to(pool, (Y.shape[0], pool.size)).copy())

    def begin_epoch(self, epoch: int, trainer):
        """Mine each training text's hard negatives and/or lay out cluster-grouped batches with the
        current weights (:mod:`xmtc.neural.negatives`)."""
        from ...features.encoder import encode

        if self.negatives != "mined" and self.batching != "cluster":
            return None
        s = trainer.settings
        label_vecs = self.label_vectors()
        self.refresh_index(label_vecs)
        if self.negatives == "mined":
            text_vecs = normalize_rows(encode(trainer.encoder, trainer.tokenized, pooling="mean",
                                              batch_size=s.encode_batch_size, device=trainer.device,
                                              precision=s.precision))
            self.mined = mine_hard_negatives(text_vecs, label_vecs, trainer.Y, self.mine_topk, index=self.index)
        if self.batching == "cluster":
            return cluster_batches(text_keys(trainer.Y, label_vecs), s.batch_size,
                                   np.random.default_rng([self.seed, epoch]), seed=self.seed + epoch,
                                   n_threads=self.n_threads or None)
        return None

    def training_state(self) -> dict:
        return {"mined": self.mined if self.mined is not None else np.zeros((0, 0), dtype=np.int64),
                "n_batches": self._n_batches}

    def load_training_state(self, state: dict) -> None:
        if "mined" in state:
            mined = np.asarray(state["mined"])
            self.mined = mined if mined.size else None
            self._n_batches = int(state["n_batches"])

    # -- prediction --------------------------------------------------------------------------------------
    def predict(self, rep, k: int):
        if self.index is None or self._stale:
            self.refresh_index()
        q = torch.nn.functional.normalize(rep.float(), dim=-1).cpu().numpy()
        ids, sc = self.index.search(q, k)
        sc = np.where(ids >= 0, (1.0 + sc) / 2.0, 0.0).astype(np.float32)
        return torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(sc)

    # -- persistence (the label tower and the index are stages of their own: see the estimator) ------------
    def meta(self) -> dict:
        return {"n_labels": self.n_labels, "hidden_size": self.hidden_size, "loss": self.loss,
                "temperature": self.temperature, "negatives": self.negatives, "n_negatives": self.n_negatives,
                "mine_topk": self.mine_topk, "batching": self.batching, "free_rows": self.free_rows,
                "seed": self.seed}

    def structure_arrays(self) -> dict[str, np.ndarray]:
        return {"has_free": self.has_free.astype(np.uint8)}

    def dense_arrays(self) -> dict[str, np.ndarray]:
        return {k: v for k, v in super().dense_arrays().items() if not k.startswith("dense.label_tower.")}

    @classmethod
    def from_arrays(cls, arrays: dict, meta: dict, *, source: str = "model", hidden_size: int | None = None):
        try:
            n_labels, hs, rows = int(meta["n_labels"]), int(meta["hidden_size"]), int(meta["free_rows"])
            has_free = np.asarray(arrays["has_free"]).astype(bool)
            kw = dict(loss=str(meta["loss"]), temperature=float(meta["temperature"]), negatives=str(meta["negatives"]),
                      n_negatives=int(meta["n_negatives"]), mine_topk=int(meta["mine_topk"]),
                      batching=str(meta["batching"]), seed=int(meta.get("seed", 0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFormatError(f"{source}: dual-encoder network lacks {exc}") from None
        if hidden_size is not None and hs != hidden_size:
            raise ModelFormatError(f"{source}: network built for hidden size {hs}, the encoder has {hidden_size}")
        if has_free.shape != (n_labels,) or not 0 <= rows <= n_labels:
            raise ModelFormatError(f"{source}: has_free does not match the {n_labels} labels")
        try:
            net = cls(n_labels, hs, free_vectors=np.zeros((rows, hs), np.float32) if rows else None,
                      has_free=has_free, **kw)
        except ValueError as exc:
            raise ModelFormatError(f"{source}: {exc}") from None
        net.load_dense_sparse(arrays, source)
        return net
