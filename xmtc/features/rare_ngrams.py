"""The rare n-gram record of a TF-IDF featurizer: the n-grams a fit left out for ``min_df`` / ``max_df``, each as a
64-bit hash with the number of texts it was seen in.

Why: a learn (``xmtc learn``, :mod:`xmtc.models.learning`) grows the vocabulary to what a fit on all documents
would keep (:meth:`xmtc.features.tfidf.TfidfFeaturizer.extended`). An n-gram in one earlier text and one new one
reaches ``min_df=2`` on all of them, but the earlier texts are gone by then: only their counts, kept here, can
say so. Likewise an n-gram the earlier texts held in more than ``max_df`` of them stays out however rarely the new
texts hold it. Only the featurizers of models that learn keep a record (``remember_rare``, set by XR-Linear). A
count per n-gram is kept under a hash of its text rather than the text itself (8 bytes however long the n-gram, and
a fit never makes its string):

* a unigram's hash is the little-endian 8-byte blake2b of its UTF-8 text, an n-gram's the splitmix64 finalizer of
  its (n-1)-gram prefix's hash and its last unigram's, so it follows the featurizer's trie of integer pairs and
  is the same in every process and on every machine (the record is saved with the model);
* at most :data:`RARE_MAX` are kept, the smallest hashes: a uniform sample of the n-grams left out.

The record is ``(sorted unique uint64 hashes, int64 counts)``, saved as the optional arrays ``rare_hash`` (the
hashes viewed as int64), ``rare_df`` and ``n_docs`` (the texts counted) beside the vocabulary in
``featurizer.safetensors``; a featurizer saved without them (before the record was kept) counts the new n-grams
in the new texts alone.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..errors import ModelFormatError
from .ngram_trie import Trie

__all__ = ["RARE_MAX", "counted_on", "feature_hashes", "left_out", "record_arrays", "record_from_arrays", "trie_hashes"]

# n-grams seen in fewer than min_df (or more than max_df) texts that a featurizer remembers; above this many, the
# smallest hashes: a uniform sample of them
RARE_MAX = 4_000_000
_RARE_ARRAYS = ("rare_hash", "rare_df", "n_docs")


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


def trie_hashes(uni_strings: list[str], ngram_keys: list[np.ndarray]) -> list[np.ndarray]:
    """Per order, the hash of each node of a trie whose order-n keys are ``parent * len(uni_strings) + unigram``."""
    n_uni = len(uni_strings)
    return _node_hashes(uni_strings, [k // n_uni for k in ngram_keys], [k % n_uni for k in ngram_keys])


def feature_hashes(trie: Trie, n_features: int) -> np.ndarray:
    """The hash of each of the ``n_features`` features of a vocabulary ``trie``."""
    out = np.zeros(n_features, dtype=np.uint64)
    for f, h in zip(trie.feature_maps, trie_hashes(trie.strings, trie.ngram_keys)):
        out[f[f >= 0]] = h[f >= 0]
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


def left_out(hashes: np.ndarray, df: np.ndarray, low: float, high: float) -> tuple[np.ndarray, np.ndarray]:
    """The record of a fit: the n-grams (``hashes``, counted in ``df`` texts) outside ``[low, high]``."""
    rare = np.flatnonzero((df < low) | (df > high))
    return _rare_record(hashes[rare], df[rare])


def counted_on(record: tuple | None, hashes: np.ndarray, df: np.ndarray, low: float, high: float,
               room: int | None) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """What a fit on all documents keeps of n-grams new to a vocabulary: ``(kept, totals, record)``.

    ``hashes`` and ``df`` are the new n-grams and the new texts they are in; each one's total adds the count
    ``record`` remembers of the earlier texts (None: a featurizer saved without it, so none). ``kept`` are the
    positions (increasing) of those whose total is in ``[low, high]``, the ``room`` (None: no cap) in most texts
    of them when more, and ``totals`` their totals. The record returned has the promoted n-grams removed and those
    still outside ``[low, high]`` set to their totals, for the next learn."""
    rare_h, rare_df = record if record is not None else (np.zeros(0, np.uint64), np.zeros(0, np.int64))
    total = df + _counts_of(rare_h, rare_df, hashes)
    inside = (total >= low) & (total <= high)
    kept = np.flatnonzero(inside)
    if room is not None and kept.size > room:
        kept = kept[np.sort(np.argsort(-total[kept], kind="stable")[:room])]
    outside = ~inside
    return kept, total[kept], _rare_merged(rare_h, rare_df, hashes[outside], total[outside], hashes[kept])


def record_arrays(record: tuple | None, n_docs: int | None) -> dict[str, np.ndarray]:
    """The record's saved arrays (none without a record or a document count)."""
    if record is None or n_docs is None:
        return {}
    return {"rare_hash": np.ascontiguousarray(record[0], dtype=np.uint64).view(np.int64),
            "rare_df": np.ascontiguousarray(record[1], dtype=np.int64),
            "n_docs": np.array([n_docs], dtype=np.int64)}


def record_from_arrays(arrays: dict) -> tuple[tuple | None, int | None, dict]:
    """``(record, n_docs, the other arrays)`` from saved arrays, checked (``(None, None, arrays)`` when they hold no
    record); an incomplete or inconsistent record is a ModelFormatError."""
    rare = {k: arrays[k] for k in _RARE_ARRAYS if k in arrays}
    if not rare:
        return None, None, arrays
    if set(rare) != set(_RARE_ARRAYS):
        raise ModelFormatError(f"TF-IDF arrays: {sorted(rare)} without {sorted(set(_RARE_ARRAYS) - set(rare))}")
    h, df, n = (np.asarray(rare[k]) for k in _RARE_ARRAYS)
    if h.ndim != 1 or df.shape != h.shape or h.dtype.kind not in "iu" or df.dtype.kind not in "iu" \
            or n.shape != (1,) or n.dtype.kind not in "iu" or int(n[0]) < 1:
        raise ModelFormatError("TF-IDF arrays: invalid rare n-gram record")
    h = h.astype(np.int64, copy=False).view(np.uint64)
    if h.size and (np.any(h[1:] <= h[:-1]) or df.min() < 1):
        raise ModelFormatError("TF-IDF arrays: the rare n-gram hashes are not increasing with counts >= 1")
    return (h, df.astype(np.int64)), int(n[0]), {k: v for k, v in arrays.items() if k not in rare}

