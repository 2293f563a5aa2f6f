"""The ranking stage of XR-Transformer and X-Transformer: what is trained on ``[tfidf, w * normalize(emb)]`` once
the encoder is fine-tuned, and the matcher that picks the clusters whose labels it scores.

Separate from the estimator (:mod:`xmtc.methods.xr_transformer.estimator`, which fine-tunes the encoder and then
calls :func:`fit_rankers`) because it is a stage of its own with its own choices, each measured below: it reads
only the finished embeddings, the tree and the fine-tuned heads, never the fine-tuning.

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
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np
import scipy.sparse as sp

from ...errors import ConfigError
from ..xr_linear.estimator import plain_linear_fit

log = logging.getLogger(__name__)


def fit_rankers(model, X_cat: sp.csr_matrix, Y: sp.csr_matrix, tree, chain, levels, embeddings, settings,
                n_threads: int, *, linear_fit=None, progress: bool = True) -> None:
    """Train ``model``'s ranking stage on ``X_cat = [tfidf, embedding]`` of its training texts.

    ``matcher="linear"``: one XR-Linear model (``linear_fit``, default :func:`plain_linear_fit`) over the tree
    ``model._ranker_tree`` cuts from the fine-tuning ``tree``. ``"neural"``: the matcher's levels
    (:func:`neural_matcher_levels`), their heads refit (:func:`refit_matcher_heads`) unless
    ``matcher_heads="fine-tuned"``, and :class:`~xmtc.linear.cluster_rankers.ClusterRankers` trained inside the
    matcher's beam (:func:`matcher_beam`) on the training ``embeddings``.
    """
    cfg = model.config
    if cfg.matcher == "linear":
        model.models_ = [(linear_fit or plain_linear_fit)(
            X_cat, Y, model._ranker_tree(tree, cfg), negatives=cfg.negatives, C_pos=cfg.C_pos, C_neg=cfg.C_neg, bias=cfg.bias,
            tol=cfg.tol, max_iter=cfg.max_iter, threshold=cfg.threshold, beam_size=cfg.beam_size,
            n_threads=n_threads, progress=progress)]
        return
    from ...linear.cluster_rankers import ClusterRankers

    model.models_ = []
    model.matcher_levels_, model.matcher_children_ = neural_matcher_levels(chain, levels)
    if cfg.matcher_heads == "refit":
        refit_matcher_heads(model, embeddings, Y, chain, settings)
    beam_ids, beam_sc = matcher_beam(model, embeddings)
    model.rankers_ = ClusterRankers().fit(
        X_cat, Y, chain, model.matcher_levels_[-1] + 1, beam_ids, beam_sc, negatives=cfg.negatives,
        C_pos=cfg.C_pos, C_neg=cfg.C_neg, bias=cfg.bias, tol=cfg.tol, max_iter=cfg.max_iter,
        threshold=cfg.threshold, beam_size=cfg.beam_size, n_threads=n_threads)


# -- the linear matcher -----------------------------------------------------------------------------------
def ranker_tree(tree, ranker_leaves: str, leaf_size):
    """The linear matcher's tree: the fine-tuning tree cut at the cluster level ``ranker_leaves`` picks.

    ``nearest``: the cluster level t whose size K_t minimises ``|log(K_t * max_leaf_size / L)|`` (ties to
    the finer level) becomes the leaves, every label hanging from its level-t ancestor; ``finest`` (or a
    tree with one cluster level) keeps the tree. ``leaf_size(L)`` is the method's max_leaf_size for L labels,
    asked only when the tree may be cut.
    """
    from ...index.tree import LabelTree

    sizes = tree.level_sizes[:-1]  # the cluster levels K_1 .. K_D
    if ranker_leaves == "finest" or len(sizes) < 2:
        return tree
    target = tree.n_labels / leaf_size(tree.n_labels)
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


# -- the neural matcher -----------------------------------------------------------------------------------
def neural_matcher_levels(chain, levels) -> tuple[list[int], list[sp.csr_matrix]]:
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
    return use, [children_csr(chain[t].indices.astype(np.int64), chain[t].shape[1]) for t in use]


def refit_matcher_heads(model, emb: np.ndarray, Y: sp.csr_matrix, chain, settings) -> None:
    """Replace the matcher levels' heads of ``model`` by eq. 11's optimum on the finished encoder's embeddings.

    Measured on yso-finna-en-2k-20k (one saved model, rankers refit each time, beam 10, matcher_combine
    ranker): recall of the positive level-2 clusters in the beam 53.4 -> 55.3, P@1 34.22 -> 35.18.
    """
    from .bootstrap import refit_heads
    from .finetune import level_positives

    t0 = time.perf_counter()
    model.heads_.update(refit_heads(np.asarray(emb, dtype=np.float32), chain, model.matcher_levels_,
                                    level_positives(Y, chain), settings.shortlist_topk,
                                    neg_weight=settings.neg_weight, n_threads=settings.n_threads))
    log.info("matcher heads of levels %s refit on the final embeddings in %.1fs", model.matcher_levels_,
             time.perf_counter() - t0)


def matcher_beam(model, emb: np.ndarray):
    """``model``'s neural matcher's beam; its scores are 1 where ``matcher_combine="ranker"`` (the rankers alone
    then order the labels inside it)."""
    from .matcher import neural_beam

    heads = [model.heads_[t] for t in model.matcher_levels_]
    ids, sc = neural_beam(np.asarray(emb, dtype=np.float32), heads, model.matcher_children_, model.beam_size,
                          post_processor="l3-hinge")
    if model.matcher_combine == "ranker":
        sc = np.where(ids >= 0, 1.0, 0.0).astype(np.float32)
    return ids, sc
