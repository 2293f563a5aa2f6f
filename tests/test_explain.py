"""Explanations: exact path contributions, checked against hand computations and the model's own scores."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

import xmtc
from xmtc.cli import main
from xmtc.linear.beam import BeamLevel, beam_search
from xmtc.linear.explain import path_contributions
from xmtc.models.ensemble import Ensemble


def tiny_levels():
    """Root -> 2 clusters -> 4 labels (labels 0,1 under cluster 0; 2,3 under cluster 1), 3 features + bias row."""
    W0 = np.array([[0.5, -1.0],     # feature 0
                   [0.0, 2.0],      # feature 1
                   [1.0, 0.25],     # feature 2
                   [0.1, -0.2]])    # bias weights
    W1 = np.array([[1.0, 0.0, 2.0, -1.0],
                   [0.0, 3.0, 0.0, 0.5],
                   [0.5, 0.0, -0.5, 1.5],
                   [0.0, 0.3, 0.0, -0.1]])
    return [BeamLevel.from_weights(sp.csc_matrix(W0, dtype=np.float32), np.zeros(2, int), 1),
            BeamLevel.from_weights(sp.csc_matrix(W1, dtype=np.float32), np.array([0, 0, 1, 1]), 2)]


def test_path_contributions_equal_a_hand_computation():
    levels = tiny_levels()
    feats, vals = np.array([0, 2]), np.array([0.5, 2.0])   # x = (0.5, 0, 2.0)
    res = path_contributions(levels, feats, vals, [3, 0], "l3-hinge")
    # label 3: cluster 1 then label 3.
    # cluster 1: 0.5*-1.0 + 2.0*0.25 + bias -0.2 = -0.2 ; label 3: 0.5*-1 + 2*1.5 - 0.1 = 2.4
    np.testing.assert_allclose(res["margins"][0], [-0.2, 2.4], rtol=1e-6)
    # feature 0: 0.5*-1 + 0.5*-1 = -1.0 ; feature 2: 2*0.25 + 2*1.5 = 3.5 ; bias -0.3
    np.testing.assert_allclose(res["contrib"][0], [-1.0, 3.5], rtol=1e-6)
    assert res["bias"][0] == pytest.approx(-0.3)
    # label 0: cluster 0 = 0.25 + 2 + 0.1 = 2.35 ; label 0 = 0.5 + 1.0 + 0 = 1.5
    np.testing.assert_allclose(res["margins"][1], [2.35, 1.5], rtol=1e-6)
    np.testing.assert_allclose(res["contrib"][1], [0.25 + 0.5, 2.0 + 1.0], rtol=1e-6)
    # the identity the explanation rests on: contributions + bias = summed path margin
    np.testing.assert_allclose(res["contrib"].sum(1) + res["bias"], res["margins"].sum(1), rtol=1e-6)
    # l3-hinge score = exp(-(1.2^3 + 0)) for label 3 (margin 2.4 >= 1 costs nothing)
    assert res["score"][0] == pytest.approx(np.exp(-1.2 ** 3), rel=1e-6)


@pytest.mark.parametrize("post", ["l3-hinge", "sigmoid", "noop"])
def test_scores_from_the_margins_equal_beam_search(post):
    levels = tiny_levels()
    X = sp.csr_matrix(np.array([[0.5, 0.0, 2.0], [0.0, 1.0, 0.3]], dtype=np.float32))
    ids, scores = beam_search(X, levels, k=4, beam_size=2, post_processor=post)
    for i in range(2):
        res = path_contributions(levels, X[i].indices, X[i].data, ids[i], post)
        np.testing.assert_allclose(res["score"], scores[i], rtol=1e-5, atol=1e-7)
        if post == "noop":  # only the ranker's margin makes the score, so only it is decomposed
            np.testing.assert_allclose(res["contrib"].sum(1) + res["bias"], res["margins"][:, -1], rtol=1e-5)


@pytest.fixture(scope="module")
def fitted(reuters_small):
    (texts, labels), _ = reuters_small
    return xmtc.XRLinear(max_leaf_size=8, branching=4, n_trees=1, n_threads=2).fit(texts, labels, progress=False)


def hand_margins(tree, x: np.ndarray, label: int) -> list[float]:
    """Margins along the label's path from the csc weights and the tree chain (an independent route)."""
    Ws, chain = tree.weights, tree.chain
    node, path = label, []
    for t in range(len(Ws) - 1, -1, -1):
        path.append(node)
        node = int(chain[t].indices[node])
    path.reverse()
    return [float(np.append(x, tree.bias) @ Ws[t][:, n].toarray().ravel()) for t, n in enumerate(path)]


def test_xr_linear_explanations_sum_to_the_margins_they_explain(fitted, reuters_small):
    _, (texts, _) = reuters_small
    texts = texts[:6]
    expl = fitted.explain(texts, k=3, n_terms=10_000)
    preds = fitted.predict(texts, k=3)
    X = fitted.transform(texts).toarray()
    names = fitted.featurizer_.feature_names()
    for i, (labels, pred) in enumerate(zip(expl, preds)):
        assert [(e["label"], e["score"]) for e in labels] == [(n, pytest.approx(s)) for n, s in pred]
        for e in labels:
            margins = hand_margins(fitted.models_[0], X[i], fitted.labels_.index[e["label"]])
            assert e["margin"] == pytest.approx(sum(margins), rel=1e-4, abs=1e-5)
            assert sum(t["weight"] for t in e["terms"]) + e["bias"] == pytest.approx(e["margin"], rel=1e-4, abs=1e-5)
            assert e["score"] == pytest.approx(np.exp(-sum(max(0, 1 - m) ** 3 for m in margins)), rel=1e-4)
            weights = [t["weight"] for t in e["terms"]]
            assert weights == sorted(weights, reverse=True)
            assert {t["term"] for t in e["terms"]} <= {names[j] for j in np.flatnonzero(X[i])}
    short = fitted.explain(texts[:1], k=2, n_terms=2)[0]
    assert len(short) == 2 and all(len(e["terms"]) <= 2 for e in short)
    assert [t["term"] for t in short[0]["terms"]] == [t["term"] for t in expl[0][0]["terms"][:2]]


def test_tree_ensemble_explanation_is_the_mean_over_trees(reuters_small):
    (texts, labels), (test_texts, _) = reuters_small
    model = xmtc.XRLinear(max_leaf_size=8, branching=4, n_trees=2, n_threads=2).fit(texts, labels, progress=False)
    e = model.explain(test_texts[:1], k=1, n_terms=10_000)[0][0]
    x = model.transform(test_texts[:1]).toarray()[0]
    label = model.labels_.index[e["label"]]
    per_tree = [sum(hand_margins(t, x, label)) for t in model.models_]
    assert e["margin"] == pytest.approx(np.mean(per_tree), rel=1e-4, abs=1e-5)
    assert sum(t["weight"] for t in e["terms"]) + e["bias"] == pytest.approx(e["margin"], rel=1e-4, abs=1e-5)


def test_ensemble_explanation_weights_members(fitted, reuters_small):
    (texts, labels), (test_texts, _) = reuters_small
    other = xmtc.XRLinear(max_leaf_size=8, branching=4, seed=3, n_trees=1, n_threads=2).fit(texts, labels,
                                                                                            progress=False)
    ens = Ensemble([fitted, other], weights=[3.0, 1.0])
    e = ens.explain(test_texts[:2], k=2, n_terms=10_000)
    idx, scores = ens.predict_topk(test_texts[:2], 2)
    for i in range(2):
        assert [x["label"] for x in e[i]] == [fitted.labels_.names[j] for j in idx[i]]
        for x in e[i]:
            j = fitted.labels_.index[x["label"]]
            xi = fitted.transform(test_texts[i:i + 1]).toarray()[0]
            want = 0.75 * sum(hand_margins(fitted.models_[0], xi, j)) + 0.25 * sum(hand_margins(other.models_[0], xi, j))
            assert x["margin"] == pytest.approx(want, rel=1e-4, abs=1e-5)


def test_ensemble_explanation_over_the_union_of_labels(fitted, reuters_small):
    """A label one member lacks is explained by the members that know it, their weights renormalised."""
    (texts, labels), (test_texts, _) = reuters_small
    drop = {"earn", "acq"}  # the other member never sees the two commonest labels
    kept = [i for i, y in enumerate(labels) if not drop & set(y)]
    other = xmtc.XRLinear(max_leaf_size=8, branching=4, seed=3, n_trees=1, n_threads=2).fit(
        [texts[i] for i in kept], [labels[i] for i in kept], progress=False)
    assert drop.isdisjoint(other.labels_.names) and set(other.labels_.names) <= set(fitted.labels_.names)
    ens = Ensemble([fitted, other], weights=[3.0, 1.0])
    e = ens.explain(test_texts[:6], k=3, n_terms=10_000)
    seen = set()
    for i in range(6):
        xi = fitted.transform(test_texts[i:i + 1]).toarray()[0]
        xo = other.transform(test_texts[i:i + 1]).toarray()[0]
        for x in e[i]:
            j = fitted.labels_.index[x["label"]]
            mine = sum(hand_margins(fitted.models_[0], xi, j))
            if x["label"] in other.labels_.index:
                theirs = sum(hand_margins(other.models_[0], xo, other.labels_.index[x["label"]]))
                want = 0.75 * mine + 0.25 * theirs
            else:
                want = mine
            seen.add(x["label"] in other.labels_.index)
            assert x["margin"] == pytest.approx(want, rel=1e-4, abs=1e-5)
    assert seen == {True, False}


def test_cli_explain_prints_json_and_text(fitted, reuters_small, tmp_path, capsys):
    fitted.save(tmp_path / "m")
    text = reuters_small[1][0][0]
    assert main(["explain", str(tmp_path / "m"), text, "-k", "2", "--n-terms", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == json.loads(json.dumps(fitted.explain([text], k=2, n_terms=3)[0]))
    assert main(["explain", str(tmp_path / "m"), text, "-k", "1"]) == 0
    printed = capsys.readouterr().out
    assert out[0]["label"] in printed and out[0]["terms"][0]["term"] in printed
    assert main(["explain", str(tmp_path / "m"), text, "-k", "0"]) == 2
    assert "k must be a positive integer" in capsys.readouterr().err


# -- transformer methods: the TF-IDF half exactly, the embedding half as one term ---------------------
def test_transformer_explanation_has_an_embedding_term(tsv_sample, tiny_bert):
    texts, labels = tsv_sample("yso-finna-en-2k-20k", "train", 200)
    model = xmtc.XRTransformer(encoder=tiny_bert, max_leaf_size=20, branching=8, n_threads=2,
                               max_length=8, seed=0, device="cpu").fit(texts, labels, progress=False)
    X = model.transform(texts[:3]).toarray()
    n_tfidf = model.featurizer_.n_features_
    assert model.matcher_combine == "ranker" and len(model.models_[0].levels_) > 1
    for combine in ("ranker", "product"):  # ranker: the label's own level alone; product: its whole path
        model.set_params(matcher_combine=combine)
        expl = model.explain(texts[:3], k=2, n_terms=10_000)
        first = len(model.models_[0].levels_) if combine == "product" else 1  # path levels counted, from the label
        for i, row in enumerate(expl):
            for e in row:
                terms = {t["term"]: t["weight"] for t in e["terms"]}
                margins = hand_margins(model.models_[0], X[i], model.labels_.index[e["label"]])
                assert e["margin"] == pytest.approx(sum(margins[-first:]), rel=1e-4, abs=1e-5)
                assert sum(terms.values()) + e["bias"] == pytest.approx(e["margin"], rel=1e-4, abs=1e-5)
                # the embedding term is the summed contribution of every embedding dimension, along the path
                path_w = [w for w in (model.models_[0].weights)]
                node, emb = model.labels_.index[e["label"]], 0.0
                for t in range(len(path_w) - 1, len(path_w) - 1 - first, -1):
                    emb += float(X[i, n_tfidf:] @ path_w[t][n_tfidf:-1, node].toarray().ravel())
                    node = int(model.models_[0].chain[t].indices[node])
                assert terms["[embedding]"] == pytest.approx(emb, rel=1e-4, abs=1e-6)
