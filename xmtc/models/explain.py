"""Why a label was suggested: the input terms that contributed most to its score.

Every estimator answers ``model.explain(texts, k=5, n_terms=10)`` with, per text, its top-k labels::

    [{"label": "p1234", "display": "railways", "score": 0.83, "source": "ranker", "margin": 1.9, "bias": -0.4,
      "terms": [{"term": "railway", "weight": 1.21}, {"term": "finnish railway", "weight": 0.77}, ...]}, ...]

The labels, their order and their scores are ``predict``'s: explain calls ``model.predict_topk(texts, k)``
and explains each label it returns, so the two agree by construction (calibrated scores, labels known only
by their text merged in, removed labels never shown). ``display`` is the label's name from the label file
(else its id). ``terms`` are the features with the largest contributions, sorted by weight, descending
(terms with zero contribution are left out).

``source`` says where the suggestion came from:

* ``"ranker"``: the model's own rankers scored the label; ``terms`` are n-grams of the TF-IDF vocabulary
  (feature names) and their weights are exact shares of ``margin`` (below, per method).
* ``"label-text"``: the label-text route (:mod:`xmtc.models.label_route`) suggested it, from the label's
  text (a label without training documents, or one whose text beat its ranker's score). The entry adds
  ``"cosine"``: the cosine between the text's and the label text's character n-gram TF-IDF rows, which
  the route's map turned into ``score``. ``terms`` are the n-grams the two share (word-boundary spaces
  kept: ``" rai"``), each weighted ``x_j * m_j``; they sum exactly to the cosine, and ``margin`` is the
  cosine with ``bias`` 0, so ``sum(term weights) + bias == margin`` holds for either source.
* ``"few-shot"``: the flat ranker of a label learned from a few documents (:mod:`xmtc.models.few_shot`) gave the
  score (it beat the trees' calibrated score for the label). ``terms`` are TF-IDF n-grams, each ``x_j * w_j`` of
  that ranker, ``margin`` its decision value and ``bias`` its bias's share, so the sum holds here too.
* ``None``: the label cannot be explained; ``"reason"`` says why, ``terms`` is empty and ``margin`` /
  ``bias`` are ``None``. The label is still listed, with its score, in its place.

What "contribution" means, per method (the arithmetic: :mod:`xmtc.models.term_contributions`,
:mod:`xmtc.linear.explain`):

* **XR-Linear**: feature j's ``x_j * w_j`` summed over the linear models on the label's tree path
  (the matcher's nodes at every level and the label's ranker); ``margin`` is the summed path margin
  and ``bias`` the bias weights' share, so ``sum(all term weights) + bias == margin`` exactly. The
  score is a monotone function of the per-level margins (``prod_t exp(-max(0, 1-s_t)^3)`` for the
  default l3-hinge), so a positive weight always raises the score. With ``n_trees > 1`` the weights,
  margin and bias are the means over the trees (each tree's path to the label, as the score is the
  mean of the trees' scores).
* **XR-Transformer / X-Transformer**: the rankers see ``[tfidf, w * normalize(embedding)]``; the TF-IDF
  half is decomposed exactly as above and the embedding half is reported as one term,
  ``"[embedding]"``, the summed contribution of all embedding dimensions. With ``matcher="linear"`` and
  ``matcher_combine="ranker"`` (the defaults) the score is the label's ranker's alone, so the label's own
  level is decomposed, not the matcher nodes above it (``"product"``: the whole path). With ``matcher="neural"`` and
  ``matcher_combine="product"`` the matcher's margins along the label's cluster path (``emb @ W_t[n_t] +
  b_t[n_t]``, all embedding) join that term, their biases go to ``bias``, and ``margin`` sums matcher and
  ranker margins (:func:`~xmtc.models.term_contributions.neural_label_contributions`); with
  ``matcher_combine="ranker"`` the matcher only picked the candidates, and the terms are the rankers' alone.
* **Ensembles** (:class:`~xmtc.models.ensemble.Ensemble`): the ensemble's top-k labels and scores; a
  term's weight is the members' weights for that label combined with the ensemble's member weights
  (a weighted mean of each member's exact path contributions, the label's path being explained in
  every member that knows the label, whether or not it ranked it; a label some members lack is
  explained by those that know it, their weights renormalised). For ``average`` this mirrors how the scores are
  combined; for ``rank-average``/``sigmoid-average`` it is an average of margins, not a decomposition of
  the combined score. A member whose suggestion of the label came from its label-text route contributes
  its n-gram weights (and its cosine as its margin); where members of both kinds meet, ``source`` is
  ``"ranker+label-text"`` and every term says its own ``source``.
* Models trained on precomputed features have no vocabulary: terms are named ``"#<feature id>"``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError
from .term_contributions import label_contributions, neural_label_contributions, ngram_contributions, term_namer

RANKER, LABEL_TEXT, FEW_SHOT = "ranker", "label-text", "few-shot"  # an explanation's ``source``


def _check_k(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _features(model, texts):
    """``(features the rankers see, embeddings or None)``, each computed once."""
    if getattr(model, "matcher", "linear") != "neural":
        return model.transform(texts), None
    emb = model.encode(texts)
    return model._concat(model.featurizer_.transform(texts), emb), emb


def _contributions(model, X_feat, emb, labels_per_row):
    if emb is not None:
        return neural_label_contributions(model, X_feat, emb, labels_per_row)
    return label_contributions(model, X_feat, labels_per_row)


def _ranked_labels(model, emb) -> int:
    """How many labels the model's rankers know (labels added later by their text have no ranker)."""
    levels = model.rankers_.levels_ if emb is not None else model.models_[0].levels_
    return int(levels[-1].bias_w.shape[0])


def _route(model, texts):
    """The model's label-text route where it can score ``texts`` (texts, not feature rows), else None."""
    route = getattr(model, "label_route_", None)
    if route is None or not len(route) or sp.issparse(texts) or isinstance(texts, np.ndarray):
        return None
    return route


def _own_topk(model, X_feat, emb, texts, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The model's own calibrated top-``width`` (its rankers', before the route is merged in), as wide as
    :meth:`~xmtc.models.base.XMCModel.predict_topk` asks for (room for the removed labels)."""
    removed = getattr(model, "removed_", None)
    width = int(width) + (min(int(removed.sum()), 64) if removed is not None else 0)
    raw = model._neural_predict(X_feat, emb, width) if emb is not None else model._predict_features(X_feat, width)
    return model.calibrated_topk(*raw, texts)


def _reason(j: int, model) -> str:
    return (f"label {model.labels_.names[j]!r} has no ranker in this model (it was added after training) and"
            " is not in its label-text route")


def label_evidence(model, texts, labels_per_row: list[list[int]],
                   suggested: tuple[np.ndarray, np.ndarray]) -> list[list[dict]]:
    """Per row and label (the model's own ids): what made its score.

    ``suggested``: the model's ``predict_topk(texts, w)`` (any ``w``), which tells, for each label in it, where
    its score came from. The route's labels were merged into the model's own calibrated top-w by score
    (:func:`~xmtc.models.label_route.merge_topk`: the higher score, the model's on a tie), so a routed label
    whose suggested score is not the model's own for it (or that the model's own top-w lacks) has the
    route's score, and is explained by its text; every other label by its ranker. A label not in
    ``suggested`` (an ensemble member's label that the member did not suggest) is explained by its ranker,
    else by its text. Returns dicts ``{"source", "weights", "margin", "bias"[, "cosine"]}``, or ``{"source":
    None, "reason"}`` for a label that cannot be explained.
    """
    X_feat, emb = _features(model, texts)
    n_ranked = _ranked_labels(model, emb)
    route = _route(model, texts)
    pos_of = {j: p for p, j in enumerate(route.label_ids.tolist())} if route is not None else {}
    few = getattr(model, "few_shot_", None)
    flat = set(few.label_ids.tolist()) if few is not None and len(few) and emb is None else set()
    sug_idx = np.asarray(suggested[0])
    from_route: set[tuple[int, int]] = set()
    suggested_sets = [set(row.tolist()) for row in sug_idx]
    if pos_of or flat:
        cand = [(i, j) for i, row in enumerate(labels_per_row) for j in row
                if (j in pos_of or j in flat) and j in suggested_sets[i]]
        if cand:
            own_idx, own_sc = _own_topk(model, X_feat, emb, texts, sug_idx.shape[1])
            sug_score = {(i, int(j)): s for i, (r_idx, r_sc) in enumerate(zip(sug_idx, np.asarray(suggested[1])))
                         for j, s in zip(r_idx, r_sc) if j >= 0}
            for i, j in cand:
                # the route's score won where the suggestion's score is not the model's own for the label
                own = np.flatnonzero(own_idx[i] == j)
                if not own.size or own_sc[i, own[0]] != sug_score[(i, j)]:
                    from_route.add((i, j))
    sources = []
    for i, row in enumerate(labels_per_row):
        src = []
        for j in row:
            if (i, j) in from_route and j in flat:
                src.append(FEW_SHOT)
            elif (i, j) in from_route or (j not in suggested_sets[i] and j >= n_ranked and j in pos_of):
                src.append(LABEL_TEXT)
            elif j < n_ranked:
                src.append(RANKER)
            else:
                src.append(None)
        sources.append(src)
    ranker_rows = [[j for j, s in zip(row, src) if s == RANKER] for row, src in zip(labels_per_row, sources)]
    ranked = _contributions(model, X_feat, emb, ranker_rows) if any(ranker_rows) else [[] for _ in labels_per_row]
    text_rows = route.featurizer.transform(list(texts)) if any(LABEL_TEXT in src for src in sources) else None
    names = None
    if route is not None and callable(getattr(route.featurizer, "feature_names", None)):
        names = route.featurizer.feature_names()
    out = []
    for i, (row, src) in enumerate(zip(labels_per_row, sources)):
        it = iter(ranked[i])
        evidence = []
        for j, s in zip(row, src):
            if s == RANKER:
                evidence.append({"source": RANKER, **next(it)})
            elif s == FEW_SHOT and few.chars is not None:  # its character n-grams shared with the label's documents
                from .few_shot_chars import char_rows

                weights, bias, margin = few.evidence(char_rows(few.chars, [texts[i]]), j)
                grams = few.chars.feature_names()
                evidence.append({"source": FEW_SHOT, "weights": {grams[f]: w for f, w in weights.items()},
                                 "margin": margin, "bias": bias})
            elif s == FEW_SHOT:
                weights, bias, margin = few.evidence(X_feat[i], j)
                name = term_namer(model)
                evidence.append({"source": FEW_SHOT, "weights": {name(f): w for f, w in weights.items()},
                                 "margin": margin, "bias": bias})
            elif s == LABEL_TEXT:
                c = ngram_contributions(text_rows[i], route.M[pos_of[j]], names)
                evidence.append({"source": LABEL_TEXT, "weights": c["weights"], "margin": c["cosine"], "bias": 0.0,
                                 "cosine": c["cosine"]})
            else:
                evidence.append({"source": None, "reason": _reason(j, model)})
        out.append(evidence)
    return out


def _entry(vocab, j: int, score: float, ev: dict, n_terms: int) -> dict:
    out = {"label": vocab.names[j], "display": vocab.display_name(j), "score": float(score), "source": ev["source"]}
    if "reason" in ev:
        out.update(margin=None, bias=None, terms=[], reason=ev["reason"])
        return out
    terms = sorted(ev["weights"].items(), key=lambda kv: (-kv[1], str(kv[0])))[:n_terms]
    out.update(margin=float(ev["margin"]), bias=float(ev["bias"]))
    if "cosine" in ev:
        out["cosine"] = float(ev["cosine"])
    mixed = ev["source"] not in (RANKER, LABEL_TEXT, FEW_SHOT)
    out["terms"] = [{"term": t[1], "weight": float(w), "source": t[0]} if mixed else {"term": t, "weight": float(w)}
                    for t, w in terms]
    return out


def explain_model(model, texts, k: int = 5, n_terms: int = 10) -> list[list[dict]]:
    """:meth:`XRLinear.explain` (and the transformer methods'): see the module docstring."""
    k, n_terms = _check_k("k", k), _check_k("n_terms", n_terms)
    model._check_fitted()
    idx, scores = model.predict_topk(texts, k)
    labels_per_row = [[int(j) for j in row if j >= 0] for row in idx]
    evidence = label_evidence(model, texts, labels_per_row, (idx, scores))
    return [[_entry(model.labels_, j, s, ev, n_terms) for j, s, ev in zip(lab, sc, evs)]
            for lab, sc, evs in zip(labels_per_row, scores, evidence)]


def explain_ensemble(ens, texts, k: int = 5, n_terms: int = 10) -> list[list[dict]]:
    """:meth:`Ensemble.explain`: weighted mean of the members' contributions to the ensemble's top-k."""
    from .predictor import checked_k

    k, n_terms = _check_k("k", k), _check_k("n_terms", n_terms)
    idx, scores = ens.predict_topk(texts, k)
    labels_per_row = [[int(j) for j in row if j >= 0] for row in idx]
    weights = np.ones(len(ens.models)) if ens.weights is None else np.asarray(ens.weights, dtype=np.float64)
    weights = weights / weights.sum()
    member_ids = getattr(ens, "member_ids_", None) or [np.arange(len(ens.labels_))] * len(ens.models)
    k_each = max(checked_k(k, len(ens.labels_)), ens.k_each)  # what the ensemble asks each member for
    # per row and label: the members' (weight, evidence), for the members that know the label
    parts: list[list[list[tuple[float, dict]]]] = [[[] for _ in row] for row in labels_per_row]
    for member, w, ids in zip(ens.models, weights, member_ids):
        if not hasattr(member, "models_"):
            raise ConfigError(f"cannot explain an ensemble member of type {type(member).__name__}")
        inv = np.full(len(ens.labels_), -1, dtype=np.int64)  # union label id -> the member's own, -1 where none
        inv[ids] = np.arange(len(ids))
        own = [[int(inv[j]) for j in row if inv[j] >= 0] for row in labels_per_row]
        evidence = label_evidence(member, texts, own, member.predict_topk(texts, k_each))
        for row_parts, row_labels, row_ev in zip(parts, labels_per_row, evidence):
            it = iter(row_ev)
            for acc, j in zip(row_parts, row_labels):
                if inv[j] >= 0:
                    acc.append((float(w), next(it)))
    out = []
    for row_labels, row_scores, row_parts in zip(labels_per_row, scores, parts):
        out.append([_entry(ens.labels_, j, s, _combine(p), n_terms)
                    for j, s, p in zip(row_labels, row_scores, row_parts)])
    return out


def _combine(parts: list[tuple[float, dict]]) -> dict:
    """The members' evidence for one label, weighted by their ensemble weights renormalised over the members
    that can explain it."""
    usable = [(w, ev) for w, ev in parts if "reason" not in ev]
    if not usable:
        reason = parts[0][1]["reason"] if parts else "no member of the ensemble knows this label"
        return {"source": None, "reason": reason}
    total = sum(w for w, _ in usable)
    kinds = sorted({ev["source"] for _, ev in usable}, key=[RANKER, LABEL_TEXT, FEW_SHOT].index)
    mixed = len(kinds) > 1
    acc = {"source": "+".join(kinds), "weights": {}, "margin": 0.0, "bias": 0.0}
    for w, ev in usable:
        share = w / total
        for term, v in ev["weights"].items():
            key = (ev["source"], term) if mixed else term
            acc["weights"][key] = acc["weights"].get(key, 0.0) + share * v
        acc["margin"] += share * ev["margin"]
        acc["bias"] += share * ev["bias"]
    if kinds == [LABEL_TEXT]:
        acc["cosine"] = acc["margin"]
    return acc
