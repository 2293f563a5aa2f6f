"""The saved vocabulary of a TF-IDF featurizer, checked before use: the arrays of
:meth:`~xmtc.features.tfidf.TfidfFeaturizer.to_arrays` (idf, the unigrams as one UTF-8 blob with offsets, and
per n-gram order the trie keys and feature ids), where any inconsistency is a ModelFormatError naming the
array, so a crafted or damaged model cannot index out of range at prediction time."""

from __future__ import annotations

import numpy as np

from ..errors import ModelFormatError


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
