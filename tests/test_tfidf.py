"""TfidfFeaturizer: exact agreement with scikit-learn's TfidfVectorizer, tokeniser paths, errors, round trip."""

import gzip
import io
import json
import re

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.feature_extraction.text import TfidfVectorizer

from xmtc.data.data_root import data_root, missing_reason
from xmtc.errors import ConfigError, DataFormatError, ModelFormatError, NotFittedError
from xmtc.features import tfidf as tfidf_mod
from xmtc.features.tfidf import TfidfFeaturizer

DATA = data_root()


def _texts(name, split, every=1, limit=None):
    path = DATA / name / f"{split}.txt.gz"
    if not path.exists():
        pytest.skip(missing_reason())
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i % every == 0:
                out.append(line.rstrip("\n").split("\t", 1)[1])
                if limit is not None and len(out) >= limit:
                    break
    return out


@pytest.fixture(scope="module")
def reuters():
    return _texts("reuters21578-apte90", "train"), _texts("reuters21578-apte90", "test")


@pytest.fixture(scope="module")
def yso_sample():
    # lines are sorted by text: a stride gives a sample spread over the whole file
    return _texts("yso-finna-en", "train", every=26), _texts("yso-finna-en", "test", every=131)


def _sklearn(**kw):
    kw.setdefault("ngram_range", (1, 2))
    kw.setdefault("min_df", 2)
    kw.setdefault("sublinear_tf", True)
    return TfidfVectorizer(dtype=np.float32, **kw)


def _assert_same(ours: TfidfFeaturizer, X, ref: TfidfVectorizer, Y):
    """Same vocabulary (our order is alphabetical, like sklearn's) and same values within 1e-5."""
    assert ours.feature_names() == list(ref.get_feature_names_out())
    assert isinstance(X, sp.csr_matrix) and X.dtype == np.float32 and X.shape == Y.shape
    assert X.has_sorted_indices and np.all(np.diff(X.indices[X.indptr[0]:X.indptr[1]]) > 0)
    Xs = X.copy()
    Xs.sort_indices()
    assert np.array_equal(Xs.indices, X.indices)  # the sorted flag is true, not just set
    np.testing.assert_allclose(ours.idf_, ref.idf_, rtol=1e-6)
    assert abs(X - Y).max() < 1e-5 if X.nnz or Y.nnz else True
    assert (X != 0).sum() == (Y != 0).sum()


def test_matches_sklearn_on_reuters(reuters):
    train, test = reuters
    ours = TfidfFeaturizer()
    ref = _sklearn()
    _assert_same(ours, ours.fit_transform(train), ref, ref.fit_transform(train))
    _assert_same(ours, ours.transform(test), ref, ref.transform(test))
    assert ours.n_features_ == len(ref.vocabulary_)


def test_matches_sklearn_on_yso_sample(yso_sample):
    train, test = yso_sample
    ours = TfidfFeaturizer()
    ref = _sklearn()
    _assert_same(ours, ours.fit_transform(train), ref, ref.fit_transform(train))
    _assert_same(ours, ours.transform(test), ref, ref.transform(test))


@pytest.mark.parametrize("kw", [
    dict(ngram_range=(1, 1), min_df=1),
    dict(ngram_range=(2, 3)),
    dict(ngram_range=(1, 3), min_df=0.002, max_df=0.3),
    dict(min_df=3, max_df=200),
    dict(max_features=700),  # many ties in corpus frequency: sklearn's tie order must be kept
    dict(ngram_range=(1, 3), max_features=2000, max_df=0.5),
    dict(sublinear_tf=False, norm="l1", smooth_idf=False),
    dict(norm=None, lowercase=False),
    dict(token_pattern=r"(?u)\b\w+\b"),  # regex path, 1-char tokens
    dict(token_pattern=r"([a-z]+)\d*"),  # one capture group: the group is the token
    dict(token_pattern=r"\S+", ngram_range=(1, 2)),  # punctuation inside tokens
])
def test_matches_sklearn_with_options(reuters, kw):
    train, test = reuters[0][:1500], reuters[1][:300]
    ours = TfidfFeaturizer(**kw)
    ref = _sklearn(**kw)
    _assert_same(ours, ours.fit_transform(train), ref, ref.fit_transform(train))
    _assert_same(ours, ours.transform(test), ref, ref.transform(test))


TRICKY = [
    "İstanbul'da ΣΟΦΙΑ ΟΔΟΣ ΟΔΟΣ. Straße STRASSE ǅemal",  # lower() changes length; final sigma
    "", "a", "x y z", "   ", "__init__ foo_bar 2024 ٣٤٥ ²³ ½½",  # underscores, Arabic digits, superscripts
    "e\u0301t\u00e9 cafe\u0301 naïve",  # combining marks (Mn) are not \w: tokens split there
    "東京都 日本語のテキスト 한국어 텍스트",
    "emoji 🙂🙂 text🙂text a🙂b \ud800lone surrogate\udfff ok",
    "nul\x00inside\x00text new\nline\ttab",
    "ends with token", "ünïcödé ÜNÏCÖDÉ",
] * 3


def test_scanner_and_regex_tokenisers_agree_exactly():
    pattern = re.compile(tfidf_mod.DEFAULT_TOKEN_PATTERN)
    for lowercase in (True, False):
        tok_a, ptr_a, voc_a = tfidf_mod.tokenize_scanner(TRICKY, lowercase)
        tok_b, ptr_b, voc_b = tfidf_mod.tokenize_regex(TRICKY, lowercase, pattern)
        assert np.array_equal(ptr_a, ptr_b)
        assert [voc_a[i] for i in tok_a] == [voc_b[i] for i in tok_b]
        expected = [w for t in TRICKY for w in pattern.findall(t.lower() if lowercase else t)]
        assert [voc_a[i] for i in tok_a] == expected


def test_scanner_word_characters_match_re_on_every_code_point():
    everything = "".join(map(chr, range(0x110000)))
    texts = [everything[i:i + 100_000] for i in range(0, len(everything), 100_000)]
    tok, ptr, voc = tfidf_mod.tokenize_scanner(texts, False)
    expected = [w for t in texts for w in re.findall(tfidf_mod.DEFAULT_TOKEN_PATTERN, t)]
    assert [voc[i] for i in tok] == expected


def test_small_and_large_inputs_give_identical_rows(yso_sample):
    train, test = yso_sample
    f = TfidfFeaturizer().fit(train[:5000])
    batch = f.transform(test[:200])  # scanner path
    for i in range(0, 200, 17):  # one short text: regex path
        one = f.transform([test[i]])
        assert one.shape == (1, f.n_features_)
        assert np.array_equal(one.indices, batch[i].indices)
        np.testing.assert_array_equal(one.data, batch[i].data)


def test_fit_transform_equals_fit_then_transform_and_is_deterministic(reuters):
    train = reuters[0][:1000]
    a = TfidfFeaturizer(ngram_range=(1, 3))
    X = a.fit_transform(train)
    Z = TfidfFeaturizer(ngram_range=(1, 3)).fit(train).transform(train)
    assert (X != Z).nnz == 0
    pa, aa = a.to_arrays()
    pb, ab = TfidfFeaturizer(ngram_range=(1, 3)).fit(list(train)).to_arrays()
    assert pa == pb and aa.keys() == ab.keys()
    assert all(np.array_equal(aa[k], ab[k]) for k in aa)


def test_empty_and_unknown_texts_give_zero_rows():
    f = TfidfFeaturizer(min_df=1).fit(["alpha beta", "beta gamma", ""])
    X = f.transform(["", "zzz unknown words", "!!", "beta"] * 5)
    assert X.shape == (20, f.n_features_)
    assert np.isfinite(X.data).all()
    assert X[0].nnz == X[1].nnz == X[2].nnz == 0
    assert X[3].nnz == 1 and X[3].data[0] == pytest.approx(1.0)
    assert f.transform([]).shape == (0, f.n_features_)


def test_feature_index_agrees_with_feature_names(reuters):
    f = TfidfFeaturizer(ngram_range=(1, 3)).fit(reuters[0][:800])
    names = f.feature_names()
    assert names == sorted(names)
    for i in list(range(0, len(names), 97)) + [len(names) - 1]:
        assert f.feature_index(names[i]) == i
    assert f.feature_index("certainly not a feature xyzzy") is None
    assert f.feature_index("a b c d e") is None


def _roundtrip(params, arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as npz:
        loaded = {k: npz[k] for k in npz.files}
    return TfidfFeaturizer.from_arrays(json.loads(json.dumps(params)), loaded)


@pytest.mark.parametrize("kw", [dict(), dict(ngram_range=(2, 3), min_df=1, max_df=0.9, norm="l1"),
                                dict(ngram_range=(1, 1), token_pattern=r"\S+")])
def test_to_arrays_round_trip_without_pickle(reuters, kw):
    train, test = reuters[0][:600], reuters[1][:100]
    f = TfidfFeaturizer(**kw).fit(train)
    params, arrays = f.to_arrays()
    assert all(isinstance(a, np.ndarray) and a.dtype != object for a in arrays.values())
    g = _roundtrip(params, arrays)
    assert g.get_params() == f.get_params()
    assert g.feature_names() == f.feature_names()
    assert (g.transform(test) != f.transform(test)).nnz == 0


def test_from_arrays_rejects_inconsistent_input(reuters):
    params, arrays = TfidfFeaturizer(ngram_range=(1, 2)).fit(reuters[0][:300]).to_arrays()

    def broken(p=None, **changes):
        a = dict(arrays)
        for k, v in changes.items():
            if v is None:
                del a[k]
            else:
                a[k] = v
        with pytest.raises(ModelFormatError):
            TfidfFeaturizer.from_arrays(params if p is None else p, a)

    broken(ngram2_keys=None)
    broken(ngram3_keys=arrays["ngram2_keys"])
    broken(ngram2_keys=arrays["ngram2_keys"][::-1].copy())
    broken(idf=arrays["idf"][:-1])
    broken(idf=np.full_like(arrays["idf"], np.nan))
    f = arrays["unigram_feature"].copy()
    f[f >= 0] = 0
    broken(unigram_feature=f)
    broken(unigram_blob=np.full_like(arrays["unigram_blob"], 0xFF))
    broken(unigram_offsets=arrays["unigram_offsets"][:-1])
    broken(unigram_feature=arrays["unigram_feature"].astype(np.float32))
    broken({**params, "surprise": 1})
    broken({**params, "format_version": 99})
    broken({**params, "ngram_range": [2, 1]})
    broken({**params, "n_features": params["n_features"] + 1})


def test_input_validation():
    good = ["some text here", "more text here"] * 10
    for texts in (good[:3] + [b"bytes"], good + [None], good[:2] + [3]):
        with pytest.raises(DataFormatError, match=f"index {len(texts) - 1}"):
            TfidfFeaturizer(min_df=1).fit(texts)
    f = TfidfFeaturizer(min_df=1).fit(good)
    with pytest.raises(DataFormatError, match="index 1"):
        f.transform(["ok", 5])
    with pytest.raises(DataFormatError, match="index 20"):
        f.transform(good + [5.0])
    with pytest.raises(ConfigError, match="single str"):
        f.transform("a single text")
    with pytest.raises(NotFittedError):
        TfidfFeaturizer().transform(good)


@pytest.mark.parametrize("kw,texts", [
    (dict(ngram_range=(2, 1)), None), (dict(ngram_range=(0, 2)), None), (dict(ngram_range=(1,)), None),
    (dict(max_features=-5), None), (dict(max_features=0), None), (dict(min_df=0), None),
    (dict(min_df=1.5), None), (dict(max_df=-0.1), None), (dict(norm="l3"), None),
    (dict(token_pattern=r"(a)(b)"), None), (dict(token_pattern="("), None), (dict(lowercase=1), None),
    (dict(min_df=50), None),  # more than the number of texts: nothing survives
    (dict(min_df=5, max_df=2), None),
    (dict(), []),
    (dict(min_df=1), ["", "!", "a b"]),  # no token of >= 2 word characters anywhere
    (dict(token_pattern=r"[a-z ]+"), None),  # tokens with spaces make n-grams ambiguous
])
def test_impossible_configurations(kw, texts):
    with pytest.raises(ConfigError):
        TfidfFeaturizer(**kw).fit(["alpha beta gamma", "beta gamma delta", "gamma"] * 4 if texts is None else texts)


# -- a vocabulary grown by a learn's texts ---------------------------------------------------------------
def _corpus(rng, n, n_words, length=8):
    words = [f"w{i}" for i in range(n_words)]
    p = 1.0 / np.arange(1, n_words + 1)
    return [" ".join(rng.choice(words, size=rng.integers(1, length + 1), p=p / p.sum())) for _ in range(n)]


def _grown_by_definition(old, new, n_before, **kw):
    """Names, idf and rows of the grown vocabulary computed with sklearn: the old fit's features, then those a
    fit on ``new`` alone keeps that the old lacks, with idf ln((N + 1) / (df_new + 1)) + 1."""
    from sklearn.feature_extraction.text import CountVectorizer

    base = _sklearn(**kw).fit(old)
    old_names = list(base.get_feature_names_out())
    new_fit = _sklearn(**kw).fit(new)
    added = sorted(set(new_fit.get_feature_names_out()) - set(old_names))
    counts = CountVectorizer(ngram_range=kw["ngram_range"], min_df=1, vocabulary=added).fit_transform(new)
    df = np.asarray((counts > 0).sum(axis=0)).ravel()
    idf = np.r_[base.idf_, np.log((n_before + len(new) + 1) / (df + 1)) + 1]
    names = old_names + added

    def rows(texts):
        tf = CountVectorizer(ngram_range=kw["ngram_range"], vocabulary=names).fit_transform(texts).astype(np.float64)
        tf.data = (1 + np.log(tf.data)) * idf[tf.indices]
        norms = np.sqrt(np.asarray(tf.multiply(tf).sum(axis=1)).ravel())
        return sp.diags(1 / np.where(norms > 0, norms, 1)) @ tf

    return names, idf, rows


@pytest.mark.parametrize("ngram_range", [(1, 2), (1, 3), (2, 3)])
def test_a_grown_vocabulary_is_the_old_one_plus_the_new_texts_fit_with_their_idf(ngram_range):
    rng = np.random.default_rng(0)
    old, new = _corpus(rng, 300, 150), _corpus(rng, 120, 260)
    kw = dict(ngram_range=ngram_range, min_df=2, sublinear_tf=True)
    f = TfidfFeaturizer(**kw).fit(old)
    g, added = f.extended(new, len(old))
    names, idf, rows = _grown_by_definition(old, new, len(old), **kw)
    assert added == len(names) - f.n_features_ > 0
    assert g.feature_names() == names and f.feature_names() == names[:f.n_features_]  # old ids stay
    np.testing.assert_allclose(g.idf_, idf, rtol=1e-6)
    probe = old[:40] + new + ["w259 w258 w1 w259 w258", "w0"]
    np.testing.assert_allclose(g.transform(probe).toarray(), rows(probe).toarray(), atol=1e-6)
    # saved and loaded, it reads texts the same; the original is unchanged
    params, arrays = g.to_arrays()
    assert (TfidfFeaturizer.from_arrays(params, arrays).transform(probe) != g.transform(probe)).nnz == 0
    assert f.n_features_ == len(f.idf_) == len(names) - added


def test_a_grown_vocabulary_keeps_to_max_features_and_adds_nothing_twice():
    rng = np.random.default_rng(1)
    old, new = _corpus(rng, 300, 150), _corpus(rng, 120, 260)
    f = TfidfFeaturizer(min_df=2).fit(old)
    g, added = f.extended(new, len(old))
    again, more = g.extended(new, len(old) + len(new))  # the same texts again: counted twice, added once
    names = again.feature_names()
    assert names[:g.n_features_] == g.feature_names() and len(set(names)) == len(names) == g.n_features_ + more
    assert again.n_docs_ == len(old) + 2 * len(new)
    capped = TfidfFeaturizer(min_df=2, max_features=f.n_features_ + 5).fit(old)
    assert capped.n_features_ == f.n_features_  # the cap did not bind on the old texts
    c, k = capped.extended(new, len(old))
    assert k == 5 and c.n_features_ == f.n_features_ + 5
    full_names = g.feature_names()[f.n_features_:]
    df = np.asarray((g.transform(new)[:, f.n_features_:] > 0).sum(axis=0)).ravel()
    top = sorted(np.argsort(-df, kind="stable")[:5].tolist())
    assert c.feature_names()[f.n_features_:] == [full_names[i] for i in top]  # the 5 in most new texts
    assert f.extended(["w0"], len(old))[1] == 0  # one text of a known word: nothing to add


@pytest.mark.parametrize("ngram_range", [(1, 2), (1, 3)])
def test_a_grown_vocabulary_remembering_rare_ngrams_is_that_of_a_fit_on_all_texts(ngram_range, tmp_path):
    """With the n-grams seen too rarely remembered, each learn adds what a fit on every text so far keeps
    (sklearn on the union, the second implementation), with that fit's idf; old features keep theirs."""
    rng = np.random.default_rng(2)
    old, new1, new2 = _corpus(rng, 300, 400), _corpus(rng, 80, 500), _corpus(rng, 60, 600)
    f = TfidfFeaturizer(ngram_range=ngram_range, min_df=2)
    f.remember_rare = True
    f.fit(old)
    params, arrays = f.to_arrays()  # the record travels with a saved model
    g = TfidfFeaturizer.from_arrays(params, arrays)
    for step, batch in enumerate((new1, new2)):
        seen = old + new1 + (new2 if step else [])
        g, added = g.extended(batch)
        union = _sklearn(ngram_range=ngram_range).fit(seen)
        names = g.feature_names()
        old_names = f.feature_names()
        assert names[:len(old_names)] == old_names
        union_names = list(union.get_feature_names_out())
        assert sorted(names) == sorted(union_names)  # exactly the union fit's vocabulary
        assert g.n_docs_ == len(seen)
        idf_union = dict(zip(union_names, union.idf_))
        added_now = names[len(names) - added:]
        assert added > 0 and all(n not in old_names for n in added_now)
        np.testing.assert_allclose(g.idf_[len(names) - added:], [idf_union[n] for n in added_now], rtol=1e-5)
        np.testing.assert_array_equal(g.idf_[:len(old_names)], f.idf_)
        params, arrays = g.to_arrays()
        g = TfidfFeaturizer.from_arrays(params, arrays)
    # without the record (a featurizer saved before it was kept) only the new texts' own counts decide
    plain, k = TfidfFeaturizer(ngram_range=ngram_range, min_df=2).fit(old).extended(new1, len(old))
    assert 0 < k < TfidfFeaturizer.from_arrays(*f.to_arrays()).extended(new1)[1]


def test_a_damaged_rare_ngram_record_is_refused():
    f = TfidfFeaturizer(min_df=2)
    f.remember_rare = True
    f.fit(_corpus(np.random.default_rng(3), 100, 200))
    params, arrays = f.to_arrays()
    assert arrays["rare_hash"].size > 0
    for broken in ({k: v for k, v in arrays.items() if k != "rare_df"},
                   {**arrays, "rare_hash": arrays["rare_hash"][::-1].copy()},
                   {**arrays, "rare_df": np.zeros_like(arrays["rare_df"])}):
        with pytest.raises(ModelFormatError):
            TfidfFeaturizer.from_arrays(params, broken)


def test_the_row_kernel_reads_the_idf_widened_once_and_again_when_it_changes():
    import copy

    f = TfidfFeaturizer().fit(["the railways of finland", "railways and trains", "trains of the north"])
    f.idf_ = f.idf_.astype(np.float32)  # as a saved model holds it
    wide = f._idf64()
    assert wide.dtype == np.float64 and f._idf64() is wide
    np.testing.assert_array_equal(wide, f.idf_.astype(np.float64))
    before = f.transform(["railways of the north"]).toarray()
    f.idf_ = (f.idf_ * np.linspace(1.0, 3.0, f.idf_.size)).astype(np.float32)  # a new idf, not a rescaling
    fresh = copy.copy(f)
    fresh.__dict__.pop("_idf_wide")
    got = f.transform(["railways of the north"]).toarray()
    np.testing.assert_array_equal(got, fresh.transform(["railways of the north"]).toarray())
    assert np.abs(got - before).max() > 1e-3  # a stale widened idf would have given the rows before
