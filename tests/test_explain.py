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

from serve_support import write_open_split


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


def test_cli_explain_reads_the_text_from_standard_input_given_a_dash(fitted, reuters_small, tmp_path, capsys,
                                                                      monkeypatch):
    import io

    fitted.save(tmp_path / "m")
    text = reuters_small[1][0][0]
    monkeypatch.setattr("sys.stdin", io.StringIO(text + "\n"))
    assert main(["explain", str(tmp_path / "m"), "-", "-k", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(fitted.explain([text], k=2)[0]))


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


# -- explain agrees with predict: the label-text route and removed labels (issue 32) ---------------------------
@pytest.fixture(scope="module")
def routed(tmp_path_factory):
    """XR-Linear on 1,000 sample titles with a fifth of their labels stripped (kept in the label file), so that
    the label-text route suggests those labels from their text; returns (model, {label id: label text})."""
    from xmtc.data import read_dataset
    from xmtc.models.calibrated_fit import fit_calibrated

    d = tmp_path_factory.mktemp("routed")
    rows, unseen, header, keep = write_open_split(d, 1000)
    ds = read_dataset(d / "train.tsv", label_file=d / "all.tsv", all_file_labels=True)
    model = xmtc.XRLinear(n_trees=1, n_threads=2)
    fit_calibrated(model, ds)
    model.save(d / "m")
    texts = {ln.split("\t")[0]: ln.split("\t")[3] for ln in keep}
    return d / "m", texts, [t for _, t in rows[:12]]


def _route_texts(model, texts, n=8):
    """Label texts of routed labels (texts the route surely suggests for) and texts made of two of them."""
    routed_ids = model.label_route_.label_ids.tolist()[:n]
    own = [texts[model.labels_.names[j]] for j in routed_ids]
    return own + [f"{a} and {b}" for a, b in zip(own[::2], own[1::2])]


def _ranker_only(model, texts, k):
    """The model's own calibrated top-k (its rankers'), the route taken away for the call."""
    route, model.label_route_ = model.label_route_, None
    try:
        return model.predict_topk(texts, k)
    finally:
        model.label_route_ = route


def test_explain_lists_predicts_labels_and_scores_route_labels_included(routed):
    folder, label_texts, titles = routed
    model = xmtc.load(folder)
    texts = _route_texts(model, label_texts) + titles
    route = model.label_route_
    f = route.featurizer
    seen_sources = set()
    for k in (1, 3, 10):
        expl = model.explain(texts, k=k, n_terms=10_000)
        idx, scores = model.predict_topk(texts, k)
        own_idx, own_sc = _ranker_only(model, texts, k)
        for i, row in enumerate(expl):
            want = [(model.labels_.names[j], float(s)) for j, s in zip(idx[i], scores[i]) if j >= 0]
            assert [(e["label"], e["score"]) for e in row] == want   # same labels, order and scores, exactly
            for e in row:
                j = model.labels_.index[e["label"]]
                seen_sources.add(e["source"])
                assert "reason" not in e
                own = {int(a): float(b) for a, b in zip(own_idx[i], own_sc[i]) if a >= 0}
                if e["source"] == "ranker":
                    assert own.get(j) == e["score"]
                    continue
                assert e["source"] == "label-text" and j in route.label_ids
                # the route's probability of the cosine is the score, and beat the ranker's (if it had one)
                cos = (f.transform([texts[i]]) @ f.transform([model.labels_.texts[j]]).T).toarray()[0, 0]
                assert e["cosine"] == pytest.approx(cos, rel=1e-5)
                assert e["score"] == pytest.approx(float(route.probabilities(np.array([cos]))[0]), rel=1e-5)
                assert own.get(j, -1.0) < e["score"]
    assert seen_sources == {"ranker", "label-text"}


def test_route_label_ngrams_sum_to_the_cosine_of_the_featurizer_rows(routed):
    folder, label_texts, _ = routed
    model = xmtc.load(folder)
    f = model.label_route_.featurizer
    names = f.feature_names()
    checked = 0
    for text in _route_texts(model, label_texts):
        for e in model.explain([text], k=5, n_terms=100_000)[0]:
            if e["source"] != "label-text":
                continue
            x = f.transform([text])
            m = f.transform([model.labels_.texts[model.labels_.index[e["label"]]]])
            cos = float((x @ m.T).toarray()[0, 0])
            assert 0.0 < cos and sum(t["weight"] for t in e["terms"]) == pytest.approx(cos, rel=1e-5)
            assert e["margin"] == e["cosine"] and e["bias"] == 0.0
            shared = set(x.indices.tolist()) & set(m.indices.tolist())
            assert {t["term"] for t in e["terms"]} == {names[j] for j in shared}
            for t in e["terms"]:  # each n-gram's weight is x_j * m_j
                j = names.index(t["term"])
                assert t["weight"] == pytest.approx(float(x[0, j]) * float(m[0, j]), rel=1e-6)
            weights = [t["weight"] for t in e["terms"]]
            assert weights == sorted(weights, reverse=True)
            checked += 1
    assert checked >= 8


def test_removed_labels_are_never_explained(routed):
    from xmtc.models.open_labels import remove_labels

    folder, label_texts, titles = routed
    model = xmtc.load(folder)
    texts = _route_texts(model, label_texts) + titles
    # remove a top-1 label the route gives and one the rankers give (each the first of its kind)
    idx, _ = model.predict_topk(texts, 1)
    own, _ = _ranker_only(model, texts, 1)
    from_route = [int(a) for a, b in zip(idx[:, 0], own[:, 0]) if a != b and a in model.label_route_.label_ids]
    from_rankers = [int(a) for a, b in zip(idx[:, 0], own[:, 0]) if a == b]
    gone = {model.labels_.names[from_route[0]], model.labels_.names[from_rankers[0]]}
    assert gone <= {e[0]["label"] for e in model.explain(texts, k=1)}
    remove_labels(model, sorted(gone))
    for k in (1, 3):
        expl = model.explain(texts, k=k)
        idx, scores = model.predict_topk(texts, k)
        for row, ids, sc in zip(expl, idx, scores):
            assert not gone & {e["label"] for e in row}
            assert [(e["label"], e["score"]) for e in row] == [(model.labels_.names[j], float(s))
                                                                for j, s in zip(ids, sc) if j >= 0]
            assert len(row) == k


def test_ngram_contributions_by_hand():
    from xmtc.features.char_ngrams import CharNgramFeaturizer
    from xmtc.models.term_contributions import ngram_contributions

    f = CharNgramFeaturizer((3, 3)).fit(["abc", "abcd"])
    # " ab" and "abc" are in both texts (idf 1 + ln(3/3) = 1), "bc ", "bcd", "cd " in one (idf a = 1 + ln(3/2))
    assert sorted(f.feature_names()) == [" ab", "abc", "bc ", "bcd", "cd "]
    a = 1.0 + np.log(1.5)
    nx, nm = np.sqrt(2 + a * a), np.sqrt(2 + 2 * a * a)  # "abc": 1, 1, a ; "abcd": 1, 1, a, a
    c = ngram_contributions(f.transform(["abc"]), f.transform(["abcd"]), f.feature_names())
    assert c["weights"] == {" ab": pytest.approx(1 / (nx * nm)), "abc": pytest.approx(1 / (nx * nm))}
    assert c["cosine"] == pytest.approx(2 / (nx * nm))
    # explicit rows: only shared features count, each x_j * m_j, named "#j" without names
    x = sp.csr_matrix(([0.6, 0.8], [0, 2], [0, 2]), shape=(1, 4))
    m = sp.csr_matrix(([0.5, 0.5, 0.7071], [1, 2, 3], [0, 3]), shape=(1, 4))
    c = ngram_contributions(x, m)
    assert c["weights"] == {"#2": pytest.approx(0.4)} and c["cosine"] == pytest.approx(0.4)


def test_cli_explain_says_a_label_came_from_its_text(routed, capsys):
    folder, label_texts, _ = routed
    model = xmtc.load(folder)
    text = _route_texts(model, label_texts, n=1)[0]
    want = model.explain([text], k=2, n_terms=3)[0]
    assert want[0]["source"] == "label-text"
    assert main(["explain", str(folder), text, "-k", "2", "--n-terms", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(want))
    assert main(["explain", str(folder), text, "-k", "1", "--n-terms", "3"]) == 0
    printed = capsys.readouterr().out
    assert "from its label text" in printed and f"cosine {want[0]['cosine']:.3f}" in printed
    assert repr(want[0]["terms"][0]["term"]) in printed  # n-grams quoted: their boundary spaces show


def test_ensemble_explains_its_route_labels_from_their_text(routed):
    folder, label_texts, titles = routed
    model = xmtc.load(folder)
    ens = Ensemble([model, xmtc.load(folder)])
    texts = _route_texts(model, label_texts, n=4) + titles[:4]
    expl = ens.explain(texts, k=3, n_terms=10_000)
    single = model.explain(texts, k=ens.k_each, n_terms=10_000)  # what the ensemble asks each member for
    idx, scores = ens.predict_topk(texts, 3)
    for row, one, ids, sc in zip(expl, single, idx, scores):
        assert [(e["label"], e["score"]) for e in row] == [(ens.labels_.names[j], float(s))
                                                            for j, s in zip(ids, sc) if j >= 0]
        # two copies of one model: the ensemble's evidence for a label is the model's own
        own = {o["label"]: o for o in one}
        for e in row:
            assert e["source"] == own[e["label"]]["source"]
            assert e["margin"] == pytest.approx(own[e["label"]]["margin"], rel=1e-9)
            assert {t["term"]: t["weight"] for t in e["terms"]} == pytest.approx(
                {t["term"]: t["weight"] for t in own[e["label"]]["terms"]}, rel=1e-9)
    assert {e["source"] for row in expl for e in row} == {"ranker", "label-text"}


def test_a_label_added_after_training_is_explained_by_its_text_and_one_without_evidence_says_why(routed):
    from xmtc.data.labels import LabelVocab
    from xmtc.models.explain import label_evidence
    from xmtc.models.open_labels import add_labels

    folder, _, _ = routed
    model = xmtc.load(folder)
    n_before = len(model.labels_)
    add_labels(model, LabelVocab(["zz-new"], display=["zymurgy"], texts=["zymurgy and home brewing of beer"]))
    j = model.labels_.index["zz-new"]
    assert j == n_before  # past every ranker: the rankers know nothing of it
    text = "home brewing of beer"
    expl = model.explain([text], k=3, n_terms=100)[0]
    idx, scores = model.predict_topk([text], 3)
    assert [(e["label"], e["score"]) for e in expl] == [(model.labels_.names[a], float(s))
                                                         for a, s in zip(idx[0], scores[0])]
    new = next(e for e in expl if e["label"] == "zz-new")
    assert new["source"] == "label-text" and new["display"] == "zymurgy"
    f = model.label_route_.featurizer
    x, m = f.transform([text]), f.transform(["zymurgy and home brewing of beer"])
    assert {t["term"] for t in new["terms"]} == {f.feature_names()[c] for c in set(x.indices) & set(m.indices)}
    assert new["cosine"] == pytest.approx(float((x @ m.T).toarray()[0, 0]), rel=1e-5)
    # with the label taken out of the route it has no evidence left: the entry says why instead of vanishing
    model.label_route_.remove([j])
    ev = label_evidence(model, [text], [[j]], (np.array([[j]]), np.array([[0.5]], dtype=np.float32)))[0][0]
    assert ev["source"] is None and "no ranker" in ev["reason"] and "zz-new" in ev["reason"]
    from xmtc.models.explain import _entry

    entry = _entry(model.labels_, j, 0.5, ev, 5)
    assert entry["terms"] == [] and entry["margin"] is None and entry["reason"] == ev["reason"]
