"""kNN voting over training texts mixed with label-text similarity (PEFA, WSDM'24): no training at all.

PEFA ("parameter-free adapters", Chang et al., WSDM'24; PECOS ``examples/pefa-wsdm24/pefa_xl.py``) scores
a label by two things a pretrained sentence encoder ``phi`` (unit-length embeddings) gives for free: how
similar the text is to the label itself, and how often the label was given to the training texts most
similar to it:

    score(l | x) = lam * <phi(x), phi(t_l)>  +  (1 - lam) * (1 / K) * sum_{i in kNN_K(x)} <phi(x), phi(x_i)> * y_il

``t_l`` is label l's text, ``kNN_K(x)`` the K training texts nearest x, ``y_il`` 1 when training text i
carries label l. As in PEFA's code (``knn_type v0``; eq. 6 of the paper, PEFA-XL): the kNN part is
normalised by K, the label part is sparse, taken over the ``label_candidates`` labels nearest x (PEFA's
``topk_p``; a label outside that shortlist gets no label-text term), and both searches are ANN searches
(:class:`xmtc.index.ann.VectorIndex`: exact below its crossover, HNSW above). One deliberate difference:
a negative cosine counts as 0 in both parts, so that a padded slot (score 0) never ranks above a real
suggestion; the encoders meant here put nearly every candidate above 0 anyway.

Why it matters here: a label that no training text carries (a concept added to the thesaurus after the
training data was labelled) still gets ``lam * cos(x, t_l)`` and can be suggested, while labels with
documents get the kNN vote that a label-text score alone lacks. ``label_weight`` is ``lam``: 1 is
label-text similarity alone (:class:`xmtc.methods.label_text.estimator.LabelText` with the encoder scorer), 0 kNN
voting alone (then no label texts are needed).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from ...config import param
from ...errors import ConfigError, DataFormatError, ModelFormatError
from ...features.embedder import TextEmbedder
from ...index.ann import VectorIndex
from ...models.base import XMCModel, register
from ...models.ensemble import csr_topk
from ...models.storage import ModelReader, ModelWriter
from ..label_text.estimator import (LabelTextParams, fit_text_inputs, label_vector_index, load_label_index,
                                    new_label_texts, resolve_label_texts)
from ...models.base import check_texts

log = logging.getLogger(__name__)


@dataclass
class KNNConfig(LabelTextParams):
    """PEFA-XL: kNN voting over the training texts' embeddings plus label-text similarity."""

    label_weight: float = param(0.5, "lam: weight of the label-text similarity; 1 - lam weighs the kNN vote"
                                " (1 = label texts alone, 0 = kNN voting alone, no label texts needed). Chosen on"
                                " an open split of yso-finna-en-2k-20k's training file (K 16; P@1 / P@5 /"
                                " R@10_unseen): 0.5 gave 27.85 / 10.00 / 49.81, 0.3 27.35 / 10.49 / 47.66, 1"
                                " 24.60 / 9.11 / 51.08, 0 23.70 / 8.75 / 0 (benchmarks/open_labels.py).",
                                minimum=0.0, maximum=1.0)
    n_neighbors: int = param(16, "K: training texts that vote (PEFA's topk_q). At lam 0.5, K 16 / 32 / 64 gave"
                             " P@1 27.85 / 26.85 / 26.15 on the same split.", minimum=1)
    #: ``xmtc tune``'s default search space (``--param`` syntax, :mod:`xmtc.tuning.space`); every trial encodes
    #: the texts again, so a trial costs a fit
    TUNE_SPACE: ClassVar[tuple[str, ...]] = ("label_weight=0..1", "n_neighbors=4,8,16,32,64")
    label_candidates: int = param(200, "Labels nearest the text by label-text similarity that get the"
                                  " label-text term (PEFA's topk_p).", minimum=1)

    def validate(self, source: str) -> None:
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ConfigError(f"{source}: 'device' must be auto, cpu, cuda or cuda:N, got {self.device!r}")


def pefa_scores(queries: np.ndarray, n_labels: int, *, label_weight: float, text_index: VectorIndex | None = None,
                train_labels: sp.csr_matrix | None = None, n_neighbors: int = 16,
                label_index: VectorIndex | None = None, label_candidates: int = 200) -> sp.csr_matrix:
    """The module docstring's score of every candidate label, (len(queries), n_labels) csr float32.

    ``queries``: unit-length embeddings; ``text_index``: the training texts' embeddings under ids = rows of
    ``train_labels`` (docs x labels, 0/1); ``label_index``: the label texts' embeddings under ids = labels.
    """
    n = len(queries)
    out = sp.csr_matrix((n, n_labels), dtype=np.float32)
    rows = lambda ids: np.repeat(np.arange(n), ids.shape[1])  # noqa: E731
    if label_weight < 1:
        ids, sims = text_index.search(queries, n_neighbors)
        keep = ids.ravel() >= 0
        vote = sp.csr_matrix((np.maximum(sims.ravel()[keep], 0) / n_neighbors, (rows(ids)[keep], ids.ravel()[keep])),
                             shape=(n, train_labels.shape[0]), dtype=np.float32)
        out = out + (1 - label_weight) * (vote @ train_labels)
    if label_weight > 0:
        ids, sims = label_index.search(queries, min(label_candidates, n_labels))
        keep = ids.ravel() >= 0
        near = sp.csr_matrix((np.maximum(sims.ravel()[keep], 0), (rows(ids)[keep], ids.ravel()[keep])),
                             shape=(n, n_labels), dtype=np.float32)
        out = out + label_weight * near
    out = sp.csr_matrix(out, dtype=np.float32)
    out.eliminate_zeros()
    return out


@register
class KNN(XMCModel):
    """PEFA: kNN voting over training texts mixed with label-text similarity, one pretrained encoder.

    >>> model = KNN(label_weight=0.5).fit(texts, label_lists, labels=vocab)   # doctest: +SKIP
    """

    method = "knn"
    config_class = KNNConfig
    requires = ("torch", "transformers")
    extra = "transformer"
    native_label_texts = True

    def fit(self, X: Any, Y: Any, *, labels=None, progress: bool = True) -> "KNN":
        """Embed and index the training texts (those with labels) and the label texts of ``labels``."""
        cfg = self.config
        t0 = time.perf_counter()
        texts, Y = fit_text_inputs(self, X, Y, labels, "knn")
        label_texts = resolve_label_texts(self.labels_, cfg.label_texts, self.method, texts, Y) \
            if cfg.label_weight > 0 else None
        self.embedder_ = TextEmbedder(cfg).load()
        self.label_index_ = self.text_index_ = self.train_labels_ = None
        if label_texts is not None:
            self.label_index_ = label_vector_index(self.embedder_, label_texts, cfg.n_threads, progress)
        if cfg.label_weight < 1:
            rows = np.flatnonzero(Y.getnnz(axis=1))  # a document without labels has no vote to give
            if rows.size == 0:
                raise DataFormatError(None, None, "no training document has a label; kNN voting needs some")
            vectors = self.embedder_.embed([texts[i] for i in rows], progress=progress, desc="embed training texts")
            self.text_index_ = VectorIndex(metric="ip", n_threads=cfg.n_threads).build(vectors)
            self.train_labels_ = sp.csr_matrix(Y[rows], dtype=np.float32)
        log.info("knn: indexed %d training texts and %d label texts in %.1fs",
                 0 if self.text_index_ is None else len(self.text_index_),
                 0 if self.label_index_ is None else len(self.label_index_), time.perf_counter() - t0)
        return self

    def _predict_batch(self, X: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        if sp.issparse(X):
            raise DataFormatError(None, None, "the knn method needs texts, not feature vectors")
        return csr_topk(self.scores(check_texts(X)), k)

    def scores(self, texts: list[str]) -> sp.csr_matrix:
        """Every candidate label's score (the module docstring's equation), (len(texts), n_labels) csr."""
        self._check_fitted()
        return pefa_scores(self.embedder_.embed(texts), len(self.labels_), label_weight=self.label_weight,
                           text_index=self.text_index_, train_labels=self.train_labels_,
                           n_neighbors=self.n_neighbors, label_index=self.label_index_,
                           label_candidates=self.label_candidates)

    def add_labels(self, grown) -> None:
        """Add the labels that ``grown`` (this model's vocabulary with new labels appended) adds: their texts
        join the label index (no training text votes for them yet). See :meth:`LabelText.add_labels`."""
        self._check_fitted()
        first = len(self.labels_)
        if self.label_index_ is None:
            raise ConfigError("this knn model has label_weight 0: it scores no label texts, so labels cannot be"
                              " added by their text")
        self.label_index_.add(self.embedder_.embed(new_label_texts(grown, first)), np.arange(first, len(grown)))
        if self.train_labels_ is not None:
            Y = sp.csr_matrix(self.train_labels_, copy=True)
            Y.resize(Y.shape[0], len(grown))
            self.train_labels_ = Y
        self.labels_ = grown

    # -- persistence --------------------------------------------------------------------------
    def _save_stages(self, writer: ModelWriter) -> list[dict]:
        stages = [self.embedder_.to_stage(writer)]
        if self.label_index_ is not None:
            stages.append(self.label_index_.to_stage(writer, "label-index"))
        if self.text_index_ is not None:
            Y = self.train_labels_
            stages.append(self.text_index_.to_stage(writer, "text-index"))
            stages.append({"name": "train-labels", "type": "csr-docs-by-labels", "shape": list(Y.shape),
                           "file": writer.arrays("train_labels", {"indptr": Y.indptr.astype(np.int64),
                                                                  "indices": Y.indices.astype(np.int32)})})
        return stages

    def _load_stages(self, reader: ModelReader) -> None:
        self.embedder_ = TextEmbedder.from_stage(reader, self.config)
        dim = self.embedder_.dim
        self.label_index_ = self.text_index_ = self.train_labels_ = None
        if self.label_weight > 0:
            self.label_index_ = load_label_index(reader, "label-index", len(self.labels_), dim, self.n_threads)
        if self.label_weight < 1:
            self.text_index_ = VectorIndex.from_stage(reader, reader.stage("text-index"), n_threads=self.n_threads)
            arrays = reader.arrays(reader.stage_value("train-labels", "file"))
            shape = (len(self.text_index_), len(self.labels_))
            try:
                indices = arrays["indices"]
                Y = sp.csr_matrix((np.ones(indices.shape, np.float32), indices, arrays["indptr"]), shape=shape)
                Y.check_format(full_check=True)
            except (KeyError, ValueError) as exc:
                raise ModelFormatError(f"{reader.folder}: the training labels are not a {shape} csr matrix"
                                       f" ({exc})") from None
            if self.text_index_.dim != dim:
                raise ModelFormatError(f"{reader.folder}: the text index is {self.text_index_.dim}-d, the encoder"
                                       f" {dim}-d")
            self.train_labels_ = Y
