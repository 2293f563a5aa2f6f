"""Why a label was suggested: the input terms that contributed most to its score.

Every estimator answers ``model.explain(texts, k=5, n_terms=10)`` with, per text, its top-k labels::

    [{"label": "p1234", "display": "railways", "score": 0.83, "margin": 1.9, "bias": -0.4,
      "terms": [{"term": "railway", "weight": 1.21}, {"term": "finnish railway", "weight": 0.77}, ...]}, ...]

``display`` is the label's name from the label file (else its id). ``score`` is the score ``predict`` gives (calibrated when the model holds a calibration). ``terms``
are the n-grams of the TF-IDF vocabulary (feature names) with the largest contributions, sorted by
weight, descending (terms with zero contribution are left out).

What "contribution" means, per method (see :mod:`xmtc.linear.explain` for the arithmetic):

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
  ranker margins (:func:`neural_label_contributions`); with ``matcher_combine="ranker"`` the matcher only
  picked the candidates, and the terms are the rankers' alone.
* **Ensembles** (:class:`~xmtc.models.ensemble.Ensemble`): the ensemble's top-k labels and scores; a
  term's weight is the members' weights for that label combined with the ensemble's member weights
  (a weighted mean of each member's exact path contributions, the label's path being explained in
  every member that knows the label, whether or not it ranked it; a label some members lack is
  explained by those that know it, their weights renormalised). For ``average`` this mirrors how the scores are
  combined; for ``rank-average``/``sigmoid-average`` it is an average of margins, not a decomposition of
  the combined score.
* Models trained on precomputed features have no vocabulary: terms are named ``"#<feature id>"``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError

EMBEDDING_TERM = "[embedding]"


def _check_k(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def term_namer(model):
    """A function: feature id -> term text, for an XR-Linear-family model."""
    featurizer = getattr(model, "featurizer_", None)
    if featurizer is None:
        return lambda j: f"#{j}"
    names = featurizer.feature_names()  # cached by the featurizer after the first call
    n_tfidf = len(names)
    return lambda j: names[j] if j < n_tfidf else EMBEDDING_TERM


def label_contributions(model, X_feat: sp.csr_matrix, labels_per_row: list[list[int]]) -> list[list[dict]]:
    """For each row and each given label: ``{"weights": {term: w}, "margin": m, "bias": b}``.

    ``model`` is an XR-Linear-family estimator (``models_``, ``post_processor``); ``X_feat`` its own
    features of the texts (``model.transform``).
    """
    from ..linear.explain import path_contributions

    name = term_namer(model)
    X_feat = sp.csr_matrix(X_feat)
    n_trees = len(model.models_)
    out = []
    for i, labels in enumerate(labels_per_row):
        feats = X_feat.indices[X_feat.indptr[i]:X_feat.indptr[i + 1]].astype(np.int64)
        vals = X_feat.data[X_feat.indptr[i]:X_feat.indptr[i + 1]]
        labels = np.asarray(labels, dtype=np.int64)
        contrib = np.zeros((labels.shape[0], feats.shape[0]))
        margin = np.zeros(labels.shape[0])
        bias = np.zeros(labels.shape[0])
        for tree in model.models_:
            res = path_contributions(tree.levels_, feats, vals, labels, model.post_processor, model._label_score())
            contrib += res["contrib"] / n_trees
            margin += (res["margins"][:, res["used"]].sum(axis=1)) / n_trees
            bias += res["bias"] / n_trees
        row = []
        for r in range(labels.shape[0]):
            weights: dict[str, float] = {}
            for j, w in zip(feats.tolist(), contrib[r].tolist()):
                if w != 0.0:
                    term = name(j)
                    weights[term] = weights.get(term, 0.0) + w
            row.append({"weights": weights, "margin": float(margin[r]), "bias": float(bias[r])})
        out.append(row)
    return out


def _parents(children: sp.csr_matrix) -> np.ndarray:
    """Parent of every node, from a (n_parents, n_nodes) 0/1 children matrix."""
    coo = children.tocoo()
    parent = np.zeros(children.shape[1], dtype=np.int64)
    parent[coo.col] = coo.row
    return parent


def neural_label_contributions(model, X_feat: sp.csr_matrix, emb: np.ndarray,
                               labels_per_row: list[list[int]]) -> list[list[dict]]:
    """:func:`label_contributions` for a transformer model with ``matcher="neural"``.

    With ``matcher_combine="product"`` the label's score multiplies the neural matcher's transformed
    margins along its cluster path (``emb @ W_t[n_t] + b_t[n_t]``, all of the embedding) with the rankers'
    below it (on ``[tfidf, embedding]``). The rankers' TF-IDF features are decomposed exactly; their
    embedding columns and the matcher's margins (minus their biases) make the one ``[embedding]`` term;
    the biases of both go to ``bias``; ``margin`` sums the matcher's and the rankers' margins. With
    ``matcher_combine="ranker"`` the matcher only chose the candidates, so the terms and the margin are
    the rankers' alone.
    """
    from ..linear.explain import parent_of, label_paths, path_contributions

    name = term_namer(model)
    emb = np.asarray(emb, dtype=np.float32)
    X_feat = sp.csr_matrix(X_feat)
    levels = model.rankers_.levels_
    scored = getattr(model, "matcher_combine", "product") == "product"
    heads = [model.heads_[t] for t in model.matcher_levels_] if scored else []
    parents = [_parents(C) for C in model.matcher_children_] if scored else []
    out = []
    for i, labels in enumerate(labels_per_row):
        feats = X_feat.indices[X_feat.indptr[i]:X_feat.indptr[i + 1]].astype(np.int64)
        vals = X_feat.data[X_feat.indptr[i]:X_feat.indptr[i + 1]]
        labels = np.asarray(labels, dtype=np.int64)
        res = path_contributions(levels, feats, vals, labels, model.post_processor)
        node = parent_of(levels[0])[label_paths(levels, labels)[:, 0]].astype(np.int64)
        matcher_margin = np.zeros(labels.shape[0])
        matcher_bias = np.zeros(labels.shape[0])
        for (W, b), parent in zip(reversed(heads), reversed(parents)):
            matcher_margin += np.asarray(W[node], dtype=np.float64) @ emb[i].astype(np.float64) + b[node]
            matcher_bias += np.asarray(b[node], dtype=np.float64)
            node = parent[node]
        row = []
        for r in range(labels.shape[0]):
            weights: dict[str, float] = {}
            for j, w in zip(feats.tolist(), res["contrib"][r].tolist()):
                if w != 0.0:
                    term = name(j)
                    weights[term] = weights.get(term, 0.0) + w
            weights[EMBEDDING_TERM] = weights.get(EMBEDDING_TERM, 0.0) + matcher_margin[r] - matcher_bias[r]
            margin = float(res["margins"][r, res["used"]].sum() + matcher_margin[r])
            row.append({"weights": weights, "margin": margin, "bias": float(res["bias"][r] + matcher_bias[r])})
        out.append(row)
    return out


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


def _format(vocab, idx_row, score_row, contribs, n_terms: int) -> list[dict]:
    out = []
    for j, s, c in zip(idx_row, score_row, contribs):
        terms = sorted(c["weights"].items(), key=lambda kv: (-kv[1], kv[0]))[:n_terms]
        out.append({"label": vocab.names[j], "display": vocab.display_name(j), "score": float(s),
                    "margin": c["margin"], "bias": c["bias"],
                    "terms": [{"term": t, "weight": float(w)} for t, w in terms]})
    return out


def explain_model(model, texts, k: int = 5, n_terms: int = 10) -> list[list[dict]]:
    """:meth:`XRLinear.explain` (and the transformer methods'): see the module docstring."""
    k, n_terms = _check_k("k", k), _check_k("n_terms", n_terms)
    model._check_fitted()
    X_feat, emb = _features(model, texts)
    raw = model._neural_predict(X_feat, emb, k) if emb is not None else model._predict_features(X_feat, k)
    idx, scores = model.calibrated_topk(*raw, texts)
    labels_per_row = [[int(j) for j in row if j >= 0] for row in idx]
    contribs = _contributions(model, X_feat, emb, labels_per_row)
    return [_format(model.labels_, lab, sc[:len(lab)], c, n_terms) for lab, sc, c in zip(labels_per_row, scores, contribs)]


def explain_ensemble(ens, texts, k: int = 5, n_terms: int = 10) -> list[list[dict]]:
    """:meth:`Ensemble.explain`: weighted mean of the members' contributions to the ensemble's top-k."""
    k, n_terms = _check_k("k", k), _check_k("n_terms", n_terms)
    idx, scores = ens.predict_topk(texts, k)
    labels_per_row = [[int(j) for j in row if j >= 0] for row in idx]
    weights = np.ones(len(ens.models)) if ens.weights is None else np.asarray(ens.weights, dtype=np.float64)
    weights = weights / weights.sum()
    combined = [[{"weights": {}, "margin": 0.0, "bias": 0.0} for _ in row] for row in labels_per_row]
    member_ids = getattr(ens, "member_ids_", None) or [np.arange(len(ens.labels_))] * len(ens.models)
    local_of = []  # per member: union label id -> its own id, -1 where it lacks the label
    for ids in member_ids:
        inv = np.full(len(ens.labels_), -1, dtype=np.int64)
        inv[ids] = np.arange(len(ids))
        local_of.append(inv)
    # a label some members lack is explained by those that know it, their weights renormalised
    shared = all(np.all(inv >= 0) for inv in local_of)
    known_w = [[1.0 if shared else sum(w for w, inv in zip(weights, local_of) if inv[j] >= 0) for j in row]
               for row in labels_per_row]
    for member, w, inv in zip(ens.models, weights, local_of):
        if not hasattr(member, "models_"):
            raise ConfigError(f"cannot explain an ensemble member of type {type(member).__name__}")
        own = [[int(inv[j]) for j in row if inv[j] >= 0] for row in labels_per_row]
        parts = _contributions(member, *_features(member, texts), own)
        for row_out, row_labels, row_in, row_w in zip(combined, labels_per_row, parts, known_w):
            it = iter(row_in)
            for acc, j, kw in zip(row_out, row_labels, row_w):
                if inv[j] < 0:
                    continue
                c, share = next(it), w / kw
                for term, v in c["weights"].items():
                    acc["weights"][term] = acc["weights"].get(term, 0.0) + share * v
                acc["margin"] += share * c["margin"]
                acc["bias"] += share * c["bias"]
    return [_format(ens.labels_, lab, sc[:len(lab)], c, n_terms) for lab, sc, c in zip(labels_per_row, scores, combined)]
