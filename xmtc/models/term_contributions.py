"""How much each input term contributed to a label's score: a margin split exactly over the features of one text.

The arithmetic behind an explanation's ``terms`` (:mod:`xmtc.models.explain` says what they mean to a reader and
picks, per suggested label, which of these explains it):

* :func:`label_contributions`: an XR-Linear-family model's linear path to the label (every tree), each feature's
  ``x_j * w_j`` and the bias weights' share (:mod:`xmtc.linear.explain`);
* :func:`neural_label_contributions`: a transformer model with ``matcher="neural"``, the matcher's margins along
  the label's cluster path joining the one ``[embedding]`` term;
* :func:`ngram_contributions`: the label-text route's cosine between a text's TF-IDF row and a label text's,
  split over the n-grams the two share.

Separate from :mod:`xmtc.models.explain` because these are the per-method numbers, worked out on a model's own
features, while that module is the format of an explanation and the choice, per label, of what explains it.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["EMBEDDING_TERM", "label_contributions", "neural_label_contributions", "ngram_contributions",
           "term_namer"]

EMBEDDING_TERM = "[embedding]"


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


def ngram_contributions(x_row: sp.spmatrix, m_row: sp.spmatrix, names=None) -> dict:
    """The cosine between a text's TF-IDF row ``x`` and a label text's row ``m`` (both L2-normalised), split
    over the features they share: ``{"weights": {name: x_j * m_j}, "cosine": sum of them}``.

    ``names``: feature index -> name (a featurizer's ``feature_names()``); ``None`` names them ``"#<id>"``.
    """
    x, m = (sp.csr_matrix(r, copy=True) for r in (x_row, m_row))
    x.sum_duplicates()  # sorted, unique indices (a no-op for a featurizer's rows)
    m.sum_duplicates()
    shared, ix, im = np.intersect1d(x.indices, m.indices, assume_unique=True, return_indices=True)
    w = x.data[ix].astype(np.float64) * m.data[im].astype(np.float64)
    weights: dict[str, float] = {}
    for j, v in zip(shared.tolist(), w.tolist()):
        if v != 0.0:
            term = names[j] if names is not None else f"#{j}"
            weights[term] = weights.get(term, 0.0) + v
    return {"weights": weights, "cosine": float(w.sum())}
