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


def test_an_offer_cuts_character_rows_only_for_the_new_texts_that_stay(monkeypatch):
    mem, texts = _memory_with_texts(n=8, capacity=5)
    new = [f"offered text {i} " + "y" * i for i in range(40)]
    f = CharNgramFeaturizer().fit(texts + new)
    mem.char_rows(f)
    read = []
    real = CharNgramFeaturizer.transform
    monkeypatch.setattr(CharNgramFeaturizer, "transform", lambda self, t: read.append(list(t)) or real(self, t))
    mem.offer(sp.csr_matrix(np.arange(100, 140, dtype=np.float32)[:, None]), sp.csr_matrix((40, 2), dtype=np.float32),
              new)
    stayed = sorted(t for t in mem.texts if t in new)
    assert 0 < len(stayed) < 5 and sorted(read[0]) == stayed  # a reservoir of 5: most offered rows do not stay
    np.testing.assert_array_equal(mem.char_rows(f).toarray(), real(f, mem.texts).toarray())


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


# -- the mutation run of 8259622 (scripts/mutate.py): edges the tests above left open ---------------------
def test_the_featurizer_is_fitted_on_a_seeded_draw_of_remembered_texts_up_to_fit_chars(monkeypatch):
    import xmtc.models.few_shot_chars as fsc

    memory = ["alpha one", "beta two", "gamma three", "delta four", "epsilon five", "zeta six"]
    order = np.random.default_rng(7).permutation(6)  # the module doc's seeded order
    lengths = np.cumsum([len(memory[i]) for i in order])
    monkeypatch.setattr(fsc, "FIT_CHARS", int(lengths[2]))  # exactly the first three texts' characters
    f = fsc.fitted_featurizer(memory, ["omega new"], seed=7)
    want = CharNgramFeaturizer().fit([memory[i] for i in np.sort(order[:3])] + ["omega new"])
    assert f.feature_names() == want.feature_names()
    np.testing.assert_array_equal(f.idf_, want.idf_)
    monkeypatch.setattr(fsc, "FIT_CHARS", int(lengths[2]) + 1)  # one character more: the fourth text joins
    f = fsc.fitted_featurizer(memory, ["omega new"], seed=7)
    want = CharNgramFeaturizer().fit([memory[i] for i in np.sort(order[:4])] + ["omega new"])
    assert f.feature_names() == want.feature_names()


def test_centroids_of_no_labels_and_of_labels_without_negatives():
    P = sp.csr_matrix(np.array([[1.0, 0, 0], [0, 1.0, 0]], np.float32))
    C, loo, values = centroids([], sp.csr_matrix((4, 3), dtype=np.float32), FEW)
    assert C.shape == (4, 0) and loo.shape == (0, FEW) and values == []  # d features + the bias row
    C, loo, values = centroids([P], sp.csr_matrix((0, 3), dtype=np.float32), FEW)
    np.testing.assert_allclose(C.toarray()[:, 0], [0.5, 0.5, 0, 0])
    np.testing.assert_allclose(loo[0, :2], [0.0, 0.0])  # the two documents share no n-gram
    assert values[0].shape == (0,)  # every remembered row carries the label: no negative value
    # rows of no feature at all: every negative still has its value, 0
    C, loo, values = centroids([sp.csr_matrix((2, 0), dtype=np.float32)], sp.csr_matrix((3, 0), dtype=np.float32),
                               FEW)
    assert C.shape == (1, 1)
    np.testing.assert_array_equal(values[0], np.zeros(3))


_SOLVER = dict(C_pos=1.0, C_neg=1.0, tol=1e-4, max_iter=100, threshold=0.0, n_threads=1)
_REMEMBERED = ["steam railway engines", "railway stations of europe", "music of the baroque", "jazz music history",
               "gardening in spring", "cooking with herbs", "a history of railways", "birds of the north"]
_DOCS = ["railway bridges", "railways and trains", "the railway age", "narrow gauge railways"]


def _text_stage_memory(carry=()):
    """Remembered rows with texts (their features an identity: the character scorer never reads them); the rows
    in ``carry`` carry label 4."""
    n = len(_REMEMBERED)
    carry = sorted(carry)
    Y = sp.csr_matrix((np.ones(len(carry), np.float32), (carry, np.full(len(carry), 4))), shape=(n, 5))
    return TrainingMemory(sp.identity(n, dtype=np.float32, format="csr"), Y, seen=3 * n, capacity=n, seed=5,
                          texts=_REMEMBERED)


def _learn_rows(k, label=4, width=5):
    """``k`` new rows of ``label`` (features of the memory's width, unread by the character scorer)."""
    return (sp.csr_matrix((k, len(_REMEMBERED)), dtype=np.float32),
            sp.csr_matrix((np.ones(k, np.float32), np.full(k, label), np.arange(k + 1)), shape=(k, width)))


def _by_definition(f, docs, negatives_texts):
    """The centroid, leave-one-out values and the negatives' sketch of one label by the module doc."""
    D = char_rows(f, docs).toarray().astype(np.float64)
    c = D.mean(axis=0)
    G = D @ D.T
    loo = (G.sum(axis=1) - np.diag(G)) / (len(docs) - 1)
    tail, ranks = negative_sketch(char_rows(f, negatives_texts).toarray() @ c)
    return c, loo, tail, ranks


def test_a_new_character_stage_fits_its_featurizer_and_scores_a_label_by_definition():
    from xmtc.models.few_shot import FewShotRankers
    from xmtc.models.few_shot_chars import fitted_featurizer

    mem = _text_stage_memory()
    X_new, Y_new = _learn_rows(3)
    stage = FewShotRankers.empty(len(_REMEMBERED), 1.0).updated(X_new, Y_new, np.array([4]), mem, texts=_DOCS[:3],
                                                                **_SOLVER)
    want_f = fitted_featurizer(_REMEMBERED, _DOCS[:3], 5)
    assert stage.chars is not None and stage.chars.feature_names() == want_f.feature_names()
    np.testing.assert_array_equal(stage.chars.idf_, want_f.idf_)
    c, loo, tail, ranks = _by_definition(stage.chars, _DOCS[:3], _REMEMBERED)  # no remembered row carries 4
    assert stage.label_ids.tolist() == [4] and stage.W.shape == (stage.chars.n_features_ + 1, 1)
    np.testing.assert_allclose(stage.W.toarray()[:, 0], np.r_[c, 0.0], atol=1e-6)
    np.testing.assert_allclose(stage.loo[0, :3], loo, atol=1e-6)
    np.testing.assert_allclose(stage.neg_tail[0], tail, atol=1e-6)
    np.testing.assert_allclose(stage.neg_ranks[0], ranks, atol=1e-6)
    np.testing.assert_allclose(stage.pos_X.toarray(), char_rows(stage.chars, _DOCS[:3]).toarray())
    assert stage.pos_owner.tolist() == [4, 4, 4] and stage.omega.tolist() == [3.0]  # seen / remembered


def test_a_large_learn_fits_the_featurizer_on_the_stage_labels_texts_and_reads_only_theirs(monkeypatch):
    """A learn that brings many documents besides a few-shot label's (a fifth of yso-finna-en: 104,507 titles, 49
    such labels) fits the featurizer on the remembered draw and the documents of labels that can join the stage,
    and cuts character rows for those alone: the same stage as a learn of those documents only."""
    from xmtc.models.few_shot import FEW, FewShotRankers
    from xmtc.models.few_shot_chars import fitted_featurizer

    others = ["zymurgy zeppelins", "quokka quilts", "xylophone yurts"] * (FEW // 3 + 1)
    texts = [others[0], _DOCS[0], others[1], _DOCS[1], _DOCS[2]] + others[2:]
    n = len(texts)
    # rows 1, 3, 4 carry the new label 4; the others the new label 3, with more than FEW documents
    lab = np.array([4 if t in _DOCS else 3 for t in texts])
    Y_new = sp.csr_matrix((np.ones(n, np.float32), (np.arange(n), lab)), shape=(n, 5))
    X_new = sp.csr_matrix((n, len(_REMEMBERED)), dtype=np.float32)
    read = []
    real = CharNgramFeaturizer.transform
    monkeypatch.setattr(CharNgramFeaturizer, "transform", lambda self, t: read.append(list(t)) or real(self, t))
    stage = FewShotRankers.empty(len(_REMEMBERED), 1.0).updated(X_new, Y_new, np.array([3, 4]), _text_stage_memory(),
                                                                texts=texts, **_SOLVER)
    want_f = fitted_featurizer(_REMEMBERED, _DOCS[:3], 5)
    assert stage.chars.feature_names() == want_f.feature_names()
    np.testing.assert_array_equal(stage.chars.idf_, want_f.idf_)
    assert not any(t in others for batch in read for t in batch)  # label 3's documents were never cut
    assert stage.label_ids.tolist() == [4]
    c, loo, tail, ranks = _by_definition(stage.chars, _DOCS[:3], _REMEMBERED)
    np.testing.assert_allclose(stage.W.toarray()[:, 0], np.r_[c, 0.0], atol=1e-6)
    np.testing.assert_allclose(stage.loo[0, :3], loo, atol=1e-6)
    np.testing.assert_allclose(stage.pos_X.toarray(), char_rows(stage.chars, _DOCS[:3]).toarray())


def test_a_character_stage_refits_a_label_on_its_kept_and_new_documents_without_the_rows_that_carry_it():
    from xmtc.models.few_shot import FewShotRankers

    X_new, Y_new = _learn_rows(2)
    stage = FewShotRankers.empty(len(_REMEMBERED), 1.0).updated(X_new, Y_new, np.array([4]), _text_stage_memory(),
                                                                texts=_DOCS[:2], **_SOLVER)
    # the memory took the label's two documents in as rows 0 and 6 (they carry it now), and one more arrives
    mem = _text_stage_memory(carry=(0, 6))
    X_one, Y_one = _learn_rows(1)
    grown = stage.updated(X_one, Y_one, np.array([], dtype=np.int64), mem, texts=_DOCS[2:3], **_SOLVER)
    assert grown.chars is stage.chars and grown.label_ids.tolist() == [4]  # the stage keeps its featurizer
    negatives = [t for i, t in enumerate(_REMEMBERED) if i not in (0, 6)]
    c, loo, tail, ranks = _by_definition(stage.chars, _DOCS[:3], negatives)
    np.testing.assert_allclose(grown.W.toarray()[:, 0], np.r_[c, 0.0], atol=1e-6)
    np.testing.assert_allclose(grown.loo[0, :3], loo, atol=1e-6)
    assert np.isneginf(grown.loo[0, 3:]).all()
    np.testing.assert_allclose(grown.neg_tail[0], tail, atol=1e-6)
    np.testing.assert_allclose(grown.neg_ranks[0], ranks, atol=1e-6)
    assert grown.pos_owner.tolist() == [4, 4, 4] and grown.omega.tolist() == [3.0]


def _stored_texts(texts):
    X = sp.csr_matrix(np.ones((len(texts), 1), np.float32))
    return TrainingMemory(X, sp.csr_matrix((len(texts), 1), dtype=np.float32), len(texts), len(texts), 0,
                          texts=texts).to_arrays()


def test_empty_and_multibyte_remembered_texts_survive_storage():
    texts = ["", "Eisenbahnen über Brücken", "", "rautatie ja höyryveturit €", "x"]
    params, arrays = _stored_texts(texts)
    np.testing.assert_array_equal(arrays["texts.ends"], np.cumsum([len(t.encode("utf-8")) for t in texts]))
    back = TrainingMemory.from_arrays(params, arrays, n_features=1, n_labels=1, where="m")
    assert back.texts == texts


@pytest.mark.parametrize("blob, ends", [(b"abcd", [-1, 4]), (b"abcdef", [4, 2, 6]), (b"abcdef", [2, 4, 5]),
                                        (b"abcdef", [2, 4, 7])])
def test_text_ends_that_do_not_cut_their_bytes_are_refused(blob, ends):
    # a negative first end, a decreasing end, ends short of the bytes and past them: each would decode (Python
    # slices clip), into texts that are not the ones saved
    from xmtc.errors import ModelFormatError

    params, arrays = _stored_texts(["ab", "cd", "ef"][:len(ends)])
    arrays["texts.blob"] = np.frombuffer(blob, np.uint8).copy()
    arrays["texts.ends"] = np.array(ends, np.int64)
    with pytest.raises(ModelFormatError, match="training memory"):
        TrainingMemory.from_arrays(params, arrays, n_features=1, n_labels=1, where="m")


def test_an_empty_character_stage_keeps_its_featurizer_and_turns_to_words_when_asked():
    from xmtc.models.few_shot import FewShotRankers

    f = CharNgramFeaturizer().fit(_REMEMBERED + _DOCS)
    empty = FewShotRankers.empty(0, 1.0, f)  # e.g. every label of the stage left it
    mem = _text_stage_memory()
    _, Y_new = _learn_rows(3)
    X_new = sp.identity(len(_REMEMBERED), dtype=np.float32, format="csr")[[0, 1, 6]]
    kept = empty.updated(X_new, Y_new, np.array([4]), mem, texts=_DOCS[:3], **_SOLVER)
    assert kept.chars is f and kept.label_ids.tolist() == [4]  # no featurizer fitted anew
    c, loo, _, _ = _by_definition(f, _DOCS[:3], _REMEMBERED)
    np.testing.assert_allclose(kept.W.toarray()[:, 0], np.r_[c, 0.0], atol=1e-6)
    np.testing.assert_allclose(kept.loo[0, :3], loo, atol=1e-6)
    words = empty.updated(X_new, Y_new, np.array([4]), mem, texts=_DOCS[:3], scorer="words", **_SOLVER)
    # the ranker on the model's features, as a words stage made from nothing fits it
    want = FewShotRankers.empty(len(_REMEMBERED), 1.0).updated(X_new, Y_new, np.array([4]), mem, **_SOLVER)
    assert words.chars is None and want.chars is None and words.label_ids.tolist() == [4]
    assert words.W.shape == (len(_REMEMBERED) + 1, 1)
    np.testing.assert_array_equal(words.W.toarray(), want.W.toarray())
    np.testing.assert_array_equal(words.loo, want.loo)


def test_a_learn_whose_fresh_labels_have_no_document_leaves_an_empty_stage_as_it_is(monkeypatch):
    import xmtc.models.few_shot_chars as fsc
    from xmtc.models.few_shot import FewShotRankers

    monkeypatch.setattr(fsc, "fitted_featurizer", lambda *a, **k: pytest.fail("fitted a featurizer"))
    empty = FewShotRankers.empty(len(_REMEMBERED), 1.0)
    X_new, Y_new = _learn_rows(2, label=0)  # an old label's documents; label 4 is fresh (cold) but not in them
    assert empty.updated(X_new, Y_new, np.array([4]), _text_stage_memory(), texts=_DOCS[:2], **_SOLVER) is empty


@pytest.mark.parametrize("change", ["none", "fewer_label_rows", "n_features", "n_labels", "capacity", "seen",
                                    "capacity_0"])
def test_a_stored_memory_is_refused_unless_it_fits_the_model_and_its_own_counts(change):
    # three rows of one feature and one label, seen 3, capacity 3: every check at its boundary, and each broken
    from xmtc.errors import ModelFormatError

    rows = 1 if change == "capacity_0" else 3
    params, arrays = _stored_texts(["ab", "cd", "ef"][:rows])
    n_features, n_labels = 1, 1
    if change == "fewer_label_rows":
        _, other = _stored_texts(["ab", "cd"])
        arrays.update({k: v for k, v in other.items() if k.startswith("Y.")})
    elif change == "n_features":
        n_features = 2
    elif change == "n_labels":
        n_labels = 0
    elif change == "capacity":
        params["capacity"] = 2
    elif change == "seen":
        params["seen"] = 2
    elif change == "capacity_0":
        params["capacity"] = 0
    if change == "none":
        back = TrainingMemory.from_arrays(params, arrays, n_features, n_labels, where="m")
        assert len(back) == back.seen == back.capacity == 3 and back.texts == ["ab", "cd", "ef"]
        return
    with pytest.raises(ModelFormatError, match="training memory"):
        TrainingMemory.from_arrays(params, arrays, n_features, n_labels, where="m")


def test_fit_refuses_texts_that_do_not_match_its_rows():
    texts, labels = sample_docs(step=40)
    model = xmtc.XRLinear(n_trees=1, max_leaf_size=16, branching=4, n_threads=1)
    X = model.fit_featurizer(texts)
    with pytest.raises(ConfigError, match=f"{len(texts) - 1} texts for {len(texts)} rows"):
        model.fit(X, labels, keep_featurizer=True, texts=texts[:-1], progress=False)


# -- the mutation run of f199fcb (scripts/mutate.py): a label with exactly FEW documents -------------------
_FIVE = _DOCS + ["railway museums of wales"]  # FEW documents of one label


def test_a_new_character_stage_fits_its_featurizer_on_a_label_with_exactly_few_documents():
    """``counts <= FEW`` (few_shot.updated): a label with FEW documents can join, so its texts feed the fit."""
    from xmtc.models.few_shot import FewShotRankers
    from xmtc.models.few_shot_chars import fitted_featurizer

    assert len(_FIVE) == FEW
    X_new, Y_new = _learn_rows(FEW)
    stage = FewShotRankers.empty(len(_REMEMBERED), 1.0).updated(X_new, Y_new, np.array([4]), _text_stage_memory(),
                                                                texts=_FIVE, **_SOLVER)
    want_f = fitted_featurizer(_REMEMBERED, _FIVE, 5)
    assert stage.chars.feature_names() == want_f.feature_names()
    np.testing.assert_array_equal(stage.chars.idf_, want_f.idf_)
    assert stage.label_ids.tolist() == [4] and stage.pos_owner.tolist() == [4] * FEW


def test_a_fresh_label_with_exactly_few_documents_joins_a_stage_that_holds_another():
    """``before`` (few_shot._update) counts no kept documents for a label the stage does not hold: a fresh label
    with FEW new documents joins a non-empty stage, its centroid by definition."""
    from xmtc.models.few_shot import FewShotRankers

    X_new, Y_new = _learn_rows(2)
    stage = FewShotRankers.empty(len(_REMEMBERED), 1.0).updated(X_new, Y_new, np.array([4]), _text_stage_memory(),
                                                                texts=_DOCS[:2], **_SOLVER)
    assert stage.label_ids.tolist() == [4]
    X_five, Y_five = _learn_rows(FEW, label=3)
    grown = stage.updated(X_five, Y_five, np.array([3]), _text_stage_memory(carry=(0, 6)), texts=_FIVE, **_SOLVER)
    assert grown.label_ids.tolist() == [3, 4] and sorted(grown.pos_owner.tolist()) == [3] * FEW + [4, 4]
    np.testing.assert_allclose(grown.pos_X[grown.pos_owner == 3].toarray(), char_rows(stage.chars, _FIVE).toarray())
    c = char_rows(stage.chars, _FIVE).toarray().astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(grown.W.toarray()[:, 0], np.r_[c, 0.0], atol=1e-6)


def test_a_fresh_label_above_the_one_label_a_stage_holds_joins_it():
    """A stage holding one label (3) takes in a fresh label with a higher id (4): the kept documents are looked
    up for both (few_shot._joining), label 3 stays as it was and label 4's weights are its documents' centroid."""
    from xmtc.models.few_shot import FewShotRankers

    X_two, Y_two = _learn_rows(2, label=3)
    stage = FewShotRankers.empty(len(_REMEMBERED), 1.0).updated(X_two, Y_two, np.array([3]), _text_stage_memory(),
                                                                texts=_DOCS[:2], **_SOLVER)
    assert stage.label_ids.tolist() == [3]
    X_new, Y_new = _learn_rows(3, label=4)
    grown = stage.updated(X_new, Y_new, np.array([4]), _text_stage_memory(), texts=_FIVE[:3], **_SOLVER)
    assert sorted(grown.label_ids.tolist()) == [3, 4] and sorted(grown.pos_owner.tolist()) == [3, 3, 4, 4, 4]
    col = {int(j): t for t, j in enumerate(grown.label_ids)}
    c = char_rows(stage.chars, _FIVE[:3]).toarray().astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(grown.W.toarray()[:, col[4]], np.r_[c, 0.0], atol=1e-6)
    np.testing.assert_array_equal(grown.W.toarray()[:, col[3]], stage.W.toarray()[:, 0])
