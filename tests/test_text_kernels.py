"""The C text kernels (xmtc/csrc/text.c behind xmtc/features/tfidf_kernels.py and char_ngram_kernels.py) against
pure-Python references written from their specifications: the word-character table is ``re``'s ``\\w`` on every
code point; tokens are ``re.findall(r"\\b\\w\\w+\\b")`` numbered by first occurrence; an n-gram's key is
(id of its (n-1)-gram) * n_uni + (its last unigram), ids by first occurrence; df / tf by counting; a row is its
sorted feature ids, each count c weighted ``1 + logf(c)`` (float32 log, as libm's ``logf``) or ``c``, times the idf
in float64, stored as float32, divided by the float64 l1 / l2 norm of the unrounded weights."""

from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import math
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from xmtc.features import tfidf_kernels as K
from xmtc.features.char_ngram_kernels import ngram_ids, ngram_table

_TOKEN = re.compile(r"(?u)\b\w\w+\b")
_logf = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6").logf
_logf.restype, _logf.argtypes = ctypes.c_float, [ctypes.c_float]

HAND = ["Hello, world! hello again", "", "a b c", "ÄÄNI äänestys, Åbo; grüße", "x_y __ 12 3.14",
        "emoji 😀😀 ok👍ok", "日本語 テキスト", "a\x00b cd\x00ef", "\ud800ab \udc00cd ab", "e\u0301te café",
        "ﬁne Ⅻ ²³ ١٢٣", "the the the cat the cat", "-", "İstanbul ǅemal"]


def ref_tokens(texts, lowercase=True):
    vocab: dict[str, int] = {}
    ids, ptr = [], [0]
    for t in texts:
        for w in _TOKEN.findall((t.lower() if lowercase else t).replace("\x00", " ")):
            ids.append(vocab.setdefault(w, len(vocab)))
        ptr.append(len(ids))
    return ids, ptr, list(vocab)


def ref_ngram_fit(prev, uni, ptr, n, n_uni):
    out, index = [-1] * len(uni), {}
    for d in range(len(ptr) - 1):
        for i in range(ptr[d], ptr[d + 1] - n + 1):
            if prev[i] >= 0:
                out[i] = index.setdefault(prev[i] * n_uni + uni[i + n - 1], len(index))
    return out, list(index)


def ref_lookup(prev, uni, ptr, n, n_uni, keys):
    out = [-1] * len(uni)
    for d in range(len(ptr) - 1):
        for i in range(ptr[d], ptr[d + 1] - n + 1):
            if prev[i] >= 0 and uni[i + n - 1] >= 0:
                key = prev[i] * n_uni + uni[i + n - 1]
                j = bisect.bisect_left(keys, key)
                if j < len(keys) and keys[j] == key:
                    out[i] = j
    return out


def ref_freq(ids, ptr, n_terms):
    df, tf = [0] * n_terms, [0] * n_terms
    for d in range(len(ptr) - 1):
        seen = set()
        for j in ids[ptr[d]:ptr[d + 1]]:
            if j >= 0:
                tf[j] += 1
                if j not in seen:
                    seen.add(j)
                    df[j] += 1
    return df, tf


def ref_rows(featpos, ptr, idf, sublinear, norm):
    indptr, indices, data = [0], [], []
    for d in range(len(ptr) - 1):
        feats = sorted(f for row in featpos for f in row[ptr[d]:ptr[d + 1]] if f >= 0)
        counts: dict[int, int] = {}
        for f in feats:
            counts[f] = counts.get(f, 0) + 1
        weights = [((1.0 + float(_logf(c))) if sublinear else float(c)) * float(idf[f]) for f, c in counts.items()]
        total = math.sqrt(sum(v * v for v in weights)) if norm == 2 else sum(abs(v) for v in weights)
        stored = np.array(weights, dtype=np.float32)
        if norm and total > 0:
            stored = (stored.astype(np.float64) / total).astype(np.float32)
        indices.extend(counts)
        data.extend(stored.tolist())
        indptr.append(len(indices))
    return np.array(indptr), np.array(indices), np.array(data, dtype=np.float32)


def check_all(texts, max_n=3):
    tok, ptr, strings = K.tokenize_scanner(texts, True)
    r_ids, r_ptr, r_strings = ref_tokens(texts)
    assert tok.dtype == np.int32 and ptr.dtype == np.int64
    assert tok.tolist() == r_ids and ptr.tolist() == r_ptr and strings == r_strings
    n_uni = len(strings)
    levels, prev = [r_ids], r_ids
    for n in range(2, max_n + 1):
        out, keys = K.ngram_fit(np.array(prev, np.int32), tok, ptr, n, n_uni)
        r_out, r_keys = ref_ngram_fit(prev, r_ids, r_ptr, n, n_uni)
        assert out.dtype == np.int32 and keys.dtype == np.int64
        assert out.tolist() == r_out and keys.tolist() == r_keys
        sub = sorted(r_keys)[::2]  # half the keys: the rest must be missed
        masked = [u if i % 5 else -1 for i, u in enumerate(r_ids)]
        got = K.ngram_lookup(np.array(prev, np.int32), np.array(masked, np.int32), ptr, n, n_uni, np.array(sub, np.int64))
        assert got.tolist() == ref_lookup(prev, masked, r_ptr, n, n_uni, sub)
        levels.append(r_out)
        prev = r_out
    for ids in levels:
        n_terms = max(ids, default=-1) + 1
        df, tf = K.doc_and_term_freq(np.array(ids, np.int32), ptr, n_terms)
        assert (df.tolist(), tf.tolist()) == ref_freq(ids, r_ptr, n_terms) and df.dtype == tf.dtype == np.int64
    # rows: features = n-gram ids offset per order, some dropped (-1)
    offsets = np.cumsum([0] + [max(ids, default=-1) + 1 for ids in levels])
    featpos = np.array([[(f + offsets[k]) if f >= 0 and (f + k) % 7 else -1 for f in ids]
                        for k, ids in enumerate(levels)], dtype=np.int32).reshape(len(levels), len(r_ids))
    n_features = int(offsets[-1])
    rng = np.random.default_rng(0)
    for idf in (rng.uniform(1.0, 9.0, n_features).astype(np.float32), rng.uniform(1.0, 9.0, n_features)):
        for sublinear in (False, True):
            for norm in (0, 1, 2):
                X = K.build_rows(featpos, ptr, idf, sublinear, norm, n_features)
                indptr, indices, data = ref_rows(featpos.tolist(), r_ptr, idf, sublinear, norm)
                assert X.shape == (len(texts), n_features) and X.data.dtype == np.float32
                assert X.indptr.tolist() == indptr.tolist() and X.indices.tolist() == indices.tolist()
                assert X.data.tobytes() == data.tobytes(), (sublinear, norm)


def test_the_word_table_is_res_word_class_on_every_code_point():
    everything = "".join(map(chr, range(0x110000)))
    expected = np.zeros(0x110000, dtype=np.uint8)
    expected[[m.start() for m in re.finditer(r"\w", everything)]] = 1
    table = K._isword_table()
    assert table.dtype == np.uint8 and table.shape == (0x110000,)
    assert np.array_equal(table, expected)


def test_hand_cases_match_the_reference():
    check_all(HAND)
    check_all(HAND * 3 + [""])
    check_all([""])
    check_all(["\x00"])


def test_ids_are_numbered_by_first_occurrence():
    tok, ptr, strings = K.tokenize_scanner(["zz yy zz", "aa yy", ""], True)
    assert strings == ["zz", "yy", "aa"] and tok.tolist() == [0, 1, 0, 2, 1] and ptr.tolist() == [0, 3, 5, 5]


def test_many_distinct_tokens_grow_the_tables():
    texts = [" ".join(f"w{i}x{j}" for j in range(50)) for i in range(400)]  # 20k distinct tokens, 2-grams
    check_all(texts[:60], max_n=2)
    tok, ptr, strings = K.tokenize_scanner(texts, True)
    assert len(strings) == 20000 and strings[:2] == ["w0x0", "w0x1"]
    out, keys = K.ngram_fit(tok, tok, ptr, 2, len(strings))
    assert len(keys) == 400 * 49 and out.tolist()[:3] == [0, 1, 2]


def test_build_rows_in_parallel_chunks_equals_one_chunk():
    texts = [" ".join(f"t{(i * 7 + j * 13) % 97}" for j in range(i % 40)) for i in range(3000)]
    tok, ptr, strings = K.tokenize_scanner(texts, True)
    featpos = tok.reshape(1, -1)
    idf = np.linspace(1.0, 3.0, len(strings)).astype(np.float32)
    X = K.build_rows(featpos, ptr, idf, True, 2, len(strings))  # > 20k entries: every CPU
    indptr, indices, data = ref_rows(featpos.tolist(), ptr.tolist(), idf, True, 2)
    assert X.indptr.tolist() == indptr.tolist() and X.indices.tolist() == indices.tolist()
    assert X.data.tobytes() == data.tobytes()


def test_hypothesis_texts_match_the_reference():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    alphabet = st.sampled_from(list("abcxyz AÄöå_1٣ \t\n.,-\x00") + ["😀", "\ud800", "ß", "İ", "\u0301", "日"])

    @hypothesis.settings(max_examples=150, deadline=None)
    @hypothesis.given(texts=st.lists(st.text(alphabet=alphabet, max_size=30) | st.text(max_size=10), max_size=12))
    def run(texts):
        check_all(texts)

    run()


def test_char_ngram_ids_match_the_analyzer():
    from sklearn.feature_extraction.text import CountVectorizer

    texts = ["Grüße aus Åbo", "light reading", "x", "", "😀 emoji ok", "reading light, lighter"]
    vec = CountVectorizer(analyzer="char_wb", ngram_range=(2, 4)).fit(texts[:3] + texts[4:5])
    ngrams = sorted(vec.vocabulary_, key=vec.vocabulary_.__getitem__)
    table = ngram_table(ngrams, 4)
    words = [w for t in texts for w in t.lower().split()]
    per = np.array([len(t.lower().split()) for t in texts], np.int64)
    text_of, ids = ngram_ids(words, per, table, 2, 4)
    analyze = vec.build_analyzer()
    expected = [(k, vec.vocabulary_[g]) for k, t in enumerate(texts) for g in analyze(t) if g in vec.vocabulary_]
    assert list(zip(text_of.tolist(), ids.tolist())) == expected


def test_the_text_path_never_loads_numba():
    """TF-IDF, character n-grams and the label route are C: no JIT (~54 MB, ~0.8 s of set-up) in the process."""
    code = textwrap.dedent("""
        import sys
        import numpy as np, scipy.sparse as sp
        from xmtc.features.tfidf import TfidfFeaturizer
        from xmtc.features.char_ngram_kernels import ngram_ids, ngram_table
        from xmtc.models.route_kernels import inverted, top_rows
        texts = ["light reading %d" % i for i in range(50)]
        X = TfidfFeaturizer(min_df=1).fit_transform(texts)
        top_rows(X, inverted(X), X.shape[0], 3)
        ngram_ids(["ab"], np.array([1]), ngram_table(["ab", " a"], 2), 2, 2)
        print(sorted(k for k in sys.modules if k.split(".")[0] in ("numba", "llvmlite")))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
