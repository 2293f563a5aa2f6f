"""The TF-IDF featurizer's parameters, shared by every method that reads word n-grams.

One dataclass, so that XR-Linear, the transformer methods' rankers, the end-to-end methods' clusters and
re-ranker, and label-text matching spell the same settings the same way in the API, the CLI and JSON
configs (:mod:`xmtc.config` generates the flags from the fields).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from ..config import param
from ..errors import ConfigError

if TYPE_CHECKING:
    from .tfidf import TfidfFeaturizer


@dataclass
class TfidfParams:
    """TF-IDF featurizer settings (word n-grams, sublinear tf, L2-normalised rows)."""

    ngram_max: int = param(2, "Longest word n-gram used as a feature (1 = unigrams only).", minimum=1, maximum=5)
    min_df: int = param(2, "Drop n-grams that occur in fewer training documents than this.", minimum=1)
    max_df: float = param(1.0, "Drop n-grams that occur in more than this fraction of training documents.",
                          minimum=0.0, maximum=1.0, exclusive_minimum=True)
    max_features: Optional[int] = param(None, "Keep only the most frequent n-grams (none = keep all).", minimum=1)
    sublinear_tf: bool = param(True, "Use 1 + log(tf) instead of raw term counts.")
    analyzer: str = param("auto", "What each word becomes before it is counted, spelled as in Annif: simple (the"
                          " lower-cased word), snowball(LANG) (PyStemmer stem, e.g. snowball(finnish)),"
                          " simplemma(LANG) (lemma, e.g. simplemma(fi)), voikko(fi) (Finnish base form; needs"
                          " libvoikko); optional ,token_min_length=N. auto = simple without --language; with it,"
                          " simplemma for en, fi and et, snowball(LANG) for the other languages Snowball has, else"
                          " simplemma (measured and reasoned in xmtc/features/analyzers.py).")
    language: Optional[str] = param(None, "Language of the texts, an ISO 639-1 code (en, fi, sv, de, et, ...):"
                                    " picks the analyzer (when analyzer is auto) and the stop words (when"
                                    " stop_words is auto).")
    stop_words: str = param("auto", "Words dropped before n-grams form: auto = the language's short list of"
                            " function words (shipped for en, fi, sv, de, et) when --language is given, else none;"
                            " none = keep every word; a language (en, fi, ... or english, ...) = its list;"
                            " iso:CODE = stopwords-iso's long list for any language.")

    def validate(self, source: str) -> None:
        """Syntax of the analyzer, language and stop-word settings (their libraries load at fit)."""
        from .analyzers import check_language, check_stop_words, parse_analyzer

        try:
            check_language(self.language)
            check_stop_words(self.stop_words)
            if self.analyzer.strip().lower() != "auto":
                parse_analyzer(self.analyzer)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    def make_featurizer(self, n_threads: int | None = None) -> TfidfFeaturizer:
        """The featurizer these settings describe, building rows on at most ``n_threads`` threads (the model's
        ``n_threads``; None or 0: every available CPU)."""
        from .analyzers import resolve
        from .tfidf import TfidfFeaturizer

        analyzer, stop_words = resolve(self.analyzer, self.language, self.stop_words)
        featurizer = TfidfFeaturizer(ngram_range=(1, self.ngram_max), min_df=self.min_df, max_df=self.max_df,
                                     max_features=self.max_features, sublinear_tf=self.sublinear_tf,
                                     analyzer=analyzer, stop_words=stop_words)
        featurizer.n_threads = n_threads
        return featurizer
