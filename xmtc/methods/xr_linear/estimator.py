"""XR-Linear (Parabel-style): TF-IDF -> PIFA label tree -> linear matchers/rankers -> beam search.

With ``n_trees > 1`` the model is an ensemble of trees that differ only in the k-means seed; their
top-k scores are averaged (a label missing from one tree's candidates counts as 0 there), the
omikuji/Parabel recipe that trades train time for a point or so of precision. The default
``n_trees=0`` (auto, :func:`~xmtc.methods.xr_linear.config.resolve_n_trees`) trains 2 trees on label sets of at most 4,096 labels with
documents that need a tree and 1 otherwise; the trees of an ensemble stop their solvers at ``ensemble_tol`` (0.5) instead
of ``tol`` (0.1), which the averaging absorbs (see that parameter).

Against PECOS's XR-Linear (1.2.8; its C++ solver ``pecos/core/xmc/linear_solver.hpp`` and beam search
``pecos/core/xmc/inference.hpp`` read for this), measured on bibtex, delicious, reuters and
yso-finna-en-2k-20k with ``benchmarks/linear.py --tree-seeds 0,1,2,3,4`` and ``--same-tree``
(benchmarks/RESULTS.md, "XR-Linear accuracy against PECOS"):

* Tree shape, the one systematic difference. PECOS makes the leaves the smallest power of two
  ``>= L / max_leaf_size`` (a balanced binary tree split until its leaves hold at most 100 labels)
  and groups the binary levels 16 at a time; a 16-way split at every level (``tree_shape="full"``)
  gives bibtex's 159 labels 16 leaves of ~10 labels where PECOS has 2 of ~80, and yso-finna-en-2k-20k
  [16, 256, 1994] where PECOS has [2, 32, 1994]. Over five tree seeds that cost 1.10 P@1 / 0.21 P@5 on
  bibtex and 0.18 / 0.08 on 2k-20k. ``tree_shape="binary"`` (default) builds PECOS's shapes;
  ``"full"`` is the 16-way rule. Delicious (983 labels) and the full yso-finna-en get the same shape
  either way, reuters (90) is flat in both.
* Same tree, same TFN negatives: the per-node solvers agree. Both run liblinear's dual coordinate
  descent for the L2-regularised squared hinge with a regularised bias feature of value 1, Cp = Cn = 1,
  eps 0.1, 100 epochs, shrinking; summed over a level the primal objectives at the two solutions
  differ by < 1e-4 relative (per node < 3e-2, the eps-0.1 stopping rule; neither is lower
  systematically). Scores are combined the same way (``l3-hinge``: ``exp(-max(0, 1 - s)^3)``
  multiplied down the tree from the first level's transformed score). On the same tree (seed 0) with
  the same threshold 0.1, xmtc - PECOS is -0.12 / -0.13 / +0.08 P@1 and -0.02 / +0.24 / +0.02 P@5 on
  bibtex / delicious / 2k-20k: the size of the tree-seed noise, either sign (the two dual solvers
  visit rows in different random orders).
* Deliberate differences: the weight threshold (0.05 here, PECOS 0.1; see ``threshold``); PECOS also
  drops a bias weight below the threshold (1-2 of 983 delicious rankers, none on the other sets),
  xmtc keeps it; beam 10 (PECOS's Python ``train`` leaves 20, its CLI 10); and two trees at solver
  tolerance 0.5 by default on label sets of at most 4,096 labels (PECOS trains one at 0.1): over tree
  seeds 0-4, P@1 / P@5 went from 63.63 / 28.05 (one tree) to 63.83 / 28.21 on bibtex, 66.01 / 55.52 to
  66.29 / 55.57 on delicious and 30.20 / 10.17 to 31.00 / 10.49 on yso-finna-en-2k-20k, against PECOS's
  one tree at 63.45 / 28.06, 66.03 / 55.45 and 29.95 / 10.13, for 0.43-0.47x the CPU time of the three
  trees at 0.1 that were the default before; ``n_trees=1`` is PECOS's model.
"""

from __future__ import annotations

import dataclasses

import logging
import time
from typing import Any, Optional

import numpy as np
import scipy.sparse as sp

from ...errors import ConfigError, DataFormatError, ModelFormatError
from ...index.pifa import pifa
from ...index.tree import LabelTree, tree_depth
from ...linear.hierarchy import HierarchicalLinearModel
from ...models.base import XMCModel, as_label_matrix, check_texts, register
from ...models.storage import ModelReader, ModelWriter
from ...native import resolve_threads
from ...progress import progress_bar
from .config import XRLinearConfig, resolve_n_trees

# The TF-IDF featurizer and the tree ensemble are imported where they are used: a model trained on given
# features (or loaded to score given features) then never imports the text path.
log = logging.getLogger(__name__)


@register
class XRLinear(XMCModel):
    """XR-Linear / Parabel: a linear eXtreme Multi-label Ranker over a hierarchical label tree.

    >>> model = XRLinear(n_trees=3).fit(texts, label_lists)     # doctest: +SKIP
    >>> model.predict(["history of finnish railways"], k=5)      # doctest: +SKIP
    """

    method = "xr-linear"
    cheap_refit = True
    config_class = XRLinearConfig
    can_learn = True

    @classmethod
    def _params_from_manifest(cls, reader: ModelReader) -> dict:
        # saved before rows of given features were normalised: they were used as given, so they stay so
        params = dict(reader.manifest.get("params") or {})
        if "normalize_features" in {f.name for f in dataclasses.fields(cls.config_class)}:  # not the subclasses'
            params.setdefault("normalize_features", False)
        reader.manifest["params"] = params
        return super()._params_from_manifest(reader)

    # -- training -----------------------------------------------------------------------------
    def fit(self, X: Any, Y: Any, *, labels=None, tree: Optional[LabelTree] = None, progress: bool = True,
            linear_fit=None, keep_featurizer: bool = False, texts=None) -> "XRLinear":
        """Fit on texts (list of str) or precomputed features (sparse, n x d) and their labels.

        ``Y`` is a list of label-name lists or a sparse 0/1 matrix (n x L); ``labels`` optionally gives
        the :class:`~xmtc.data.labels.LabelVocab` (names in column order, optional label texts).
        ``tree`` is a given label tree (a :class:`~xmtc.index.tree.LabelTree` over the L labels, e.g.
        another library's clustering) used instead of clustering PIFA; it needs ``n_trees=1``.
        ``linear_fit(X, Y, tree, **settings)`` replaces :meth:`HierarchicalLinearModel.fit` for the
        matcher and rankers, e.g. :func:`xmtc.distributed.ray_backend.linear_fit` (same model, trained
        as Ray tasks); it must return a fitted :class:`HierarchicalLinearModel`. ``keep_featurizer``: ``X`` is
        sparse rows of :meth:`fit_featurizer`'s features, and the model keeps that featurizer for its texts;
        ``texts``: then, those rows' texts, which the remembered training rows keep (:mod:`xmtc.models.memory`).
        """
        cfg = self.config
        t0 = time.perf_counter()
        if not sp.issparse(X):
            X = check_texts(X)
        # labels first: a mismatch should not wait for featurizing to finish
        Y, vocab = as_label_matrix(Y, labels, X.shape[0] if sp.issparse(X) else len(X))
        if keep_featurizer:
            if getattr(self, "featurizer_", None) is None or not sp.issparse(X):
                raise ConfigError("keep_featurizer needs the sparse features of fit_featurizer(), called first")
            X_feat = _check_features(X, self.featurizer_.n_features_)
        else:
            X_feat = self._fit_features(X, cfg, progress)
        self.calibration_ = None  # a calibration belongs to the weights it was fitted on
        self.labels_ = vocab
        self.label_counts_ = np.asarray(Y.getnnz(axis=0), dtype=np.int64)
        self.n_train_ = int(X_feat.shape[0])
        self.n_features_ = int(X_feat.shape[1])
        n_threads = resolve_threads(cfg.n_threads)
        t1 = time.perf_counter()
        if tree is not None and not isinstance(tree, LabelTree):
            tree = LabelTree(tree)  # a chain of cluster matrices
        if tree is not None and (cfg.n_trees > 1 or tree.n_labels != Y.shape[1]):
            raise ConfigError(f"a given tree needs n_trees=1 and one leaf per label; got n_trees={cfg.n_trees}"
                              f" and a tree over {tree.n_labels} labels for {Y.shape[1]}")
        # a label set that fits in one leaf gets the flat tree, which needs no label embeddings
        flat = tree is None and tree_depth(Y.shape[1], cfg.branching, cfg.max_leaf_size) == 0
        # counted: the labels with documents, whose rankers the trees' time grows with (a whole vocabulary as
        # label file adds 25,760 doc-less labels to yso-finna-en-2k-20k's 1,994; counted, they cost it its
        # second tree: P@1 30.78 -> 29.62)
        documented = int(np.count_nonzero(self.label_counts_))
        n_trees = 1 if tree is not None else resolve_n_trees(cfg.n_trees, documented, flat)
        label_emb = None if flat or tree is not None else pifa(X_feat, Y)
        # every tree first, then the label embeddings go: they are as large as the weights of the
        # last level (PIFA has a row per label) and no linear model needs them
        trees = []
        for t in range(n_trees):
            if tree is not None:
                trees.append(tree)
            elif flat:
                trees.append(LabelTree.from_parents([np.zeros(Y.shape[1], dtype=np.int32)]))
            else:
                from ...index.kmeans import build_label_tree

                trees.append(build_label_tree(label_emb, branching=cfg.branching, max_leaf_size=cfg.max_leaf_size,
                                              seed=cfg.seed + t, max_iter=cfg.kmeans_max_iter, n_threads=n_threads,
                                              shape=cfg.tree_shape))
        del label_emb
        log.info("label trees %s built in %.1fs", [tr.level_sizes for tr in trees], time.perf_counter() - t1)
        # the trees are independent: two at a time where there are two (a tree's small levels and the work between
        # levels leave a core idle), each with the threads given, advancing one bar; a given linear_fit (Ray)
        # schedules its own
        workers = 1 if linear_fit is not None else min(len(trees), 2, n_threads)
        bar = progress_bar(progress and workers > 1, total=sum(len(tr.level_sizes) for tr in trees),
                           desc="linear levels", unit="level")

        def fit_tree(t: int, tree: LabelTree) -> HierarchicalLinearModel:
            t2 = time.perf_counter()
            model = (linear_fit or plain_linear_fit)(
                X_feat, Y, tree, negatives=cfg.negatives, C_pos=cfg.C_pos, C_neg=cfg.C_neg, bias=cfg.bias,
                tol=cfg.tree_tol(n_trees), max_iter=cfg.max_iter, threshold=cfg.threshold,
                beam_size=cfg.beam_size, n_threads=n_threads, progress=bar if workers > 1 and progress else progress)
            log.info("tree %d/%d: levels %s, linear models %.1fs", t + 1, n_trees, tree.level_sizes,
                     time.perf_counter() - t2)
            return model

        try:
            if workers > 1:
                from concurrent.futures import ThreadPoolExecutor

                with ThreadPoolExecutor(max_workers=workers) as pool:
                    self.models_ = list(pool.map(fit_tree, range(len(trees)), trees))
            else:
                self.models_ = [fit_tree(t, tree) for t, tree in enumerate(trees)]
        finally:
            bar.close()
        self.memory_ = self.few_shot_ = None
        if cfg.memory_rows > 0:
            from ...models.memory import TrainingMemory

            own_texts = X if isinstance(X, list) else (check_texts(texts) if texts is not None else None)
            if own_texts is not None and len(own_texts) != X_feat.shape[0]:
                raise ConfigError(f"{len(own_texts)} texts for {X_feat.shape[0]} rows")
            self.memory_ = TrainingMemory.sample(X_feat, Y, cfg.memory_rows, cfg.seed, texts=own_texts)
        log.info("trained XR-Linear on %d documents, %d features, %d labels in %.1fs", X_feat.shape[0],
                 X_feat.shape[1], Y.shape[1], time.perf_counter() - t0)
        return self

    def learn(self, X: Any, Y: Any, *, labels=None, replay=None, anchor: float = 4.0, memory: bool = True,
              whole_memory_refit: bool = True, curvature: bool = False, few_shot: bool | str = True,
              new_words: bool = True, sampled_replay: bool = True, progress: bool = False) -> "XRLinear":
        """Update the model with new labelled documents, new labels included, without a retrain: the
        tree stays, the texts' words the TF-IDF vocabulary lacks join it (``new_words=False``: it stays as
        trained), new labels join the leaf cluster their documents are routed to, and only
        nodes whose training data changed are refitted, pulled toward their old weights with strength
        ``anchor``; ``replay=(X_old, Y_old)`` refits on the old documents too; a label without a ranker so far
        is fitted against the remembered training rows (``memory=False``: on its new documents alone, for
        comparison; ``whole_memory_refit=False``: the proximal update even when every training row is remembered;
        ``curvature``: each feature held by the remembered rows' curvature instead of one ``anchor``; ``few_shot``:
        labels learned from 2-5 documents scored flat as well, :mod:`xmtc.models.few_shot`; ``sampled_replay``:
        the refits replay a sample of the remembered rows around a shifted centre, False: the anchor alone).
        See :mod:`xmtc.models.learning`. Returns self; a score calibration is kept.
        """
        from ...models.learning import learn_tree_model

        return learn_tree_model(self, X, Y, labels=labels, replay=replay, anchor=anchor, memory=memory,
                                whole_memory_refit=whole_memory_refit, curvature=curvature, few_shot=few_shot,
                                new_words=new_words, sampled_replay=sampled_replay, progress=progress)

    def fit_featurizer(self, texts: Any) -> sp.csr_matrix:
        """Fit the TF-IDF featurizer on ``texts`` and return their features, for fits on rows of them
        (``fit(rows, ..., keep_featurizer=True)``): ``xmtc train`` featurizes once for its two fits."""
        return self._fit_features(check_texts(texts), self.config, False)

    def _fit_features(self, X: Any, cfg: XRLinearConfig, progress: bool) -> sp.csr_matrix:
        if sp.issparse(X):
            self.featurizer_ = None
            return _given_rows(_check_features(X, None), cfg)
        t0 = time.perf_counter()
        self.featurizer_ = cfg.tfidf().make_featurizer(cfg.n_threads)
        self.featurizer_.remember_rare = self.can_learn  # a learn counts on the n-grams too rare to keep
        X_feat = self.featurizer_.fit_transform(X)
        log.info("TF-IDF: %d documents -> %d features in %.1fs", len(X), X_feat.shape[1],
                 time.perf_counter() - t0)
        return X_feat

    # -- prediction ---------------------------------------------------------------------------
    def transform(self, X: Any) -> sp.csr_matrix:
        """Features of the inputs as this model sees them (TF-IDF of texts, or checked sparse rows)."""
        self._check_fitted()
        if sp.issparse(X):
            X = _check_features(X, self.n_features_)
            # rows of given features, normalised as in training; a text model's sparse rows are its own TF-IDF's
            return _given_rows(X, self.config) if self.featurizer_ is None else X
        if self.featurizer_ is None:
            raise ConfigError("this model was trained on precomputed features; pass a sparse matrix"
                              f" with {self.n_features_} columns, not texts")
        return self.featurizer_.transform(check_texts(X))

    def _predict_batch(self, X: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self._predict_features(self.transform(X), k)

    def _raw_topk(self, X: Any, k: int) -> tuple[np.ndarray, np.ndarray, Any]:
        """With few-shot rankers (only after a ``learn``, which the subclasses refuse) the features go on to them:
        each text is featurized once."""
        if getattr(self, "few_shot_", None) is None:
            return super()._raw_topk(X, k)
        X_feat = self.transform(X)
        return (*self._predict_features(X_feat, k), X_feat)

    def _raw_prefix(self, k_small: int, k_large: int) -> bool:
        """One tree's raw top-k is a prefix of any deeper one (beam search keeps the best of the same candidates by
        score, then label id); averaged trees only while each tree's list is as long (``max(k, beam_size)``).
        A subclass that predicts its own way promises nothing."""
        if type(self)._predict_batch is not XRLinear._predict_batch or \
                type(self)._predict_features is not XRLinear._predict_features:
            return super()._raw_prefix(k_small, k_large)
        if k_small > k_large:
            return False
        return len(self.models_) == 1 or max(k_small, self.beam_size) == max(k_large, self.beam_size)

    def _label_score(self) -> str:
        """How a label's score joins its cluster's (:func:`~xmtc.linear.beam.beam_search`): PECOS's product."""
        return "product"

    def _predict_features(self, X_feat: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Uncalibrated top-k of features from :meth:`transform`."""
        # n_threads bounds prediction as it bounds training (0 / None: every available CPU)
        kwargs = dict(beam_size=self.beam_size, post_processor=self.post_processor, label_score=self._label_score(),
                      n_threads=getattr(self, "n_threads", None))
        if len(self.models_) == 1:
            return self.models_[0].predict_topk(X_feat, k, **kwargs)
        from ...models.ensemble import average_topk

        k_each = max(k, self.beam_size)
        parts = [m.predict_topk(X_feat, k_each, **kwargs) for m in self.models_]
        return average_topk(parts, self.n_labels, k)

    def explain(self, X: Any, k: int = 5, n_terms: int = 10) -> list[list[dict]]:
        """Per text, its top-k labels with the terms that contributed most to each score.

        Returns ``[[{"label", "score", "margin", "bias", "terms": [{"term", "weight"}, ...]}, ...], ...]``
        (terms by weight, descending); contributions are exact ``x_j * w_j`` summed along the label's
        tree path, see :mod:`xmtc.models.explain`.
        """
        from ...models.explain import explain_model

        return explain_model(self, X, k, n_terms)

    # -- persistence --------------------------------------------------------------------------
    def _own_features_only(self) -> bool:
        """Whether the featurizer alone makes the linear models' features (subclasses that append an
        embedding check the count once their encoder is loaded)."""
        return True

    def _check_feature_count(self, reader: ModelReader, produced: int) -> None:
        if produced != self.n_features_:
            raise ModelFormatError(f"{reader.folder}: stage 'features' declares {self.n_features_} features,"
                                   f" but the featurizer and encoder produce {produced}")

    def _save_stages(self, writer: ModelWriter) -> list[dict]:
        from .stages import save_stages

        return save_stages(self, writer)

    def _load_stages(self, reader: ModelReader) -> None:
        from .stages import load_stages

        load_stages(self, reader)


def plain_linear_fit(X, Y, tree, **settings) -> HierarchicalLinearModel:
    return HierarchicalLinearModel().fit(X, Y, tree, **settings)


def _given_rows(X: sp.csr_matrix, cfg: XRLinearConfig) -> sp.csr_matrix:
    """Rows of given features as the model uses them: unit L2 norm with ``normalize_features`` (zero rows stay
    zero), else as given (and for the subclasses, whose configs lack the field and read texts)."""
    if not getattr(cfg, "normalize_features", False):
        return X
    from ...index.pifa import normalize_rows

    return normalize_rows(X)


def _check_features(X: Any, n_features: int | None) -> sp.csr_matrix:
    X = sp.csr_matrix(X, dtype=np.float32)
    if n_features is not None and X.shape[1] != n_features:
        raise DataFormatError(None, None, f"features have {X.shape[1]} columns but the model expects"
                                          f" {n_features}")
    if X.nnz and not np.all(np.isfinite(X.data)):
        raise DataFormatError(None, None, "features contain NaN or infinite values")
    X.sort_indices()
    return X
