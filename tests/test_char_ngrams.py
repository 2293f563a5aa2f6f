import gzip
import itertools
import json

import numpy as np
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer

from xmtc.errors import ModelFormatError
from xmtc.features.char_ngrams import CharNgramFeaturizer

TEXTS = ["Steam locomotives", "railways of Finland", "the history of the Finnish railway", "Åland ferries"]


def test_rows_equal_scikit_learns_char_wb_tfidf_and_survive_a_round_trip():
    feat = CharNgramFeaturizer().fit(TEXTS)
    ref = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True, dtype=np.float32).fit(TEXTS)
    queries = ["railway locomotive", "ÅLAND", "", "zzzz"]
    X, R = feat.transform(queries), ref.transform(queries)
    # same columns in the same order: the n-gram order is scikit-learn's vocabulary order
    assert feat.ngrams_ == sorted(ref.vocabulary_, key=ref.vocabulary_.get)
    np.testing.assert_allclose(X.toarray(), R.toarray(), rtol=1e-6, atol=1e-7)
    params, arrays = feat.to_arrays()
    again = CharNgramFeaturizer.from_arrays(params, arrays)
    np.testing.assert_array_equal(again.transform(queries).toarray(), X.toarray())


def test_an_inflected_label_name_matches_where_words_do_not():
    feat = CharNgramFeaturizer().fit(TEXTS)
    words = TfidfVectorizer().fit(TEXTS)
    a, b = "railways", "the finnish railway"
    assert (words.transform([a]) @ words.transform([b]).T).toarray()[0, 0] == 0.0
    cos = (feat.transform([a]) @ feat.transform([b, "steam locomotives"]).T).toarray()[0]
    # ' railways ' shares ' ra', 'rai', ..., 'railw', 'ailwa', ... with ' railway ' and nothing with the other
    assert cos[0] > 0.2 and cos[1] == 0.0


def test_inconsistent_arrays_are_refused():
    params, arrays = CharNgramFeaturizer().fit(TEXTS).to_arrays()
    with pytest.raises(ModelFormatError):
        CharNgramFeaturizer.from_arrays({**params, "n_features": params["n_features"] + 1}, arrays)
    with pytest.raises(ModelFormatError):
        CharNgramFeaturizer.from_arrays(params, {**arrays, "idf": arrays["idf"][:-1]})
    with pytest.raises(ModelFormatError):
        CharNgramFeaturizer.from_arrays({**params, "format": "tfidf"}, arrays)


def test_a_model_whose_route_featurizer_contradicts_its_manifest_names_the_file(tmp_path):
    import xmtc
    from xmtc.cli import main
    from xmtc.data import sample_path

    with gzip.open(sample_path("train"), "rt", encoding="utf-8") as fh:
        (tmp_path / "t.tsv").write_text("".join(itertools.islice(fh, 600)), encoding="utf-8")
    model = tmp_path / "m"
    assert main(["train", str(tmp_path / "t.tsv"), "--label-file", str(sample_path("labels")), "-o", str(model),
                 "--n-trees", "1", "--valid-size", "0.3", "-q"]) == 0
    manifest = json.loads((model / "manifest.json").read_text())
    (stage,) = [st for st in manifest["stages"] if st["name"] == "label-route-featurizer"]
    assert stage["type"] == "char-ngrams"
    stage["params"]["n_features"] += 1
    (model / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelFormatError, match=rf"^{model / stage['file']}: character n-gram featurizer"):
        xmtc.load(model)


@pytest.mark.parametrize("seed", range(4))
def test_fit_equals_scikit_learns_vocabulary_and_idf_to_the_bit_without_importing_it(seed):
    """The fit counts n-grams itself (no scikit-learn): vocabulary, order and float32 idf equal TfidfVectorizer's,
    on words shorter than, as long as and longer than the n-grams, runs of white space, case, accents, digits."""
    rng = np.random.default_rng(seed)
    alphabet = list("abcÅäöxyz 1\t\n") + ["  ", "É", "ß"]
    texts = ["".join(rng.choice(alphabet, size=int(rng.integers(0, 30)))) for _ in range(40)] + ["a", "ab", "abc"]
    feat = CharNgramFeaturizer().fit(texts)
    ref = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True, dtype=np.float32).fit(texts)
    assert feat.ngrams_ == sorted(ref.vocabulary_, key=ref.vocabulary_.get)
    np.testing.assert_array_equal(feat.idf_, ref.idf_)
    assert feat.idf_.dtype == np.float32
    np.testing.assert_allclose(feat.transform(texts).toarray(), ref.transform(texts).toarray(), rtol=1e-6, atol=1e-7)
    b = CharNgramFeaturizer().fit([t.encode("utf-8") for t in texts])  # bytes: decoded as UTF-8
    assert b.ngrams_ == feat.ngrams_
    with pytest.raises(ValueError, match="empty vocabulary"):
        CharNgramFeaturizer().fit(["", "  "])


@pytest.mark.parametrize("ngram_range", [(3, 5), (1, 3), (2, 6)])
def test_the_fit_kernel_counts_what_the_analyzer_counts(ngram_range):
    """char_ngram_kernels.fit_vocabulary (C) against the featurizer's own count in Python: the same n-grams in the
    same order and the same document frequencies, at other n-gram ranges too (a kernel that counted occurrences
    instead of texts, or dropped a word's whole-word n-gram, or mis-decoded a key, differs)."""
    from xmtc.features.char_ngram_kernels import fit_vocabulary
    from xmtc.features.char_ngrams import _words

    rng = np.random.default_rng(sum(ngram_range))
    alphabet = list("aab bcc Ωé ") + ["zz", "  ", "\U0001f600"]
    texts = ["".join(rng.choice(alphabet, size=int(rng.integers(0, 40)))) for _ in range(60)] + ["aaaa aaaa", "a"]
    words = [_words(t) for t in texts]
    feat = CharNgramFeaturizer(ngram_range)
    got, df = fit_vocabulary(words, *ngram_range)
    want, want_df = feat._counted(words)
    assert got == want and len(got) > 20
    np.testing.assert_array_equal(df, want_df)
    if ngram_range[1] >= 6:  # a word twice in one text (and in no other): counted once
        assert df[got.index(" aaaa ")] == 1


def test_an_alphabet_too_large_for_the_kernel_is_counted_in_python_to_the_same_vocabulary():
    """10,000 distinct characters: base 10,001 keys of five characters overflow 62 bits, so the fit falls back to
    the Python count, still scikit-learn's vocabulary and idf."""
    from xmtc.features.char_ngram_kernels import fit_vocabulary
    from xmtc.features.char_ngrams import _words

    rng = np.random.default_rng(3)
    chars = [chr(0x4E00 + i) for i in range(10_000)]
    texts = [" ".join("".join(rng.choice(chars, size=int(rng.integers(1, 7)))) for _ in range(5)) for _ in range(2100)]
    assert fit_vocabulary([_words(t) for t in texts], 3, 5) is None
    feat = CharNgramFeaturizer().fit(texts)
    ref = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True, dtype=np.float32).fit(texts)
    assert feat.ngrams_ == sorted(ref.vocabulary_, key=ref.vocabulary_.get)
    np.testing.assert_array_equal(feat.idf_, ref.idf_)
