"""Text analyzers of the TF-IDF features: spec parsing, stems and lemmas, stop words, save/load, defaults."""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer

import xmtc
from xmtc.config import build_config
from xmtc.errors import ConfigError, ModelFormatError
from xmtc.features import analyzers
from xmtc.features.analyzers import Analyzer, parse_analyzer, resolve
from xmtc.features.tfidf import TfidfFeaturizer
from xmtc.features.params import TfidfParams
from xmtc.methods.xr_linear.config import XRLinearConfig

needs_stemmer = pytest.mark.skipif(importlib.util.find_spec("Stemmer") is None,
                                   reason="PyStemmer is not installed (pip install 'xmtc[analyzers]')")

TEXTS = ["The history of the Finnish railways", "Railways and railway stations of Finland",
         "history of stations and of trains", "the trains of Finland", "railway history"] * 3


def _one_line_config_error(call, *fragments):
    with pytest.raises(ConfigError) as info:
        call()
    msg = str(info.value)
    assert "\n" not in msg
    for fragment in fragments:
        assert fragment in msg, msg
    return msg


# ---- spec parsing --------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, canonical", [
    ("simple", "simple"),
    ("snowball(finnish)", "snowball(finnish)"),
    ("snowball(fi)", "snowball(finnish)"),  # ISO code accepted, saved under Snowball's name
    ("Snowball( English )", "snowball(english)"),
    ("simplemma(sv)", "simplemma(sv)"),
    ("voikko(fi)", "voikko(fi)"),
    ("snowball(english,token_min_length=3)", "snowball(english,token_min_length=3)"),
])
def test_spec_parses_to_its_canonical_form(spec, canonical):
    assert str(parse_analyzer(spec)) == canonical


@pytest.mark.parametrize("spec, fragment", [
    ("stemmer(fi)", "unknown analyzer 'stemmer'"),
    ("snowball", "needs one language"),
    ("snowball(klingon)", "Snowball has no language 'klingon'"),
    ("simplemma(xx)", "simplemma has no language 'xx'"),
    ("voikko(sv)", "Finnish only"),
    ("simple(en)", "takes no language"),
    ("snowball(en,min=3)", "unknown option 'min=3'"),
    ("snowball(en", "invalid analyzer"),
])
def test_bad_specs_are_one_line_config_errors(spec, fragment):
    _one_line_config_error(lambda: parse_analyzer(spec), fragment)


def test_config_rejects_bad_settings_before_any_data_is_read():
    _one_line_config_error(lambda: build_config(XRLinearConfig, {"analyzer": "snowball(klingon)"}), "klingon")
    _one_line_config_error(lambda: build_config(XRLinearConfig, {"language": "xx"}), "unknown language 'xx'")
    _one_line_config_error(lambda: build_config(XRLinearConfig, {"stop_words": "klingon"}), "stop_words")
    cfg = build_config(XRLinearConfig, {"language": "fi", "analyzer": "voikko(fi)", "stop_words": "none"})
    assert (cfg.language, cfg.analyzer, cfg.stop_words) == ("fi", "voikko(fi)", "none")


def test_resolve_defaults_per_language():
    assert resolve("auto", None, "auto") == ("simple", None)  # no language: no analysis at all
    spec, words = resolve("auto", "sv", "auto")
    assert spec == "snowball(swedish)" and "och" in words and words == sorted(words)
    assert resolve("auto", "sv", "none") == ("snowball(swedish)", None)
    assert resolve("simple", "fi", "none") == ("simple", None)  # an explicit analyzer wins over the language
    spec, words = resolve("auto", None, "english")
    assert spec == "simple" and "the" in words
    assert resolve("auto", "fi", "none")[0] == "simplemma(fi)"  # Finnish: a lemmatizer (see analyzers.py)
    assert resolve("auto", "en", "none")[0] == "simplemma(en)"
    assert resolve("auto", "et", "auto")[0] == "simplemma(et)"
    assert resolve("auto", "sk", "none")[0] == "simplemma(sk)"  # no Snowball stemmer: the lemmatizer


def test_stop_word_lists_are_short_function_word_lists_and_iso_is_opt_in():
    import re

    for code in analyzers.SHIPPED_STOP_WORDS:
        words = analyzers.stop_word_list(code)
        assert 50 < len(words) < 250 and all(re.fullmatch(r"\w\w+", w) and w == w.lower() for w in words), code
    english = analyzers.stop_word_list("en")
    assert {"the", "of", "and"} <= set(english) and not {"computer", "information", "us"} & set(english)
    assert resolve("auto", "fr", "auto") == ("snowball(french)", None)  # no shipped French list: none
    _one_line_config_error(lambda: resolve("auto", None, "fr"), "iso:CODE")
    pytest.importorskip("stopwordsiso", reason="stopwordsiso is not installed (pip install 'xmtc[analyzers]')")
    assert "computer" in resolve("auto", None, "iso:en")[1]


def test_missing_library_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "Stemmer", None)  # import Stemmer now raises ImportError
    _one_line_config_error(lambda: TfidfFeaturizer(analyzer="snowball(finnish)").fit(TEXTS),
                           "PyStemmer", "pip install 'xmtc[analyzers]'")


# ---- what tokens become --------------------------------------------------------------------------

def _features(texts, **kw):
    return TfidfFeaturizer(min_df=1, ngram_range=(1, 1), **kw).fit(texts).feature_names()


@needs_stemmer
def test_snowball_stems_by_hand():
    assert _features(["railways railway"], analyzer="snowball(english)") == ["railway"]
    # PyStemmer's Finnish stem of the genitive plural "rautateiden" (railways') and of "kirjastot"
    assert _features(["rautateiden kirjastot"], analyzer="snowball(finnish)") == ["kirjasto", "rautat"]
    assert _features(["järnvägarna järnvägar"], analyzer="snowball(swedish)") == ["järnväg"]


def test_simplemma_lemmatizes_by_hand():
    pytest.importorskip("simplemma", reason="simplemma is not installed (pip install 'xmtc[analyzers]')")
    assert _features(["mice mouse went railways"], analyzer="simplemma(en)") == ["go", "mouse", "railway"]


@pytest.mark.slow
@needs_stemmer
def test_simplemma_swedish_and_finnish_lemmas():
    """Why Finnish defaults to simplemma: consonant gradation (sota/sodan, lapsi/lasten) splits Snowball stems.
    Slow only because simplemma's Swedish and Finnish dictionaries take seconds each to load."""
    pytest.importorskip("simplemma", reason="simplemma is not installed (pip install 'xmtc[analyzers]')")
    assert _features(["böckerna boken"], analyzer="simplemma(sv)") == ["bok"]
    forms = ["talvisota talvisodan lapsi lasten rautatie rautateiden"]
    assert _features(forms, analyzer="simplemma(fi)") == ["lapsi", "rautatie", "talvisota"]
    assert len(_features(forms, analyzer="snowball(finnish)")) == 6


@needs_stemmer
def test_analysed_forms_are_lower_cased_and_never_hold_spaces():
    an = Analyzer("snowball(german)")  # lemmatizers return capitalised German nouns ("Haus"), some return phrases
    an._normalize = lambda words: [{"häuser": "Haus", "zu": "zu dem"}.get(w, w) for w in words]
    assert an.normalize(["häuser", "zu", "der"]) == ["haus", "zu", "der"]


def test_voikko_base_forms_by_hand():
    try:
        Analyzer("voikko(fi)")
    except ConfigError as exc:
        pytest.skip(f"libvoikko with a Finnish dictionary is not installed: {exc}")
    assert _features(["rautateiden rautatiellä"], analyzer="voikko(fi)") == ["rautatie"]
    assert _features(["xqzwv"], analyzer="voikko(fi)") == ["xqzwv"]  # unknown to Voikko: kept as it is


@needs_stemmer
def test_stop_words_are_removed_before_bigrams_form():
    f = TfidfFeaturizer(min_df=1, stop_words="en").fit(["the history of the finnish railways"])
    names = f.feature_names()
    assert "the" not in names and "of" not in names and not any(" of" in n or "the " in n for n in names)
    assert "history finnish" in names  # the bigram formed across the removed "of the"
    # surface forms are matched before stemming: "others" is a stop word, its stem "other" is not asked
    assert _features(["others railways"], analyzer="snowball(english)", stop_words=["others"]) == ["railway"]


def test_token_min_length_drops_short_tokens():
    assert _features(["ab abc abcd"], analyzer="simple(token_min_length=3)") == ["abc", "abcd"]


@needs_stemmer
def test_each_distinct_token_is_analysed_once_and_cached():
    an = Analyzer("snowball(english)")
    seen = []
    stem = an._normalize
    an._normalize = lambda words: (seen.extend(words), stem(words))[1]
    f = TfidfFeaturizer(min_df=1, analyzer="snowball(english)")
    f._make_analyzer = lambda: an
    f.fit(["railways railways railway", "railways stations"] * 50)
    assert sorted(seen) == ["railway", "railways", "stations"]
    seen.clear()
    f.transform(["railways stations", "stations"])
    assert seen == []  # known from the fit batch


def test_default_features_are_byte_identical_to_the_plain_tokenizer():
    """The default settings must not stem or drop words: same vocabulary and bytes as scikit-learn's."""
    texts = TEXTS * 4  # > 8 texts: the C scanner path
    ours = TfidfParams().make_featurizer()
    X = ours.fit_transform(texts)
    assert ours.analyzer == "simple" and ours.stop_words is None and ours._analyzer is None
    ref = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True, dtype=np.float32)
    Y = ref.fit_transform(texts)
    assert ours.feature_names() == list(ref.get_feature_names_out())
    assert np.allclose(X.toarray(), Y.toarray(), atol=1e-6)
    plain = TfidfFeaturizer(ngram_range=(1, 2), min_df=2).fit_transform(texts)
    for a in ("data", "indices", "indptr"):
        assert getattr(X, a).tobytes() == getattr(plain, a).tobytes()


@needs_stemmer
def test_analysed_features_agree_between_scanner_and_regex_paths():
    many = TfidfFeaturizer(min_df=1, analyzer="snowball(english)", stop_words="en").fit(TEXTS)
    rows_many = many.transform(TEXTS[:2] * 10)  # > 8 texts: scanner
    rows_few = many.transform(TEXTS[:2])  # few short texts: regex
    assert np.array_equal(rows_many[:2].toarray(), rows_few.toarray())
    assert "railway" in many.feature_names() and "the" not in many.feature_names()


# ---- models: save, load, legacy ------------------------------------------------------------------

LABELS = [["rail"], ["rail", "station"], ["history"], ["finland"], ["rail", "history"]] * 3


@needs_stemmer
def test_model_predicts_with_its_analyzer_after_save_and_load(tmp_path):
    model = xmtc.XRLinear(language="sv", n_trees=1, analyzer="snowball(english)").fit(TEXTS, LABELS, progress=False)
    feat = model.featurizer_
    assert feat.analyzer == "snowball(english)" and "och" in feat._stop_list  # Swedish stop words, as asked
    before = model.predict(["railways of finland"], k=3)
    loaded = xmtc.load(model.save(tmp_path / "m"))
    assert loaded.featurizer_.analyzer == "snowball(english)"
    assert loaded.predict(["railways of finland"], k=3) == before
    # "railways" is read as the feature "railway": the loaded model stems at prediction
    X = loaded.transform(["railways"])
    assert X.nnz == 1 and loaded.featurizer_.feature_names()[X.indices[0]] == "railway"
    manifest = json.loads((Path(tmp_path / "m") / "manifest.json").read_text())
    assert manifest["params"]["language"] == "sv"
    stage = next(st for st in manifest["stages"] if st["name"] == "featurizer")
    assert stage["params"]["analyzer"] == "snowball(english)" and "och" in stage["params"]["stop_words"]


def test_model_saved_before_analyzers_loads_and_predicts_as_before(tmp_path):
    model = xmtc.XRLinear(n_trees=1).fit(TEXTS, LABELS, progress=False)
    before = model.predict(TEXTS[:3], k=3)
    folder = Path(model.save(tmp_path / "m"))
    manifest = json.loads((folder / "manifest.json").read_text())
    for key in ("analyzer", "language", "stop_words"):
        del manifest["params"][key]
    stage = next(st for st in manifest["stages"] if st["name"] == "featurizer")
    for key in ("analyzer", "stop_words"):
        del stage["params"][key]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    loaded = xmtc.load(folder)
    assert loaded.analyzer == "auto" and loaded.featurizer_.analyzer == "simple"
    assert loaded.featurizer_._analyzer is None
    assert loaded.predict(TEXTS[:3], k=3) == before
    assert "the" in loaded.featurizer_.feature_names()


def test_saved_stop_words_must_be_a_list():
    f = TfidfFeaturizer(min_df=1, stop_words="en").fit(TEXTS)
    params, arrays = f.to_arrays()
    assert isinstance(params["stop_words"], list)
    params["stop_words"] = "en"  # a name could mean another list in another edition of the package
    with pytest.raises(ModelFormatError, match="stop_words"):
        TfidfFeaturizer.from_arrays(params, arrays)


@needs_stemmer
def test_languages_table_is_consistent_with_the_installed_libraries():
    import Stemmer

    assert set(analyzers.SNOWBALL.values()) <= set(Stemmer.algorithms())


def test_cli_flags_come_from_the_dataclass():
    import argparse

    from xmtc.config import add_config_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_config_arguments(parser, XRLinearConfig)
    args = parser.parse_args(["--language", "fi", "--analyzer", "voikko(fi)", "--stop-words", "none"])
    cfg = config_from_args(XRLinearConfig, args)
    assert (cfg.language, cfg.analyzer, cfg.stop_words) == ("fi", "voikko(fi)", "none")
    with pytest.raises(ConfigError, match="command line"):
        config_from_args(XRLinearConfig, parser.parse_args(["--analyzer", "stemmer(fi)"]))
