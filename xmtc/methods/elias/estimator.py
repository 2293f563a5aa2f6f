"""ELIAS and ELIAS++ (Gupta et al., NeurIPS'22): ``xmtc train --method elias [--ranker]`` / ``xmtc.ELIAS(...)``.

The network (cluster scores, the learned cluster -> label graph, path x classifier scores, the loss) is
:mod:`xmtc.methods.elias.network`; the training loop, validation-based epoch selection, SWA, checkpoints and the
model folder are the shared end-to-end shell (:mod:`xmtc.models.end_to_end`). Training runs the paper's
three steps, each a plain use of the shell's parts:

1. **stage 1** -- the label clusters are the leaves of a balanced 2-means tree on PIFA over TF-IDF
   (``cluster_size`` labels at most, as the reference's ``max_leaf``); the adjacency is that tree, fixed;
   the encoder, W_C and W_L train for ``epochs`` epochs (``learning_rate`` / ``head_learning_rate`` /
   ``loss_lambda``);
2. **approximate adjacency** -- the stage-1 model's top-``beam_size`` cluster scores of every training
   text (``M``), each cluster keeping the ``kappa`` labels of largest ``(M^T Y)_{c,l}``;
3. **stage 2** -- that sparsity pattern with learned edge weights, trained end to end with the rest for
   ``stage2_epochs`` epochs (``stage2_learning_rate`` / ``stage2_head_learning_rate`` /
   ``stage2_loss_lambda``). Each stage keeps its best validation epoch (a split of the training data).

**ELIAS++** (``ranker=True``): the end-to-end shell's re-ranker (:mod:`xmtc.models.reranker`, which
every end-to-end method can use): one-vs-all linear rankers on ``[tfidf, w * normalize(embedding)]``
re-rank ELIAS's top-``ranker_topk`` (100). They are trained with the papers'
negatives: a label's positives plus the training texts that ELIAS put in its top-100 (TFN + MAN), and the
final score is ``exp(-max(0, 1 - r)^3) * elias_score`` (PECOS's ``l3-hinge`` combiner, which the reference's
ELIAS++ uses through PECOS).

Where this differs from the reference code (nilesh2797/ELIAS ``run_benchmark.sh``, ``elias_utils.py``,
``nets.py``, ``optimizer_bundles.py``):

* the reference clusters twice (a first clustering on BOW, 5 epochs of stage 1, then re-clustering on
  ``[BOW, embedding]`` PIFA and stage 1 again); we cluster once on TF-IDF PIFA (the paper's method; the
  re-clustering is a refinement of the reference's script that is not part of the method);
* the reference re-initialises W_L at stage 2 (it loads only the encoder and W_C from stage 1); we keep
  the stage-1 W_L by default (``reset_classifier=False``): with a few CPU epochs per stage there is no
  time to relearn it. ``reset_classifier=True`` is the reference's choice;
* phi(x) defaults to the masked mean of the last layer's token states (``pooling="mean"``, the
  reference's ``tf_pooler: mean`` option) rather than its default [CLS] state (``pooling="cls"``):
  all-MiniLM-L6-v2 was trained as a mean-pooled sentence encoder, so the mean is informative from the
  first step of a short CPU run;
* stage 2's edge logits start at ``log A_approx`` (``adjacency_init="approx"``) rather than the code's
  U(0, 1) (``adjacency_init="random"``), and a label that no cluster keeps among its kappa keeps the edge
  from its stage-1 cluster (``keep_tree_edges``; the code leaves it unreachable). See
  :mod:`xmtc.methods.elias.network` for why;
* the reference gives W_C, W_L and the edge logits separate rates (stage 2: W_C 1e-4, W_L and A 5e-3);
  the core has one rate for a method's own layers per run, so per stage W_C, A and W_L share
  ``*head_learning_rate``;
* ELIAS++: the reference's ranker is PECOS's ``MLModel`` on ``[normalize(emb), normalize(BOW)]`` with
  TFN + MAN from the top-100; ours is the project's solver on ``[tfidf, w * normalize(emb)]`` (the same
  features as XR-Transformer's rankers); the reference's optional decision-tree calibration on test-time
  statistics is not reproduced.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...config import param
from ...models.base import as_label_matrix, register
from ...models.end_to_end import EndToEndModel, EndToEndParams, label_clusters, validation_split
from ...models.base import check_texts

log = logging.getLogger(__name__)


@dataclass
class ELIASConfig(EndToEndParams):
    """ELIAS: a learned sparse cluster -> label graph searched end to end (stage 1 tree, stage 2 learned);
    ``ranker`` adds ELIAS++'s linear re-ranker."""

    epochs: int = param(3, "Stage-1 epochs (fixed tree adjacency).", minimum=1)
    learning_rate: float = param(1e-4, "Stage 1: AdamW rate of the encoder (peak, after warm-up).",
                                 minimum=0.0, exclusive_minimum=True)
    head_learning_rate: float = param(1e-2, "Stage 1: rate of W_C and W_L. The reference's 0.005 is for dense"
                                      " Adam; W_L's lazy Adam moves a label's row only on the steps where it is"
                                      " shortlisted and needs the larger rate (yso-finna-en-2k-20k, 2 + 1 epochs at"
                                      " 0.005: validation P@1 2.5 after the first epoch; 3 + 1 at 1e-2: 19.6).",
                                      minimum=0.0, exclusive_minimum=True)
    stage2_epochs: int = param(1, "Stage-2 epochs (learned adjacency).", minimum=1)
    stage2_learning_rate: float = param(5e-5, "Stage 2: AdamW rate of the encoder.", minimum=0.0,
                                        exclusive_minimum=True)
    stage2_head_learning_rate: float = param(1e-2, "Stage 2: rate of W_C, the edge logits and W_L (the"
                                             " reference's 0.005, for dense Adam; see head_learning_rate).",
                                             minimum=0.0,
                                             exclusive_minimum=True)
    n_layers: int = param(1, "[CLS] states of the last this many encoder layers form phi(x) (the reference: 1).",
                          minimum=1)
    pooling: str = param("mean", "phi(x): mean = masked mean of the token states (the reference's tf_pooler"
                         " mean option; the pooling all-MiniLM-L6-v2 was trained with), cls = the [CLS] state (the"
                         " reference's default).", choices=("mean", "cls"))
    dropout: float = param(0.5, "Dropout on phi(x) during training (the reference's 0.5).", minimum=0.0,
                           maximum=0.95)
    cluster_size: int = param(32, "Most labels per cluster of the stage-1 tree (the reference's max_leaf, 100 for"
                              " its 131K-3M labels).", minimum=1)
    beam_size: int = param(10, "Clusters searched per text (b; the reference's 20).", minimum=1)
    kappa: int = param(320, "Labels per cluster in the learned adjacency (the reference's 1000, ~10 x max_leaf).",
                       minimum=1)
    shortlist_size: int = param(320, "Top-K paths whose labels the classifier scores (the reference's 2000,"
                                " beam x max_leaf).", minimum=1)
    alpha: float = param(10.0, "Cluster score clamp(alpha * softmax(W_C phi), 0, 1): about how many clusters can"
                         " score 1 (the reference's 10).", minimum=0.0, exclusive_minimum=True)
    beta: float = param(48.0, "Edge weight clamp(beta * row-softmax(a), 0, 1): about how many labels per cluster"
                        " can weigh 1 (the reference's 150 for max_leaf 100, scaled here to 1.5 x cluster_size).",
                        minimum=0.0, exclusive_minimum=True)
    loss_lambda: float = param(0.01, "Stage 1: weight of the path (shortlist) loss (the reference's 0.01).",
                               minimum=0.0)
    stage2_loss_lambda: float = param(0.05, "Stage 2: weight of the path loss (the reference's 0.05).", minimum=0.0)
    extra_train_clusters: int = param(5, "Training shortlist: at most beam_size + this many clusters, sampled by"
                                      " score when the positives' clusters add more (the reference's 5).",
                                      minimum=0)
    adjacency_init: str = param("approx", "Stage-2 edge logits: approx = log of the approximate adjacency's"
                                " values (edge weights start at min(1, beta * A / row sum)); random = U(0, 1) as the"
                                " reference code (only A_approx's sparsity is kept).", choices=("approx", "random"))
    keep_tree_edges: bool = param(True, "Stage 2: a label that no cluster keeps among its kappa gets the edge"
                                  " from its stage-1 cluster (false: such labels are unreachable, as in the"
                                  " reference code).")
    reset_classifier: bool = param(False, "Stage 2 starts W_L from scratch (the reference code) instead of from"
                                   " stage 1.")
    head_init: str = param("centroid", "How stage 1's W_C and W_L start: centroid (rows on the standardised"
                           " centroids of their clusters' and labels' training texts under the pretrained encoder;"
                           " see xmtc/neural/head_init.py) or random (the reference's). yso-finna-en-2k-20k, 3 + 1"
                           " epochs: ELIAS++ test P@1 38.22 from the centroid start, 36.98 from the random one.",
                           choices=("random", "centroid"))
    ranker: bool = param(True, "ELIAS++ (the default): re-rank the top ranker_topk with linear rankers on TF-IDF +"
                         " embedding; false = ELIAS alone. yso-finna-en-2k-20k, 3 + 1 epochs, 2 CPU threads, centroid"
                         " start: ELIAS++ test P@1 38.22 in 946 s, ELIAS alone 34.80 in 877 s (benchmarks/RESULTS.md).")


@register
class ELIAS(EndToEndModel):
    """ELIAS: encoder + cluster scores + learned sparse cluster -> label graph + label classifier (+ ELIAS++
    rankers)."""

    method = "elias"
    config_class = ELIASConfig

    # -- the shell's hooks (stage 1) ---------------------------------------------------------------
    def _build_network(self, cfg, encoder, texts, Y, n_threads):
        from .adjacency import tree_adjacency
        from .network import ELIASNetwork

        X = cfg.tfidf().make_featurizer(cfg.n_threads).fit_transform(texts)
        clusters = label_clusters(X, Y, cfg.cluster_size, seed=cfg.seed, n_threads=n_threads)
        n_clusters = int(clusters.max()) + 1
        return ELIASNetwork(encoder.config.hidden_size, Y.shape[1], tree_adjacency(clusters, n_clusters), stage=1,
                            **self._network_kwargs(cfg, encoder, stage=1))

    def _network_class(self):
        from .network import ELIASNetwork

        return ELIASNetwork

    @staticmethod
    def _network_kwargs(cfg, encoder, stage: int) -> dict:
        return {"alpha": cfg.alpha, "beta": cfg.beta, "beam_size": cfg.beam_size, "shortlist_size": cfg.shortlist_size,
                    "loss_lambda": cfg.loss_lambda if stage == 1 else cfg.stage2_loss_lambda,
                    "extra_train_clusters": cfg.extra_train_clusters,
                    "n_layers": min(cfg.n_layers, encoder.config.num_hidden_layers), "pooling": cfg.pooling,
                    "dropout": cfg.dropout,
                    "seed": cfg.seed + stage - 1}

    # -- training: stage 1 (the shell), approximate adjacency, stage 2, ELIAS++ ------------------------
    def _train(self, X: Any, Y: Any, *, labels=None, progress: bool = True, checkpoint_dir=None,
               resume: bool = False) -> None:
        """Stage 1, the approximate adjacency and stage 2 (the shell's ``fit`` then adds ELIAS++'s re-ranker).

        ``checkpoint_dir`` keeps each stage's training state in its ``stage1`` / ``stage2`` subfolder;
        ``resume`` continues either (a finished stage 1 is restored from its last checkpoint, not re-run).
        """
        from pathlib import Path

        import torch

        from ...features.encoder import Tokenized
        from ...neural.checkpoint import Checkpoint
        from ...neural.training_loop import EndToEndTrainer
        from .adjacency import add_missing_labels, approximate_adjacency
        from .network import ELIASNetwork
        from ...models.end_to_end import data_fingerprint

        t0 = time.perf_counter()
        cfg = self.config
        ck = Path(checkpoint_dir) if checkpoint_dir else None
        super()._train(X, Y, labels=labels, progress=progress, checkpoint_dir=ck / "stage1" if ck else None,
                       resume=resume)
        history1, best1 = self.history_, self.best_epoch_
        texts = check_texts(X)
        Y, _ = as_label_matrix(Y, labels, len(texts))
        train_rows, valid_rows = validation_split(len(texts), cfg.valid_size, cfg.seed)
        tokenized = Tokenized(self.tokenizer_, texts, cfg.max_length)
        tok_train, Y_train = tokenized.take(train_rows), Y[train_rows]
        net1 = self.network_
        # 2. the approximate adjacency from the stage-1 model's cluster beams on the training texts
        t1 = time.perf_counter()
        beam_ids, beam_sc = self._cluster_beams(tok_train, progress)
        index, values = approximate_adjacency(beam_ids, beam_sc, Y_train, net1.n_clusters, cfg.kappa)
        reach = np.unique(index[index >= 0]).size
        if cfg.keep_tree_edges:
            index, values = add_missing_labels(index, values, net1.cluster_of_label())
        log.info("ELIAS approximate adjacency: %d clusters x kappa %d, %d of %d labels reachable (%.1fs)",
                 index.shape[0], cfg.kappa, reach, Y.shape[1], time.perf_counter() - t1)
        # 3. stage 2: the learned adjacency, initialised from stage 1's encoder, W_C (and W_L)
        head = None if cfg.reset_classifier else net1.sparse_heads["labels"].numpy()
        net2 = ELIASNetwork(net1.hidden, net1.n_labels, index, stage=2, label_head=head,
                            adj_values=values if cfg.adjacency_init == "approx" else None,
                            **self._network_kwargs(cfg, self.encoder_, stage=2))
        net2.cluster_head.load_state_dict(net1.cluster_head.state_dict())
        net2.to_device(self.device_)
        s2 = cfg.train_settings()
        s2.epochs, s2.learning_rate = cfg.stage2_epochs, cfg.stage2_learning_rate
        s2.head_learning_rate = cfg.stage2_head_learning_rate
        from ...neural.distributed import init_distributed
        ctx = init_distributed()
        valid = (tokenized.take(valid_rows), Y[valid_rows]) if valid_rows.size else None
        trainer = EndToEndTrainer(self.encoder_, net2, tok_train, Y_train, s2, self.device_, ctx, valid=valid,
                                  name="train elias stage 2")
        ckpt = Checkpoint(ck / "stage2", data_fingerprint(self.get_params(), texts, Y)) if ck else None
        if ckpt is not None:
            start = ckpt.load() if resume else None
            if start is not None:
                trainer.restore(start)
            elif not resume:
                ckpt.clear()
        torch.manual_seed(cfg.seed + 1)
        result = trainer.run(progress, ckpt.save if ckpt is not None and ctx.is_main else None)
        self.network_ = net2
        self.history_ = [{"stage": 1, **h} for h in history1] + [{"stage": 2, **h} for h in result["history"]]
        self.best_epoch_ = result["best_epoch"]
        self.stage1_best_epoch_ = best1
        self.loss_curve_ = self.loss_curve_ + result["loss_curve"]
        self.reachable_labels_ = int(reach)
        log.info("trained ELIAS's two stages in %.1fs", time.perf_counter() - t0)

    def _cluster_beams(self, tokenized, progress: bool):
        """Top-``beam_size`` cluster ids and scores of every tokenized text (no teacher forcing, eval mode)."""
        from ...neural.inference import eval_batches

        n, b = len(tokenized), min(self.network_.beam_size, self.network_.n_clusters)
        ids = np.full((n, b), -1, dtype=np.int64)
        sc = np.zeros((n, b), dtype=np.float32)
        for pos, rep in eval_batches(self.encoder_, self.network_, tokenized, self.encode_batch_size, self.device_,
                                     self.precision, progress, "cluster beams"):
            i, v = self.network_.cluster_beam(rep)
            ids[pos], sc[pos] = i.cpu().numpy(), v.float().cpu().numpy()
        return ids, sc
