"""X-Transformer (Chang et al., KDD'20; ``x-transformer``): semantic label indexing with a choice of label
representation (``pifa-tfidf``, ``pifa-neural`` from the pretrained encoder, or ``text-emb``, the encoder's
embedding of each label's text), then fine-tuning on one level of ``n_clusters`` clusters with a fresh head
and every cluster scored. It shares XR-Transformer's machinery (:mod:`xmtc.methods.xr_transformer.estimator`;
both methods' matchers and figures: :mod:`xmtc.methods.xr_transformer.rankers`) and differs in the tree level it
fine-tunes and how labels are indexed."""

from __future__ import annotations

import math

from ...errors import ConfigError
from ...index.pifa import normalize_rows, pifa
from ...models.base import register
from .config import XTransformerConfig
from .estimator import _TransformerModel

__all__ = ["XTransformer", "XTransformerConfig"]


@register
class XTransformer(_TransformerModel):
    """X-Transformer: semantic label indexing, transformer fine-tuned on the leaf clusters, linear rankers."""

    method = "x-transformer"
    config_class = XTransformerConfig

    def _n_clusters(self, cfg, n_labels: int) -> int:
        b = cfg.branching
        if cfg.n_clusters:
            n = cfg.n_clusters
            k = round(math.log(n, b)) if n > 1 else 0
            if n < b or b ** k != n:
                raise ConfigError(f"n_clusters must be a power of branching={b} (>= {b}), got {n}")
            if n >= n_labels:
                raise ConfigError(f"n_clusters={n} must be below the number of labels ({n_labels})")
            return n
        if n_labels <= b:
            raise ConfigError(f"x-transformer needs more labels ({n_labels}) than branching={b}: its fine-tuned"
                              " level is a level of clusters above the labels")
        target = max(1.0, n_labels / cfg.max_leaf_size)
        k = max(1, round(math.log(target, b)))
        while b ** k >= n_labels and k > 1:
            k -= 1
        return b ** k

    def _leaf_size(self, cfg, n_labels: int) -> int:
        return max(1, math.ceil(n_labels / self._n_clusters(cfg, n_labels)))

    def _levels(self, chain, cfg) -> list[int]:
        level = max(0, len(chain) - 2)  # the leaf clusters (the labels themselves for a flat tree)
        n = self._n_clusters(cfg, chain[-1].shape[0])
        if chain[level].shape[0] != n:
            raise ConfigError(f"the tree's leaf-cluster level has {chain[level].shape[0]} clusters, not"
                              f" n_clusters={n}")
        return [level]

    def _label_embeddings(self, X_tfidf, Y, vocab, cfg, tokenized, tokenizer, encoder, device):
        from ...features.encoder import Tokenized, encode

        if cfg.indexer == "pifa-tfidf":
            return pifa(X_tfidf, Y)
        if cfg.indexer == "pifa-neural":  # PIFA on the pretrained (not yet fine-tuned) embeddings
            emb = encode(encoder, tokenized, pooling=cfg.pooling, batch_size=cfg.encode_batch_size, device=device,
                         precision=cfg.precision)
            return pifa(emb, Y)
        if vocab.texts is None or not any(vocab.texts):
            raise ConfigError("indexer 'text-emb' needs label texts: pass a label file (--label-file) or a"
                              " LabelVocab with texts")
        texts = [t or n for t, n in zip(vocab.texts, vocab.names)]
        emb = encode(encoder, Tokenized(tokenizer, texts, cfg.max_length), pooling=cfg.pooling,
                     batch_size=cfg.encode_batch_size, device=device, precision=cfg.precision)
        return normalize_rows(emb)
