"""The compiled kernels of :mod:`xmtc.features.tfidf` (C, ``xmtc/csrc/text.c``): tokenising, n-gram interning,
counts, rows.

What the estimator in :mod:`xmtc.features.tfidf` calls, one step of its module docstring each: the byte
scanner that turns a corpus into unigram ids (step 1; and the ``re`` fallback for other token patterns),
n-grams as interned integer pairs (step 2), document and term frequencies, and the parallel per-document
row builder (step 4). Kept apart from the estimator so that the vocabulary logic and the saved format read
without the kernels, and the kernels without the estimator. The kernels are C behind
:mod:`xmtc.native` (nothing to compile or load at run time, the GIL released); each wrapper here allocates
the outputs, at an upper bound where the size is known only afterwards.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError, DataFormatError
from ..native import check, lib, ptr, resolve_threads


_ISWORD: np.ndarray | None = None


def _isword_table() -> np.ndarray:
    """Which code points ``re`` calls ``\\w`` (uint8, one per code point), asked of ``re`` itself so the
    scanner cannot disagree: one ``finditer`` over every code point for the runs of ``\\w+`` (a few
    thousand: word characters come in blocks), each run one slice assignment."""
    global _ISWORD
    if _ISWORD is None:
        table = np.zeros(0x110000, dtype=np.uint8)
        everything = np.arange(0x110000, dtype=np.uint32).tobytes().decode("utf-32-le", "surrogatepass")
        for m in re.finditer(r"\w+", everything):
            table[m.start():m.end()] = 1
        _ISWORD = table
    return _ISWORD


def _i32(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int32)


def _i64(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def _scan_words(buf: np.ndarray, isword: np.ndarray, n_docs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tokenise NUL-separated UTF-8 texts into interned ids of maximal runs of >= 2 word characters.

    Returns (token ids, end token offset of each text, distinct tokens as NUL-terminated UTF-8 bytes
    back to back). Ids are numbered in order of first occurrence, so output is deterministic.
    """
    buf = np.ascontiguousarray(buf, dtype=np.uint8)
    n = buf.shape[0]
    tok = np.empty(n // 3 + 1, np.int32)  # a token needs >= 2 bytes plus a separator
    doc_end = np.zeros(n_docs, np.int64)
    blob = np.empty(n + 1, np.uint8)  # each distinct token and its NUL fit in one occurrence and its separator
    counts = np.zeros(3, np.int64)
    check(lib().xmtc_scan_words(ptr(buf, np.uint8), n, ptr(isword, np.uint8), n_docs, ptr(tok, np.int32),
                                ptr(doc_end, np.int64), ptr(blob, np.uint8), ptr(counts, np.int64)), "scan_words")
    return tok[: counts[0]], doc_end, blob[: counts[1]]


def ngram_fit(prev, uni, doc_ptr, n: int, n_uni: int) -> tuple[np.ndarray, np.ndarray]:
    """Id of the n-gram starting at each token (-1 where it would cross the text's end) and each
    id's key, (id of the (n-1)-gram at the token) * n_uni + (unigram at token + n - 1); ids numbered
    by first occurrence."""
    prev, uni, doc_ptr = _i32(prev), _i32(uni), _i64(doc_ptr)
    T = uni.shape[0]
    out = np.empty(T, np.int32)
    keys = np.empty(max(T, 1), np.int64)
    n_keys = np.zeros(1, np.int64)
    check(lib().xmtc_ngram_fit(ptr(prev, np.int32), ptr(uni, np.int32), T, ptr(doc_ptr, np.int64),
                               doc_ptr.shape[0] - 1, int(n), int(n_uni), ptr(out, np.int32), ptr(keys, np.int64),
                               ptr(n_keys, np.int64)), "ngram_fit")
    return out, keys[: n_keys[0]].copy()


def ngram_lookup(prev, uni, doc_ptr, n: int, n_uni: int, keys) -> np.ndarray:
    """Transform-time counterpart of :func:`ngram_fit`: find each n-gram in the fitted sorted keys."""
    prev, uni, doc_ptr, keys = _i32(prev), _i32(uni), _i64(doc_ptr), _i64(keys)
    T = uni.shape[0]
    out = np.empty(T, np.int32)
    lib().xmtc_ngram_lookup(ptr(prev, np.int32), ptr(uni, np.int32), T, ptr(doc_ptr, np.int64),
                            doc_ptr.shape[0] - 1, int(n), int(n_uni), ptr(keys, np.int64), keys.shape[0],
                            ptr(out, np.int32))
    return out


def doc_and_term_freq(ids, doc_ptr, n_terms: int) -> tuple[np.ndarray, np.ndarray]:
    """Per term: number of texts containing it (df) and total occurrences (for max_features)."""
    ids, doc_ptr = _i32(ids), _i64(doc_ptr)
    df = np.zeros(n_terms, np.int64)  # calloc: pages zeroed as they are touched
    tf = np.zeros(n_terms, np.int64)
    last = np.full(n_terms, -1, np.int64)
    lib().xmtc_doc_term_freq(ptr(ids, np.int32), ptr(doc_ptr, np.int64), doc_ptr.shape[0] - 1, int(n_terms),
                             ptr(df, np.int64), ptr(tf, np.int64), ptr(last, np.int64))
    return df, tf


def build_rows(featpos: np.ndarray, doc_ptr: np.ndarray, idf: np.ndarray, sublinear: bool, norm: int,
               n_features: int, n_threads: int | None = None) -> sp.csr_matrix:
    """CSR rows from per-token feature ids (one row of ``featpos`` per n-gram order, -1 = none).

    Per text: its feature ids sorted and counted (float32), each weighted as ``1 + log(count)`` (log of the
    float32 count in float32) or the count, times the idf, in float64; stored as float32 and divided by the
    float64 l1 / l2 norm of the unrounded weights. Rows are filled at an upper bound of their length (their
    valid entries) so that chunks of texts fill them in parallel, then moved together where texts repeat
    an n-gram (sizing rows exactly first would cost a second sort of every row). ``n_threads``: at most this many
    threads, resolved as everywhere in xmtc (:func:`xmtc.native.resolve_threads`: None or 0 = every available CPU);
    a batch of fewer than 20,000 entries gets one.
    """
    featpos = np.ascontiguousarray(featpos, dtype=np.int32)
    doc_ptr = _i64(doc_ptr)
    idf = np.ascontiguousarray(idf, dtype=np.float64)  # a float32 idf widens exactly
    L, T = featpos.shape
    n_docs = doc_ptr.shape[0] - 1
    kernels = lib()
    ub_ptr = np.empty(n_docs + 1, np.int64)
    kernels.xmtc_rows_bound(ptr(featpos, np.int32), L, T, ptr(doc_ptr, np.int64), n_docs, ptr(ub_ptr, np.int64))
    ub = int(ub_ptr[-1])
    idx_dtype = np.int32 if max(ub, n_features) < np.iinfo(np.int32).max else np.int64
    idx64 = int(idx_dtype is np.int64)
    indices_ub = np.empty(ub, idx_dtype)
    data_ub = np.empty(ub, np.float32)
    nnz = np.empty(n_docs, np.int64)
    n_threads = 1 if ub < 20000 else resolve_threads(n_threads)  # below that, starting threads costs more than the work
    check(kernels.xmtc_rows_fill(ptr(featpos, np.int32), L, T, ptr(doc_ptr, np.int64), n_docs,
                                 ptr(ub_ptr, np.int64), ptr(idf, np.float64), int(bool(sublinear)), int(norm),
                                 n_threads, 8 * n_threads, idx64, ptr(indices_ub, idx_dtype),
                                 ptr(data_ub, np.float32), ptr(nnz, np.int64)), "build_rows")
    indptr = np.zeros(n_docs + 1, idx_dtype)
    np.cumsum(nnz, out=indptr[1:])
    if int(indptr[-1]) == ub:  # no repeated n-gram in any text: nothing to squeeze out
        indices, data = indices_ub, data_ub
    else:
        indices = np.empty(int(indptr[-1]), idx_dtype)
        data = np.empty(int(indptr[-1]), np.float32)
        kernels.xmtc_rows_compact(ptr(ub_ptr, np.int64), ptr(indptr, idx_dtype), n_docs, idx64,
                                  ptr(indices_ub, idx_dtype), ptr(data_ub, np.float32), ptr(indices, idx_dtype),
                                  ptr(data, np.float32))
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


