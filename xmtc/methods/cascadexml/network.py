"""CascadeXML's network (Kharbanda et al., NeurIPS'22): one encoder pass, one tree level per encoder layer.

The label tree (levels ``K_0 < K_1 < ... < K_D = L``; the last level is the labels) is read top-down by
a *cascade* of classifiers, each fed by a different depth of the same transformer: coarse levels by
intermediate layers, the labels by the last one. With ``h_l`` the first token's ([CLS]) state of
layer ``l`` (``hidden_states[l]``, 0 = embeddings) and ``layers_t`` the layers chosen for level ``t``:

    phi_0 = W_p dropout_p([h_l for l in layers_0])      (a pair of layers, concatenated and projected to h)
    phi_t = [h_l for l in layers_t]                      (t >= 1; one layer)
    s_t(n) = sigma(w_{t,n} . dropout_t(phi_t) + b_{t,n})  for node n of level t

Level 0 scores every node. Level ``t >= 1`` scores only its *candidates*

    M_t = children( top-k_{t-1}(s_{t-1} over M_{t-1})  ∪  P_{t-1} )

where the top-k is taken over the previous level's candidates only (the cascade: a node outside
``M_{t-1}`` has no score) and ``P_{t-1}`` are the text's true nodes of level ``t-1`` (teacher forcing,
training only; every true node of level ``t`` is then a candidate). Built with
:func:`xmtc.neural.shortlist.build_shortlist`, the same set as XR-Transformer's eq. 8. The top-k uses
detached scores: the shortlist is a discrete choice, gradients flow through each level's own loss.

Loss (the paper's weighted sum of per-level binary cross-entropies):

    loss = sum_t  lambda_t * mean_{(i, n): n in M_t(i)}  BCE(s_t(n | x_i), y_t(n | x_i))

Prediction (:mod:`xmtc.methods.cascadexml.prediction`) runs the same cascade without ``P``, keeping the
top-``k_t`` candidates of each level, and scores the labels reached by ``score``: ``parent`` (default,
``s_D(l) * s_{D-1}(parent(l))``), ``path`` (the product of the level scores along the path) or ``label``
(``s_D(l)`` alone).

All three are in [0, 1]. Only level 0 (the coarsest, a few dozen nodes) is a dense parameter; every
other level is a :class:`~xmtc.neural.heads.RowSparseHead`, so a step touches the candidates' rows,
never all L. (The ALC objective, :meth:`CascadeNetwork.alc_scores`, acts on the final ``score`` of the
batch's candidate labels: the levels it multiplies, each from its own ``phi_t`` and rows.)

Defaults and deviations from the paper and its reference code (xmc-aalto/cascadexml, ``src/CascadeXML.py``,
``src/Runner.py``, read at commit ce701f6):

* **Layers.** The reference hard-codes 12-layer BERT: 3 levels -> layers ``[(7, 8), 10, 12]``, 4 levels ->
  ``[(5, 6), 8, 10, 12]``. We keep its rule and scale it to the encoder's depth N: the last level reads
  layer N, each coarser level ``max(1, N // 6)`` layers lower, and the first level pairs its layer with the
  one just below. For 12 layers this reproduces the reference exactly; all-MiniLM-L6 (6 layers), 3 levels:
  ``[(3, 4), 5, 6]``. ``layers`` sets any other choice ("3+4,5,6"); both are read by
  :mod:`xmtc.methods.cascadexml.settings`.
* **Pooling.** ``pooling="cls"`` reads the first token's state as the paper does; the estimator's default,
  ``pooling="mean"``, reads the attention-masked mean of the same layer's token states instead, because
  all-MiniLM-L6-v2 (the project's default encoder) was trained as a mean-pooled sentence encoder and its
  [CLS] output was never trained to summarise a text (on a randomly initialised encoder the [CLS] state
  hardly depends on the text at all: the tests' tiny BERT's spread across texts is 0.1-0.2% of its size,
  against 16% for the mean). Measured on the pretrained encoder at full scale (yso-finna-en-2k-20k, 3
  epochs, no re-ranker, benchmarks/RESULTS.md): test P@1 34.46 with mean, 15.50 with cls, so the estimator
  keeps mean; the network's own default stays ``cls``. The three ``score`` rules were measured on one
  trained network: their figures are in the estimator's ``score`` help.
* **Candidates.** The reference forces the true parents into a *fixed-size* top-k by adding 1 to their
  probability (``topk(s + y)``), so when a text has more than k true parents some are dropped and
  otherwise fewer predicted parents are kept. We use the union ``top-k ∪ true parents`` that
  XR-Transformer's eq. 8 states, so every true node is always trained and k predicted (hard) negatives are
  always present. The union is at most ``k + |P|`` parents per text.
* **Loss mean.** The reference averages each level's BCE over a padded (B, S) block, padding included (it
  scores padding as logit 0, a constant log 2 that carries no gradient but dilutes the level's weight with
  the padding's share). We average over the real candidates only, so ``lambda_t`` means what it says.
* **Schedule and optimiser.** The reference runs a three-phase one-cycle LR and AdamW on everything (its
  heads optionally sparse with SparseAdam). We train on the project's one loop (:mod:`xmtc.neural.training_loop`:
  linear warm-up + decay, AdamW on encoder and dense layers, lazy Adam on the row-sparse heads). The
  reference's heads run at 10x the encoder's rate (1e-3) under dense Adam, whose momentum keeps moving a
  row on the steps that do not touch it; the lazy Adam moves a row only when it is a candidate, and at
  1e-3 the heads barely leave their start (yso-finna-en-2k-20k: test P@1 3.88 after 2 epochs). The
  estimator's default is 1e-2 for the heads (33.30 after 3 epochs, 733 s; benchmarks/RESULTS.md). Weight decay: the
  reference's 0.05 on the encoder and 0.005 on the heads; ours the shell's 0.01 on the encoder's matrices
  and none on the heads (the lazy Adam has none).
* **First-level projection.** The reference always projects the first level's two concatenated layers
  (Dropout 0.2 + Linear 2h -> h); we do the same, and skip the projection when ``layers`` gives the first
  level a single layer (its state already has size h).
* **Head initialisation.** ``head_init="centroid"`` (:meth:`CascadeNetwork.init_from_data`) puts every
  level's rows on the standardised centroids of its nodes' training texts, each level under its own
  representation; ``random`` (Xavier) is the reference's. yso-finna-en-2k-20k, 3 epochs: validation P@1
  26.7 / 31.8 / 33.4 after each epoch against 20.1 / 28.8 / 32.4 from the random start, test P@1 33.58
  against 33.30 (PSP@5 44.28 against 44.86), for 50 s of encoding the training texts once; on 6,000 titles
  and 1 epoch, 18.87 against 1.87. The estimator's default is ``centroid`` (with the
  dense layers at 1e-3 and the shell's re-ranker: test P@1 37.52 in 830 s; benchmarks/RESULTS.md).
* **Checkpoint selection.** The reference keeps the epoch with the best *test* score; the core chooses on a
  validation split cut from the training data.
* **Tree.** The reference loads ECLARE-style clusters (balanced 2-means on label features, branching 8
  per level); we build the project's balanced k-means tree on PIFA over TF-IDF
  (:func:`xmtc.index.kmeans.build_label_tree`) with ``branching`` children per node and leaves of at most
  ``max_leaf_size`` labels.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from ...errors import ConfigError, ModelFormatError
from ...index.tree import LabelTree
from ...neural.network import LossOut, Network, mean_pooled
from ...neural.heads import RowSparseHead
from ...neural.shortlist import build_shortlist, children_csr
from .prediction import cascade, top_labels

SCORES = ("parent", "path", "label")
POOLINGS = ("cls", "mean")


def padded_children(parents: np.ndarray, n_parents: int) -> np.ndarray:
    """(n_parents, max children) int64 node ids, -1 padded, ascending within a row."""
    order = np.argsort(parents, kind="stable")
    counts = np.bincount(parents, minlength=n_parents)
    width = int(counts.max(initial=0))
    out = np.full((n_parents, max(width, 1)), -1, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    sorted_parents = parents[order]
    col = np.arange(parents.size) - starts[sorted_parents]
    out[sorted_parents, col] = order
    return out


def _xavier(n: int, h: int, gen: torch.Generator) -> np.ndarray:
    bound = float(np.sqrt(6.0 / (n + h)))
    return ((torch.rand(n, h, generator=gen) * 2 - 1) * bound).numpy()


# -- the network -----------------------------------------------------------------------------------------
class CascadeNetwork(Network):
    """CascadeXML's level classifiers over a label tree; see the module docstring."""

    PREDICT_PARAMS = ("score",)

    def __init__(self, tree: LabelTree, hidden: int, layers: list[tuple[int, ...]], topk: list[int],
                 dropouts: list[float], loss_weights: list[float], score: str = "parent",
                 proj_dropout: float = 0.2, seed: int = 0, pooling: str = "cls"):
        super().__init__()
        if tree.depth < 1:
            raise ConfigError("CascadeXML needs a label tree with at least one cluster level")
        if pooling not in POOLINGS:
            raise ConfigError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        if score not in SCORES:
            raise ConfigError(f"score must be one of {', '.join(SCORES)}, got {score!r}")
        n_levels = tree.depth + 1
        for name, v in (("layers", layers), ("dropouts", dropouts), ("loss_weights", loss_weights)):
            if len(v) != n_levels:
                raise ConfigError(f"{name} has {len(v)} entries; the tree has {n_levels} levels")
        if any(not 0.0 <= p < 1.0 for p in list(dropouts) + [proj_dropout]):
            raise ConfigError(f"dropouts must lie in [0, 1), got {list(dropouts)} and {proj_dropout}")
        if len(topk) != n_levels - 1:
            raise ConfigError(f"topk has {len(topk)} entries; the tree has {n_levels - 1} cluster levels")
        self.tree = tree
        self.parents = tree.parents                      # parents[t][n]: parent (level t-1) of node n of level t
        self.sizes = tree.level_sizes
        self.n_labels = tree.n_labels
        self.hidden = int(hidden)
        self.layers = [tuple(int(x) for x in e) for e in layers]
        self.topk = [int(k) for k in topk]
        self.dropouts = [float(p) for p in dropouts]
        self.loss_weights = [float(w) for w in loss_weights]
        self.score = score
        self.pooling = pooling
        self.proj_dropout = float(proj_dropout)
        self.seed = int(seed)
        gen = torch.Generator().manual_seed(seed)
        width = len(self.layers[0]) * self.hidden
        self.proj = torch.nn.Sequential(torch.nn.Dropout(self.proj_dropout), torch.nn.Linear(width, self.hidden)) \
            if len(self.layers[0]) > 1 else torch.nn.Identity()
        if len(self.layers[0]) > 1:
            with torch.no_grad():
                self.proj[1].weight.copy_(torch.from_numpy(_xavier(self.hidden, width, gen)))
                self.proj[1].bias.zero_()
        self.drops = torch.nn.ModuleList([torch.nn.Dropout(p) for p in self.dropouts])
        self.head0 = torch.nn.Linear(self.hidden, self.sizes[0])
        with torch.no_grad():
            self.head0.weight.copy_(torch.from_numpy(_xavier(self.sizes[0], self.hidden, gen)))
            self.head0.bias.zero_()
        for t in range(1, n_levels):
            self.sparse_heads[f"level{t}"] = RowSparseHead(_xavier(self.sizes[t], self.hidden, gen),
                                                           np.zeros(self.sizes[t], dtype=np.float32))
        self._children_csr = [None] + [children_csr(self.parents[t], self.sizes[t - 1]) for t in range(1, n_levels)]
        for t in range(1, n_levels):
            self.register_buffer(f"children{t}", torch.from_numpy(padded_children(self.parents[t], self.sizes[t - 1])),
                                 persistent=False)
            self.register_buffer(f"parent_of{t}", torch.from_numpy(self.parents[t].astype(np.int64)),
                                 persistent=False)

    @property
    def n_levels(self) -> int:
        return len(self.sizes)

    # -- representation --------------------------------------------------------------------------------
    def text_representation(self, hidden_states, attention_mask):
        """Per-level representations ``[phi_0, ..., phi_D]``, each (B, h), dropout applied."""
        n = len(hidden_states) - 1
        reps = []
        for t, entry in enumerate(self.layers):
            if max(entry) > n:
                raise ConfigError(f"level {t} reads layer {max(entry)}, but the encoder has {n} layers")
            if self.pooling == "cls":
                x = torch.cat([hidden_states[layer][:, 0] for layer in entry], dim=-1)
            else:
                x = torch.cat([mean_pooled(hidden_states[layer], attention_mask) for layer in entry], dim=-1)
            if t == 0:
                x = self.proj(x)
            reps.append(self.drops[t](x))
        return reps

    def init_from_data(self, rep, Y, seed: int = 0) -> None:
        """Every level's rows on the standardised centroids of its nodes' texts (:mod:`xmtc.neural.head_init`).

        ``rep`` is ``[phi_0 | phi_1 | ... | phi_D]`` side by side (what
        :func:`xmtc.neural.inference.representations` gives for a list of per-level representations, each of width h); level ``t``'s node ``n`` takes
        the centroid of ``phi_t`` over the texts with a label under ``n``, and the prior bias. Nodes
        without a training text keep their random rows."""
        from ...neural.head_init import centroid_weights, set_rows

        rep = np.asarray(rep, dtype=np.float32)
        if rep.shape[1] != self.n_levels * self.hidden:
            raise ValueError(f"expected {self.n_levels} representations of width {self.hidden} side by side,"
                             f" got width {rep.shape[1]}")
        targets = self.tree.level_targets(sp.csr_matrix(Y, dtype=np.float32))
        with torch.no_grad():
            for t in range(self.n_levels):
                W, b, has = centroid_weights(rep[:, t * self.hidden:(t + 1) * self.hidden], targets[t], seed=seed)
                head = self.head0 if t == 0 else self.sparse_heads[f"level{t}"]
                set_rows(head.weight, head.bias, W, b, has)

    # -- training ----------------------------------------------------------------------------------------
    def candidates(self, prev_ids: np.ndarray, prev_scores: np.ndarray, level: int,
                   Y_prev: sp.csr_matrix | None, Y_level: sp.csr_matrix | None):
        """Candidates of ``level`` (t >= 1) for a batch: ``(ids, targets)``, (B, S) -1 / 0 padded.

        ``prev_ids`` (B, S') and ``prev_scores`` (B, S') are the previous level's candidates and scores
        (padding: id -1); its top-``k_{t-1}`` by score, united with the true parents ``Y_prev`` when given
        (training), are expanded to their children. ``targets`` are 1 for the true nodes ``Y_level``.
        """
        k = self.topk[level - 1]
        B = prev_ids.shape[0]
        sc = np.where(prev_ids >= 0, prev_scores, -np.inf)
        kk = min(k, sc.shape[1])
        part = np.argpartition(-sc, kk - 1, axis=1)[:, :kk] if kk < sc.shape[1] else \
            np.tile(np.arange(sc.shape[1]), (B, 1))
        top = np.take_along_axis(prev_ids, part, axis=1)
        top = np.where(np.take_along_axis(sc, part, axis=1) > -np.inf, top, -1)
        mass = Y_level if Y_level is not None else sp.csr_matrix((B, self.sizes[level]), dtype=np.float32)
        ids, targets, _ = build_shortlist(top, mass, self._children_csr[level], prev_positive=Y_prev)
        return ids, (targets > 0).astype(np.float32)

    def training_loss(self, rep, Y) -> LossOut:
        import torch.nn.functional as F

        Y = sp.csr_matrix(Y, dtype=np.float32)
        targets = self.tree.level_targets(Y)
        logits0 = self.head0(rep[0].to(self.head0.weight.dtype))
        y0 = torch.from_numpy(targets[0].toarray()).to(logits0.device)
        parts_t = [F.binary_cross_entropy_with_logits(logits0.float(), y0)]
        rows = []
        B = logits0.shape[0]
        prev_ids = np.tile(np.arange(self.sizes[0], dtype=np.int64), (B, 1))
        prev_scores = torch.sigmoid(logits0.detach().float()).cpu().numpy()
        for t in range(1, self.n_levels):
            ids, y = self.candidates(prev_ids, prev_scores, t, targets[t - 1], targets[t])
            ids_t = torch.from_numpy(ids).to(logits0.device)
            hb = self.sparse_heads[f"level{t}"].gather(ids_t)
            logits = hb.score(rep[t].float())
            valid = ~hb.mask
            per = F.binary_cross_entropy_with_logits(logits, torch.from_numpy(y).to(logits.device), reduction="none")
            parts_t.append((per * valid).sum() / valid.sum().clamp_min(1))
            rows.append((f"level{t}", hb))
            prev_ids = ids
            prev_scores = torch.sigmoid(logits.detach()).cpu().numpy()
        loss = sum(w * p for w, p in zip(self.loss_weights, parts_t))
        return LossOut(loss=loss, rows=rows, parts={f"level{t}": float(p.detach()) for t, p in enumerate(parts_t)},
                       candidates=prev_ids)  # the label level's candidates (ALC pairs them)

    # -- prediction --------------------------------------------------------------------------------------
    def cascade(self, rep):
        """The prediction cascade: per level ``(ids, level scores, path scores, parent scores)``, (B, S_t)
        (:func:`~xmtc.methods.cascadexml.prediction.cascade`)."""
        return cascade(self, rep)

    def predict(self, rep, k: int):
        """Top-``k`` labels (B, k) and their ``score`` (:func:`~xmtc.methods.cascadexml.prediction.top_labels`)."""
        return top_labels(self, rep, k)

    def alc_scores(self, rep, out, label_ids, tap):
        """ALC: the log of ``score`` (B, C) for labels ``label_ids``: ``log sigma(w . phi_t + b)`` summed over
        the levels ``score`` multiplies (``parent``: the label and its parent; ``path``: every ancestor;
        ``label``: the label alone), each level's rows gathered for the labels' ancestors at that level."""
        import torch.nn.functional as F

        D = self.n_levels - 1
        depth = {"parent": min(1, D), "path": D, "label": 0}[self.score]
        ids = label_ids.to(self.head0.weight.device)
        logp, rows = 0.0, []
        for t in range(D, D - depth - 1, -1):
            phi = tap(rep[t], "text").float()
            if t == 0:
                w, b = tap(self.head0.weight, "head0")[ids], tap(self.head0.bias, "head0")[ids]
            else:
                hb = self.sparse_heads[f"level{t}"].gather(ids.reshape(1, -1))
                w, b = tap(hb.w, f"level{t}")[hb.local[0]], tap(hb.b, f"level{t}")[hb.local[0]]
                rows.append((f"level{t}", hb))
                ids = getattr(self, f"parent_of{t}")[ids]
            logp = logp + F.logsigmoid(phi @ w.float().t() + b.float())
        return logp, rows

    # -- storage -----------------------------------------------------------------------------------------
    def meta(self) -> dict:
        return {"hidden": self.hidden, "layers": [list(e) for e in self.layers], "topk": self.topk,
                "dropouts": self.dropouts, "loss_weights": self.loss_weights, "score": self.score,
                "proj_dropout": self.proj_dropout, "seed": self.seed, "pooling": self.pooling}

    def structure_arrays(self) -> dict[str, np.ndarray]:
        return {f"tree.{k}": v for k, v in self.tree.to_arrays().items()}

    @classmethod
    def from_arrays(cls, arrays, meta: dict, *, source: str = "model", hidden_size: int | None = None):
        try:
            tree = LabelTree.from_arrays({"level_sizes": arrays["tree.level_sizes"], "parents": arrays["tree.parents"]})
            net = cls(tree, int(meta["hidden"]), [tuple(e) for e in meta["layers"]], list(meta["topk"]),
                      list(meta["dropouts"]), list(meta["loss_weights"]), str(meta["score"]),
                      float(meta["proj_dropout"]), int(meta.get("seed", 0)), str(meta.get("pooling", "cls")))
        except (KeyError, TypeError, ValueError, ConfigError) as exc:
            raise ModelFormatError(f"{source}: bad CascadeXML network ({exc!r})") from None
        if hidden_size is not None and int(hidden_size) != net.hidden:
            raise ModelFormatError(f"{source}: network expects hidden size {net.hidden}, encoder has {hidden_size}")
        net.load_dense_sparse(arrays, source)
        return net
