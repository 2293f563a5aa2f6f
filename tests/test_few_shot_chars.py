"""The few-shot stage's character n-gram scorer (:mod:`xmtc.models.few_shot_chars`): centroid, leave-one-out and
negative values by their definitions, the remembered texts that feed them, the scorer a stage keeps, and the
stage in a model that learns, predicts, saves, loads and explains."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import scipy.sparse as sp

import xmtc
from xmtc.errors import ConfigError
from xmtc.features.char_ngrams import CharNgramFeaturizer
from xmtc.models.calibration import MIN_KNOWN
from xmtc.models.few_shot import FEW, TAIL, negative_sketch, probability, _decision
from xmtc.models.few_shot_chars import centroids, char_rows
from xmtc.models.memory import TEXT_CHARS, TrainingMemory

from serve_support import sample_docs


# -- the values by their definitions ---------------------------------------------------------------------
def test_centroid_leave_one_out_and_negative_values_by_hand():
    # unit rows: documents a, b, c of one label; negatives n1, n2
    a, b, c = np.array([1.0, 0, 0]), np.array([0.6, 0.8, 0]), np.array([0, 0.6, 0.8])
    n1, n2 = np.array([0, 0, 1.0]), np.array([0.8, 0, 0.6])
    P = sp.csr_matrix(np.vstack([a, b, c]).astype(np.float32))
    N = sp.csr_matrix(np.vstack([n1, n2]).astype(np.float32))
    C, loo, values = centroids([P], N, FEW)
    centre = (a + b + c) / 3
    np.testing.assert_allclose(C.toarray()[:3, 0], centre, rtol=1e-6)
    assert C.shape == (4, 1) and C[3, 0] == 0  # the zero bias row
    # leave-one-out: each document against the mean of the other two
    want = [a @ (b + c) / 2, b @ (a + c) / 2, c @ (a + b) / 2]
    np.testing.assert_allclose(loo[0, :3], want, rtol=1e-6)
    assert np.all(loo[0, 3:] == -np.inf)
    np.testing.assert_allclose(values[0], [n1 @ centre, n2 @ centre], rtol=1e-6)


def test_two_labels_fitted_together_equal_each_fitted_alone():
    rng = np.random.default_rng(0)
    rows = sp.random(12, 30, density=0.3, random_state=1, format="csr", dtype=np.float32)
    rows = sp.csr_matrix(sp.diags(1 / np.sqrt(np.asarray(rows.multiply(rows).sum(1)).ravel())) @ rows)
    P1, P2, N = rows[:3], rows[3:5], rows[5:]
    C, loo, values = centroids([P1, P2], N, FEW)
    for t, P in enumerate((P1, P2)):
        Ct, loot, vt = centroids([P], N, FEW)
        np.testing.assert_allclose(C[:, t].toarray(), Ct.toarray(), rtol=1e-6)
        np.testing.assert_array_equal(loo[t], loot[0])
        np.testing.assert_allclose(values[t], vt[0], rtol=1e-6)
    assert rng is not None


# -- the remembered texts ------------------------------------------------------------------------------
def _memory_with_texts(n=6, capacity=4):
    texts = [f"text number {i} " + "x" * i for i in range(n)]
    X = sp.csr_matrix(np.arange(1, n + 1, dtype=np.float32)[:, None])  # row i holds i + 1: rows are traceable
    Y = sp.csr_matrix((n, 2), dtype=np.float32)
    return TrainingMemory.sample(X, Y, capacity, seed=3, texts=texts), texts


def test_the_memory_keeps_each_rows_text_through_sampling_offers_and_storage():
    mem, texts = _memory_with_texts()
    assert [texts[int(v) - 1] for v in mem.X.toarray().ravel()] == mem.texts
    new = ["new one", "new two", "new three"]
    mem.offer(sp.csr_matrix(np.array([[7.0], [8.0], [9.0]], np.float32)), sp.csr_matrix((3, 3), dtype=np.float32),
              new)
    pool = texts + new
    assert [pool[int(v) - 1] for v in mem.X.toarray().ravel()] == mem.texts  # rows and texts moved together
    params, arrays = mem.to_arrays()
    back = TrainingMemory.from_arrays(params, arrays, n_features=1, n_labels=3, where="m")
    assert back.texts == mem.texts and back.draws == mem.draws


def test_rows_offered_without_texts_drop_the_memorys_texts_and_long_texts_are_cut():
    mem, _ = _memory_with_texts()
    mem.offer(sp.csr_matrix(np.array([[7.0]], np.float32)), sp.csr_matrix((1, 2), dtype=np.float32))
    assert mem.texts is None
    long = TrainingMemory.sample(sp.csr_matrix(np.ones((1, 1), np.float32)), sp.csr_matrix((1, 1)), 5,
                                 texts=["y" * (TEXT_CHARS + 50)])
    assert long.texts == ["y" * TEXT_CHARS]
    params, arrays = long.to_arrays()
    arrays["texts.ends"] = arrays["texts.ends"] + 1  # past the bytes
    from xmtc.errors import ModelFormatError

    with pytest.raises(ModelFormatError, match="training memory"):
        TrainingMemory.from_arrays(params, arrays, n_features=1, n_labels=1, where="m")


# -- in a model ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def learned():
    texts, labels = sample_docs(step=6)
    cut = int(len(texts) * 0.8)
    model = xmtc.XRLinear(n_trees=1, max_leaf_size=16, branching=4, n_threads=2)
    from xmtc.data.dataset import Dataset, label_matrix
    from xmtc.models.calibrated_fit import fit_calibrated

    Y, vocab = label_matrix(labels[:cut])
    fit_calibrated(model, Dataset(texts[:cut], None, Y, vocab), progress=False)
    before = copy.deepcopy(model)
    music = [t for t in texts[cut:] if "music" in t.lower().split()]
    model.learn(music[:3], [["new-music"]] * 3)
    return model, before, texts, cut, music


def test_a_model_trained_on_texts_remembers_them_with_its_rows(learned):
    model, before, texts, cut, music = learned
    mem = before.memory_
    assert mem.texts is not None and len(mem.texts) == len(mem)
    whole = {t[:TEXT_CHARS]: t for t in texts}  # each remembered text is its document's first TEXT_CHARS
    np.testing.assert_allclose(before.transform([whole[t] for t in mem.texts]).toarray(), mem.X.toarray(), atol=1e-6)


def test_the_learned_label_is_scored_by_its_documents_centroid_against_the_remembered_texts(learned):
    model, before, texts, cut, music = learned
    stage = model.few_shot_
    j = list(model.labels_.names).index("new-music")
    assert stage.chars is not None and stage.label_ids.tolist() == [j]
    docs = char_rows(stage.chars, music[:3])
    np.testing.assert_allclose(stage.W[:-1, 0].toarray().ravel(), np.asarray(docs.mean(axis=0)).ravel(), atol=1e-6)
    G = (docs @ docs.T).toarray()
    np.testing.assert_allclose(stage.loo[0, :3], (G.sum(1) - np.diag(G)) / 2, atol=1e-6)
    # the negatives: every text the model remembered before the learn (none carries the new label)
    neg = (char_rows(stage.chars, before.memory_.texts) @ stage.W[:-1, 0]).toarray().ravel()
    tail, ranks = negative_sketch(neg)
    np.testing.assert_allclose(stage.neg_tail[0], tail, atol=1e-6)
    np.testing.assert_allclose(stage.neg_ranks[0], ranks, atol=1e-6)
    assert stage.omega[0] == before.memory_.seen / len(before.memory_)


def test_predict_merges_the_stages_probability_of_the_texts_character_rows(learned):
    model, before, texts, cut, music = learned
    stage = model.few_shot_
    j = int(stage.label_ids[0])
    test = texts[cut:]
    own = model.calibrated_topk(*model._predict_batch(test, 10), test)
    merged_i, merged_s = model.predict_topk(test, 10)
    p = probability(_decision(char_rows(stage.chars, test), stage.W, 1.0), stage.loo, stage.neg_tail,
                    stage.neg_ranks, stage.omega)[:, 0]
    p = p * np.minimum(1.0, model.known_fraction(test) / MIN_KNOWN)
    from_stage = 0
    for r in range(len(test)):
        tree = dict(zip(own[0][r].tolist(), own[1][r].tolist())).get(j, 0.0)
        got = dict(zip(merged_i[r].tolist(), merged_s[r].tolist()))
        if j in got:
            assert got[j] == pytest.approx(max(tree, p[r]), rel=1e-5)
            from_stage += p[r] > tree
    assert from_stage > 0, "the stage suggested the label for no text"


def test_the_stage_survives_save_and_load_and_explain_names_its_character_ngrams(learned, tmp_path):
    model, before, texts, cut, music = learned
    model.save(tmp_path / "m")
    back = xmtc.load(tmp_path / "m", mmap=False)
    assert back.memory_.texts == model.memory_.texts
    a, b = model.predict_topk(texts[cut:], 10), back.predict_topk(texts[cut:], 10)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_allclose(a[1], b[1])
    j = int(back.few_shot_.label_ids[0])
    won = []  # texts whose suggestion of the label is the stage's score, not the trees'
    for r in range(len(texts) - cut):
        own = back.calibrated_topk(*back._predict_batch([texts[cut + r]], 10), [texts[cut + r]])
        tree = dict(zip(own[0][0].tolist(), own[1][0].tolist())).get(j, -1.0)
        got = dict(zip(a[0][r].tolist(), a[1][r].tolist())).get(j)
        if got is not None and got != tree:
            won.append(texts[cut + r])
    assert won, "no suggestion of the learned label came from the stage"
    text = won[0]
    entry = [e for e in back.explain([text], k=10)[0] if e["label"] == "new-music"]
    assert entry and entry[0]["source"] == "few-shot"
    grams = set(back.few_shot_.chars.feature_names())
    assert entry[0]["terms"] and all(t["term"] in grams for t in entry[0]["terms"])
    row = char_rows(back.few_shot_.chars, [text])
    assert entry[0]["margin"] == pytest.approx(float((row @ back.few_shot_.W[:-1, 0]).toarray()[0, 0]), abs=1e-5)


def test_a_stage_keeps_its_scorer_and_feature_rows_leave_new_labels_to_the_trees(learned):
    model, before, texts, cut, music = learned
    other = [t for t in texts[cut:] if t not in music][:3]
    m = copy.deepcopy(model)
    m.learn(m.transform(other), [["rows-only"]] * 3)
    assert m.few_shot_.label_ids.tolist() == model.few_shot_.label_ids.tolist()  # not in the stage
    assert m.memory_.texts is None  # the memory's rows no longer all have texts
    idx, _ = m.predict_topk(m.transform(texts[cut:]), 10)  # feature rows: the stage has nothing to read
    assert idx.shape == (len(texts) - cut, 10)
    w = copy.deepcopy(before)
    w.learn(music[:3], [["new-music"]] * 3, few_shot="words")
    assert w.few_shot_.chars is None
    w.learn(other, [["more"]] * 3)  # the default asks for characters; the stage keeps its words
    assert w.few_shot_.chars is None and len(w.few_shot_) == 2
    with pytest.raises(ConfigError, match="few_shot"):
        copy.deepcopy(before).learn(music[:3], [["x"]] * 3, few_shot="bytes")


def test_a_learn_of_old_labels_only_fits_no_character_featurizer(learned, monkeypatch):
    model, before, texts, cut, music = learned
    import xmtc.models.few_shot_chars as fsc

    monkeypatch.setattr(fsc, "fitted_featurizer", lambda *a, **k: pytest.fail("fitted a featurizer"))
    m = copy.deepcopy(before)
    old = list(m.labels_.names)[0]
    m.learn(music[:2], [[old]] * 2)
    assert m.few_shot_ is None or not len(m.few_shot_)


def test_the_featurizer_is_fitted_on_the_remembered_and_the_new_texts():
    from xmtc.models.few_shot_chars import fitted_featurizer

    f = fitted_featurizer(["alpha beta"], ["gamma"], seed=0)
    want = CharNgramFeaturizer().fit(["alpha beta", "gamma"])
    assert f.feature_names() == want.feature_names()
    np.testing.assert_array_equal(f.idf_, want.idf_)
    assert TAIL > 0


def test_the_memorys_character_rows_follow_its_offers_as_a_fresh_transform_would():
    mem, texts = _memory_with_texts(n=8, capacity=5)
    f = CharNgramFeaturizer().fit(texts + ["new one", "new two"])
    first = mem.char_rows(f)
    assert mem.char_rows(f) is first  # computed once per featurizer
    mem.offer(sp.csr_matrix(np.array([[9.0], [10.0]], np.float32)), sp.csr_matrix((2, 2), dtype=np.float32),
              ["new one", "new two"])
    np.testing.assert_array_equal(mem.char_rows(f).toarray(), f.transform(mem.texts).toarray())


def test_a_fold_refit_keeps_the_remembered_texts_beside_their_rows():
    texts, labels = sample_docs(step=6)
    from xmtc.data.dataset import Dataset, label_matrix
    from xmtc.models.calibrated_fit import fit_calibrated

    Y, vocab = label_matrix(labels)
    model = xmtc.XRLinear(n_trees=1, max_leaf_size=16, branching=4, n_threads=2, memory_rows=10_000)
    fit_calibrated(model, Dataset(texts, None, Y, vocab), refit="fold", progress=False)
    mem = model.memory_
    assert mem.texts is not None and len(mem) == len(texts) == mem.seen  # the fold's documents joined with theirs
    whole = {t[:TEXT_CHARS]: t for t in texts}  # each remembered text is its document's first TEXT_CHARS
    np.testing.assert_allclose(model.transform([whole[t] for t in mem.texts]).toarray(), mem.X.toarray(), atol=1e-6)
