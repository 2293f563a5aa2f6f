"""Pins for the mutation survivors of learn's growing TF-IDF vocabulary (dd67dc2): ``TfidfFeaturizer.extended``
(xmtc/features/tfidf_growth.py, its trie growth in xmtc/features/ngram_trie.py) and the rare-n-gram record
(xmtc/features/rare_ngrams.py), ``widened`` (xmtc/linear/beam_edit.py) / ``widened_rows`` (xmtc/linear/update.py) and
the grown-vocabulary functions of xmtc/models/learning.py (issue 32 item 6; ``scripts/mutate.py`` picks these by
the ``pin_vocab_<area>`` in their names)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer

from xmtc.features.tfidf import TfidfFeaturizer


def _corpus(rng, n, n_words, length=8):
    words = [f"w{i}" for i in range(n_words)]
    p = 1.0 / np.arange(1, n_words + 1)
    return [" ".join(rng.choice(words, size=rng.integers(1, length + 1), p=p / p.sum())) for _ in range(n)]


def _remembering(**kw):
    f = TfidfFeaturizer(**kw)
    f.remember_rare = True
    return f


def _added_by_union(old, seen, kw, old_names):
    """sklearn fitted on every text so far: (the n-grams it keeps that the old fit lacks, their idf)."""
    union = TfidfVectorizer(dtype=np.float64, **kw).fit(seen)
    idf = dict(zip(union.get_feature_names_out(), union.idf_))
    return {n: v for n, v in idf.items() if n not in set(old_names)}


def test_pin_vocab_tfidf_an_ngram_too_common_to_keep_stays_out_as_in_a_fit_on_all_texts():
    """max_df: an n-gram the earlier texts held in more than max_df of them is left out by a fit on every text
    even when the new texts hold it rarely; its earlier count must be remembered (bug before: it was counted in
    the new texts alone and added). Hand case: 'common' in 20 of 20 old texts and 2 of 10 new ones, 22/30 > 0.5."""
    old = [f"common a{i} b{i % 7}" for i in range(20)]
    new = [f"common x{i % 3}" if i < 2 else f"y{i % 3} zz" for i in range(10)]
    f = _remembering(ngram_range=(1, 1), min_df=2, max_df=0.5).fit(old)
    assert "common" not in f.feature_names()
    g, added = f.extended(new)
    assert g.feature_names()[f.n_features_:] == ["y0", "y1", "y2", "zz"]
    assert added == 4
    # the record holds it with its count on, so a later learn keeps it out too
    g2, _ = g.extended([f"common q{i}" for i in range(3)])
    assert "common" not in g2.feature_names()


@pytest.mark.parametrize("kw", [dict(ngram_range=(1, 2), min_df=2, max_df=0.3),
                                dict(ngram_range=(1, 2), min_df=0.004, max_df=40),
                                dict(ngram_range=(1, 2), min_df=3, smooth_idf=False),
                                dict(ngram_range=(2, 3), min_df=2, max_df=0.5, smooth_idf=False)])
def test_pin_vocab_tfidf_each_learn_adds_what_sklearn_on_all_texts_adds_with_its_idf(kw):
    """Integer and fractional min_df / max_df, without idf smoothing, over two learns: the n-grams added are those
    sklearn's TfidfVectorizer fitted on the union keeps and the old fit lacks, with the union's idf."""
    rng = np.random.default_rng(7)
    old, new1, new2 = _corpus(rng, 300, 300), _corpus(rng, 90, 420), _corpus(rng, 70, 520)
    f = _remembering(**kw).fit(old)
    seen, g = list(old), f
    for batch in (new1, new2):
        seen += batch
        before = g.feature_names()
        g, added = g.extended(batch)
        want = _added_by_union(old, seen, kw, before)
        names = g.feature_names()
        assert names[:len(before)] == before and added == len(names) - len(before)
        assert sorted(names[len(before):]) == names[len(before):] == sorted(want)
        np.testing.assert_allclose(g.idf_[len(before):], [want[n] for n in names[len(before):]], rtol=1e-5)
        assert g.n_docs_ == len(seen)
    assert added > 0


def test_pin_vocab_update_rows_and_weights_widen_but_never_narrow():
    """widened / widened_rows: wider is zeros past the old features (the bias row last); the same width is the
    input itself; narrower is refused, for rows as for weights."""
    import scipy.sparse as sp

    from xmtc.errors import ConfigError
    from xmtc.linear.beam_edit import widened
    from xmtc.linear.update import widened_rows

    X = sp.csr_matrix(np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]], dtype=np.float32))
    assert widened_rows(X, 3) is X
    np.testing.assert_array_equal(widened_rows(X, 5).toarray(), [[1, 0, 2, 0, 0], [0, 3, 0, 0, 0]])
    dense = X.toarray()
    assert widened_rows(dense, 5) is dense  # not sparse: left to prepare_features
    with pytest.raises(ConfigError):
        widened_rows(X, 2)
    W = sp.csc_matrix(np.array([[1.0], [0.0], [4.0], [-7.0]], dtype=np.float32))  # d_old = 3, bias -7
    np.testing.assert_array_equal(widened(W, 4).toarray().ravel(), [1, 0, 4, 0, -7])
    with pytest.raises(ConfigError):
        widened(W, 2)


@pytest.fixture(scope="module")
def small():
    from serve_support import learn_split_model

    return learn_split_model()


def _with_route(model, own: bool):
    """A copy of ``model`` with a label-text route of one label: reading texts with the model's own word
    featurizer (a route saved before it had its own) or with a featurizer of its own."""
    import copy

    from xmtc.models.label_route import LabelRoute

    m = copy.deepcopy(model)
    f = copy.deepcopy(m.featurizer_) if own else m.featurizer_
    M = f.transform(["medieval castles and wooden churches"])
    m.label_route_ = LabelRoute(np.array([m.n_labels - 1]), M, np.array([0.0, 1.0]), np.array([0.0, 1.0]), f, own)
    return m


def test_pin_vocab_learning_a_route_reading_the_models_words_follows_the_grown_vocabulary(small):
    """_follow_vocabulary: a route that reads texts with the model's featurizer gets the grown one and its rows
    widened (zeros on the new features: the same row); one with its own featurizer is left as it was."""
    model, texts, labels, cut = small
    shared = _with_route(model, own=False)
    M0 = shared.label_route_.M.toarray()
    m = shared.learn(texts[cut:], labels[cut:])
    d, grown = model.n_features_, m.n_features_
    assert grown > d
    route = m.label_route_
    assert route.featurizer is m.featurizer_ and route.M.shape == (1, grown)
    np.testing.assert_array_equal(route.M.toarray()[:, :d], M0)
    assert route.M[:, d:].nnz == 0
    assert route.topk(["medieval castles"], 1)[0].shape == (1, 1)
    own = _with_route(model, own=True)
    f_own, M_own = own.label_route_.featurizer, own.label_route_.M.toarray()
    m2 = own.learn(texts[cut:], labels[cut:])
    assert m2.n_features_ == grown
    assert m2.label_route_.featurizer is f_own and f_own.n_features_ == d
    np.testing.assert_array_equal(m2.label_route_.M.toarray(), M_own)


def test_pin_vocab_learning_a_few_shot_stage_widens_with_each_grown_vocabulary(small):
    """_few_shot_after / _widened_stage: a stage fitted over the first learn's features reads the second learn's
    wider rows: its weights get zero rows before the bias row, its positives zero columns, and it scores."""
    import copy

    model, texts, labels, cut = small
    m = copy.deepcopy(model)
    m.learn(texts[cut:cut + 3], [["zeta label"]] * 3, few_shot="words")  # the ranker on the model's words
    d1 = m.n_features_
    st1 = m.few_shot_
    assert st1 is not None and st1.W.shape[0] == d1 + 1
    W1 = st1.W.toarray()
    m.learn(texts[cut + 3:cut + 40], [ls + ["eta label"] if i < 3 else ls for i, ls in enumerate(labels[cut + 3:cut + 40])])
    d2 = m.n_features_
    assert d2 > d1
    st2 = m.few_shot_
    assert st2.W.shape[0] == d2 + 1 and st2.pos_X.shape[1] == d2
    zeta = m.labels_.index["zeta label"]
    col = list(np.asarray(st2.label_ids)).index(zeta)
    col1 = list(np.asarray(st1.label_ids)).index(zeta)
    np.testing.assert_allclose(st2.W.toarray()[:d1, col], W1[:d1, col1], atol=1e-6)
    assert st2.W.toarray()[d1:d2, col].any() == False  # noqa: E712
    np.testing.assert_allclose(st2.W.toarray()[d2, col], W1[d1, col1], atol=1e-6)
    assert m.predict(texts[cut:cut + 3], k=3)
    # a learn adding one feature only (one new word, alone in two texts) widens the stage too
    m.learn(["qqqzzz", "qqqzzz"], [labels[0], labels[1]])
    assert m.n_features_ == d2 + 1
    assert m.few_shot_.W.shape[0] == d2 + 2 and m.few_shot_.pos_X.shape[1] == d2 + 1
    assert m.predict([texts[cut]], k=3)
    # a stage scored by character n-grams reads its own featurizer's rows: a grown vocabulary leaves it as it is
    c = copy.deepcopy(model)
    c.learn(texts[cut:cut + 3], [["zeta label"]] * 3)
    width = c.few_shot_.chars.n_features_ + 1
    assert c.few_shot_.W.shape[0] == width
    c.learn(["qqqzzz", "qqqzzz"], [labels[0], labels[1]])
    assert c.n_features_ > model.n_features_ and c.few_shot_.W.shape[0] == width


def test_pin_vocab_tfidf_a_learn_adding_nothing_reads_texts_as_before_and_counts_on():
    """_copy_vocabulary: a learn whose texts hold no n-gram to add gives a featurizer that reads every text as the
    old one does (uni- and bigrams), with the document count and the rare record moved on."""
    rng = np.random.default_rng(11)
    old = _corpus(rng, 200, 120)
    f = _remembering(ngram_range=(1, 2), min_df=2).fit(old)
    g, added = f.extended(["w0", "w0 w1"])
    assert added == 0 and g is not f and g.feature_names() == f.feature_names()
    probe = old[:50] + ["w0 w1 w2 w0", "w3"]
    assert (g.transform(probe) != f.transform(probe)).nnz == 0
    np.testing.assert_array_equal(g.idf_, f.idf_)
    assert g.n_docs_ == f.n_docs_ + 2
    assert f._rare[0].size > 0 and np.array_equal(g._rare[0], f._rare[0])  # nothing of these texts was rare


def test_pin_vocab_tfidf_remembered_counts_are_looked_up_by_hash_past_either_end():
    """_counts_of by hand: a hash below, between and above every remembered one counts 0; an equal one its count."""
    from xmtc.features.rare_ngrams import _counts_of

    h, df = np.array([5, 9, 2**63 + 1], dtype=np.uint64), np.array([2, 3, 4], dtype=np.int64)
    q = np.array([1, 5, 7, 9, 2**63, 2**63 + 1, 2**64 - 1], dtype=np.uint64)
    np.testing.assert_array_equal(_counts_of(h, df, q), [0, 2, 0, 3, 0, 4, 0])
    np.testing.assert_array_equal(_counts_of(h[:2], df[:2], q), [0, 2, 0, 3, 0, 0, 0])
    np.testing.assert_array_equal(_counts_of(h[:0], df[:0], q), np.zeros(7))


def test_pin_vocab_tfidf_a_capped_learn_gives_the_kept_ngrams_their_own_idf():
    """max_features: the n-grams that fill the room left are those in most new texts, each with the idf it gets
    without the cap (the union fit's ln((N + 1) / (df + 1)) + 1 of its own df)."""
    rng = np.random.default_rng(1)
    old, new = _corpus(rng, 300, 150), _corpus(rng, 120, 260)
    f = TfidfFeaturizer(min_df=2).fit(old)
    g, _ = f.extended(new, len(old))
    idf = dict(zip(g.feature_names(), g.idf_))
    capped = TfidfFeaturizer(min_df=2, max_features=f.n_features_ + 7).fit(old)
    c, k = capped.extended(new, len(old))
    assert k == 7
    names = c.feature_names()[f.n_features_:]
    np.testing.assert_allclose(c.idf_[f.n_features_:], [idf[n] for n in names], rtol=1e-6)
    assert len(set(np.round(c.idf_[f.n_features_:], 5))) > 1 or k == 1  # not one df for every kept n-gram


def test_pin_vocab_tfidf_ngram_hashes_are_blake2b_and_splitmix64_written_out():
    """The record's hashes travel with saved models, so they are pinned to their definition: a unigram's is
    the little-endian 8-byte blake2b of its UTF-8 text, an n-gram's the splitmix64 finalizer of
    ``prefix * 0x9E3779B97F4A7C15 ^ last`` (mod 2^64), here in Python integers."""
    import hashlib

    from xmtc.features.rare_ngrams import _mix, _node_hashes

    mask = 2**64 - 1

    def blake(s):
        return int.from_bytes(hashlib.blake2b(s.encode("utf-8"), digest_size=8).digest(), "little")

    def mix(a, b):
        x = ((a * 0x9E3779B97F4A7C15) & mask) ^ b
        x ^= x >> 30
        x = (x * 0xBF58476D1CE4E5B9) & mask
        x ^= x >> 27
        x = (x * 0x94D049BB133111EB) & mask
        return x ^ (x >> 31)

    rng = np.random.default_rng(5)
    a, b = rng.integers(0, 2**63, 50, dtype=np.uint64) * np.uint64(2) + np.uint64(1), rng.integers(0, 2**63, 50, dtype=np.uint64)
    assert [int(v) for v in _mix(a, b)] == [mix(int(x), int(y)) for x, y in zip(a, b)]
    words = ["alpha", "beta", "gämma"]
    hashes = _node_hashes(words, [np.array([0, 2])], [np.array([1, 0])])
    assert [int(v) for v in hashes[0]] == [blake(w) for w in words]
    assert [int(v) for v in hashes[1]] == [mix(blake("alpha"), blake("beta")), mix(blake("gämma"), blake("alpha"))]


def test_pin_vocab_learning_texts_without_new_words_leave_the_anchor_whole_and_no_memory_is_fine(small, monkeypatch):
    """grown_vocabulary's ``n_added`` is 0 when nothing was added: a proximal refit then holds every feature by the
    anchor (no curvature); a model without remembered rows learns new words too."""
    import copy


    model, texts, labels, cut = small
    from serve_support import update_calls

    calls = update_calls(monkeypatch)
    known = [t for t in texts[:cut] if t.strip()][:6]  # training texts: every n-gram of them is known or rare
    m = copy.deepcopy(model)
    m.featurizer_.remember_rare = False
    m.featurizer_._rare = None  # counted in these texts alone: nothing reaches min_df that the fit lacks
    got, added = m.featurizer_.extended(known[:1], int(m.n_train_))
    assert added == 0
    m.learn(known[:1], [labels[0]], whole_memory_refit=False)
    assert m.n_features_ == model.n_features_ and calls[-1]["curvature"] is None
    bare = copy.deepcopy(model)
    bare.memory_ = None
    bare.learn(texts[cut:], labels[cut:])
    assert bare.n_features_ > model.n_features_ and bare.memory_ is None
