"""TF-IDF features with scikit-learn's ``TfidfVectorizer`` semantics, built without Python strings per n-gram.

Why not scikit-learn: its analyzer makes one Python string per n-gram occurrence and counts them in a
dict, which is most of the 24 s it needs on yso-finna-en, and its fitted state only saves by pickle.
Here text becomes integers as early as possible:

1. **Tokenise** to a stream of unigram ids. For the default pattern ``\\b\\w\\w+\\b`` a C scanner
   walks the UTF-8 bytes of the whole (lower-cased) corpus once, finds maximal runs of word characters
   (``\\w`` as Python's ``re`` defines it, taken from ``re`` itself) and interns them in a hash table.
   Any other ``token_pattern`` goes through ``re.findall`` per text, so every pattern sklearn accepts
   works; only the speed differs.
2. **N-grams are integers**: the id of the n-gram starting at token i is the interned pair
   (id of the (n-1)-gram at i, unigram id at i+n-1), so n-grams of any order cost one hash insert per
   occurrence and never exist as strings during counting.
3. **Prune and order** exactly like sklearn: min_df/max_df as counts or proportions, then
   ``max_features`` by corpus frequency with sklearn's own tie-breaking (the same ``argsort`` over the
   same alphabetically ordered array). Alphabetical order of n-grams equals the lexicographic order of
   their tuples of unigram ranks whenever tokens contain no character <= U+0020 (true for ``\\w``);
   otherwise the strings themselves are sorted. Features are numbered alphabetically, as in sklearn.
4. **Rows** are built per document by a parallel C kernel: sort the document's feature ids, count
   runs, tf -> 1 + ln(tf) (sublinear), times idf, row norm.

Steps 1, 2 and 4 are C kernels (``xmtc/csrc/text.c``) behind :mod:`xmtc.features.tfidf_kernels`; this module
holds the estimator: the vocabulary (step 3) and sklearn's parameter semantics (the rules its hyperparameters
must follow are :mod:`xmtc.features.tfidf_checks`). Its saved format is :mod:`xmtc.features.tfidf_arrays`.

The fitted vocabulary is kept (and saved) as a trie of integer pairs, not as strings
(:mod:`xmtc.features.ngram_trie`): the unigrams a kept feature needs, and per order n a sorted int64 array of keys
``parent * n_unigrams + unigram`` whose positions are the order-n ids. Transform looks n-grams up with
``searchsorted``; feature names are rebuilt from the trie on demand (:mod:`xmtc.features.tfidf_names`). This is
compact, loads without pickle, and is checked on load (:mod:`xmtc.features.tfidf_arrays`). A featurizer of a model
that learns also remembers the n-grams its fit left out, so that :meth:`TfidfFeaturizer.extended` can grow the
vocabulary to what a fit on all documents would keep (:mod:`xmtc.features.tfidf_growth`,
:mod:`xmtc.features.rare_ngrams`).

Text analysis (:mod:`xmtc.features.analyzers`) sits between steps 1 and 2: with an ``analyzer`` other than
``simple`` or a ``stop_words`` list, each distinct token of step 1 is mapped once to its stem or lemma (or
dropped, for a stop word) and the id stream is rewritten before n-grams form; with neither, step 1's output
goes on untouched, so the features are exactly those of a featurizer without analysis. The analyzer and the
stop-word list are saved with the vocabulary (the list itself, not its name, so a later edition of the list
cannot change a saved model's features).

Edge cases: a text that is empty or holds no known n-gram gives an all-zero row (as in sklearn, never
NaN). The one deliberate difference from sklearn: a custom ``token_pattern`` whose tokens contain a
space is refused when ``ngram_range`` allows n > 1, because "a b"+"c" and "a"+"b c" would silently
merge into one feature in sklearn.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError, NotFittedError
from . import tfidf_growth
from .analyzers import Analyzer, check_stop_words, stop_word_list
from .ngram_trie import Trie, alphabetical_order, pruned
from .rare_ngrams import left_out, trie_hashes
from .tfidf_arrays import featurizer_arrays, featurizer_from_arrays
from .tfidf_checks import NORM_CODES, checked_params
from .tfidf_kernels import (as_text_list, build_rows, doc_and_term_freq, ngram_fit, ngram_lookup,
                            tokenize_regex, tokenize_scanner)
from .tfidf_names import feature_id, feature_texts

__all__ = ["TfidfFeaturizer"]

DEFAULT_TOKEN_PATTERN = r"(?u)\b\w\w+\b"
# Spellings of the default pattern the byte scanner implements (str patterns are Unicode in Python 3).
_SCANNER_PATTERNS = frozenset({DEFAULT_TOKEN_PATTERN, r"\b\w\w+\b", r"(?u)\b\w{2,}\b", r"\b\w{2,}\b"})
_PARAM_NAMES = ("ngram_range", "min_df", "max_df", "max_features", "sublinear_tf", "lowercase", "norm",
                "smooth_idf", "token_pattern", "analyzer", "stop_words")
# Below this many characters per call the regex tokeniser beats the scanner's fixed costs.
_SMALL_INPUT_CHARS = 4096
_KEEP_TOKENS = 8192  # texts of a batch whose tokens are kept for the next call (XMCModel.predict_topk's batch)


class TfidfFeaturizer:
    """TF-IDF over word n-grams; same features and values as sklearn's ``TfidfVectorizer``.

    Hyperparameters mean what they mean in sklearn: ``min_df``/``max_df`` are document counts when int
    and proportions of the training texts when float; ``max_features`` keeps the most frequent n-grams
    by total count. Features are numbered in alphabetical order of their text.

    ``analyzer`` is an Annif-style spec (``simple``, ``snowball(finnish)``, ``simplemma(sv)``, ``voikko(fi)``;
    see :mod:`xmtc.features.analyzers`); ``stop_words`` is None, a list of words, or a language whose
    stop-word list is used ("en", "english", ...). Stop words are removed before n-grams form.
    """

    #: (texts, unigram ids, doc_ptr) of the last tokenized batch, for the next call on the same texts (_unigrams)
    _last_tokens: tuple | None = None
    #: (sorted uint64 hashes, document counts) of the n-grams seen in fewer than min_df texts
    #: (or more than max_df: ``extended``; :mod:`xmtc.features.rare_ngrams`)
    _rare: tuple | None = None
    #: texts the document frequencies are counted on (None: a featurizer saved before it was kept)
    n_docs_: int | None = None
    #: a fit keeps the n-grams it saw too rarely, for ``extended`` (set by the models that learn: XR-Linear)
    remember_rare: bool = False
    #: the most threads the row builder uses, as a model's ``n_threads`` (None or 0: every available CPU); set by
    #: the model that fits the featurizer (:meth:`~xmtc.features.params.TfidfParams.make_featurizer`), not saved
    n_threads: int | None = None

    def __init__(self, ngram_range=(1, 2), min_df=2, max_df=1.0, max_features=None, sublinear_tf=True,
                 lowercase=True, norm="l2", smooth_idf=True, token_pattern=DEFAULT_TOKEN_PATTERN, analyzer="simple",
                 stop_words=None):
        self.ngram_range = ngram_range
        self.min_df = min_df
        self.max_df = max_df
        self.max_features = max_features
        self.sublinear_tf = sublinear_tf
        self.lowercase = lowercase
        self.norm = norm
        self.smooth_idf = smooth_idf
        self.token_pattern = token_pattern
        self.analyzer = analyzer
        self.stop_words = stop_words

    # ---- parameters -----------------------------------------------------------------------------

    def get_params(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _PARAM_NAMES}

    def _checked_params(self) -> tuple[int, int, re.Pattern]:
        """Validate hyperparameters (at fit, as sklearn does) and return (min_n, max_n, pattern)
        (:func:`xmtc.features.tfidf_checks.checked_params`)."""
        return checked_params(self)

    def _make_analyzer(self) -> Analyzer | None:
        """The analyzer transform applies, None when analysis would change nothing."""
        sw = self.stop_words
        words = stop_word_list(check_stop_words(sw)) if isinstance(sw, str) else sw
        analyzer = Analyzer(self.analyzer, sorted(set(words)) if words else None, self.lowercase)
        return None if analyzer.is_identity else analyzer

    @staticmethod
    def _tokenize(texts: list, pattern: re.Pattern, lowercase: bool, analyzer: Analyzer | None = None
                  ) -> tuple[np.ndarray, np.ndarray, list[str]]:
        if pattern.pattern in _SCANNER_PATTERNS and (
                len(texts) > 8 or sum(len(t) for t in texts if isinstance(t, str)) > _SMALL_INPUT_CHARS):
            out = tokenize_scanner(texts, lowercase)
        else:
            out = tokenize_regex(texts, lowercase, pattern)
        return out if analyzer is None else analyzer.apply(*out)

    # ---- fitting --------------------------------------------------------------------------------

    def fit(self, texts: Sequence[str]) -> "TfidfFeaturizer":
        self._fit(as_text_list(texts))
        return self

    def fit_transform(self, texts: Sequence[str]) -> sp.csr_matrix:
        featpos, doc_ptr = self._fit(as_text_list(texts))
        return self._rows(featpos, doc_ptr)

    def _fit(self, texts: list) -> tuple[np.ndarray, np.ndarray]:
        """Learn vocabulary and idf; return the training texts' per-token feature ids for fit_transform."""
        min_n, max_n, pattern = self._checked_params()
        n_docs = len(texts)
        if n_docs == 0:
            raise ConfigError("cannot fit TF-IDF on zero texts")
        analyzer = self._make_analyzer()
        uni, doc_ptr, uni_strings = self._tokenize(texts, pattern, self.lowercase, analyzer)
        n_uni = len(uni_strings)
        if max_n > 1 and any(" " in s for s in uni_strings):
            raise ConfigError(f"token_pattern {self.token_pattern!r} produced tokens containing a space; "
                              "their n-grams would be ambiguous. Use ngram_range=(1, 1) or another pattern")
        # ids[n-1]: id of the n-gram starting at each token; keys[n-1]: parent * n_uni + last unigram
        ids = [uni]
        keys = [np.arange(n_uni, dtype=np.int64)]
        for n in range(2, max_n + 1):
            ids_n, keys_n = ngram_fit(ids[-1], uni, doc_ptr, n, n_uni)
            ids.append(ids_n)
            keys.append(keys_n)
        dfs, tfs = [], []
        for n in range(min_n, max_n + 1):
            df, tf = doc_and_term_freq(ids[n - 1], doc_ptr, len(keys[n - 1]))
            dfs.append(df)
            tfs.append(tf)
        level_of = np.concatenate([np.full(len(d), n, np.int64) for n, d in zip(range(min_n, max_n + 1), dfs)])
        local_id = np.concatenate([np.arange(len(d), dtype=np.int64) for d in dfs])
        df_all = np.concatenate(dfs)
        if len(df_all) == 0:
            raise ConfigError("empty vocabulary: no text contains a token matching token_pattern "
                              f"{self.token_pattern!r}")

        low, high = self._df_bounds(n_docs)
        if high < low:
            if isinstance(self.min_df, numbers.Integral) and n_docs < self.min_df:
                raise ConfigError(f"{n_docs} training text{'s' if n_docs != 1 else ''} cannot give features that"
                                  f" occur in at least min_df={self.min_df} texts; train on more texts (or lower"
                                  " --min-df)")
            raise ConfigError(f"max_df={self.max_df!r} corresponds to fewer texts than min_df={self.min_df!r} "
                              f"on {n_docs} texts")
        cand = np.flatnonzero((df_all <= high) & (df_all >= low))
        self._rare, self.n_docs_ = None, n_docs
        if self.remember_rare:  # n-grams too rare (or too common) to keep: remembered for a learn to count on
            self._rare = left_out(np.concatenate(trie_hashes(uni_strings, keys[1:])[min_n - 1:]), df_all, low, high)
        rank = np.empty(n_uni, np.int64)
        rank[np.array(sorted(range(n_uni), key=uni_strings.__getitem__), dtype=np.int64)] = np.arange(n_uni)
        cand = cand[alphabetical_order(level_of[cand], local_id[cand], keys, rank, uni_strings, n_uni)]
        if self.max_features is not None and len(cand) > self.max_features:
            tf_all = np.concatenate(tfs)
            keep = (-tf_all[cand]).argsort()[: self.max_features]  # sklearn's exact call: same ties
            cand = cand[np.sort(keep)]
        if len(cand) == 0:
            raise ConfigError(f"after pruning with min_df={self.min_df!r}, max_df={self.max_df!r} no n-gram "
                              f"remains of {len(df_all)} seen in {n_docs} texts; lower min_df or raise max_df")

        self.idf_ = self._idf(df_all[cand], n_docs)
        self.n_features_ = len(cand)

        # feature id of each candidate, per order (plus a -1 sentinel so that id -1 maps to -1)
        featmap = [np.full(len(k) + 1, -1, np.int64) for k in keys]
        for n in range(min_n, max_n + 1):
            sel = level_of[cand] == n
            featmap[n - 1][local_id[cand][sel]] = np.flatnonzero(sel)
        self._set_trie(pruned(featmap, keys, rank, uni_strings, n_uni))
        self._ready(min_n, max_n, pattern, analyzer)

        featpos = np.empty((max_n - min_n + 1, len(uni)), np.int32)
        for n in range(min_n, max_n + 1):
            featpos[n - min_n] = featmap[n - 1][ids[n - 1]]  # id -1 hits the -1 sentinel
        return featpos, doc_ptr

    def _df_bounds(self, n_docs: int) -> tuple[float, float]:
        """(low, high): the document counts min_df and max_df mean on ``n_docs`` texts."""
        high = self.max_df if isinstance(self.max_df, numbers.Integral) else self.max_df * n_docs
        low = self.min_df if isinstance(self.min_df, numbers.Integral) else self.min_df * n_docs
        return low, high

    def _idf(self, df: np.ndarray, n_docs: int) -> np.ndarray:
        """The idf of n-grams in ``df`` of ``n_docs`` texts: ``ln((N + s) / (df + s)) + 1`` (``s`` = 1 with
        ``smooth_idf``)."""
        s = 1.0 if self.smooth_idf else 0.0
        return (np.log((n_docs + s) / (np.asarray(df, dtype=np.float64) + s)) + 1.0).astype(np.float32)

    def _trie(self) -> Trie:
        return Trie(self._uni_strings, self._uni_feature, self._ngram_keys, self._ngram_feature)

    def _set_trie(self, trie: Trie) -> None:
        self._uni_strings, self._uni_feature, self._ngram_keys, self._ngram_feature = trie

    def _ready(self, min_n: int, max_n: int, pattern: re.Pattern, analyzer: Analyzer | None) -> None:
        """Derive transform-time lookups from the trie, and freeze the settings transform uses.

        Freezing means a fitted featurizer keeps producing the features it was fitted for even if
        someone edits its hyperparameters afterwards; it also keeps per-call overhead at a minimum.
        """
        self._uni_index = {s: i for i, s in enumerate(self._uni_strings)}
        # feature id per trie node, plus a trailing -1 so that node id -1 maps to "no feature"
        self._featmaps = [np.append(f, -1).astype(np.int32) for f in [self._uni_feature, *self._ngram_feature]]
        self._frozen = (min_n, max_n, pattern, self.lowercase, bool(self.sublinear_tf), NORM_CODES[self.norm])
        self._analyzer = analyzer
        self._stop_list = sorted(analyzer.stop_words) if analyzer is not None and analyzer.stop_words else None
        self._names = None
        self._last_tokens = None

    def _rows(self, featpos: np.ndarray, doc_ptr: np.ndarray) -> sp.csr_matrix:
        _, _, _, _, sublinear, norm = self._frozen
        return build_rows(featpos, doc_ptr, self._idf64(), sublinear, norm, self.n_features_, self.n_threads)

    def _idf64(self) -> np.ndarray:
        """``idf_`` in float64, the row kernel's input, widened once per ``idf_`` (saved idf is float32): widening
        110,889 values took 52 us, a third of the features of one reuters text."""
        kept = self.__dict__.get("_idf_wide")
        if kept is None or kept[0] is not self.idf_:
            kept = self._idf_wide = (self.idf_, np.ascontiguousarray(self.idf_, dtype=np.float64))
        return kept[1]

    # ---- growing (a learn's new documents: :mod:`xmtc.features.tfidf_growth`) ------------------------

    def extended(self, texts: Sequence[str], n_docs_before: int | None = None) -> tuple["TfidfFeaturizer", int]:
        """A copy whose vocabulary also holds what a fit on all the documents would keep of the n-grams of
        ``texts`` (a learn's new documents), appended after the old features, which keep their ids and idf.
        Returns ``(featurizer, n_added)``; ``self`` is not changed. See :func:`xmtc.features.tfidf_growth.extended`
        for the counts and the rules."""
        return tfidf_growth.extended(self, texts, n_docs_before)

    # ---- transforming ---------------------------------------------------------------------------

    def _check_fitted(self) -> None:
        if not hasattr(self, "idf_"):
            raise NotFittedError("TfidfFeaturizer is not fitted; call fit() or from_arrays() first")

    def _unigrams(self, texts: list) -> tuple[np.ndarray, np.ndarray]:
        """Each token of ``texts`` as its unigram's trie index (-1: not in the vocabulary), and where
        each text's tokens start (``doc_ptr``).

        A prediction asks for the same texts twice, their :meth:`known_fraction` and their :meth:`transform`:
        the tokens of a batch of at most :data:`_KEEP_TOKENS` texts are kept for the next call, which takes
        them if its texts are equal, so each text is tokenized once."""
        last = self._last_tokens  # one read: another thread may replace it meanwhile
        if last is not None and last[0] == texts:
            self._last_tokens = None
            return last[1], last[2]
        _, _, pattern, lowercase, _, _ = self._frozen
        tok, doc_ptr, strings = self._tokenize(texts, pattern, lowercase, self._analyzer)
        get = self._uni_index.get
        remap = np.array([get(s, -1) for s in strings], dtype=np.int32)
        uni = remap[tok] if len(tok) else tok
        # a copy of the list: the caller may change its own before the next call
        self._last_tokens = (list(texts), uni, doc_ptr) if len(texts) <= _KEEP_TOKENS else None
        return uni, doc_ptr

    def known_fraction(self, texts: Sequence[str]) -> np.ndarray:
        """Per text, the share of its tokens that are words of the vocabulary (0 for a text without
        tokens): how much of the text the model can read at all."""
        self._check_fitted()
        uni, doc_ptr = self._unigrams(as_text_list(texts))
        known = np.concatenate([[0], np.cumsum(uni >= 0)])
        ptr = np.asarray(doc_ptr, dtype=np.int64)
        n_tok = np.diff(ptr)
        return np.divide(np.diff(known[ptr]), n_tok, out=np.zeros(n_tok.shape, dtype=np.float64), where=n_tok > 0)

    def transform(self, texts: Sequence[str]) -> sp.csr_matrix:
        """(n_texts, n_features) float32 CSR, sorted indices; texts with no known n-gram give zero rows."""
        self._check_fitted()
        texts = as_text_list(texts)
        min_n, max_n = self._frozen[:2]
        uni, doc_ptr = self._unigrams(texts)
        n_uni = len(self._uni_strings)
        featpos = np.empty((max_n - min_n + 1, len(uni)), np.int32)
        prev = uni
        for n in range(1, max_n + 1):
            if n > 1:
                prev = ngram_lookup(prev, uni, doc_ptr, n, n_uni, self._ngram_keys[n - 2])
            if n >= min_n:
                featpos[n - min_n] = self._featmaps[n - 1][prev]
        return self._rows(featpos, doc_ptr)

    # ---- vocabulary by text (:mod:`xmtc.features.tfidf_names`) -----------------------------------------

    def feature_names(self) -> list[str]:
        """Feature texts by feature index (alphabetical, like sklearn's ``get_feature_names_out``)."""
        self._check_fitted()
        if self._names is None:
            self._names = feature_texts(self._trie(), self.n_features_)
        return list(self._names)

    def feature_index(self, term: str) -> int | None:
        """Index of an n-gram given as its text (tokens joined by one space), None if not a feature."""
        self._check_fitted()
        return feature_id(self._trie(), self._uni_index, term)

    # ---- serialisation (the saved format: :mod:`xmtc.features.tfidf_arrays`) ----------------------------

    def to_arrays(self) -> tuple[dict, dict[str, np.ndarray]]:
        """(JSON-able params, numeric arrays); the vocabulary is a trie of int64 keys over a UTF-8 blob."""
        self._check_fitted()
        return featurizer_arrays(self.get_params(), self._stop_list, self.idf_, self._trie(), self._rare,
                                 self.n_docs_)

    @classmethod
    def from_arrays(cls, params: dict, arrays: dict) -> "TfidfFeaturizer":
        """Rebuild from :meth:`to_arrays` output; any inconsistency raises ModelFormatError."""
        return featurizer_from_arrays(cls, _PARAM_NAMES, params, arrays)
