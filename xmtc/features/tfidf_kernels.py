"""The compiled kernels of :mod:`xmtc.features.tfidf` (numba): tokenising, n-gram interning, counts, rows.

What the estimator in :mod:`xmtc.features.tfidf` calls, one step of its module docstring each: the byte
scanner that turns a corpus into unigram ids (step 1; and the ``re`` fallback for other token patterns),
n-grams as interned integer pairs (step 2), document and term frequencies, and the parallel per-document
row builder (step 4). Kept apart from the estimator so that the vocabulary logic and the saved format read
without the kernels, and the kernels without the estimator.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import scipy.sparse as sp
from numba import get_num_threads, njit, prange

from ..errors import ConfigError, DataFormatError


_ISWORD: np.ndarray | None = None


def _isword_table() -> np.ndarray:
    """Which code points ``re`` calls ``\\w``, asked of ``re`` itself so the scanner cannot disagree."""
    global _ISWORD
    if _ISWORD is None:
        table = np.zeros(0x110000, dtype=np.bool_)
        everything = "".join(map(chr, range(0x110000)))
        table[np.fromiter((m.start() for m in re.finditer(r"\w", everything)), dtype=np.int64)] = True
        _ISWORD = table
    return _ISWORD


# --------------------------------------------------------------------------------------------------
# numba kernels
# --------------------------------------------------------------------------------------------------

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_FIB = np.uint64(0x9E3779B97F4A7C15)


@njit(cache=True, nogil=True)
def _grow(a, size):
    """Copy into a larger array (numba has no resize)."""
    out = np.empty(size, a.dtype)
    out[: a.shape[0]] = a
    return out


@njit(cache=True, nogil=True)
def _scan_some(buf, isword, st, tok, doc_end, slot_h, slot_id, u_hash, u_off, ublob):
    """Scan from byte st[0] until the end (True) or until the tables must grow (False, resumable).

    Why resumable instead of growing in place: numba compiles a loop that reassigns its arrays into
    much slower code (4x here), so growth happens in the caller and this loop only reads its arrays.
    st holds (byte position, tokens, texts, distinct tokens); each distinct token's bytes are kept
    NUL-terminated in ublob[u_off[u]:u_off[u + 1]].
    """
    n = buf.shape[0]
    i, t, doc, n_uni = st[0], st[1], st[2], st[3]
    cap = slot_id.shape[0]
    mask = np.uint64(cap - 1)
    run_start = -1
    run_cp = 0
    h = _FNV_OFFSET
    while i <= n:
        word = False
        w = 1
        b = 0
        if i < n:
            b = np.int64(buf[i])
            if b < 0x80:
                cp = b
            elif b < 0xE0:
                cp = ((b & 0x1F) << 6) | (np.int64(buf[i + 1]) & 0x3F)
                w = 2
            elif b < 0xF0:
                cp = ((b & 0x0F) << 12) | ((np.int64(buf[i + 1]) & 0x3F) << 6) | (np.int64(buf[i + 2]) & 0x3F)
                w = 3
            else:
                cp = (((b & 0x07) << 18) | ((np.int64(buf[i + 1]) & 0x3F) << 12)
                      | ((np.int64(buf[i + 2]) & 0x3F) << 6) | (np.int64(buf[i + 3]) & 0x3F))
                w = 4
            word = isword[cp]
        if word:
            if run_start < 0:
                run_start = i
                run_cp = 0
                h = _FNV_OFFSET
            run_cp += 1
            for k in range(w):
                h = (h ^ np.uint64(buf[i + k])) * _FNV_PRIME
        else:
            if run_start >= 0:
                if run_cp >= 2:
                    length = i - run_start
                    s = np.int64(h & mask)
                    found = -1
                    while slot_id[s] >= 0:
                        if slot_h[s] == h:
                            u = slot_id[s]
                            a = u_off[u]
                            if u_off[u + 1] - a == length + 1:
                                same = True
                                for k in range(length):
                                    if ublob[a + k] != buf[run_start + k]:
                                        same = False
                                        break
                                if same:
                                    found = u
                                    break
                        s = np.int64((np.uint64(s) + np.uint64(1)) & mask)
                    if found < 0:
                        a = u_off[n_uni]
                        if 2 * (n_uni + 1) > cap or a + length + 1 > ublob.shape[0]:
                            st[0], st[1], st[2], st[3] = run_start, t, doc, n_uni
                            return False
                        found = n_uni
                        for k in range(length):
                            ublob[a + k] = buf[run_start + k]
                        ublob[a + length] = 0
                        u_off[n_uni + 1] = a + length + 1
                        u_hash[n_uni] = h
                        slot_h[s] = h
                        slot_id[s] = n_uni
                        n_uni += 1
                    tok[t] = found
                    t += 1
                run_start = -1
            if b == 0:
                doc_end[doc] = t
                doc += 1
        i += w
    st[0], st[1], st[2], st[3] = i, t, doc, n_uni
    return True


@njit(cache=True, nogil=True)
def _scan_words(buf, isword, n_docs):
    """Tokenise NUL-separated UTF-8 texts into interned ids of maximal runs of >= 2 word characters.

    Returns (token ids, end token offset of each text, distinct tokens as NUL-terminated UTF-8 bytes
    back to back). Ids are numbered in order of first occurrence, so output is deterministic.
    """
    tok = np.empty(buf.shape[0] // 3 + 1, np.int32)  # a token needs >= 2 bytes plus a separator
    doc_end = np.empty(n_docs, np.int64)
    cap = 1 << 12
    slot_h = np.zeros(cap, np.uint64)
    slot_id = np.full(cap, -1, np.int32)
    u_hash = np.empty(cap // 2, np.uint64)
    u_off = np.zeros(cap // 2 + 1, np.int64)
    ublob = np.empty(8 * cap, np.uint8)
    st = np.zeros(4, np.int64)
    while not _scan_some(buf, isword, st, tok, doc_end, slot_h, slot_id, u_hash, u_off, ublob):
        n_uni = st[3]
        if 2 * (n_uni + 1) > cap:
            cap *= 2
            mask = np.uint64(cap - 1)
            slot_h = np.zeros(cap, np.uint64)
            slot_id = np.full(cap, -1, np.int32)
            for u in range(n_uni):
                s = np.int64(u_hash[u] & mask)
                while slot_id[s] >= 0:
                    s = np.int64((np.uint64(s) + np.uint64(1)) & mask)
                slot_h[s] = u_hash[u]
                slot_id[s] = u
            u_hash = _grow(u_hash, cap // 2)
            u_off = _grow(u_off, cap // 2 + 1)
        else:
            ublob = _grow(ublob, 2 * ublob.shape[0])
    return tok[: st[1]], doc_end, ublob[: u_off[st[3]]]


@njit(cache=True, nogil=True)
def _ngram_some(prev, uni, doc_ptr, n, n_uni, st, out, slot, keys, bits):
    """Intern n-grams from text st[0], token st[1] on, until done (True) or the table is half full.

    The key of the n-gram at token i is (id of the (n-1)-gram at i) * n_uni + (unigram at i+n-1);
    resumable for the same reason as :func:`_scan_some`.
    """
    cap = slot.shape[0]
    n_keys = st[2]
    i = st[1]
    for d in range(st[0], doc_ptr.shape[0] - 1):
        i = max(i, doc_ptr[d])
        while i < doc_ptr[d + 1] - n + 1:
            p = prev[i]
            if p >= 0:
                key = np.int64(p) * n_uni + uni[i + n - 1]
                s = np.int64((np.uint64(key) * _FIB) >> np.uint64(64 - bits))
                found = -1
                while slot[s] >= 0:
                    if keys[slot[s]] == key:
                        found = slot[s]
                        break
                    s = (s + 1) & (cap - 1)
                if found < 0:
                    if 2 * (n_keys + 1) > cap:
                        st[0], st[1], st[2] = d, i, n_keys
                        return False
                    found = n_keys
                    keys[n_keys] = key
                    slot[s] = n_keys
                    n_keys += 1
                out[i] = found
            i += 1
    st[2] = n_keys
    return True


@njit(cache=True, nogil=True)
def ngram_fit(prev, uni, doc_ptr, n, n_uni):
    """Id of the n-gram starting at each token (-1 where it would cross the text's end) and each
    id's key; ids numbered by first occurrence."""
    out = np.full(uni.shape[0], -1, np.int32)
    bits = 12
    slot = np.full(1 << bits, -1, np.int32)
    keys = np.empty(1 << (bits - 1), np.int64)
    st = np.zeros(3, np.int64)
    while not _ngram_some(prev, uni, doc_ptr, n, n_uni, st, out, slot, keys, bits):
        bits += 1
        cap = 1 << bits
        slot = np.full(cap, -1, np.int32)
        for j in range(st[2]):
            s = np.int64((np.uint64(keys[j]) * _FIB) >> np.uint64(64 - bits))
            while slot[s] >= 0:
                s = (s + 1) & (cap - 1)
            slot[s] = j
        keys = _grow(keys, cap // 2)
    return out, keys[: st[2]]


@njit(cache=True, nogil=True)
def ngram_lookup(prev, uni, doc_ptr, n, n_uni, keys):
    """Transform-time counterpart of :func:`ngram_fit`: find each n-gram in the fitted sorted keys."""
    T = uni.shape[0]
    out = np.full(T, -1, np.int32)
    K = keys.shape[0]
    for d in range(doc_ptr.shape[0] - 1):
        for i in range(doc_ptr[d], doc_ptr[d + 1] - n + 1):
            p = prev[i]
            u = uni[i + n - 1]
            if p < 0 or u < 0:
                continue
            key = np.int64(p) * n_uni + u
            j = np.searchsorted(keys, key)
            if j < K and keys[j] == key:
                out[i] = j
    return out


@njit(cache=True, nogil=True)
def doc_and_term_freq(ids, doc_ptr, n_terms):
    """Per term: number of texts containing it (df) and total occurrences (for max_features)."""
    df = np.zeros(n_terms, np.int64)
    tf = np.zeros(n_terms, np.int64)
    last = np.full(n_terms, -1, np.int64)
    for d in range(doc_ptr.shape[0] - 1):
        for i in range(doc_ptr[d], doc_ptr[d + 1]):
            j = ids[i]
            if j >= 0:
                tf[j] += 1
                if last[j] != d:
                    last[j] = d
                    df[j] += 1
    return df, tf


@njit(cache=True, nogil=True)
def _rows_chunk(featpos, doc_ptr, ub_ptr, idf, sublinear, norm, d0, d1, indices, data, nnz):
    """Rows d0..d1: sort each text's feature ids, count runs, weight, normalise; write at ub_ptr[d]."""
    L = featpos.shape[0]
    longest = 0
    for d in range(d0, d1):
        longest = max(longest, ub_ptr[d + 1] - ub_ptr[d])
    tmp = np.empty(longest, np.int32)
    for d in range(d0, d1):
        m = 0
        for lvl in range(L):
            for i in range(doc_ptr[d], doc_ptr[d + 1]):
                f = featpos[lvl, i]
                if f >= 0:
                    tmp[m] = f
                    m += 1
        part = tmp[:m]
        part.sort()
        base = ub_ptr[d]
        k = base
        prev = -1
        for q in range(m):
            f = part[q]
            if f != prev:
                indices[k] = f
                data[k] = 1.0
                k += 1
                prev = f
            else:
                data[k - 1] += 1.0
        total = 0.0
        for q in range(base, k):
            c = data[q]
            v = (1.0 + math.log(c)) if sublinear else c
            v *= idf[indices[q]]
            data[q] = v
            if norm == 2:
                total += v * v
            elif norm == 1:
                total += abs(v)
        if norm == 2:
            total = math.sqrt(total)
        if norm != 0 and total > 0.0:
            for q in range(base, k):
                data[q] /= total
        nnz[d] = k - base


@njit(cache=True, nogil=True)
def _valid_per_doc(featpos, doc_ptr):
    """Upper bound of each row's length (its n-gram occurrences), so rows can be filled in parallel."""
    n_docs = doc_ptr.shape[0] - 1
    ub_ptr = np.zeros(n_docs + 1, np.int64)
    for d in range(n_docs):
        c = 0
        for lvl in range(featpos.shape[0]):
            for i in range(doc_ptr[d], doc_ptr[d + 1]):
                if featpos[lvl, i] >= 0:
                    c += 1
        ub_ptr[d + 1] = ub_ptr[d] + c
    return ub_ptr


@njit(cache=True, nogil=True, parallel=True)
def _rows_parallel(featpos, doc_ptr, ub_ptr, idf, sublinear, norm, n_chunks, indices, data, nnz):
    n_docs = doc_ptr.shape[0] - 1
    for c in prange(n_chunks):
        _rows_chunk(featpos, doc_ptr, ub_ptr, idf, sublinear, norm, c * n_docs // n_chunks,
                    (c + 1) * n_docs // n_chunks, indices, data, nnz)


@njit(cache=True, nogil=True)
def _compact_chunk(ub_ptr, indptr, indices_ub, data_ub, indices, data, d0, d1):
    """Move rows d0..d1 from their upper-bound slots to their final CSR positions (texts that repeat
    an n-gram leave gaps, and sizing rows exactly first would cost a second sort of every row)."""
    for d in range(d0, d1):
        s = ub_ptr[d]
        for q in range(indptr[d + 1] - indptr[d]):
            indices[indptr[d] + q] = indices_ub[s + q]
            data[indptr[d] + q] = data_ub[s + q]


def build_rows(featpos: np.ndarray, doc_ptr: np.ndarray, idf: np.ndarray, sublinear: bool, norm: int,
                n_features: int) -> sp.csr_matrix:
    """CSR rows from per-token feature ids (one row of ``featpos`` per n-gram order, -1 = none)."""
    n_docs = doc_ptr.shape[0] - 1
    ub_ptr = _valid_per_doc(featpos, doc_ptr)
    ub = int(ub_ptr[-1])
    idx_dtype = np.int32 if max(ub, n_features) < np.iinfo(np.int32).max else np.int64
    indices_ub = np.empty(ub, idx_dtype)
    data_ub = np.empty(ub, np.float32)
    nnz = np.empty(n_docs, np.int64)
    small = ub < 20000
    n_chunks = 1 if small else min(n_docs, 8 * get_num_threads())
    if small:  # parallel launch costs more than the work
        _rows_chunk(featpos, doc_ptr, ub_ptr, idf, sublinear, norm, 0, n_docs, indices_ub, data_ub, nnz)
    else:
        _rows_parallel(featpos, doc_ptr, ub_ptr, idf, sublinear, norm, n_chunks, indices_ub, data_ub, nnz)
    indptr = np.zeros(n_docs + 1, idx_dtype)
    np.cumsum(nnz, out=indptr[1:])
    if int(indptr[-1]) == ub:  # no repeated n-gram in any text: nothing to squeeze out
        indices, data = indices_ub, data_ub
    else:
        indices = np.empty(int(indptr[-1]), idx_dtype)
        data = np.empty(int(indptr[-1]), np.float32)
        _compact_chunk(ub_ptr, indptr, indices_ub, data_ub, indices, data, 0, n_docs)  # memory-bound
    out = sp.csr_matrix((data, indices, indptr), shape=(n_docs, n_features), copy=False)
    out.has_sorted_indices = True
    return out


# --------------------------------------------------------------------------------------------------
# tokenisation front ends
# --------------------------------------------------------------------------------------------------

def as_text_list(texts: Any) -> list:
    if isinstance(texts, (str, bytes)):
        raise ConfigError("expected a sequence of texts, got a single " + type(texts).__name__)
    return texts if isinstance(texts, list) else list(texts)


def _bad_item(texts: list) -> DataFormatError:
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            return DataFormatError(None, None, f"text at index {i} is {type(t).__name__}, expected str")
    raise AssertionError("no bad item")  # pragma: no cover - caller saw a type error


def tokenize_scanner(texts: list, lowercase: bool) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Default-pattern tokeniser: one pass of :func:`_scan_words` over the joined corpus."""
    try:
        docs = [t.lower() for t in texts] if lowercase else texts
        joined = "\x00".join(docs)
    except (AttributeError, TypeError):
        raise _bad_item(texts) from None
    if joined.count("\x00") != len(docs) - 1:  # a text holds NUL: any non-word char is equivalent
        joined = "\x00".join([d.replace("\x00", " ") for d in docs])
    buf = np.frombuffer(joined.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    tok, doc_end, blob = _scan_words(buf, _isword_table(), len(docs))
    doc_ptr = np.zeros(len(docs) + 1, np.int64)
    doc_ptr[1:] = doc_end
    if len(blob) == 0:
        return tok, doc_ptr, []
    return tok, doc_ptr, blob[:-1].tobytes().decode("utf-8", "surrogatepass").split("\x00")


def tokenize_regex(texts: list, lowercase: bool, pattern: re.Pattern) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Any-pattern tokeniser: ``re.findall`` per text, exactly what sklearn's analyzer does."""
    findall = pattern.findall
    vocab: dict[str, int] = {}
    setdefault = vocab.setdefault
    ids: list[int] = []
    counts = np.zeros(len(texts) + 1, np.int64)
    try:
        for k, t in enumerate(texts):
            toks = findall(t.lower() if lowercase else t)
            counts[k + 1] = len(toks)
            ids.extend([setdefault(w, len(vocab)) for w in toks])
    except (AttributeError, TypeError):
        raise _bad_item(texts) from None
    return np.array(ids, dtype=np.int32), np.cumsum(counts), list(vocab)



from .jit_cache import notice_if_uncompiled  # noqa: E402  (the kernels above must exist first)

notice_if_uncompiled(globals())


# --------------------------------------------------------------------------------------------------
# the estimator
# --------------------------------------------------------------------------------------------------
