"""The compiled half (C, ``xmtc/csrc/text.c``) of :mod:`xmtc.features.char_ngrams`: a text's character n-grams as feature ids, without
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

from ..native import lib, ptr


def _alphabet(strings: list[str], longest: int):
    """``(chars, code_of, codes)`` of the strings' characters and the padding space, or None when base
    ``len(chars) + 1`` keys of ``longest`` characters would not fit 62 bits: ``chars`` sorted (code ``i + 1`` is
    ``chars[i]``, so keys sort as the strings do), ``code_of`` maps a code point below its size to its code (0: not
    in the alphabet), ``codes`` the strings' characters, concatenated, as codes."""
    chars = sorted(set("".join(strings)) | {" "})
    if float(len(chars) + 1) ** longest >= 2.0 ** 62:
        return None
    code_of = np.zeros(ord(chars[-1]) + 1, dtype=np.int64)
    code_of[[ord(c) for c in chars]] = np.arange(1, len(chars) + 1)
    cps = np.frombuffer("".join(strings).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    return chars, code_of, code_of[cps.astype(np.int64)]


def ngram_table(ngrams: list[str], max_n: int):
    """``(code_of, A, space, keys, ids, bits)`` for :func:`ngram_ids`, or None when the alphabet is too large:
    ``code_of`` maps a code point below its size to its code (0: not in the alphabet)."""
    alphabet = _alphabet(ngrams, max(max_n, max((len(g) for g in ngrams), default=0)))
    if alphabet is None:
        return None
    chars, code_of, codes = alphabet
    A = len(chars) + 1
    lens = np.fromiter(map(len, ngrams), dtype=np.int64, count=len(ngrams))
    starts = np.zeros(len(ngrams) + 1, dtype=np.int64)
    np.cumsum(lens, out=starts[1:])
    keys = np.zeros(len(ngrams), dtype=np.int64)
    for j in range(int(lens.max(initial=0))):  # key = key * A + code, one character position at a time
        has = lens > j
        keys[has] = keys[has] * A + codes[starts[:-1][has] + j]
    bits = max(4, int(2 * max(len(ngrams), 1) - 1).bit_length())
    table_keys = np.full(1 << bits, -1, dtype=np.int64)
    table_ids = np.zeros(1 << bits, dtype=np.int32)
    lib().xmtc_char_fill(ptr(keys, np.int64), keys.shape[0], ptr(table_keys, np.int64), ptr(table_ids, np.int32), bits)
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
    codes = np.ascontiguousarray(codes, dtype=np.int64)
    n = lib().xmtc_char_ngram_ids(ptr(codes, np.int64), ptr(word_len, np.int64), ptr(word_text, np.int64),
                                  word_len.shape[0], int(min_n), int(max_n), int(A), int(space),
                                  ptr(table_keys, np.int64), ptr(table_ids, np.int32), int(bits),
                                  ptr(out_text, np.int64), ptr(out_id, np.int64))
    return out_text[:n], out_id[:n]


# a fit whose n-grams would need a larger table than this (2**24 slots, 256 MB) is left to the analyzer itself
MAX_FIT_BITS = 24


def fit_vocabulary(words_per_text: list[list[str]], min_n: int, max_n: int):
    """``(n-grams, df)`` of the texts (each a list of the analyzer's words): every distinct n-gram in sorted
    order (Python's string order, scikit-learn's vocabulary order) and the number of texts holding it, counted
    by ``xmtc_char_fit`` (``xmtc/csrc/char_fit.c``); None where the alphabet is too large for the kernel's keys
    or the n-grams for its table (the caller counts them itself)."""
    index: dict[str, int] = {}
    pair_word: list[int] = []
    sizes = np.zeros(len(words_per_text) + 1, dtype=np.int64)
    for t, ws in enumerate(words_per_text):
        distinct = {index.setdefault(w, len(index)) for w in ws}
        pair_word.extend(distinct)
        sizes[t + 1] = len(distinct)
    words = list(index)
    if not words:
        return [], np.zeros(0, dtype=np.int64)
    alphabet = _alphabet(words, max_n)  # an n-gram, a whole padded word included, has at most max_n characters
    if alphabet is None:
        return None
    chars, code_of, codes = alphabet
    A = len(chars) + 1
    word_len = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    # n-grams per word, an upper bound on the distinct ones: the table's size and the slot list's
    padded, bound, done = word_len + 2, np.zeros(len(words), dtype=np.int64), np.zeros(len(words), dtype=bool)
    for n in range(min_n, max_n + 1):
        whole = ~done & (padded <= n)
        bound += np.where(done, 0, np.where(whole, 1, padded - n + 1))
        done |= whole
    total = int(bound.sum())
    bits = max(4, (2 * total - 1).bit_length())
    if bits > MAX_FIT_BITS:
        return None
    table_keys = np.full(1 << bits, -1, dtype=np.int64)
    table_df = np.zeros(1 << bits, dtype=np.int32)
    table_last = np.full(1 << bits, -1, dtype=np.int32)
    gram_ptr = np.zeros(len(words) + 1, dtype=np.int64)
    gram_slot = np.empty(max(total, 1), dtype=np.int64)
    pair_ptr = np.cumsum(sizes)
    pair_word_arr = np.fromiter(pair_word, dtype=np.int32, count=len(pair_word))
    found = lib().xmtc_char_fit(ptr(codes, np.int64), ptr(word_len, np.int64), len(words), int(min_n), int(max_n),
                                int(A), int(code_of[ord(" ")]), ptr(pair_ptr, np.int64), ptr(pair_word_arr, np.int32),
                                len(words_per_text), ptr(table_keys, np.int64), ptr(table_df, np.int32),
                                ptr(table_last, np.int32), bits, ptr(gram_ptr, np.int64), ptr(gram_slot, np.int64),
                                gram_slot.size)
    if found < 0:  # the bound above holds every n-gram, so this cannot happen; the kernel checks it all the same
        return None
    used = np.flatnonzero(table_keys >= 0)
    keys, df = table_keys[used], table_df[used].astype(np.int64)
    # each key's codes, least significant (its last character) first; a key's length is its number of digits
    digits = np.zeros((keys.size, max_n), dtype=np.int64)
    rest = keys.copy()
    for j in range(max_n):
        digits[:, j] = rest % A
        rest //= A
    length = np.count_nonzero(digits, axis=1)
    point = np.zeros(A, dtype=np.uint32)
    point[1:] = [ord(c) for c in chars]
    text = np.zeros((keys.size, max_n), dtype=np.uint32)  # code points, left-aligned, NUL-padded
    for i in range(max_n):
        has = np.flatnonzero(length > i)
        text[has, i] = point[digits[has, length[has] - 1 - i]]
    strings = text.view(f"<U{max_n}").ravel()
    order = np.argsort(strings, kind="stable")  # NUL padding sorts first: a prefix before its extensions
    return strings[order].tolist(), df[order]
