"""Label-text similarity: a text's labels are the labels whose texts it resembles most. No training.

Every other method learns a closed label set from training documents: a label no document carries can
never be suggested. A thesaurus grows (YSO adds concepts monthly; 337 yso-finna-en labels occur only in
its test split), and the only thing known of a new concept is its text (preferred plus alternative
labels). Scoring by that text alone is the zero-shot baseline of the label-text literature (SemSup-XC's
TF-IDF baseline; the label-text part of PEFA, :mod:`xmtc.methods.knn.estimator`):

    score(l | x) = cos(phi(x), phi(t_l))

with ``t_l`` label l's text and ``phi`` one of two scorers (``scorer``):

* ``tfidf``: TF-IDF (:class:`xmtc.features.tfidf.TfidfFeaturizer`, L2-normalised rows) fitted on the label
  texts plus the training texts when given (their document frequencies make the IDF of catalogue words
  realistic; ``min_df`` 1 by default so that a word found only in one label's text still counts); the
  label matrix is sparse and a batch's scores are one sparse product.
* ``encoder``: a pretrained sentence encoder's mean-pooled, unit-length embedding
  (:class:`xmtc.features.embedder.TextEmbedder`); the label vectors sit in a
  :class:`xmtc.index.ann.VectorIndex` (exact search below its crossover, HNSW above).

``fit(texts, label_lists, labels=vocab)`` only indexes the label texts of ``vocab`` (``xmtc train
--label-file``: every label of the file, also those without a document). Where the labels have no texts
(a training file without ``--label-file``) it refuses in one line, unless told where else to find them:
``label_texts="names"`` makes each label's display name, or its id, its text (right for word-like ids such
as StackOverflow tags, meaningless for YSO's ``p1234``); ``label_texts="documents"`` joins the label's
training texts into its text, which turns the method into a nearest-centroid classifier (Rocchio) and
leaves labels without documents to their names. With label texts from the file, the training documents
matter for nothing but the TF-IDF's document frequencies and the label counts that calibration and
PSP@k read.
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
from ...features.embedder import EmbedderParams, TextEmbedder
from ...index.ann import VectorIndex
from ...models.base import XMCModel, as_label_matrix, register
from ...models.ensemble import csr_topk
from ...models.storage import ModelReader, ModelWriter
from ...features.params import TfidfParams
from ...models.base import check_texts

log = logging.getLogger(__name__)

LABEL_TEXTS = ("file", "names", "documents")
_CHUNK = 1024  # texts scored per sparse product (bounds the product's size on common words)


@dataclass
class LabelTextParams(EmbedderParams):
    """Where each label's text comes from (shared by every method that reads label texts)."""

    label_texts: str = param("file", "Each label's text: file = the label file's text column (--label-file;"
                             " an error without one), names = the label's display name, or its id when it has"
                             " none (for word-like label ids, e.g. tags), documents = its training texts joined"
                             " (a nearest-centroid classifier, for labels known only by their documents).",
                             choices=LABEL_TEXTS)
    n_threads: int = param(0, "Threads for the TF-IDF rows or the vector index (0 = all cores).", minimum=0)


@dataclass
class LabelTextConfig(LabelTextParams, TfidfParams):
    """Label-text similarity: TF-IDF or encoder cosine between a text and each label's text."""

    scorer: str = param("tfidf", "How texts are compared: tfidf = cosine of TF-IDF vectors (label texts and"
                        " training texts fit the IDF), encoder = cosine of the pretrained encoder's embeddings.",
                        choices=("tfidf", "encoder"))
    min_df: int = param(1, "TF-IDF: drop n-grams found in fewer label and training texts than this (1 keeps a"
                        " word that only one label's text has).", minimum=1)
    ngram_max: int = param(2, "TF-IDF: longest word n-gram used as a feature.", minimum=1, maximum=5)

    #: ``xmtc tune``'s default search space (``--param`` syntax, :mod:`xmtc.tuning.space`)
    TUNE_SPACE: ClassVar[tuple[str, ...]] = ("ngram_max=1,2,3", "min_df=1,2,3", "sublinear_tf=true,false",
                                             "max_df=0.05,0.2,0.5,1.0")

    def validate(self, source: str) -> None:
        TfidfParams.validate(self, source)
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ConfigError(f"{source}: 'device' must be auto, cpu, cuda or cuda:N, got {self.device!r}")


def resolve_label_texts(vocab, source: str, method: str, texts: list[str] | None = None,
                        Y: sp.csr_matrix | None = None) -> list[str]:
    """Each label's text for ``label_texts=source`` (see :class:`LabelTextParams`; ``documents`` reads the
    training ``texts`` and their labels ``Y``); a ConfigError naming ``--label-file`` where the vocabulary
    has none and ``source`` is ``file``."""
    if source == "documents":
        if texts is None or Y is None:
            raise ConfigError(f"the {method} method: label_texts=documents needs the training texts")
        Yc = sp.csc_matrix(Y)
        return [" ".join(texts[i] for i in Yc.indices[Yc.indptr[j]:Yc.indptr[j + 1]]) or vocab.display_name(j)
                for j in range(len(vocab))]
    if source == "names":
        return [vocab.texts[j] if vocab.texts and vocab.texts[j] else vocab.display_name(j) for j in range(len(vocab))]
    if vocab.texts is None or not any(vocab.texts):
        raise ConfigError(f"the {method} method needs label texts: pass a label file with a text column"
                          " (--label-file, e.g. yso-finna-en's labels.txt.gz), or label_texts=names"
                          " (--label-texts names) to use the label names as their texts")
    return [t or (vocab.display[j] if vocab.display else "") for j, t in enumerate(vocab.texts)]


def fit_text_inputs(model: XMCModel, X: Any, Y: Any, labels, what: str) -> tuple[list[str], sp.csr_matrix]:
    """The shared start of a training-free fit: texts checked, labels as a matrix, and the model's label
    vocabulary, training counts and size set (no calibration yet); ``what`` names the method in errors."""
    if sp.issparse(X):
        raise ConfigError(f"the {what} method compares texts; it cannot use precomputed features")
    texts = check_texts(X)
    Y, vocab = as_label_matrix(Y, labels, len(texts))
    model.calibration_ = None
    model.labels_ = vocab
    model.label_counts_ = np.asarray(Y.getnnz(axis=0), dtype=np.int64)
    model.n_train_ = max(1, len(texts))
    return texts, Y


def new_label_texts(grown, first: int) -> list[str]:
    """The texts of the labels ``first..`` of a grown vocabulary: its text, else its display name or id."""
    return [grown.texts[j] if grown.texts and grown.texts[j] else grown.display_name(j)
            for j in range(first, len(grown))]


def label_vector_index(embedder: TextEmbedder, texts: list[str], n_threads: int, progress: bool) -> VectorIndex:
    """An inner-product index over the unit-length embeddings of ``texts``, id j = label j."""
    vectors = embedder.embed(texts, progress=progress, desc="embed label texts")
    return VectorIndex(metric="ip", n_threads=n_threads).build(vectors)


def load_label_index(reader: ModelReader, name: str, n_labels: int, dim: int, n_threads: int) -> VectorIndex:
    index = VectorIndex.from_stage(reader, reader.stage(name), n_threads=n_threads)
    if len(index) != n_labels or index.dim != dim:
        raise ModelFormatError(f"{reader.folder}: stage {name!r} holds {len(index)} vectors of dimension"
                               f" {index.dim}; the model has {n_labels} labels and a {dim}-d encoder")
    return index


def finite_topk(ids: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A vector index's top-k with its -1 / -inf padding turned into xmtc's -1 / 0."""
    return ids.astype(np.int32), np.where(ids >= 0, scores, 0).astype(np.float32)


@register
class LabelText(XMCModel):
    """Suggest the labels whose texts are most similar to the text (TF-IDF or encoder cosine).

    >>> model = LabelText(scorer="tfidf").fit(texts, label_lists, labels=vocab)   # doctest: +SKIP
    """

    method = "label-text"
    config_class = LabelTextConfig
    cheap_refit = True
    native_label_texts = True

    def fit(self, X: Any, Y: Any, *, labels=None, progress: bool = True) -> "LabelText":
        """Index the label texts of ``labels`` (a :class:`~xmtc.data.labels.LabelVocab`); ``X`` (texts)
        and ``Y`` (their label lists or a sparse 0/1 matrix) give the TF-IDF's document frequencies and
        the label counts."""
        cfg = self.config
        t0 = time.perf_counter()
        texts, Y = fit_text_inputs(self, X, Y, labels, "label-text")
        vocab = self.labels_
        label_texts = resolve_label_texts(vocab, cfg.label_texts, self.method, texts, Y)
        self.featurizer_ = self.embedder_ = self.index_ = self.label_matrix_ = None
        if cfg.scorer == "tfidf":
            self.featurizer_ = cfg.make_featurizer(cfg.n_threads)
            self.featurizer_.fit(label_texts + texts)
            self.label_matrix_ = sp.csr_matrix(self.featurizer_.transform(label_texts).T, dtype=np.float32)
        else:
            self.embedder_ = TextEmbedder(cfg).load()
            self.index_ = label_vector_index(self.embedder_, label_texts, cfg.n_threads, progress)
        log.info("indexed %d label texts (%s) in %.1fs", len(vocab), cfg.scorer, time.perf_counter() - t0)
        return self

    # -- prediction ---------------------------------------------------------------------------
    def _predict_batch(self, X: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        if sp.issparse(X):
            raise DataFormatError(None, None, "the label-text method needs texts, not feature vectors")
        texts = check_texts(X)
        if self.scorer == "encoder":
            return finite_topk(*self.index_.search(self.embedder_.embed(texts), k))
        parts = [csr_topk(self.featurizer_.transform(texts[s:s + _CHUNK]) @ self.label_matrix_, k)
                 for s in range(0, len(texts), _CHUNK)]
        if not parts:
            return np.zeros((0, k), np.int32), np.zeros((0, k), np.float32)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def label_scores(self, texts: list[str]) -> np.ndarray:
        """Dense (len(texts), n_labels) cosines (for small label sets and tests)."""
        self._check_fitted()
        if self.scorer == "encoder":
            ids, scores = self.index_.search(self.embedder_.embed(texts), len(self.labels_))
            out = np.zeros((len(texts), len(self.labels_)), np.float32)
            rows, cols = np.nonzero(ids >= 0)  # -1 pads a row where the index holds fewer vectors: no label
            out[rows, ids[rows, cols]] = scores[rows, cols]
            return out
        return (self.featurizer_.transform(texts) @ self.label_matrix_).toarray()

    def add_labels(self, grown) -> None:
        """Index the labels that ``grown`` (this model's vocabulary with new labels appended) adds, by their
        text, or name where they have none: suggested at once, no refit. The native half of
        :func:`xmtc.models.open_labels.add_labels` (``xmtc labels add``), which grows the per-label arrays."""
        self._check_fitted()
        first = len(self.labels_)
        texts = new_label_texts(grown, first)
        if self.scorer == "encoder":
            self.index_.add(self.embedder_.embed(texts), np.arange(first, len(grown)))
        else:
            cols = sp.csr_matrix(self.featurizer_.transform(texts).T, dtype=np.float32)
            self.label_matrix_ = sp.csr_matrix(sp.hstack([self.label_matrix_, cols]), dtype=np.float32)
        self.labels_ = grown

    # -- persistence --------------------------------------------------------------------------
    def _save_stages(self, writer: ModelWriter) -> list[dict]:
        if self.scorer == "encoder":
            return [self.embedder_.to_stage(writer), self.index_.to_stage(writer, "label-index")]
        params, arrays = self.featurizer_.to_arrays()
        M = self.label_matrix_
        return [{"name": "featurizer", "type": "tfidf", "params": params, "file": writer.arrays("featurizer", arrays)},
                {"name": "label-matrix", "type": "csr-features-by-labels", "shape": list(M.shape),
                 "file": writer.arrays("label_matrix", {"indptr": M.indptr.astype(np.int64),
                                                        "indices": M.indices.astype(np.int32), "data": M.data})}]

    def _load_stages(self, reader: ModelReader) -> None:
        self.featurizer_ = self.embedder_ = self.index_ = self.label_matrix_ = None
        if self.scorer == "encoder":
            self.embedder_ = TextEmbedder.from_stage(reader, self.config)
            self.index_ = load_label_index(reader, "label-index", len(self.labels_), self.embedder_.dim,
                                           self.n_threads)
            return
        from ...features.tfidf import TfidfFeaturizer

        st = reader.stage("featurizer")
        self.featurizer_ = TfidfFeaturizer.from_arrays(st.get("params", {}), reader.arrays(st["file"]))
        arrays = reader.arrays(reader.stage_value("label-matrix", "file"))
        shape = (self.featurizer_.n_features_, len(self.labels_))
        try:
            self.label_matrix_ = sp.csr_matrix((arrays["data"], arrays["indices"], arrays["indptr"]), shape=shape)
            self.label_matrix_.check_format(full_check=True)
        except (KeyError, ValueError) as exc:
            raise ModelFormatError(f"{reader.folder}: the label matrix is not a {shape} csr matrix ({exc})") from None
