"""Label-text similarity, PEFA's kNN voting and the open-label-set metrics, on hand-made cases."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.sparse as sp

from xmtc.cli import main
from xmtc.data.labels import LabelVocab
from xmtc.errors import ConfigError
from xmtc.index.ann import VectorIndex
from xmtc.models import load
from xmtc.methods.knn.estimator import KNN, pefa_scores
from xmtc.methods.label_text.estimator import LabelText
from xmtc.open_metrics import open_set_metrics, restrict_topk, unseen_columns

# -- label-text similarity ---------------------------------------------------------------------------


def test_tfidf_scores_are_the_hand_computed_cosine():
    vocab = LabelVocab(["A", "B"], texts=["red apple", "green tree"])
    model = LabelText(ngram_max=1).fit(["red car"], [["A"]], labels=vocab, progress=False)
    # IDF over the label texts and the training text (n = 3, smooth): red is in 2 of them, the rest in 1
    idf = {w: math.log(4 / (1 + df)) + 1 for w, df in {"red": 2, "apple": 1, "car": 1}.items()}
    q = np.array([(1 + math.log(2)) * idf["red"], idf["car"], 0.0])  # "red red car": sublinear tf; red, car, apple
    label = np.array([idf["red"], 0.0, idf["apple"]])
    expected = q @ label / (np.linalg.norm(q) * np.linalg.norm(label))
    np.testing.assert_allclose(model.label_scores(["red red car"]), [[expected, 0.0]], rtol=1e-5)
    idx, scores = model.predict_topk(["red red car"], 2)
    assert idx.tolist() == [[0, -1]] and scores[0, 0] == pytest.approx(expected, rel=1e-5)


def test_a_label_without_documents_is_suggested_for_its_own_text():
    vocab = LabelVocab(["p1", "p2", "p3"], texts=["railways", "mushrooms fungi", "medieval castles"])
    texts = ["history of the finnish railways", "wild mushrooms of europe"]
    model = LabelText().fit(texts, [["p1"], ["p2"]], labels=vocab, progress=False)
    assert model.label_counts_.tolist() == [1, 1, 0]
    assert model.predict(["medieval castles"], k=1)[0][0][0] == "p3"


def test_command_line_indexes_every_label_of_the_label_file(tmp_path, capsys):
    (tmp_path / "labels.tsv").write_text("#id\tprefLabel\tlabel_text\np1\trailways\trailways trains\n"
                                         "p2\tfungi\tmushrooms fungi\np3\tcastles\tmedieval castles\n")
    (tmp_path / "train.tsv").write_text("p1\thistory of railways\np2\twild mushrooms\n")
    (tmp_path / "test.tsv").write_text("p3\tcastles of the middle ages\np1\ttrains and railways\n")
    out = tmp_path / "m"
    assert main(["train", str(tmp_path / "train.tsv"), "-o", str(out), "--method", "label-text", "--label-file",
                 str(tmp_path / "labels.tsv"), "-q"]) == 0
    model = load(out)
    assert model.labels_.names == ["p1", "p2", "p3"] and model.label_counts_.tolist() == [1, 1, 0]
    assert main(["evaluate", str(out), str(tmp_path / "test.tsv"), "--json", "-q"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    # p3 has no training document: the test document that carries it is the one open-set document
    assert metrics["docs_unseen"] == 1 and metrics["P@1_zs"] == 100.0 and metrics["R@10_unseen"] == 100.0
    (tmp_path / "unseen.txt").write_text("p1\n")
    assert main(["evaluate", str(out), str(tmp_path / "test.tsv"), "--json", "-q", "--unseen-labels",
                 str(tmp_path / "unseen.txt")]) == 0
    assert json.loads(capsys.readouterr().out)["docs_unseen"] == 1


def test_labels_added_after_fitting_are_suggested_and_saved(tmp_path):
    from xmtc.models.open_labels import add_labels

    vocab = LabelVocab(["p1", "p2"], texts=["railways", "mushrooms fungi"])
    model = LabelText().fit(["history of railways", "medieval castles of europe"], [["p1"], ["p2"]], labels=vocab,
                            progress=False)
    assert add_labels(model, LabelVocab(["p3"], texts=["medieval castles"])) == 1
    assert model.label_counts_.tolist() == [1, 1, 0]
    assert model.predict(["castles"], k=1)[0][0][0] == "p3"
    model.save(tmp_path / "m")
    assert load(tmp_path / "m").predict(["castles"], k=1)[0][0][0] == "p3"


def test_label_texts_are_required_unless_told_where_else_to_look():
    with pytest.raises(ConfigError, match="--label-file"):
        LabelText().fit(["a text"], [["x"]], progress=False)
    model = LabelText(label_texts="names").fit(["a text"], [["railways"]], progress=False)
    assert model.predict(["railways of finland"], k=1)[0][0][0] == "railways"
    model = LabelText(label_texts="documents").fit(["steam trains"], [["p1"]], progress=False)
    assert model.predict(["trains"], k=1)[0][0][0] == "p1"


def test_encoder_scorer_saves_and_loads(tiny_bert, tmp_path):
    vocab = LabelVocab(["p1", "p2", "p3"], texts=["railways", "mushrooms fungi", "medieval castles"])
    model = LabelText(scorer="encoder", encoder=tiny_bert, max_length=16).fit(
        ["trains"], [["p1"]], labels=vocab, progress=False)
    model.save(tmp_path / "m")
    loaded = load(tmp_path / "m")
    a, b = model.predict_topk(["wild mushrooms", "castles"], 3), loaded.predict_topk(["wild mushrooms", "castles"], 3)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_allclose(a[1], b[1], rtol=1e-5)
    E = model.embedder_.embed(["wild mushrooms"])
    L = model.embedder_.embed(vocab.texts)
    np.testing.assert_allclose(model.label_scores(["wild mushrooms"]), E @ L.T, rtol=1e-4, atol=1e-5)


def test_encoder_label_scores_drop_the_indexs_padding_instead_of_writing_it_into_label_0(tiny_bert):
    # an index that holds fewer vectors than labels (here label p2 taken out) pads each row with id -1:
    # the padding is no label, so label 0 keeps its cosine and only the missing label scores 0
    vocab = LabelVocab(["p0", "p1", "p2"], texts=["railways", "mushrooms fungi", "medieval castles"])
    model = LabelText(scorer="encoder", encoder=tiny_bert, max_length=16).fit(
        ["trains"], [["p0"]], labels=vocab, progress=False)
    assert model.index_.remove([2]) == 1
    ids, _ = model.index_.search(model.embedder_.embed(["wild mushrooms"]), 3)
    assert ids[0, -1] == -1                                              # the padding this test is about
    E = model.embedder_.embed(["wild mushrooms"])
    want = E @ model.embedder_.embed(vocab.texts).T
    want[:, 2] = 0.0
    assert abs(want[0, 0]) > 1e-3                                        # label 0's cosine is not 0 itself
    np.testing.assert_allclose(model.label_scores(["wild mushrooms"]), want, rtol=1e-4, atol=1e-5)


# -- PEFA: kNN voting + label-text similarity ----------------------------------------------------------


def _unit(rows):
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_pefa_mix_is_its_definition():
    rng = np.random.default_rng(0)
    X_train, labels, q = _unit(rng.normal(size=(6, 4))), _unit(rng.normal(size=(3, 4))), _unit(rng.normal(size=(2, 4)))
    Y = sp.csr_matrix(np.array([[1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 0], [1, 0, 0], [0, 1, 0]], np.float32))
    lam, K = 0.3, 3
    got = pefa_scores(q, 3, label_weight=lam, text_index=VectorIndex().build(X_train), train_labels=Y,
                      n_neighbors=K, label_index=VectorIndex().build(labels), label_candidates=3).toarray()
    for i in range(2):
        sims = X_train @ q[i]
        near = np.argsort(-sims)[:K]
        vote = sum(max(sims[j], 0) * Y[j].toarray()[0] for j in near) / K
        expected = lam * np.maximum(labels @ q[i], 0) + (1 - lam) * vote
        np.testing.assert_allclose(got[i], expected, rtol=1e-5, atol=1e-6)


class _FixedEmbedder:
    """Embeds the texts of a table (stands in for an encoder)."""

    def __init__(self, table):
        self.table = table

    def embed(self, texts, **_):
        return _unit([self.table[t] for t in texts])


def _knn_model(label_weight: float) -> KNN:
    """Labels: a (documents, a dissimilar text), b (no document, its text = the query), c (a text close to
    the query, no document), d (documents far from the query). The query's true labels are a and b."""
    m = KNN(label_weight=label_weight, n_neighbors=2, label_candidates=4)
    m.labels_ = LabelVocab(["a", "b", "c", "d"])
    m.label_counts_, m.n_train_, m.calibration_ = np.array([2, 0, 0, 1]), 3, None
    m.embedder_ = _FixedEmbedder({"query": [1, 0, 0]})
    m.text_index_ = VectorIndex().build(_unit([[0.9, 0.1, 0], [0.8, 0.2, 0], [0.1, 0, 1]]))
    m.train_labels_ = sp.csr_matrix(np.array([[1, 0, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1]], np.float32))
    m.label_index_ = VectorIndex().build(_unit([[0, 1, 0.05], [1, 0, 0], [0.95, 0.3, 0], [0.2, 0, 1]]))
    return m


def test_knn_needs_both_the_vote_and_the_label_texts():
    top2 = lambda m: {name for name, _ in m.predict(["query"], k=2)[0]}  # noqa: E731
    assert top2(_knn_model(0.5)) == {"a", "b"}  # the default mix finds both true labels
    assert top2(_knn_model(1.0)) == {"b", "c"}  # label texts alone: the dissimilar text of a loses it
    assert "b" not in top2(_knn_model(0.0))  # kNN alone: b has no document to vote for it


# -- open-label-set metrics ----------------------------------------------------------------------------


def test_unseen_columns_and_restricted_ranking():
    assert unseen_columns(5, [2, 0, 3]).tolist() == [False, True, False, True, True]
    assert unseen_columns(3, [1, 1, 1], ["x", "y", "z"], {"y"}).tolist() == [False, True, False]
    keep = np.array([False, True, False, True])
    assert restrict_topk(np.array([[0, 3, 1, -1], [2, 0, -1, -1]]), keep, 2).tolist() == [[3, 1], [-1, -1]]


def test_open_set_metrics_by_hand():
    # labels 3 and 4 are unseen; document 1 has none (not counted)
    Y = sp.csr_matrix(np.array([[1, 0, 0, 1, 0], [0, 1, 0, 0, 0], [0, 0, 0, 1, 1], [0, 0, 0, 0, 1]], np.float32))
    unseen = np.array([0, 0, 0, 1, 1], bool)
    ranking = np.array([[3, 0, 1], [1, 2, -1], [0, 4, 1], [3, 0, -1]])
    out = open_set_metrics(Y, ranking, unseen)
    # R@10_unseen: doc 0 finds 3 of {3}; doc 2 finds 4 of {3, 4}; doc 3 misses 4
    assert out["docs_unseen"] == 3 and out["labels_unseen"] == 2
    assert out["R@10_unseen"] == pytest.approx(100 * (1 + 0.5 + 0) / 3)
    # zero-shot: unseen labels only, in ranking order: doc 0 [3] hit; doc 2 [4] hit (1 of 2); doc 3 [3] miss
    assert out["P@1_zs"] == pytest.approx(100 * 2 / 3) and out["R@10_zs"] == pytest.approx(100 * 1.5 / 3)
    deeper = np.array([[3, 0, 1, 2, 4], [1, 2, 0, 3, 4], [0, 4, 1, 2, 3], [3, 0, 1, 2, 4]])
    out = open_set_metrics(Y, ranking, unseen, deeper)  # doc 2 now finds 4 then 3; doc 3 finds 4 second
    assert out["P@1_zs"] == pytest.approx(100 * 2 / 3) and out["R@10_zs"] == pytest.approx(100 * 3 / 3)
    assert out["R@10_unseen"] == pytest.approx(100 * 1.5 / 3)  # read from the ranking over all labels
    none = open_set_metrics(Y, ranking, np.zeros(5, bool))
    assert none["docs_unseen"] == 0 and none["R@10_zs"] == 0.0
