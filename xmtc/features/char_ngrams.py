"""Character n-gram TF-IDF inside word boundaries: matching short texts to label names across inflections.

What: scikit-learn's ``char_wb`` analyzer (each word padded with one space, its 3- to 5-character
substrings), sublinear term frequencies ``1 + log tf``, smoothed idf ``1 + log((1 + N) / (1 + df))`` and L2
rows -- scikit-learn's TfidfVectorizer, with the vocabulary and idf stored as plain arrays so that a model
folder never holds a pickle.

Why: a label is usually named by one to three words ("railways", "steam locomotives"), a text says
"railway" or "locomotive"; word features see no overlap there, character n-grams see most of it, in any
language and without a stemmer. On yso-finna-en-2k-20k's open split (361 labels without a training
document, benchmarks/RESULTS.md "label-text route") ranking those labels by cosine found 58.4% of them in
the top 10 with character 3-5-grams against 41.6% with word 1-2-grams and 51.2% with stemmed words.

How: :meth:`CharNgramFeaturizer.rows` walks the texts' words as the analyzer does in a compiled kernel
(:mod:`xmtc.features.char_ngram_kernels`) and counts without CountVectorizer's per-call set-up, so that the
route's share of a one-text prediction is in proportion to the text (1.5 ms -> 0.17 ms for 1,200 characters);
the rows are equal to the bit to what scikit-learn's vectorizer and scipy's row sums give.
"""

from __future__ import annotations

import re

import numpy as np
import scipy.sparse as sp

from ..errors import ModelFormatError

_FORMAT, _FORMAT_VERSION = "xmtc-char-ngrams", 1
_WHITE_SPACES = re.compile(r"\s\s+")  # scikit-learn's, which its char_wb analyzer applies before splitting


class CharNgramFeaturizer:
    """``fit(texts)`` learns the n-grams and their idf; ``transform(texts)`` gives L2-normalised float32 rows."""

    def __init__(self, ngram_range: tuple[int, int] = (3, 5)):
        self.ngram_range = (int(ngram_range[0]), int(ngram_range[1]))

    def fit(self, texts: list[str]) -> "CharNgramFeaturizer":
        """Every n-gram of the texts (scikit-learn's sorted vocabulary) and its smoothed idf, computed in float32
        as scikit-learn's TfidfVectorizer(dtype=float32) does, so that the rows are the same to the bit; counted
        by a compiled kernel (:func:`~xmtc.features.char_ngram_kernels.fit_vocabulary`: the whole YSO vocabulary's
        27,754 label texts in 0.13 s against 0.57 s with a Python set per text), or here where the alphabet is too
        large for its keys, without importing scikit-learn (~1 s) or building the count matrix it would."""
        words = [_words(text) for text in texts]
        from .char_ngram_kernels import fit_vocabulary

        fitted = fit_vocabulary(words, *self.ngram_range)
        if fitted is None:
            fitted = self._counted(words)
        self.ngrams_, df = fitted
        if not self.ngrams_:
            raise ValueError("empty vocabulary; perhaps the documents only contain stop words")
        counts = df.astype(np.float32)
        idf = np.full(counts.size, len(words) + 1, dtype=np.float32)
        idf /= counts + np.float32(1.0)
        np.log(idf, out=idf)
        idf += np.float32(1.0)
        self.idf_ = idf
        return self._ready()

    def _counted(self, words_per_text: list[list[str]]) -> tuple[list[str], np.ndarray]:
        """:func:`~xmtc.features.char_ngram_kernels.fit_vocabulary` in Python: each distinct n-gram numbered when
        first cut, a text's distinct numbers appended to one list and counted once at the end (counting the
        strings in a dict per text: 2.8 s against 2.0 s on 6,000 texts of 730 characters)."""
        number: dict[str, int] = {}
        of_word: dict[str, list[int]] = {}  # a word's n-grams' numbers, cut once however often it occurs
        seen: list[int] = []
        for ws in words_per_text:
            grams: set[int] = set()
            for w in ws:
                cut = of_word.get(w)
                if cut is None:
                    cut = of_word[w] = [number.setdefault(g, len(number)) for g in self._word_grams(w)]
                grams.update(cut)
            seen.extend(grams)
        names = list(number)
        order = sorted(range(len(names)), key=names.__getitem__)  # column order: the n-grams sorted
        df = np.bincount(np.fromiter(seen, np.int64, len(seen)), minlength=len(names))[order]
        return [names[i] for i in order], df

    def _ready(self) -> "CharNgramFeaturizer":
        self.n_features_ = len(self.ngrams_)
        self._index = {g: i for i, g in enumerate(self.ngrams_)}
        self._table = None  # the compiled lookup (char_ngram_kernels), built at the first transform
        return self

    def _grams(self, text) -> list[str]:
        """scikit-learn's ``char_wb`` analyzer: decoded (UTF-8, strict), lower-cased, runs of white space to one
        space, each word padded with a space and cut into its n-grams (a word shorter than n once, whole)."""
        out: list[str] = []
        for w in _words(text):
            out.extend(self._word_grams(w))
        return out

    def _word_grams(self, word: str) -> list[str]:
        """One word's n-grams, padded with a space each side, in the analyzer's order."""
        w = " " + word + " "
        size = len(w)
        out: list[str] = []
        for k in range(self.ngram_range[0], self.ngram_range[1] + 1):
            if size <= k:  # the padded word is one n-gram of this size, and of every larger one
                out.append(w)
                break
            out.extend(w[i:i + k] for i in range(size - k + 1))
        return out

    def transform(self, texts: list[str]) -> sp.csr_matrix:
        indptr, indices, data = self.rows(texts)
        return sp.csr_matrix((data, indices, indptr), shape=(indptr.size - 1, self.n_features_))

    def rows(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`transform` as CSR arrays ``(indptr int64, indices int32, data float32)``, indices sorted
        within a row: the work is proportional to the texts' characters, with no per-call set-up."""
        texts = list(texts)
        n_feat = self.n_features_
        table = self._table
        if table is None:
            from .char_ngram_kernels import ngram_table

            table = self._table = ngram_table(self.ngrams_, self.ngram_range[1]) or False
        if table and all(type(t) is str for t in texts):
            # the analyzer's own steps before its n-grams: lower-case, runs of white space to one, words
            words = [_words(t) for t in texts]
            from .char_ngram_kernels import ngram_ids

            doc, ids = ngram_ids([w for ws in words for w in ws], np.fromiter(map(len, words), np.int64, len(words)),
                                 table, *self.ngram_range)
            keys = doc * n_feat + ids
        else:  # bytes among the texts, or an alphabet too large for the kernel's keys: the analyzer itself
            get, analyze = self._index.get, self._grams
            found: list[int] = []
            for i, text in enumerate(texts):
                base = i * n_feat
                found.extend([base + j for j in map(get, analyze(text)) if j is not None])
            keys = np.array(found, dtype=np.int64)
        if keys.size:
            uniq, counts = np.unique(keys, return_counts=True)
        else:
            uniq, counts = np.zeros(0, np.int64), np.zeros(0, np.int64)
        row, indices = np.divmod(uniq, n_feat)
        indptr = np.zeros(len(texts) + 1, np.int64)
        np.cumsum(np.bincount(row, minlength=len(texts)), out=indptr[1:])
        # sublinear tf times idf, then L2 rows: the same float32 operations as scikit-learn's (row sums of
        # squares by np.add.reduceat, as scipy's csr sum(axis=1) takes them), so rows are equal to the bit
        data = (1.0 + np.log(counts.astype(np.float32))) * self.idf_[indices]
        sq = np.zeros(len(texts), np.float32)
        filled = np.flatnonzero(np.diff(indptr))
        if filled.size:
            sq[filled] = np.add.reduceat(data * data, indptr[filled])
        norms = np.sqrt(sq)
        data /= np.repeat(np.where(norms > 0, norms, 1.0), np.diff(indptr)).astype(np.float32)
        return indptr, indices.astype(np.int32), data

    def feature_names(self) -> list[str]:
        """The n-gram of every feature index (word-boundary padding spaces included, e.g. ``" rai"``); the
        featurizer's own list, not a copy: read it, do not change it."""
        return self.ngrams_

    # -- storage ----------------------------------------------------------------------------------------
    def to_arrays(self) -> tuple[dict, dict[str, np.ndarray]]:
        encoded = [g.encode("utf-8", "surrogatepass") for g in self.ngrams_]
        offsets = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=offsets[1:])
        params = {"format": _FORMAT, "format_version": _FORMAT_VERSION, "ngram_range": list(self.ngram_range),
                  "n_features": self.n_features_}
        return params, {"idf": self.idf_, "ngram_blob": np.frombuffer(b"".join(encoded), np.uint8).copy(),
                        "ngram_offsets": offsets}

    @classmethod
    def from_arrays(cls, params: dict, arrays: dict) -> "CharNgramFeaturizer":
        if not isinstance(params, dict) or params.get("format") != _FORMAT or \
                params.get("format_version") != _FORMAT_VERSION:
            raise ModelFormatError(f"not a character n-gram featurizer of format {_FORMAT} v{_FORMAT_VERSION}")
        try:
            lo, hi = (int(v) for v in params["ngram_range"])
            blob, offsets = bytes(arrays["ngram_blob"]), np.asarray(arrays["ngram_offsets"], np.int64)
            idf, n = np.asarray(arrays["idf"], np.float32), int(params["n_features"])
            ngrams = [blob[offsets[i]:offsets[i + 1]].decode("utf-8", "surrogatepass") for i in range(n)]
        except (KeyError, TypeError, ValueError, IndexError, UnicodeDecodeError) as exc:
            raise ModelFormatError(f"character n-gram featurizer: {exc}") from None
        if not 1 <= lo <= hi or idf.shape != (n,) or offsets.shape != (n + 1,) or offsets[-1] != len(blob) or \
                len(set(ngrams)) != n:
            raise ModelFormatError("character n-gram featurizer: its arrays do not agree")
        self = cls((lo, hi))
        self.ngrams_, self.idf_ = ngrams, idf
        return self._ready()


def _words(text) -> list[str]:
    """The analyzer's words of one text: decoded (UTF-8, strict), lower-cased, runs of white space to one space,
    split."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return _WHITE_SPACES.sub(" ", text.lower()).split()
