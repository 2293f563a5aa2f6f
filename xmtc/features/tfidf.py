"""TF-IDF features with scikit-learn's ``TfidfVectorizer`` semantics, built without Python strings per n-gram.

Why not scikit-learn: its analyzer makes one Python string per n-gram occurrence and counts them in a
dict, which is most of the 24 s it needs on yso-finna-en, and its fitted state only saves by pickle.
Here text becomes integers as early as possible:

1. **Tokenise** to a stream of unigram ids. For the default pattern ``\\b\\w\\w+\\b`` a numba scanner
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
4. **Rows** are built per document by a parallel numba kernel: sort the document's feature ids, count
   runs, tf -> 1 + ln(tf) (sublinear), times idf, row norm.

Steps 1, 2 and 4 are numba kernels in :mod:`xmtc.features.tfidf_kernels`; this module holds the estimator:
the vocabulary (step 3 and the trie below), its saved format and sklearn's parameter semantics.

The fitted vocabulary is kept (and saved) as a trie of integer pairs, not as strings: the unigrams a
kept feature needs, and per order n a sorted int64 array of keys ``parent * n_unigrams + unigram``
whose positions are the order-n ids. Transform looks n-grams up with ``searchsorted``; feature names
are rebuilt from the trie on demand. This is compact, loads without pickle, and is checked on load.

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

import hashlib
import numbers
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError, ModelFormatError, NotFittedError
from .analyzers import Analyzer, check_stop_words, parse_analyzer, stop_word_list
from .tfidf_arrays import vocabulary_from_arrays
from .tfidf_kernels import (as_text_list, build_rows, doc_and_term_freq, ngram_fit, ngram_lookup,
                            tokenize_regex, tokenize_scanner)

__all__ = ["TfidfFeaturizer"]

DEFAULT_TOKEN_PATTERN = r"(?u)\b\w\w+\b"
# Spellings of the default pattern the byte scanner implements (str patterns are Unicode in Python 3).
_SCANNER_PATTERNS = frozenset({DEFAULT_TOKEN_PATTERN, r"\b\w\w+\b", r"(?u)\b\w{2,}\b", r"\b\w{2,}\b"})
_FORMAT = "xmtc.tfidf"
_FORMAT_VERSION = 1
_PARAM_NAMES = ("ngram_range", "min_df", "max_df", "max_features", "sublinear_tf", "lowercase", "norm",
                "smooth_idf", "token_pattern", "analyzer", "stop_words")
# Saved before analyzers existed: a file without these keys means no analysis.
_LEGACY_DEFAULTS = {"analyzer": "simple", "stop_words": None}
_NORM_CODES = {None: 0, "l1": 1, "l2": 2}
# Below this many characters per call the regex tokeniser beats the scanner's fixed costs.
_SMALL_INPUT_CHARS = 4096
_KEEP_TOKENS = 8192  # texts of a batch whose tokens are kept for the next call (XMCModel.predict_topk's batch)

_AT_MOST_SPACE = re.compile(r"[\x00- ]")
# n-grams seen in fewer than min_df (or more than max_df) texts that a featurizer remembers (by 64-bit hash, with
# their counts) so that a learn can count them on (``extended``); above this many, the smallest hashes: a uniform
# sample of them
RARE_MAX = 4_000_000
_RARE_ARRAYS = ("rare_hash", "rare_df", "n_docs")


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
    #: (or more than max_df: ``extended``)
    _rare: tuple | None = None
    #: texts the document frequencies are counted on (None: a featurizer saved before it was kept)
    n_docs_: int | None = None
    #: a fit keeps the n-grams it saw too rarely, for ``extended`` (set by the models that learn: XR-Linear)
    remember_rare: bool = False

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
        """Validate hyperparameters (at fit, as sklearn does) and return (min_n, max_n, pattern)."""
        rng = self.ngram_range
        if (not isinstance(rng, (tuple, list)) or len(rng) != 2
                or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in rng)
                or not 1 <= rng[0] <= rng[1]):
            raise ConfigError(f"ngram_range must be two ints 1 <= min_n <= max_n, got {rng!r}")
        for name in ("min_df", "max_df"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise ConfigError(f"{name} must be an int >= 1 or a float in [0, 1], got {v!r}")
            if isinstance(v, numbers.Integral):
                if v < 1:
                    raise ConfigError(f"{name} as an int counts texts and must be >= 1, got {v!r}")
            elif not 0.0 <= v <= 1.0:
                raise ConfigError(f"{name} as a float is a proportion and must be in [0, 1], got {v!r}")
        mf = self.max_features
        if mf is not None and (isinstance(mf, bool) or not isinstance(mf, numbers.Integral) or mf < 1):
            raise ConfigError(f"max_features must be None or an int >= 1, got {mf!r}")
        if self.norm not in _NORM_CODES:
            raise ConfigError(f"norm must be 'l2', 'l1' or None, got {self.norm!r}")
        for name in ("sublinear_tf", "lowercase", "smooth_idf"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if not isinstance(self.token_pattern, str):
            raise ConfigError(f"token_pattern must be a str, got {type(self.token_pattern).__name__}")
        try:
            pattern = re.compile(self.token_pattern)
        except re.error as exc:
            raise ConfigError(f"token_pattern {self.token_pattern!r} is not a valid regex: {exc}") from None
        if pattern.groups > 1:
            raise ConfigError(f"token_pattern {self.token_pattern!r} has {pattern.groups} capturing groups; "
                              "at most one (the token) is allowed")
        parse_analyzer(self.analyzer)
        sw = self.stop_words
        if sw is not None and not isinstance(sw, str) and (
                not isinstance(sw, (list, tuple, set, frozenset)) or not all(isinstance(w, str) for w in sw)):
            raise ConfigError(f"stop_words must be None, a language or a list of words, got {type(sw).__name__}")
        return int(rng[0]), int(rng[1]), pattern

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

        high = self.max_df if isinstance(self.max_df, numbers.Integral) else self.max_df * n_docs
        low = self.min_df if isinstance(self.min_df, numbers.Integral) else self.min_df * n_docs
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
            rare = np.flatnonzero((df_all < low) | (df_all > high))  # (``extended``)
            hashes = _node_hashes(uni_strings, [k // n_uni for k in keys[1:]], [k % n_uni for k in keys[1:]])
            h_all = np.concatenate([hashes[n - 1] for n in range(min_n, max_n + 1)])
            self._rare = _rare_record(h_all[rare], df_all[rare])
        rank = np.empty(n_uni, np.int64)
        rank[np.array(sorted(range(n_uni), key=uni_strings.__getitem__), dtype=np.int64)] = np.arange(n_uni)
        cand = cand[self._alphabetical_order(level_of[cand], local_id[cand], keys, rank, uni_strings, n_uni)]
        if self.max_features is not None and len(cand) > self.max_features:
            tf_all = np.concatenate(tfs)
            keep = (-tf_all[cand]).argsort()[: self.max_features]  # sklearn's exact call: same ties
            cand = cand[np.sort(keep)]
        if len(cand) == 0:
            raise ConfigError(f"after pruning with min_df={self.min_df!r}, max_df={self.max_df!r} no n-gram "
                              f"remains of {len(df_all)} seen in {n_docs} texts; lower min_df or raise max_df")

        n_features = len(cand)
        df_kept = df_all[cand].astype(np.float64)
        s = 1.0 if self.smooth_idf else 0.0
        self.idf_ = (np.log((n_docs + s) / (df_kept + s)) + 1.0).astype(np.float32)
        self.n_features_ = n_features

        # feature id of each candidate, per order (plus a -1 sentinel so that id -1 maps to -1)
        featmap = [np.full(len(k) + 1, -1, np.int64) for k in keys]
        for n in range(min_n, max_n + 1):
            sel = level_of[cand] == n
            featmap[n - 1][local_id[cand][sel]] = np.flatnonzero(sel)
        self._build_trie(featmap, keys, rank, uni_strings, n_uni)
        self._ready(min_n, max_n, pattern, analyzer)

        featpos = np.empty((max_n - min_n + 1, len(uni)), np.int32)
        for n in range(min_n, max_n + 1):
            featpos[n - min_n] = featmap[n - 1][ids[n - 1]]  # id -1 hits the -1 sentinel
        return featpos, doc_ptr

    @staticmethod
    def _alphabetical_order(level, local, keys, rank, uni_strings, n_uni) -> np.ndarray:
        """Permutation putting candidates (order n, id) in sklearn's order: sorted by n-gram text."""
        max_n = int(level.max()) if len(level) else 1
        cols = np.full((max_n, len(level)), -1, np.int64)  # unigram ids, -1 pads shorter n-grams
        for n in range(1, max_n + 1):
            sel = np.flatnonzero(level == n)
            j = local[sel]
            for pos in range(n - 1, 0, -1):
                cols[pos, sel] = keys[pos][j] % n_uni
                j = keys[pos][j] // n_uni
            cols[0, sel] = j
        if "" not in uni_strings and _AT_MOST_SPACE.search("".join(uni_strings)) is None:
            ranked = np.where(cols >= 0, rank[cols], -1)
            return np.lexsort(ranked[::-1])
        names = _join_columns(cols, uni_strings)  # rare: tokens with control characters
        return np.array(sorted(range(len(names)), key=names.__getitem__), dtype=np.int64)

    def _build_trie(self, featmap, keys, rank, uni_strings, n_uni) -> None:
        """Keep only the n-grams the features need, renumbered: unigrams alphabetically, order n by key."""
        max_n = len(keys)
        need = [featmap[n][:-1] >= 0 for n in range(max_n)]
        for n in range(max_n - 1, 0, -1):  # an n-gram's parent (n-1)-gram and last unigram are needed
            j = np.flatnonzero(need[n])
            need[n - 1][keys[n][j] // n_uni] = True
            need[0][keys[n][j] % n_uni] = True
        uni_keep = np.flatnonzero(need[0])
        uni_keep = uni_keep[np.argsort(rank[uni_keep], kind="stable")]
        new_uni = np.full(n_uni, -1, np.int64)
        new_uni[uni_keep] = np.arange(len(uni_keep))
        n_new = len(uni_keep)
        self._uni_strings = [uni_strings[u] for u in uni_keep.tolist()]
        self._uni_feature = featmap[0][uni_keep]
        self._ngram_keys, self._ngram_feature = [], []
        new_prev = new_uni
        for n in range(1, max_n):
            j = np.flatnonzero(need[n])
            new_key = new_prev[keys[n][j] // n_uni] * n_new + new_uni[keys[n][j] % n_uni]
            order = np.argsort(new_key, kind="stable")
            self._ngram_keys.append(new_key[order])
            self._ngram_feature.append(featmap[n][j[order]])
            new_prev = np.full(len(keys[n]), -1, np.int64)
            new_prev[j[order]] = np.arange(len(j))

    def _ready(self, min_n: int, max_n: int, pattern: re.Pattern, analyzer: Analyzer | None) -> None:
        """Derive transform-time lookups from the trie, and freeze the settings transform uses.

        Freezing means a fitted featurizer keeps producing the features it was fitted for even if
        someone edits its hyperparameters afterwards; it also keeps per-call overhead at a minimum.
        """
        self._uni_index = {s: i for i, s in enumerate(self._uni_strings)}
        # feature id per trie node, plus a trailing -1 so that node id -1 maps to "no feature"
        self._featmaps = [np.append(f, -1).astype(np.int32) for f in [self._uni_feature, *self._ngram_feature]]
        self._frozen = (min_n, max_n, pattern, self.lowercase, bool(self.sublinear_tf), _NORM_CODES[self.norm])
        self._analyzer = analyzer
        self._stop_list = sorted(analyzer.stop_words) if analyzer is not None and analyzer.stop_words else None
        self._names = None
        self._last_tokens = None

    def _rows(self, featpos: np.ndarray, doc_ptr: np.ndarray) -> sp.csr_matrix:
        _, _, _, _, sublinear, norm = self._frozen
        return build_rows(featpos, doc_ptr, self.idf_, sublinear, norm, self.n_features_)

    # ---- growing --------------------------------------------------------------------------------

    def extended(self, texts: Sequence[str], n_docs_before: int | None = None) -> tuple["TfidfFeaturizer", int]:
        """A copy whose vocabulary also holds what a fit on all the documents would keep of the n-grams of
        ``texts`` (a learn's new documents) that it lacks: counted in ``texts`` plus, for n-grams the earlier
        documents held too rarely (or too often) to keep, the count remembered from them (the featurizer keeps the
        n-grams seen in fewer than ``min_df`` texts or more than ``max_df``, by 64-bit hash, :data:`RARE_MAX` at
        most), kept by ``min_df`` / ``max_df`` on all ``N`` documents, appended as features ``n_features_,
        n_features_ + 1, ...`` in alphabetical order, each with the idf of that fit:
        ``ln((N + s) / (df + s)) + 1`` (``s`` = 1 with ``smooth_idf``).

        ``N`` is the earlier documents (``n_docs_``, else ``n_docs_before``) plus ``len(texts)``. Every old
        feature keeps its id and its idf, so a text without new n-grams gets the row it got before, and one with
        some differs only by the row norm; weights trained on the old features stay valid, and those of the new
        ones start at 0. The remembered counts take in the n-grams of ``texts`` that stay below ``min_df``, for
        the next learn. ``max_features`` caps the grown vocabulary: the new n-grams in most documents fill what
        room it leaves. Returns ``(featurizer, n_added)``; ``self`` is not changed. A featurizer saved without
        the rare n-grams (before they were kept) counts the new n-grams in ``texts`` alone."""
        self._check_fitted()
        texts = as_text_list(texts)
        min_n, max_n, pattern = self._frozen[0], self._frozen[1], self._frozen[2]
        before = self.n_docs_ if self.n_docs_ is not None else n_docs_before
        if before is None:
            raise ConfigError("extended() needs the number of documents the vocabulary was counted on")
        n_docs = int(before) + len(texts)
        if not texts:
            return self, 0
        fresh = TfidfFeaturizer(**{**self.get_params(), "max_features": None, "min_df": 1, "max_df": 1.0})
        try:
            X_fresh = fresh.fit_transform(texts)
        except ConfigError:  # no text holds a token
            return self, 0
        df = np.bincount(X_fresh.indices, minlength=fresh.n_features_).astype(np.int64)
        # each node of the fresh trie (per order) as a node of this one, -1 where this trie lacks it
        n_uni, f_uni = len(self._uni_strings), len(fresh._uni_strings)
        get = self._uni_index.get
        uni_map = np.array([get(s, -1) for s in fresh._uni_strings], dtype=np.int64)
        maps = [uni_map]
        for n in range(2, max_n + 1):
            fkeys, okeys = fresh._ngram_keys[n - 2], self._ngram_keys[n - 2]
            parent, last = maps[-1][fkeys // f_uni], uni_map[fkeys % f_uni]
            key = np.where((parent >= 0) & (last >= 0), parent * n_uni + last, -1)
            j = np.minimum(np.searchsorted(okeys, key), max(len(okeys) - 1, 0))
            found = (key >= 0) & (okeys[j] == key) if len(okeys) else np.zeros(len(fkeys), dtype=bool)
            maps.append(np.where(found, j, -1))
        old_fmaps = [self._uni_feature, *self._ngram_feature]
        fresh_fmaps = [fresh._uni_feature, *fresh._ngram_feature]
        # the fresh features this vocabulary lacks, and each fresh feature's hash
        lacks = np.zeros(fresh.n_features_, dtype=bool)
        f_hash = np.zeros(fresh.n_features_, dtype=np.uint64)
        node_hash = _node_hashes(fresh._uni_strings, [k // f_uni for k in fresh._ngram_keys],
                                 [k % f_uni for k in fresh._ngram_keys])
        for n in range(min_n, max_n + 1):
            f, m = fresh_fmaps[n - 1], maps[n - 1]
            has = f >= 0
            known = np.zeros(len(f), dtype=bool)
            known[m >= 0] = old_fmaps[n - 1][m[m >= 0]] >= 0
            lacks[f[has & ~known]] = True
            f_hash[f[has]] = node_hash[n - 1][has]
        cand = np.flatnonzero(lacks)
        rare_h, rare_df = self._rare if self._rare is not None else (np.zeros(0, np.uint64), np.zeros(0, np.int64))
        total = df[cand] + _counts_of(rare_h, rare_df, f_hash[cand])
        high = self.max_df if isinstance(self.max_df, numbers.Integral) else self.max_df * n_docs
        low = self.min_df if isinstance(self.min_df, numbers.Integral) else self.min_df * n_docs
        kept = (total >= low) & (total <= high)
        new_f, new_df = cand[kept], total[kept]
        if self.max_features is not None and new_f.size > self.max_features - self.n_features_:
            room = max(self.max_features - self.n_features_, 0)
            top = np.sort(np.argsort(-new_df, kind="stable")[:room])
            new_f, new_df = new_f[top], new_df[top]
        # the remembered rare n-grams: those promoted leave, those still below min_df (or above max_df: a fit on
        # every text leaves them out too) are counted on
        below = ~kept
        record = _rare_merged(rare_h, rare_df, f_hash[cand[below]], total[below], f_hash[new_f])
        if new_f.size == 0:
            grown = self._copy_vocabulary()
            grown._rare, grown.n_docs_ = record, n_docs
            return grown, 0
        new_id = np.full(fresh.n_features_ + 1, -1, dtype=np.int64)  # fresh feature -> grown id (-1 sentinel)
        new_id[new_f] = self.n_features_ + np.arange(new_f.size)
        # fresh nodes the added features need (their own and every prefix's), as _build_trie keeps them
        feat_of = [new_id[f] for f in fresh_fmaps]  # per order, per fresh node: its added feature or -1
        need = [fo >= 0 for fo in feat_of]
        for n in range(max_n, 1, -1):
            j = np.flatnonzero(need[n - 1])
            need[n - 2][fresh._ngram_keys[n - 2][j] // f_uni] = True
            need[0][fresh._ngram_keys[n - 2][j] % f_uni] = True
        # unigrams: the old ones keep their ids, the added ones follow
        add_uni = np.flatnonzero(need[0] & (uni_map < 0))
        uni_to = uni_map.copy()
        uni_to[add_uni] = n_uni + np.arange(add_uni.size)
        n_uni2 = n_uni + add_uni.size
        strings = self._uni_strings + [fresh._uni_strings[u] for u in add_uni.tolist()]
        uni_feature = np.concatenate([self._uni_feature, np.full(add_uni.size, -1, dtype=np.int64)])
        hit = feat_of[0] >= 0
        uni_feature[uni_to[hit]] = feat_of[0][hit]
        ngram_keys, ngram_feature = [], []
        old_to, fresh_to = np.arange(n_uni, dtype=np.int64), uni_to  # node ids of the order below, old and fresh
        for n in range(2, max_n + 1):
            okeys, fkeys = self._ngram_keys[n - 2], fresh._ngram_keys[n - 2]
            add = np.flatnonzero(need[n - 1] & (maps[n - 1] < 0))
            keys = np.concatenate([old_to[okeys // n_uni] * n_uni2 + okeys % n_uni,
                                   fresh_to[fkeys[add] // f_uni] * n_uni2 + uni_to[fkeys[add] % f_uni]])
            order = np.argsort(keys, kind="stable")
            position = np.empty_like(order)
            position[order] = np.arange(order.size)
            feature = np.concatenate([self._ngram_feature[n - 2], np.full(add.size, -1, dtype=np.int64)])[order]
            old_to = position[:okeys.size]
            fresh_to = np.full(fkeys.size, -1, dtype=np.int64)
            fresh_to[maps[n - 1] >= 0] = old_to[maps[n - 1][maps[n - 1] >= 0]]
            fresh_to[add] = position[okeys.size:]
            hit = feat_of[n - 1] >= 0
            feature[fresh_to[hit]] = feat_of[n - 1][hit]
            ngram_keys.append(keys[order])
            ngram_feature.append(feature)
        s = 1.0 if self.smooth_idf else 0.0
        idf_new = (np.log((n_docs + s) / (new_df.astype(np.float64) + s)) + 1.0).astype(np.float32)
        grown = TfidfFeaturizer(**self.get_params())
        grown.idf_ = np.concatenate([self.idf_, idf_new])
        grown.n_features_ = int(self.n_features_ + new_f.size)
        grown._uni_strings, grown._uni_feature = strings, uni_feature
        grown._ngram_keys, grown._ngram_feature = ngram_keys, ngram_feature
        grown._ready(min_n, max_n, pattern, self._analyzer)
        grown._rare, grown.n_docs_ = record, n_docs
        return grown, int(new_f.size)

    def _copy_vocabulary(self) -> "TfidfFeaturizer":
        """A copy sharing this one's (never modified) vocabulary arrays."""
        other = TfidfFeaturizer(**self.get_params())
        other.idf_, other.n_features_ = self.idf_, self.n_features_
        other._uni_strings, other._uni_feature = self._uni_strings, self._uni_feature
        other._ngram_keys, other._ngram_feature = self._ngram_keys, self._ngram_feature
        other._ready(self._frozen[0], self._frozen[1], self._frozen[2], self._analyzer)
        other._rare, other.n_docs_ = self._rare, self.n_docs_
        return other

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

    # ---- vocabulary -----------------------------------------------------------------------------

    def _trie_names(self) -> list[list[str]]:
        """Text of every trie node, per order (nodes that are only prefixes included)."""
        levels = [self._uni_strings]
        n_uni = len(self._uni_strings)
        for keys in self._ngram_keys:
            parent = levels[-1]
            levels.append([parent[p] + " " + self._uni_strings[u]
                           for p, u in zip((keys // n_uni).tolist(), (keys % n_uni).tolist())])
        return levels

    def feature_names(self) -> list[str]:
        """Feature texts by feature index (alphabetical, like sklearn's ``get_feature_names_out``)."""
        self._check_fitted()
        if self._names is None:
            names: list[str] = [""] * self.n_features_
            fmaps = [self._uni_feature, *self._ngram_feature]
            for level, fmap in zip(self._trie_names(), fmaps):
                for i in np.flatnonzero(fmap >= 0).tolist():
                    names[fmap[i]] = level[i]
            self._names = names
        return list(self._names)

    def feature_index(self, term: str) -> int | None:
        """Index of an n-gram given as its text (tokens joined by one space), None if not a feature."""
        self._check_fitted()
        parts = term.split(" ") if self._ngram_keys else [term]
        n_uni = len(self._uni_strings)
        node = self._uni_index.get(parts[0], -1)
        for n, part in enumerate(parts[1:], start=2):
            u = self._uni_index.get(part, -1)
            if node < 0 or u < 0 or n - 2 >= len(self._ngram_keys):
                return None
            keys = self._ngram_keys[n - 2]
            key = node * n_uni + u
            j = int(np.searchsorted(keys, key))
            node = j if j < len(keys) and keys[j] == key else -1
        if node < 0:
            return None
        f = (self._uni_feature if len(parts) == 1 else self._ngram_feature[len(parts) - 2])[node]
        return int(f) if f >= 0 else None

    # ---- serialisation --------------------------------------------------------------------------

    def to_arrays(self) -> tuple[dict, dict[str, np.ndarray]]:
        """(JSON-able params, numeric arrays); the vocabulary is a trie of int64 keys over a UTF-8 blob."""
        self._check_fitted()
        encoded = [s.encode("utf-8", "surrogatepass") for s in self._uni_strings]
        offsets = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=offsets[1:])
        params = self.get_params()
        params["ngram_range"] = [int(v) for v in self.ngram_range]
        params["analyzer"] = str(parse_analyzer(self.analyzer))
        params["stop_words"] = self._stop_list
        params.update(format=_FORMAT, format_version=_FORMAT_VERSION, n_features=int(self.n_features_))
        arrays = {
            "idf": np.ascontiguousarray(self.idf_, dtype=np.float32),
            "unigram_blob": np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(),
            "unigram_offsets": offsets,
            "unigram_feature": self._uni_feature.astype(np.int64),
        }
        for n, (k, f) in enumerate(zip(self._ngram_keys, self._ngram_feature), start=2):
            arrays[f"ngram{n}_keys"] = k.astype(np.int64)
            arrays[f"ngram{n}_feature"] = f.astype(np.int64)
        if self._rare is not None and self.n_docs_ is not None:  # the n-grams too rare to keep (``extended``)
            arrays["rare_hash"] = np.ascontiguousarray(self._rare[0], dtype=np.uint64).view(np.int64)
            arrays["rare_df"] = np.ascontiguousarray(self._rare[1], dtype=np.int64)
            arrays["n_docs"] = np.array([self.n_docs_], dtype=np.int64)
        return params, arrays

    @classmethod
    def from_arrays(cls, params: dict, arrays: dict) -> "TfidfFeaturizer":
        """Rebuild from :meth:`to_arrays` output; any inconsistency raises ModelFormatError."""
        if not isinstance(params, dict):
            raise ModelFormatError("TF-IDF params must be a JSON object")
        params = dict(params)
        fmt, version, n_features = params.pop("format", None), params.pop("format_version", None), \
            params.pop("n_features", None)
        if fmt != _FORMAT or version != _FORMAT_VERSION:
            raise ModelFormatError(f"not a TF-IDF featurizer of format {_FORMAT} v{_FORMAT_VERSION} "
                                   f"(found {fmt!r} v{version!r})")
        params = {**_LEGACY_DEFAULTS, **params}
        unknown = set(params) - set(_PARAM_NAMES)
        missing = set(_PARAM_NAMES) - set(params)
        if unknown or missing:
            raise ModelFormatError(f"TF-IDF params: unknown keys {sorted(unknown)}, missing keys {sorted(missing)}")
        if isinstance(params["ngram_range"], list):
            params["ngram_range"] = tuple(params["ngram_range"])
        self = cls(**params)
        try:
            min_n, max_n, pattern = self._checked_params()
        except ConfigError as exc:
            raise ModelFormatError(f"TF-IDF params: {exc}") from None
        if isinstance(self.stop_words, str):
            raise ModelFormatError("TF-IDF params: 'stop_words' must be saved as a list of words or null")
        analyzer = self._make_analyzer()  # a missing analyzer library is a ConfigError saying what to install
        if not isinstance(n_features, int) or isinstance(n_features, bool) or n_features < 1:
            raise ModelFormatError(f"TF-IDF params: n_features must be a positive int, got {n_features!r}")

        rare = {k: arrays[k] for k in _RARE_ARRAYS if k in arrays}
        if rare and set(rare) != set(_RARE_ARRAYS):
            raise ModelFormatError(f"TF-IDF arrays: {sorted(rare)} without {sorted(set(_RARE_ARRAYS) - set(rare))}")
        idf, strings, fmaps, keys_list = vocabulary_from_arrays(
            {k: v for k, v in arrays.items() if k not in rare}, n_features, min_n, max_n)
        if rare:
            h, df, n = (np.asarray(rare[k]) for k in _RARE_ARRAYS)
            if h.ndim != 1 or df.shape != h.shape or h.dtype.kind not in "iu" or df.dtype.kind not in "iu" \
                    or n.shape != (1,) or n.dtype.kind not in "iu" or int(n[0]) < 1:
                raise ModelFormatError("TF-IDF arrays: invalid rare n-gram record")
            h = h.astype(np.int64, copy=False).view(np.uint64)
            if h.size and (np.any(h[1:] <= h[:-1]) or df.min() < 1):
                raise ModelFormatError("TF-IDF arrays: the rare n-gram hashes are not increasing with counts >= 1")
            self._rare, self.n_docs_ = (h, df.astype(np.int64)), int(n[0])

        self.idf_ = idf
        self.n_features_ = n_features
        self._uni_strings = strings
        self._uni_feature = fmaps[0]
        self._ngram_keys = keys_list
        self._ngram_feature = fmaps[1:]
        self._ready(min_n, max_n, pattern, analyzer)
        return self


def _unigram_hashes(strings: list[str]) -> np.ndarray:
    """A 64-bit hash of each unigram's text (the same in every process and on every machine)."""
    return np.array([int.from_bytes(hashlib.blake2b(u.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                                    "little") for u in strings], dtype=np.uint64)


def _mix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The hash of an n-gram from its (n-1)-gram prefix's ``a`` and its last unigram's ``b`` (splitmix64)."""
    with np.errstate(over="ignore"):
        x = (a * np.uint64(0x9E3779B97F4A7C15)) ^ b
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


def _node_hashes(uni_strings: list[str], parents: list[np.ndarray], lasts: list[np.ndarray]) -> list[np.ndarray]:
    """Per order, the hash of each trie node: unigrams by their text, an order-n node (``parents[n-2]``, the
    order n-1 node it extends, and ``lasts[n-2]``, its last unigram) by :func:`_mix`."""
    out = [_unigram_hashes(uni_strings)]
    for p, u in zip(parents, lasts):
        out.append(_mix(out[-1][p], out[0][u]))
    return out


def _rare_record(hashes: np.ndarray, df: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique hashes, counts), the :data:`RARE_MAX` smallest hashes kept (a uniform sample of them)."""
    hashes, df = np.asarray(hashes, dtype=np.uint64), np.asarray(df, dtype=np.int64)
    order = np.argsort(hashes, kind="stable")[:RARE_MAX]
    return hashes[order], df[order]


def _counts_of(rare_h: np.ndarray, rare_df: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    """The remembered count of each hash (0 where none)."""
    if rare_h.size == 0:
        return np.zeros(hashes.size, dtype=np.int64)
    j = np.minimum(np.searchsorted(rare_h, hashes), rare_h.size - 1)
    return np.where(rare_h[j] == hashes, rare_df[j], 0).astype(np.int64)


def _rare_merged(rare_h, rare_df, hashes, totals, promoted) -> tuple[np.ndarray, np.ndarray]:
    """The record with ``hashes`` set to their ``totals`` (old counts included) and ``promoted`` removed."""
    keep = ~np.isin(rare_h, np.concatenate([hashes, promoted]))
    return _rare_record(np.concatenate([rare_h[keep], hashes]), np.concatenate([rare_df[keep], totals]))


def _join_columns(cols: np.ndarray, uni_strings: list[str]) -> list[str]:
    """N-gram texts from a (max_n, k) array of unigram ids padded with -1."""
    names = [uni_strings[u] for u in cols[0].tolist()]
    for row in cols[1:]:
        names = [a + " " + uni_strings[u] if u >= 0 else a for a, u in zip(names, row.tolist())]
    return names
