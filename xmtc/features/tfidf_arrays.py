"""The saved format of a TF-IDF featurizer (:meth:`~xmtc.features.tfidf.TfidfFeaturizer.to_arrays` /
``from_arrays``): JSON-able params (the hyperparameters, the format and its version, ``n_features``) and numeric
arrays (idf, the unigrams as one UTF-8 blob with offsets, per n-gram order the trie keys and feature ids, and the
record of the n-grams too rare to keep, :mod:`xmtc.features.rare_ngrams`). Everything is checked before use: any
inconsistency is a ModelFormatError naming the param or array, so a crafted or damaged model cannot index out of
range at prediction time."""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError, ModelFormatError
from .analyzers import parse_analyzer
from .ngram_trie import Trie
from .rare_ngrams import record_arrays, record_from_arrays

__all__ = ["featurizer_arrays", "featurizer_from_arrays", "vocabulary_from_arrays"]

_FORMAT = "xmtc.tfidf"
_FORMAT_VERSION = 1
# Saved before analyzers existed: a file without these keys means no analysis.
_LEGACY_DEFAULTS = {"analyzer": "simple", "stop_words": None}


def featurizer_arrays(params: dict, stop_list: list[str] | None, idf: np.ndarray, trie: Trie,
                      rare: tuple | None, n_docs: int | None) -> tuple[dict, dict[str, np.ndarray]]:
    """The saved form of a fitted featurizer: its ``get_params()`` (the stop words as the list ``stop_list``),
    its ``idf``, vocabulary ``trie`` and record of rare n-grams (``rare``, counted on ``n_docs`` texts)."""
    strings, uni_feature, ngram_keys, ngram_feature = trie
    encoded = [s.encode("utf-8", "surrogatepass") for s in strings]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=offsets[1:])
    params = dict(params)
    params["ngram_range"] = [int(v) for v in params["ngram_range"]]
    params["analyzer"] = str(parse_analyzer(params["analyzer"]))
    params["stop_words"] = stop_list
    params.update(format=_FORMAT, format_version=_FORMAT_VERSION, n_features=int(len(idf)))
    arrays = {
        "idf": np.ascontiguousarray(idf, dtype=np.float32),
        "unigram_blob": np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(),
        "unigram_offsets": offsets,
        "unigram_feature": uni_feature.astype(np.int64),
    }
    for n, (k, f) in enumerate(zip(ngram_keys, ngram_feature), start=2):
        arrays[f"ngram{n}_keys"] = k.astype(np.int64)
        arrays[f"ngram{n}_feature"] = f.astype(np.int64)
    arrays.update(record_arrays(rare, n_docs))  # the n-grams too rare to keep (``extended``)
    return params, arrays


def featurizer_from_arrays(cls, param_names: tuple[str, ...], params: dict, arrays: dict):
    """A featurizer of class ``cls`` (hyperparameters ``param_names``) rebuilt from :func:`featurizer_arrays`
    output; any inconsistency raises ModelFormatError."""
    if not isinstance(params, dict):
        raise ModelFormatError("TF-IDF params must be a JSON object")
    params = dict(params)
    fmt, version, n_features = params.pop("format", None), params.pop("format_version", None), \
        params.pop("n_features", None)
    if fmt != _FORMAT or version != _FORMAT_VERSION:
        raise ModelFormatError(f"not a TF-IDF featurizer of format {_FORMAT} v{_FORMAT_VERSION} "
                               f"(found {fmt!r} v{version!r})")
    params = {**_LEGACY_DEFAULTS, **params}
    unknown = set(params) - set(param_names)
    missing = set(param_names) - set(params)
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

    rare, n_docs, arrays = record_from_arrays(arrays)
    idf, strings, fmaps, keys_list = vocabulary_from_arrays(arrays, n_features, min_n, max_n)
    if rare is not None:
        self._rare, self.n_docs_ = rare, n_docs
    self.idf_ = idf
    self.n_features_ = n_features
    self._set_trie(Trie(strings, fmaps[0], keys_list, fmaps[1:]))
    self._ready(min_n, max_n, pattern, analyzer)
    return self


def vocabulary_from_arrays(arrays: dict, n_features: int, min_n: int, max_n: int
                           ) -> tuple[np.ndarray, list[str], list[np.ndarray], list[np.ndarray]]:
    """``(idf, unigram strings, feature maps per order, trie keys per order >= 2)`` from saved arrays."""
    if not 1 <= min_n <= max_n <= 1 + len(arrays) // 2:  # each order n >= 2 has two arrays; none is 10**20
        raise ModelFormatError(f"TF-IDF arrays: {len(arrays)} arrays cannot hold n-grams of orders {min_n}..{max_n}")
    expected = {"idf", "unigram_blob", "unigram_offsets", "unigram_feature"}
    expected |= {f"ngram{n}_{part}" for n in range(2, max_n + 1) for part in ("keys", "feature")}
    if set(arrays) != expected:
        raise ModelFormatError(f"TF-IDF arrays: expected {sorted(expected)}, got {sorted(arrays)}")

    def arr(name, kind, dtype):
        a = np.asarray(arrays[name])
        if a.ndim != 1 or a.dtype.kind not in kind:
            raise ModelFormatError(f"TF-IDF array {name!r}: expected 1-d {dtype.__name__}, "
                                   f"got {a.ndim}-d {a.dtype}")
        return a.astype(dtype, copy=False)

    idf = arr("idf", "f", np.float32)
    if len(idf) != n_features or not np.all(np.isfinite(idf)) or np.any(idf <= 0):
        raise ModelFormatError(f"TF-IDF array 'idf': need {n_features} finite positive values")
    if np.asarray(arrays["unigram_blob"]).dtype != np.uint8:
        raise ModelFormatError("TF-IDF array 'unigram_blob' must be uint8 (UTF-8 bytes)")
    blob = arr("unigram_blob", "u", np.uint8).tobytes()
    offsets = arr("unigram_offsets", "iu", np.int64)
    if len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != len(blob) or np.any(np.diff(offsets) < 0):
        raise ModelFormatError("TF-IDF array 'unigram_offsets' does not partition 'unigram_blob'")
    try:
        strings = [blob[a:b].decode("utf-8", "surrogatepass")
                   for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
    except UnicodeDecodeError as exc:
        raise ModelFormatError(f"TF-IDF array 'unigram_blob' is not UTF-8: {exc}") from None
    n_uni = len(strings)
    if len(set(strings)) != n_uni:
        raise ModelFormatError("TF-IDF array 'unigram_blob' holds duplicate unigrams")
    fmaps = [arr("unigram_feature", "iu", np.int64)]
    keys_list = []
    prev_size = n_uni
    for n in range(2, max_n + 1):
        k = arr(f"ngram{n}_keys", "iu", np.int64)
        f = arr(f"ngram{n}_feature", "iu", np.int64)
        if len(k) != len(f):
            raise ModelFormatError(f"TF-IDF arrays 'ngram{n}_keys' and 'ngram{n}_feature' differ in length")
        if len(k) and (k[0] < 0 or k[-1] >= prev_size * n_uni or np.any(np.diff(k) <= 0)):
            raise ModelFormatError(f"TF-IDF array 'ngram{n}_keys' is not strictly increasing in range")
        keys_list.append(k)
        fmaps.append(f)
        prev_size = len(k)
    if len(fmaps[0]) != n_uni:
        raise ModelFormatError("TF-IDF array 'unigram_feature' does not match the number of unigrams")
    used = []
    for n, f in enumerate(fmaps, start=1):
        if len(f) and (f.min() < -1 or f.max() >= n_features or (n < min_n and f.max() >= 0)):
            raise ModelFormatError(f"TF-IDF feature ids of order {n} are out of range")
        used.append(f[f >= 0])
    if not np.array_equal(np.sort(np.concatenate(used)), np.arange(n_features)):
        raise ModelFormatError("TF-IDF arrays: feature ids are not each used exactly once")
    return idf, strings, fmaps, keys_list
