"""The dual encoder (``xmtc train --method dual-encoder`` / ``xmtc.DualEncoder(...)``): the embedding family.

A text and a label are the same kind of thing here: both go through one transformer into one vector
space, and a text's labels are its nearest label vectors (NGAME, Dahiya et al. WSDM'23; DEXA, KDD'23;
DEXML, Gupta et al. ICLR'24). The network -- label vectors (text embedding plus a free vector where
training documents exist), the contrastive step, prediction through the ANN index -- is
:mod:`xmtc.methods.dual_encoder.network`; the losses and their equations :mod:`xmtc.neural.contrastive`; hard
negatives and cluster-grouped batches :mod:`xmtc.neural.negatives`.

Training runs on the end-to-end methods' shared loop (:mod:`xmtc.neural.training_loop`): the two-tower step is one
``Network.training_loss`` that runs the batch's label texts through the (shared) encoder inside the same
forward, so the loop's optimisers, warm-up, clipping, bf16 autocast on CUDA, DDP, validation-based epoch
choice and checkpoints serve it unchanged; the mining before each epoch and the batch rows the negatives
need came in as two loop hooks (``Network.begin_epoch``, ``Network.on_batch``).

Open label sets, natively: labels of the vocabulary with no training document (a ``--label-file``'s labels
never used, columns of ``Y`` left empty) keep ``v_l = e_l`` and are suggested from their text;
:meth:`DualEncoder.add_labels` embeds the texts of new labels and adds them to the saved index (what
``xmtc labels add`` calls), no retraining. The optional second stage (``ranker``, NGAME's per-label
classifiers on the shortlist) is the end-to-end shell's re-ranker on TF-IDF + the text embedding.

Defaults, chosen on a holdout cut from yso-finna-en-2k-20k's training file (2,000 titles to train, 500 to
score; benchmarks/dual_encoder.py, benchmarks/RESULTS.md "Dual encoder"): one epoch; NGAME's
cluster-grouped batches with in-batch negatives (holdout P@1 36.8) rather than DEXML's ANN-mined negatives
on random batches (37.4, within the holdout's noise of about +-2 points, and dearer by construction: mining
encodes every training text before each epoch, cluster batches need only the label vectors); no second
stage (the per-label re-ranker fell to 16.2: with few documents per label its classifiers are near zero and
the combiner pushes the labels they do know above the network's better order).

The saved folder: the encoder (Hugging Face folder), the network (free vectors, which labels have one),
the label index (:meth:`xmtc.index.ann.VectorIndex.to_stage`), with ``towers = "two"`` the label encoder
as a second Hugging Face folder, and the re-ranker when trained.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from ...config import param
from ...data.labels import LabelVocab
from ...errors import ConfigError
from ...models.base import as_label_matrix, register
from ...models.end_to_end import EndToEndModel, EndToEndParams
from ...models.storage import ModelReader, ModelWriter
from ...models.base import check_texts
from ...native import resolve_threads


@dataclass
class DualEncoderConfig(EndToEndParams):
    """Dual encoder: texts and label texts in one space, contrastive training with hard negatives."""

    epochs: int = param(1, "Passes over the training texts.", minimum=1)
    batch_size: int = param(64, "Texts per batch; their labels and mined negatives form the step's label pool.",
                            minimum=1)
    learning_rate: float = param(1e-4, "AdamW learning rate of the encoder (peak, after warm-up).", minimum=0.0,
                                 exclusive_minimum=True)
    head_learning_rate: float = param(2e-3, "Learning rate of the free label vectors (lazy Adam: a row moves only"
                                      " when its label is in the pool).", minimum=0.0, exclusive_minimum=True)
    dense_learning_rate: float = param(0.0, "Learning rate of the label encoder with towers=two (0 ="
                                       " learning_rate).", minimum=0.0)
    towers: str = param("shared", "One encoder for texts and labels (shared, NGAME's and DEXML's) or a second"
                        " copy for the labels (two).", choices=("shared", "two"))
    free_vectors: bool = param(True, "Give every label with training documents a free vector added to its text"
                               " embedding (DEXA / NGAME's classifier half), started at that embedding.")
    loss: str = param("decoupled", "DEXML's DecoupledSoftmax (a text's other positives left out of each"
                      " positive's denominator) or InfoNCE (softmax over the whole pool).",
                      choices=("decoupled", "infonce"))
    temperature: float = param(0.05, "Softmax temperature tau on the cosine scores (DEXML's 0.05).", minimum=0.0,
                               exclusive_minimum=True)
    negatives: str = param("in-batch", "Hard negatives: mined (each text's top non-positive labels under the current"
                           " model, re-mined before each epoch; DEXML's hard-negative mining) or in-batch (the other"
                           " texts' labels only, hard when batching=cluster). yso-finna-en-2k-20k, 2,000 titles,"
                           " holdout P@1: mined + random batches 37.4, in-batch + cluster batches 36.8, without"
                           " mining's encoding pass over the training texts before each epoch.",
                           choices=("mined", "in-batch"))
    n_negatives: int = param(1, "Mined negatives sampled per text and step.", minimum=0)
    mine_topk: int = param(20, "Each text's negatives are sampled from its this many best non-positive labels.",
                           minimum=1)
    batching: str = param("cluster", "Mini-batches: random (length-sorted windows) or cluster (NGAME: texts whose"
                          " labels are close share a batch, re-clustered before each epoch).",
                          choices=("random", "cluster"))
    label_max_length: int = param(16, "Tokens kept per label text.", minimum=2)
    ranker: bool = param(False, "Second stage (NGAME): re-rank the top ranker_topk with one linear classifier per"
                         " label on TF-IDF + the text embedding (xmtc/models/reranker.py).")

    def validate(self, source: str) -> None:
        super().validate(source)
        if self.alc:
            raise ConfigError(f"{source}: the dual encoder does not train with alc")

    def train_settings(self):
        s = super().train_settings()
        s.dense_learning_rate = self.dense_learning_rate or self.learning_rate  # the label tower, if any
        return s


def label_texts(vocab: LabelVocab) -> list[str]:
    """Each label's text: its label-file text, else its display name, else its id."""
    return [vocab.texts[j] if vocab.texts is not None and vocab.texts[j] else vocab.display_name(j)
            for j in range(len(vocab))]


def _tokenizer(encoder_name: str):
    from transformers import AutoTokenizer

    from ...features.encoder import resolve_encoder_path

    return AutoTokenizer.from_pretrained(str(resolve_encoder_path(encoder_name)), local_files_only=True)


@register
class DualEncoder(EndToEndModel):
    """One transformer embeds texts and label texts; labels are the text's nearest label vectors."""

    method = "dual-encoder"
    config_class = DualEncoderConfig
    native_label_texts = True  # labels without documents are scored from their text by the network itself

    # -- training ---------------------------------------------------------------------------------------
    def fit(self, X: Any, Y: Any, *, labels=None, progress: bool = True, checkpoint_dir=None,
            resume: bool = False) -> "DualEncoder":
        """Fit on texts and labels. A ``labels`` vocabulary longer than a sparse ``Y``'s columns adds labels
        without training documents (kept, suggested from their text)."""
        if sp.issparse(X):
            raise ConfigError("DualEncoder fine-tunes a transformer on texts; got a feature matrix")
        texts = check_texts(X)
        if sp.issparse(Y) and labels is not None and Y.shape[1] < len(labels):
            Y = sp.csr_matrix(Y)
            Y = sp.csr_matrix((Y.data, Y.indices, Y.indptr), shape=(Y.shape[0], len(labels)))
        Y, vocab = as_label_matrix(Y, labels, len(texts))
        self._fit_vocab = vocab
        try:
            return super().fit(texts, Y, labels=vocab, progress=progress, checkpoint_dir=checkpoint_dir,
                               resume=resume)
        finally:
            del self._fit_vocab

    def _build_network(self, cfg, encoder, texts, Y, n_threads):
        from ...features.encoder import Tokenized, encode
        from .network import DualEncoderNetwork, normalize_rows

        label_tok = Tokenized(_tokenizer(cfg.encoder), label_texts(self._fit_vocab), cfg.label_max_length)
        tower = copy.deepcopy(encoder) if cfg.towers == "two" else None
        has_free = np.asarray(sp.csr_matrix(Y).getnnz(axis=0) > 0) if cfg.free_vectors \
            else np.zeros(Y.shape[1], dtype=bool)
        start = None
        if cfg.free_vectors:  # free vectors start at the pretrained label-text embeddings
            start = normalize_rows(encode(tower or encoder, label_tok, pooling="mean", batch_size=cfg.encode_batch_size,
                                          device=next(encoder.parameters()).device, precision=cfg.precision))
        net = DualEncoderNetwork(Y.shape[1], encoder.config.hidden_size, free_vectors=start, has_free=has_free,
                                 loss=cfg.loss, temperature=cfg.temperature, negatives=cfg.negatives,
                                 n_negatives=cfg.n_negatives, mine_topk=cfg.mine_topk, batching=cfg.batching,
                                 seed=cfg.seed)
        net.attach(encoder, label_tok, label_tower=tower, precision=cfg.precision,
                   encode_batch_size=cfg.encode_batch_size, n_threads=n_threads)
        return net

    def _network_class(self):
        from .network import DualEncoderNetwork

        return DualEncoderNetwork

    def _train(self, X, Y, **kw) -> None:
        super()._train(X, Y, **kw)
        self.network_.eval()
        self.network_.refresh_index()  # the kept epoch's weights (the trainer may have restored an earlier one)

    # -- new labels ---------------------------------------------------------------------------------------
    def add_labels(self, labels: LabelVocab | list[str]) -> list[str]:
        """Add the labels of ``labels`` (a vocabulary with texts, or label names used as texts) that the model
        does not know: their texts are embedded and added to the index, so they are suggested at once; the
        vocabulary grows with them. Returns the names added.

        This is the native half of :func:`xmtc.models.open_labels.add_labels` (what ``xmtc labels add``
        runs), which grows the per-label arrays (training counts 0, calibration bands, removed-label mask)
        after it; call that function to add labels to a model that is then saved."""
        from ...features.encoder import Tokenized

        self._check_fitted()
        vocab = labels if isinstance(labels, LabelVocab) else LabelVocab(list(labels))
        new = [j for j, n in enumerate(vocab.names) if n not in self.labels_.index]
        if not new:
            return []
        old = self.labels_

        def column(attr, fallback):
            mine, theirs = getattr(old, attr), getattr(vocab, attr)
            if mine is None and theirs is None:
                return None
            mine = mine if mine is not None else [""] * len(old)
            return mine + [theirs[j] if theirs is not None else fallback(j) for j in new]

        new_texts = label_texts(vocab)
        merged = LabelVocab(old.names + [vocab.names[j] for j in new], display=column("display", lambda j: ""),
                            texts=column("texts", lambda j: new_texts[j]), uris=column("uris", lambda j: ""))
        tok_new = Tokenized(self.tokenizer_, [new_texts[j] for j in new], self.label_max_length)
        vectors = self.network_.text_embeddings(tokenized=tok_new)
        self.network_.add_labels(Tokenized(self.tokenizer_, label_texts(merged), self.label_max_length), vectors)
        self.labels_ = merged
        return [vocab.names[j] for j in new]

    # -- persistence --------------------------------------------------------------------------------------
    def _save_stages(self, writer: ModelWriter) -> list[dict]:
        stages = super()._save_stages(writer)
        stages.append(self.network_.index.to_stage(writer, "label-index"))
        if self.network_.label_tower is not None:
            folder = writer.folder("label-encoder")
            self.network_.label_tower.save_pretrained(str(folder), safe_serialization=True)
            stages.append({"name": "label-encoder", "type": "hf-transformer", "folder": "label-encoder"})
        return stages

    def _load_stages(self, reader: ModelReader) -> None:
        from ...features.encoder import Tokenized, load_saved_encoder
        from ...index.ann import VectorIndex

        super()._load_stages(reader)
        tower = None
        if self.towers == "two":
            st = reader.stage("label-encoder")
            _, tower = load_saved_encoder(reader.subfolder(st["folder"]), self.device_)
            tower.eval()
        n_threads = resolve_threads(self.n_threads)
        label_tok = Tokenized(self.tokenizer_, label_texts(self.labels_), self.label_max_length)
        self.network_.attach(self.encoder_, label_tok, label_tower=tower, precision=self.precision,
                             encode_batch_size=self.encode_batch_size, n_threads=n_threads)
        index = VectorIndex.from_stage(reader, reader.stage("label-index"), n_threads=n_threads)
        if len(index) != len(self.labels_):
            from ...errors import ModelFormatError

            raise ModelFormatError(f"{reader.folder}: the label index holds {len(index)} vectors for"
                                   f" {len(self.labels_)} labels")
        self.network_.index, self.network_._stale = index, False
