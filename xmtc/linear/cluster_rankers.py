"""Linear rankers below a neural matcher: the levels of the tree under the clusters a matcher selects.

XR-Transformer's and X-Transformer's ranking stage (``--matcher neural``): the neural matcher's beam at
level m (cluster ids with scores) is handed to one-vs-all linear models of levels m+1 .. D-1 on
``[tfidf, embedding]``, which score only the children of those clusters. Training follows the papers'
negatives: for level m+1, TFN = the texts positive somewhere in the cluster, MAN = the texts the
*neural matcher* sent there by mistake (its beam on the training texts); deeper levels (when the tree
has more levels than were fine-tuned) take MAN from the rankers' own beam, as XR-Linear does.

The final score combines matcher and ranker as PECOS's ``XLinearModel.predict(csr_codes=...)`` does
with its default ``l3-hinge`` post-processor: each ranker score s is transformed to
``exp(-max(0, 1 - s)^3)`` and multiplied with its parent's (matcher) score (``xmtc.linear.beam``).
"""

from __future__ import annotations

import logging
import time

import numpy as np
import scipy.sparse as sp

from ..errors import ModelFormatError
from .beam import BeamLevel, beam_step, prepare_features
from .negatives import active_mask, check_negatives, level_targets

log = logging.getLogger(__name__)


class ClusterRankers:
    """Levels ``start .. D-1`` of a tree as linear models, entered from a matcher's beam at ``start - 1``."""

    def __init__(self) -> None:
        self.levels_: list[BeamLevel] = []
        self.start_ = 0

    @property
    def n_features(self) -> int:
        return self.levels_[0].n_features

    def fit(self, X, Y, chain, start: int, beam_ids: np.ndarray, beam_scores: np.ndarray, *, negatives="tfn+man",
            C_pos=1.0, C_neg=1.0, bias=1.0, tol=0.1, max_iter=100, threshold=0.05, beam_size=10, n_threads=None
            ) -> "ClusterRankers":
        from .solver import train_level

        check_negatives(negatives)
        X = prepare_features(X, X.shape[1])
        targets = level_targets(sp.csr_matrix(Y), chain)
        ids = np.ascontiguousarray(beam_ids, dtype=np.int32)
        sc = np.ascontiguousarray(beam_scores, dtype=np.float32)
        self.levels_, self.start_ = [], int(start)
        for t in range(start, len(chain)):
            t0 = time.perf_counter()
            C = chain[t]
            parent_of = C.indices.astype(np.int64)
            active = active_mask(negatives, t, targets, ids)
            W = train_level(X, targets[t], parent_of, active, C_pos=C_pos, C_neg=C_neg, bias=bias, tol=tol,
                            max_iter=max_iter, threshold=threshold, n_threads=n_threads)
            level = BeamLevel.from_weights(W, parent_of, C.shape[1], bias=bias)
            self.levels_.append(level)
            if t < len(chain) - 1:
                ids, sc = beam_step(X, level, ids, sc, beam_size, n_threads=n_threads)
            log.info("ranker level %d/%d: %d nodes, %d (text, parent) pairs, %.1fs", t + 1, len(chain), C.shape[0],
                     active.nnz, time.perf_counter() - t0)
        return self

    def predict_topk(self, X, beam_ids, beam_scores, k: int, *, beam_size: int = 10,
                     post_processor: str = "l3-hinge", n_threads=None):
        X = prepare_features(X, self.n_features)
        ids = np.ascontiguousarray(beam_ids, dtype=np.int32)
        sc = np.ascontiguousarray(beam_scores, dtype=np.float32)
        for t, level in enumerate(self.levels_):
            keep = k if t == len(self.levels_) - 1 else beam_size
            ids, sc = beam_step(X, level, ids, sc, keep, post_processor=post_processor, n_threads=n_threads)
        return ids, sc

    def to_arrays(self) -> dict[str, np.ndarray]:
        out = {"start": np.array([self.start_], dtype=np.int64), "n_levels": np.array([len(self.levels_)], np.int64),
               "bias": np.array([self.levels_[0].bias], dtype=np.float32),
               "n_parents0": np.array([self.levels_[0].n_parents], dtype=np.int64)}
        for t, lv in enumerate(self.levels_):
            W = lv.to_weights()
            out[f"W{t}.data"], out[f"W{t}.indices"] = W.data, W.indices.astype(np.int32)
            out[f"W{t}.indptr"], out[f"W{t}.shape"] = W.indptr.astype(np.int64), np.array(W.shape, dtype=np.int64)
            out[f"C{t}.parent"] = lv.parent_of
        return out

    @classmethod
    def from_arrays(cls, arrays) -> "ClusterRankers":
        try:
            n_levels, bias = int(arrays["n_levels"][0]), float(arrays["bias"][0])
            n_parents = int(arrays["n_parents0"][0])
            self = cls()
            self.start_ = int(arrays["start"][0])
            for t in range(n_levels):
                shape = tuple(int(x) for x in arrays[f"W{t}.shape"])
                W = sp.csc_matrix((arrays[f"W{t}.data"], arrays[f"W{t}.indices"], arrays[f"W{t}.indptr"]), shape=shape)
                parent = np.asarray(arrays[f"C{t}.parent"], dtype=np.int64)
                if parent.shape != (shape[1],) or (parent.size and (parent.min() < 0 or parent.max() >= n_parents)):
                    raise ModelFormatError(f"rankers, level {t}: parents do not match the level above")
                self.levels_.append(BeamLevel.from_weights(W, parent, n_parents, bias=bias))
                n_parents = shape[1]
        except KeyError as exc:
            raise ModelFormatError(f"rankers: missing array {exc}") from None
        except (ValueError, IndexError) as exc:
            raise ModelFormatError(f"rankers: inconsistent arrays ({exc})") from None
        return self
