"""Labels learned from a few documents, scored flat: a ranker fitted against every remembered training row and
a probability read off those same rows.

**Why.** ``learn`` hangs a new label under one leaf cluster of each tree (:mod:`xmtc.linear.update`), and a text
reaches it only through the beam, whose cluster rankers were fitted on hundreds of other labels' documents.
Three documents barely move a cluster's ranker, so a text that carries the label reaches its cluster with a
small path score, and the label's own ranker, trained on three positives, multiplies it further down. Measured
on yso-finna-en-2k-20k (10 labels of 3 documents each learned into a model trained without them, seed 1): the
learned label's cluster was in the beam of 41 of 52 such texts, and the label was in the top 10 of 8; "Rhetoric
and community : studies in unity and fragmentation" reached the cluster of "rhetoric" (learned from "In defence
of rhetoric" and two others) with a path score of 0.011 against 0.0135 for the tenth suggestion.

**What.** A label that ``learn`` fits without a ranker of its own so far (new, or with no document until now)
and that has :data:`MIN_DOCS` to :data:`FEW` documents after the learn gets, besides its place in the trees, a
linear ranker ``w_j`` fitted on all remembered training rows (:mod:`xmtc.models.memory`) -- its documents the
positives, every other row a negative standing for ``omega = seen / remembered`` documents, the fit's own ``C``
-- and for a text with decision value ``s = x w_j`` the probability

    p_j(s) = max over t <= s of  A_j(t) / (A_j(t) + omega * N_j(t) + 1)

``A_j(s)``: the label's documents whose *leave-one-out* decision value (the ranker refitted without that
document) is at least ``s`` -- how a new document of the label scores, not how the ones it was fitted on do;
``N_j(s)``: the remembered rows without the label that score at least ``s``, each scored *out of sample* (by a
ranker fitted without its half of the rows, even or odd) and standing for ``omega``
documents. So ``p`` is the share of the label's documents among all documents that score at least ``s``, with
one pseudo-negative (a text that scores above every known document is not certain): what every calibrated
score in xmtc estimates, P(correct), counted on the model's own data instead of a validation map fitted on
labels with many documents. The label's score is the higher of the trees' calibrated score and ``p_j`` (cut
for a text the model can hardly read, as its own scores are); the stage's list is merged into the model's
top-k as the label-text route's is (:func:`xmtc.models.label_route.merge_topk`).

**Two scorers.** Where the learn and the model's remembered rows have texts (a model trained on texts, the
default), a new stage scores by character n-grams instead of this ranker: ``s = x . c_j``, the cosine of the
text's character 3-5-gram row to the mean of the label's documents' rows, with the same ``p_j(s)`` counted on
the remembered texts (:mod:`xmtc.models.few_shot_chars`, where the figures are: 22.4% -> 34.1% of the carriers
found on five draws). ``few_shot="words"`` keeps the ranker below (fitted in
:mod:`xmtc.models.few_shot_words`); a stage keeps the scorer it was made with.

**The ranker's choices, measured** (yso-finna-en-2k-20k, the case above, seeds 0 / 1 / 2, learned labels in the top 10
of the texts that carry them / their share of the top-5 slots of texts that do not):

* trees alone 23.8 / 15.4 / 24.5% and 0.16 / 0.13 / 0.21%; the stage as built 26.2 / 28.8 / 26.5% and 0.24 /
  0.30 / 0.35%, P@1 30.86 / 30.24 / 30.60 against 30.86 / 30.22 / 30.62 (``benchmarks/learn_few.py``;
  benchmarks/RESULTS.md, "Labels learned from a few documents, scored flat", has the probe's figures for the
  variants below);
* the plain precision at ``s`` (not interpolated: a text above every leave-one-out value got 0): 23.8 / 23.1 /
  26.5% and 0.20 / 0.26 / 0.31%;
* the documents' own (in-sample) decision values in place of the leave-one-out ones (a prototype, top 10 of
  ``predict(k=20)``): 34.9 / 42.3 / 36.7% but 1.54 / 1.59 / 1.82% of the others' slots (the documents a ranker
  was fitted on score higher than new ones);
* the negatives scored by the ranker fitted on them (not cross-fitted): 0.32 / 0.55 / 0.60% of the slots for
  the same recall, and its probabilities of 0.1-0.3 right 0-7% of the time (those rows' own fit pushed their
  values down);
* the unit centroid of the label's documents (cosine, no solver) in place of the ranker: 23.3 / 19.2 / 26.5%,
  0.31 / 0.49 / 0.51% (measured, not kept);
* a label's prior at a typical label's count instead of its own (A scaled 4x, 2k-20k's median count 12 against
  3 documents): 25.6 / 25.0 / 28.6% but 1.15% and 1.06% of the slots on seeds 1 and 2.

On yso-finna-en (517,535 documents, 50,000 remembered, omega 10.4) the stage changed nothing measurable: three
titles' leave-one-out values sit among hundreds of remembered rows' there, so ``p`` stays below the model's own
tenth suggestion. One document has no leave-one-out value to go by (:data:`MIN_DOCS`): a label learned from one
document is held in the stage with its document and no ranker (it scores 0 there, the trees alone suggest it),
so that the learn that brings its second document fits it on both. Without that, a label taught one record at
a time (``POST /learn`` of each record as it is catalogued) got a tree ranker from its first record, counted as
old from then on, and never joined the stage.

**What it keeps:** per label its weights, its positive rows (at most :data:`FEW`, so a later learn refits it
on all of them even where the memory's reservoir has dropped some), their leave-one-out values, the
:data:`TAIL` highest negative values and, below them, the values at :data:`RANKS` (``N_j`` within a factor of
2 there). A label that grows past :data:`FEW` documents leaves the stage: the trees score it alone. Fitting
is one solver call for all the learn's labels (three parents shared by their columns): the 49 labels of 2-5
documents that the last 20% of yso-finna-en brings, against 50,000 remembered rows, in ~8 CPU seconds.
"""

from __future__ import annotations

import logging

import numpy as np
import scipy.sparse as sp

from ..errors import ModelFormatError
from .few_shot_scores import (RANKS, TAIL, _decision, interpolation_points, negative_sketch,  # noqa: F401
                              probability)

log = logging.getLogger(__name__)

FEW = 5  # documents up to which a learned label is scored flat as well (module doc)
# a label's documents from which on: with one, no leave-one-out value says how a new document would score
MIN_DOCS = 2
STAGE = "few-shot-rankers"


class FewShotRankers:
    """The flat rankers of labels learned from at most :data:`FEW` documents (module doc)."""

    def __init__(self, label_ids, W: sp.csc_matrix, loo: np.ndarray, neg_tail: np.ndarray, neg_ranks: np.ndarray,
                 pos_X: sp.csr_matrix, pos_owner: np.ndarray, omega, bias: float, chars=None):
        self.label_ids = np.asarray(label_ids, dtype=np.int64)
        self.W = sp.csc_matrix(W, dtype=np.float32)
        self.loo = np.asarray(loo, dtype=np.float32).reshape(self.label_ids.size, FEW)
        self.neg_tail = np.asarray(neg_tail, dtype=np.float32).reshape(self.label_ids.size, TAIL)
        self.neg_ranks = np.asarray(neg_ranks, dtype=np.float32).reshape(self.label_ids.size, RANKS.size)
        self.pos_X = sp.csr_matrix(pos_X, dtype=np.float32)
        self.pos_owner = np.asarray(pos_owner, dtype=np.int64)  # label id of each positive row
        self.omega = np.asarray(omega, dtype=np.float64).reshape(self.label_ids.size)
        self.bias = float(bias)
        # the character featurizer of a stage that scores by character n-grams (xmtc.models.few_shot_chars);
        # None: by the model's own features. W and pos_X are in its features then.
        self.chars = chars

    @classmethod
    def empty(cls, n_features: int, bias: float, chars=None) -> "FewShotRankers":
        d = n_features if chars is None else chars.n_features_
        return cls(np.zeros(0, np.int64), sp.csc_matrix((d + 1, 0)), np.zeros((0, FEW)),
                   np.zeros((0, TAIL)), np.zeros((0, RANKS.size)), sp.csr_matrix((0, d)),
                   np.zeros(0, np.int64), np.zeros(0), bias, chars)

    def __len__(self) -> int:
        return int(self.label_ids.size)

    # -- fitting ----------------------------------------------------------------------------------------
    def updated(self, X_new: sp.csr_matrix, Y_new: sp.csr_matrix, fresh: np.ndarray, memory, *, C_pos: float,
                C_neg: float, tol: float, max_iter: int, threshold: float, n_threads=None, texts=None,
                scorer: str = "chars") -> "FewShotRankers":
        """The stage after a learn of ``(X_new, Y_new)`` (this one is not changed): fit the ``fresh`` labels (no
        ranker before the learn) and refit the stage's labels that the new rows carry; labels with more than
        :data:`FEW` documents leave (or never join) the stage. ``memory``: the
        :class:`~xmtc.models.memory.TrainingMemory` before it takes in the new rows (the negatives); without one
        the stage stays as it is. ``texts``: the new rows' texts (None: feature rows). ``scorer``: what a new
        stage scores by, ``"chars"`` (:mod:`xmtc.models.few_shot_chars`, where the learn and the memory have
        texts) or ``"words"`` (the ranker on the model's features); a stage keeps the scorer it was made with."""
        stage = self
        if not len(self) and memory is not None:  # an empty stage takes the scorer asked for
            Y_csc = sp.csc_matrix(Y_new)
            fresh = np.asarray(fresh, dtype=np.int64)
            if not fresh.size or not Y_csc[:, fresh].nnz:
                return self
            want_chars = scorer == "chars" and memory.texts is not None and texts is not None
            if want_chars and self.chars is None:
                from .few_shot_chars import fitted_featurizer

                # the texts of the labels that can join the stage (a learn of a fifth of yso-finna-en brings
                # 104,507 titles, 49 such labels: fitting on all of them took 18 s)
                rows = self._joining(Y_csc, fresh)[2]
                stage = FewShotRankers.empty(0, self.bias, fitted_featurizer(
                    memory.texts, [texts[i] for i in rows.tolist()], memory.seed))
            elif not want_chars and self.chars is not None:
                stage = FewShotRankers.empty(X_new.shape[1], self.bias)
        return stage._update(X_new, Y_new, fresh, memory, texts, C_pos=C_pos, C_neg=C_neg, tol=tol,
                             max_iter=max_iter, threshold=threshold, n_threads=n_threads)

    def _update(self, X_new, Y_new, fresh, memory, texts, **solver) -> "FewShotRankers":
        """:meth:`updated` on this stage, with its own scorer."""
        if self.chars is not None and (texts is None or memory is None or memory.texts is None):
            log.info("few-shot stage: scored by character n-grams, but this learn or the memory has no texts;"
                     " its labels stay as they are, new ones are left to the trees")
            return self
        Y_new = sp.csc_matrix(Y_new)
        touched, small, need = self._joining(Y_new, fresh)
        if memory is None or not len(memory) or touched.size == 0:
            return self
        # each label of the stage after the learn: the documents the stage kept, then the new ones; a label with
        # more than FEW leaves the stage, and its documents are not read
        if not need.size:
            rows = None
        elif self.chars is not None:  # the character rows of the texts read, not of every text of the learn
            from .few_shot_chars import char_rows

            rows = char_rows(self.chars, [texts[i] for i in need.tolist()])
        else:
            rows = sp.csr_matrix(X_new)[need]
        staged, pos = set(self.label_ids.tolist()), {}
        for j in small.tolist():
            new = rows[np.searchsorted(need, Y_new[:, j].indices)]
            pos[j] = sp.vstack([self.pos_X[self.pos_owner == j], new], format="csr") if j in staged else \
                sp.csr_matrix(new)
        fit = [j for j in sorted(pos) if MIN_DOCS <= pos[j].shape[0]]
        held = [j for j in sorted(pos) if pos[j].shape[0] < MIN_DOCS]
        keep = ~np.isin(self.label_ids, touched)
        parts = [self._subset(keep)]
        if fit and self.chars is not None:
            parts.append(self._fit_chars(fit, pos, memory))
        elif fit:
            parts.append(self._fit(fit, pos, memory, **solver))
        if held:
            parts.append(self._held(held, pos, memory.seen / len(memory)))
        out = _stack(parts, self.W.shape[0] - 1, self.bias, self.chars)
        log.info("few-shot rankers: %d labels fitted against %d remembered rows, %d in the stage", len(fit),
                 len(memory), len(out))
        return out

    def _joining(self, Y_csc: sp.csc_matrix, fresh) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(touched, small, rows)`` of a learn's labels ``Y_csc``: the labels it touches (``fresh`` ones it
        brings a document of, and the stage's own it brings more of); those of them with at most :data:`FEW`
        documents after it (kept by the stage and new), which join or stay in the stage; and the new rows that
        carry one of those, sorted."""
        fresh = np.asarray(fresh, dtype=np.int64)
        touched = np.union1d(fresh[np.asarray(Y_csc[:, fresh].getnnz(axis=0)) > 0],
                             self.label_ids[np.asarray(Y_csc[:, self.label_ids].getnnz(axis=0)) > 0]
                             if len(self) else np.zeros(0, np.int64))
        owners, kept = np.unique(self.pos_owner, return_counts=True)
        at = np.minimum(np.searchsorted(owners, touched), max(owners.size - 1, 0))
        before = np.where(owners[at] == touched, kept[at], 0) if owners.size else np.zeros(touched.size, np.int64)
        small = touched[before + np.asarray(Y_csc[:, touched].getnnz(axis=0)) <= FEW]
        return touched, small, np.unique(Y_csc[:, small].indices)

    def _fit(self, labels: list[int], pos: dict, memory, **solver) -> "FewShotRankers":
        """The word scorer's labels (:mod:`xmtc.models.few_shot_words`): each label's ranker against the remembered
        rows that carry none of the labels being fitted (one solver call for them all)."""
        from .few_shot_words import rankers

        omega = memory.seen / len(memory)
        negatives = sp.csr_matrix(memory.X, dtype=np.float32)[~_carriers(memory, np.asarray(labels, np.int64))]
        W, loo, values = rankers([pos[j] for j in labels], negatives, FEW, omega, self.bias, **solver)
        return self._made(labels, pos, W, loo, values, omega, None)

    def _fit_chars(self, labels: list[int], pos: dict, memory) -> "FewShotRankers":
        """The character scorer's labels (:mod:`xmtc.models.few_shot_chars`): each label's centroid, its documents'
        leave-one-out values, and the remembered rows that carry none of the labels being fitted as negatives."""
        from .few_shot_chars import centroids

        negatives = memory.char_rows(self.chars)[np.flatnonzero(~_carriers(memory, np.asarray(labels, np.int64)))]
        C, loo, values = centroids([pos[j] for j in labels], negatives, FEW)
        return self._made(labels, pos, C, loo, values, memory.seen / len(memory), self.chars)

    def _made(self, labels: list[int], pos: dict, W, loo, values: list[np.ndarray], omega: float, chars
              ) -> "FewShotRankers":
        """The stage of the fitted ``labels``: their weights ``W`` and leave-one-out values, the sketch of each
        one's negative ``values``, their documents kept."""
        sketches = [negative_sketch(v) for v in values]
        tails = np.array([t for t, _ in sketches], dtype=np.float32).reshape(len(labels), TAIL)
        ranks = np.array([r for _, r in sketches], dtype=np.float32).reshape(len(labels), RANKS.size)
        owners = np.repeat(np.asarray(labels, np.int64), [pos[j].shape[0] for j in labels])
        return FewShotRankers(labels, W, loo, tails, ranks, sp.vstack([pos[j] for j in labels], format="csr"), owners,
                              np.full(len(labels), omega), self.bias, chars)

    def _held(self, labels: list[int], pos: dict, omega: float) -> "FewShotRankers":
        """Labels with fewer than :data:`MIN_DOCS` documents so far: their documents kept, no ranker (zero weights,
        no leave-one-out value, so ``p = 0``: never suggested by the stage), until a learn brings the next one."""
        ids = np.asarray(labels, dtype=np.int64)
        m, d = ids.size, self.W.shape[0] - 1
        P = sp.vstack([pos[j] for j in labels], format="csr")
        owners = np.repeat(ids, [pos[j].shape[0] for j in labels])
        return FewShotRankers(ids, sp.csc_matrix((d + 1, m), dtype=np.float32), np.full((m, FEW), -np.inf),
                              np.full((m, TAIL), -np.inf), np.full((m, RANKS.size), -np.inf), P, owners,
                              np.full(m, omega), self.bias, self.chars)

    def _subset(self, keep: np.ndarray) -> "FewShotRankers":
        ids = self.label_ids[keep]
        rows = np.isin(self.pos_owner, ids)
        return FewShotRankers(ids, self.W[:, np.flatnonzero(keep)], self.loo[keep], self.neg_tail[keep],
                              self.neg_ranks[keep],
                              self.pos_X[np.flatnonzero(rows)], self.pos_owner[rows], self.omega[keep], self.bias,
                              self.chars)

    # -- prediction -------------------------------------------------------------------------------------
    def topk(self, X_feat: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Per row of ``X_feat`` the stage's ``k`` most probable labels: (global ids -1 padded, probabilities);
        a label with probability 0 is left out."""
        p = probability(self.decision(X_feat), self.loo, self.neg_tail, self.neg_ranks, self.omega,
                        self._cached("best_below", lambda: interpolation_points(self.loo, self.neg_tail,
                                                                                 self.neg_ranks, self.omega)))
        k = min(k, len(self))
        order = np.argsort(-p, axis=1, kind="stable")[:, :k]
        top = np.take_along_axis(p, order, 1)
        ids = np.where(top > 0, self.label_ids[order], -1)
        return ids.astype(np.int32), np.where(top > 0, top, 0.0).astype(np.float32)

    def decision(self, X: sp.csr_matrix) -> np.ndarray:
        """Dense decision values of ``X`` (n, labels): :func:`~xmtc.models.few_shot_scores._decision` with the
        weights' body and bias row split once, not at every call."""
        body = self._cached("body", lambda: sp.csr_matrix(self.W[:self.W.shape[0] - 1]))  # csr @ csr: no conversion
        bias_row = self._cached("bias_row", lambda: self.W[self.W.shape[0] - 1].toarray().ravel())
        out = np.asarray((sp.csr_matrix(X) @ body).todense(), dtype=np.float64)
        return out + self.bias * bias_row[None, :]

    def _cached(self, name: str, make):
        """What prediction derives from the stage's arrays, made once (a stage is not changed after it is
        made: a learn makes a new one)."""
        cache = self.__dict__.setdefault("_derived", {})
        if name not in cache:
            cache[name] = make()
        return cache[name]

    def merge(self, idx: np.ndarray, scores: np.ndarray, X_feat: sp.csr_matrix,
              damp: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The model's calibrated top-k merged with the stage's (the higher score of a label in both);
        ``damp``: per row, the factor the model's own scores were cut by (unreadable texts)."""
        if not len(self):
            return idx, scores
        from .label_route import merge_topk

        fi, fs = self.topk(X_feat, idx.shape[1])
        if damp is not None:
            fs = (fs * damp[:, None]).astype(np.float32)
        return merge_topk(idx, scores, fi, fs, idx.shape[1])

    def evidence(self, x_row: sp.csr_matrix, label: int) -> tuple[dict[int, float], float, float]:
        """``(feature -> x_j w_j, bias share, decision value)`` of ``label``'s flat ranker on one text."""
        col = int(np.flatnonzero(self.label_ids == label)[0])
        w = self.W[:, col].toarray().ravel()
        x = sp.csr_matrix(x_row)
        weights = {int(f): float(v * w[f]) for f, v in zip(x.indices, x.data) if w[f] != 0.0}
        bias = float(self.bias * w[-1])
        return weights, bias, float(sum(weights.values()) + bias)

    # -- storage ----------------------------------------------------------------------------------------
    def to_arrays(self) -> tuple[dict, dict[str, np.ndarray]]:
        arrays = {"label_ids": self.label_ids, "loo": self.loo, "neg_tail": self.neg_tail, "neg_ranks": self.neg_ranks,
                  "pos_owner": self.pos_owner, "omega": self.omega}
        for name, M in (("W", self.W), ("pos_X", self.pos_X)):
            arrays.update({f"{name}.data": M.data, f"{name}.indices": M.indices.astype(np.int64),
                           f"{name}.indptr": M.indptr.astype(np.int64),
                           f"{name}.shape": np.array(M.shape, dtype=np.int64)})
        params = {"bias": self.bias, "few": FEW, "tail": TAIL, "scorer": "words" if self.chars is None else "chars"}
        if self.chars is not None:
            chars_params, chars_arrays = self.chars.to_arrays()
            params["chars"] = chars_params
            arrays.update({f"chars.{k}": v for k, v in chars_arrays.items()})
        return params, arrays

    @classmethod
    def from_arrays(cls, params: dict, arrays: dict, n_features: int, n_labels: int, where: str
                    ) -> "FewShotRankers":
        try:
            W = sp.csc_matrix((arrays["W.data"], arrays["W.indices"], arrays["W.indptr"]),
                              shape=tuple(int(v) for v in arrays["W.shape"]))
            P = sp.csr_matrix((arrays["pos_X.data"], arrays["pos_X.indices"], arrays["pos_X.indptr"]),
                              shape=tuple(int(v) for v in arrays["pos_X.shape"]))
            if int(params["few"]) != FEW or int(params["tail"]) != TAIL:
                raise ValueError(f"saved with FEW={params['few']}, TAIL={params['tail']}")
            chars = None
            if params.get("scorer", "words") == "chars":
                from ..features.char_ngrams import CharNgramFeaturizer

                chars = CharNgramFeaturizer.from_arrays(params["chars"], {k[len("chars."):]: v for k, v in
                                                                          arrays.items() if k.startswith("chars.")})
            elif params.get("scorer", "words") != "words":
                raise ValueError(f"unknown scorer {params['scorer']!r}")
            stage = cls(arrays["label_ids"], W, arrays["loo"], arrays["neg_tail"], arrays["neg_ranks"], P,
                        arrays["pos_owner"],
                        arrays["omega"], float(params["bias"]), chars)
        except (KeyError, ValueError, TypeError, IndexError, ModelFormatError) as exc:
            raise ModelFormatError(f"{where}: invalid few-shot rankers ({exc})") from None
        ids = stage.label_ids
        d = n_features if stage.chars is None else stage.chars.n_features_
        if W.shape != (d + 1, ids.size) or P.shape[1] != d or \
                (ids.size and (ids.min() < 0 or ids.max() >= n_labels)) or \
                not np.isin(stage.pos_owner, ids).all() or not np.all(stage.omega >= 1.0):
            raise ModelFormatError(f"{where}: the few-shot rankers do not match the model's labels or features")
        return stage


def _carriers(memory, ids: np.ndarray) -> np.ndarray:
    """Per remembered row, whether it carries one of the labels ``ids`` (those among its columns): such a row is
    among the labels' positives, never a negative."""
    own = ids[ids < memory.Y.shape[1]]
    if not own.size:
        return np.zeros(len(memory), dtype=bool)
    return np.asarray(sp.csc_matrix(memory.Y)[:, own].getnnz(axis=1)).ravel() > 0


def _stack(parts: list[FewShotRankers], d: int, bias: float, chars=None) -> FewShotRankers:
    parts = [p for p in parts if len(p)]
    if not parts:
        return FewShotRankers.empty(d, bias, chars)
    ids = np.concatenate([p.label_ids for p in parts])
    order = np.argsort(ids, kind="stable")
    W = sp.hstack([p.W for p in parts], format="csc")[:, order]
    return FewShotRankers(ids[order], W, np.vstack([p.loo for p in parts])[order],
                          np.vstack([p.neg_tail for p in parts])[order], np.vstack([p.neg_ranks for p in parts])[order],
                          sp.vstack([p.pos_X for p in parts], format="csr"),
                          np.concatenate([p.pos_owner for p in parts]),
                          np.concatenate([p.omega for p in parts])[order], bias, chars)


def merge_few_shot(model, idx: np.ndarray, scores: np.ndarray, X, known: np.ndarray | None, features=None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """A calibrated model's top-k of ``X`` merged with its few-shot rankers' (module doc); the stage's scores
    are cut for texts the model can hardly read as its own are (:func:`~xmtc.models.calibration.damp_unreadable`).
    ``features``: ``model.transform(X)`` where the caller has it (the prediction that came first)."""
    stage = getattr(model, "few_shot_", None)
    if stage is None or not len(stage) or getattr(model, "calibration_", None) is None:
        return idx, scores
    from .calibration import MIN_KNOWN

    damp = None if known is None else np.minimum(1.0, np.asarray(known, dtype=np.float64) / MIN_KNOWN)
    if stage.chars is not None:  # scored by character n-grams: of the texts themselves
        if sp.issparse(X) or isinstance(X, np.ndarray):
            return idx, scores  # feature rows: nothing for the stage to read
        from .few_shot_chars import char_rows

        return stage.merge(idx, scores, char_rows(stage.chars, list(X)), damp)
    return stage.merge(idx, scores, model.transform(X) if features is None else features, damp)
