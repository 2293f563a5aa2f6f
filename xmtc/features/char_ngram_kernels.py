"""The compiled half of :mod:`xmtc.features.char_ngrams`: a text's character n-grams as feature ids, without
a Python string per n-gram.

What: the vocabulary's n-grams become integer keys -- each character a code in a small alphabet (the
characters the vocabulary holds, 1..A-1), an n-gram the number its codes spell in base ``A`` -- in an
open-addressing hash table (:func:`ngram_table`). :func:`ngram_ids` walks the words of a batch of texts as
scikit-learn's ``char_wb`` analyzer does (each word padded with one space; for each n, every n-gram of the
padded word, or the whole padded word once if it is not longer than n, which ends that word) and looks each
n-gram up; an n-gram with a character outside the alphabet cannot be in the vocabulary and is skipped.

Why: the analyzer makes one Python string per n-gram, ~1.5 ms for a 1,200-character text, most of a one-text
prediction with the label-text route; the kernel does the same walk in ~0.05 ms. A vocabulary whose alphabet
is too large for ``A ** max_n`` to fit 63 bits has no table, and the featurizer keeps the analyzer.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_FIB = np.uint64(0x9E3779B97F4A7C15)


def ngram_table(ngrams: list[str], max_n: int):
    """``(code_of, A, space, keys, ids, bits)`` for :func:`ngram_ids`, or None when the alphabet is too large:
    ``code_of`` maps a code point below its size to its code (0: not in the alphabet)."""
    chars = sorted(set("".join(ngrams)) | {" "})
    A = len(chars) + 1
    longest = max(max_n, max((len(g) for g in ngrams), default=0))
    if float(A) ** longest >= 2.0 ** 62:
        return None
    code_of = np.zeros(ord(chars[-1]) + 1, dtype=np.int64)
    code_of[[ord(c) for c in chars]] = np.arange(1, A)
    cps = np.frombuffer("".join(ngrams).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    lens = np.fromiter(map(len, ngrams), dtype=np.int64, count=len(ngrams))
    starts = np.zeros(len(ngrams) + 1, dtype=np.int64)
    np.cumsum(lens, out=starts[1:])
    codes = code_of[cps.astype(np.int64)]
    keys = np.zeros(len(ngrams), dtype=np.int64)
    for j in range(int(lens.max(initial=0))):  # key = key * A + code, one character position at a time
        has = lens > j
        keys[has] = keys[has] * A + codes[starts[:-1][has] + j]
    bits = max(4, int(2 * max(len(ngrams), 1) - 1).bit_length())
    table_keys = np.full(1 << bits, -1, dtype=np.int64)
    table_ids = np.zeros(1 << bits, dtype=np.int32)
    _fill(keys, table_keys, table_ids, bits)
    return code_of, A, int(code_of[ord(" ")]), table_keys, table_ids, bits


def ngram_ids(words: list[str], words_per_text: np.ndarray, table, min_n: int, max_n: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """Per n-gram occurrence in the texts' ``words`` (each text's words in order, ``words_per_text`` of them):
    (text index int64, feature id int64), n-grams outside the vocabulary left out."""
    code_of, A, space, table_keys, table_ids, bits = table
    cps = np.frombuffer("".join(words).encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.int64)
    codes = np.where(cps < code_of.size, code_of[np.minimum(cps, code_of.size - 1)], 0) if cps.size else cps
    word_len = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    word_text = np.repeat(np.arange(words_per_text.size, dtype=np.int64), words_per_text)
    bound = (max_n - min_n + 1) * (int(word_len.sum()) + 2 * len(words))
    out_text = np.empty(bound, dtype=np.int64)
    out_id = np.empty(bound, dtype=np.int64)
    n = _ngram_ids(codes, word_len, word_text, min_n, max_n, A, space, table_keys, table_ids, bits, out_text, out_id)
    return out_text[:n], out_id[:n]


@njit(cache=True, nogil=True)
def _slot(key, bits):  # pragma: no cover - compiled
    return np.int64((np.uint64(key) * _FIB) >> np.uint64(64 - bits))


@njit(cache=True, nogil=True)
def _fill(keys, table_keys, table_ids, bits):  # pragma: no cover - compiled
    mask = table_keys.shape[0] - 1
    for i in range(keys.shape[0]):
        h = _slot(keys[i], bits)
        while table_keys[h] != -1:
            h = (h + 1) & mask
        table_keys[h] = keys[i]
        table_ids[h] = i


@njit(cache=True, nogil=True)
def _ngram_ids(codes, word_len, word_text, min_n, max_n, A, space, table_keys, table_ids, bits,
               out_text, out_id):  # pragma: no cover - compiled
    mask = table_keys.shape[0] - 1
    n_out = 0
    start = 0
    for w in range(word_len.shape[0]):
        L = word_len[w] + 2  # the padded word: space, its characters, space
        for n in range(min_n, max_n + 1):
            whole = n >= L
            last = 0 if whole else L - n
            width = L if whole else n
            for off in range(last + 1):
                key = 0
                for q in range(off, off + width):
                    c = space if q == 0 or q == L - 1 else codes[start + q - 1]
                    if c == 0:
                        key = -1
                        break
                    key = key * A + c
                if key < 0:
                    continue
                h = _slot(key, bits)
                while table_keys[h] != -1:
                    if table_keys[h] == key:
                        out_text[n_out] = word_text[w]
                        out_id[n_out] = table_ids[h]
                        n_out += 1
                        break
                    h = (h + 1) & mask
            if whole:
                break
        start += word_len[w]
    return n_out
