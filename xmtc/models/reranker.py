"""A linear re-ranker on TF-IDF + the network's text representation, below any end-to-end method.

ELIAS++ (Gupta et al., NeurIPS'22) re-scores ELIAS's top-100 labels with one-vs-all linear classifiers
on sparse bag-of-words and dense encoder features; XR-Transformer's rankers are the same kind of model
on the same kind of features. The composition does not depend on ELIAS: any end-to-end network that
proposes a top-k with scores can hand it to this stage. So it is one part of the end-to-end shell
(``ranker=true``), ELIAS++'s default and an option of LightXML, APLC and CascadeXML, whose papers have
no such stage. ``ranker=false`` removes this stage only: the network alone, still with xmtc's other
defaults (centroid head starts, the heads' and dense layers' own learning rates), not the paper's
configuration as a whole.

* features: ``[tfidf, w * normalize(rep)]`` (:func:`~xmtc.features.concat.concat_features`),
  ``rep`` the network's text representation of the trained model (eval mode), ``w`` the
  ``embedding_weight``; the TF-IDF vocabulary is fitted on the training texts;
* classifiers: one per label (:class:`~xmtc.linear.cluster_rankers.ClusterRankers` on a two-level "tree" in
  which every label is its own cluster), trained with the papers' negatives -- a label's positives plus
  the training texts whose network top-``topk`` holds it (TFN + MAN);
* score: ``exp(-max(0, 1 - r)^3) * network score`` (PECOS's ``l3-hinge`` combiner), over the network's
  top-``topk`` only: the re-ranker never adds a label the network did not propose.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import scipy.sparse as sp

from ..errors import ModelFormatError

log = logging.getLogger(__name__)


def identity_chain(n_labels: int) -> list[sp.csr_matrix]:
    """The rankers' two-level "tree": every label its own cluster under the root."""
    return [sp.csr_matrix(np.ones((n_labels, 1), dtype=np.float32)),
            sp.identity(n_labels, dtype=np.float32, format="csr")]


class SparseReranker:
    """TF-IDF featurizer + per-label linear rankers over a network's top-k (see the module docstring)."""

    def __init__(self, featurizer, embedding_weight: float = 1.0):
        self.featurizer = featurizer
        self.embedding_weight = float(embedding_weight)
        self.rankers = None
        self.n_features = 0
        self.embedding_dim = 0
        self.seconds = 0.0

    def features(self, texts: list[str], rep: np.ndarray) -> sp.csr_matrix:
        from ..features.concat import concat_features

        return concat_features(self.featurizer.transform(texts), rep, self.embedding_weight)

    def fit(self, texts: list[str], Y: sp.csr_matrix, ids: np.ndarray, scores: np.ndarray, rep: np.ndarray, *,
            C_pos: float = 1.0, C_neg: float = 1.0, threshold: float = 0.05, n_threads: int | None = None
            ) -> SparseReranker:
        """Fit the vocabulary on ``texts`` and one ranker per label on the network's top-k ``ids`` / ``scores``
        (padding -1) of the same texts, whose representations are ``rep``."""
        from ..linear.cluster_rankers import ClusterRankers
        from ..features.concat import concat_features

        t0 = time.perf_counter()
        X = concat_features(self.featurizer.fit_transform(texts), rep, self.embedding_weight)
        self.n_features, self.embedding_dim = int(X.shape[1]), int(rep.shape[1])
        self.rankers = ClusterRankers().fit(
            X, Y, identity_chain(Y.shape[1]), 1, ids, scores, negatives="tfn+man", C_pos=C_pos, C_neg=C_neg,
            threshold=threshold, beam_size=ids.shape[1], n_threads=n_threads)
        self.seconds = time.perf_counter() - t0
        log.info("re-ranker on %d features (%d dense) over the top %d in %.1fs", self.n_features,
                 self.embedding_dim, ids.shape[1], self.seconds)
        return self

    def predict_topk(self, texts: list[str], ids: np.ndarray, scores: np.ndarray, rep: np.ndarray, k: int, *,
                     n_threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The network's top ``ids`` / ``scores`` re-scored and cut to ``k``."""
        if rep.shape[1] != self.embedding_dim:
            raise ModelFormatError(f"the re-ranker was trained on {self.embedding_dim}-d representations, the"
                                   f" network gives {rep.shape[1]}")
        return self.rankers.predict_topk(self.features(texts, rep), ids, scores, k, beam_size=ids.shape[1],
                                         n_threads=n_threads)

    # -- persistence ---------------------------------------------------------------------------------
    def stages(self, writer) -> list[dict]:
        params, arrays = self.featurizer.to_arrays()
        return [{"name": "featurizer", "type": "tfidf", "params": params, "file": writer.arrays("featurizer", arrays)},
                {"name": "rankers", "type": "cluster-rankers", "n_features": self.n_features,
                 "embedding_dim": self.embedding_dim, "file": writer.arrays("rankers", self.rankers.to_arrays())}]

    @classmethod
    def from_stages(cls, reader, embedding_weight: float) -> SparseReranker:
        """Rebuild from a model folder (the stages :meth:`stages` wrote)."""
        from ..features.tfidf import TfidfFeaturizer
        from ..linear.cluster_rankers import ClusterRankers

        names = [st.get("name") for st in reader.manifest["stages"]]
        if "rankers" not in names or "featurizer" not in names:
            raise ModelFormatError(f"{reader.folder}: a model with ranker=true needs its featurizer and rankers"
                                   " stages")
        st = reader.stage("featurizer")
        out = cls(TfidfFeaturizer.from_arrays(st.get("params", {}), reader.arrays(st["file"])), embedding_weight)
        out.n_features = reader.stage_value("rankers", "n_features", int)
        # models saved before the stage recorded it: the features past the vocabulary are the dense part
        out.embedding_dim = int(reader.stage("rankers").get("embedding_dim",
                                                             out.n_features - out.featurizer.n_features_))
        out.rankers = ClusterRankers.from_arrays(reader.arrays(reader.stage_value("rankers", "file")))
        if out.rankers.n_features != out.n_features or out.embedding_dim <= 0 \
                or out.n_features != out.featurizer.n_features_ + out.embedding_dim:
            raise ModelFormatError(f"{reader.folder}: rankers have {out.rankers.n_features} features, the"
                                   f" featurizer gives {out.featurizer.n_features_} + {out.embedding_dim} dense")
        return out
