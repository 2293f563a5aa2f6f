"""One text through the Python API (issue 33, item 2): the steps made proportional to the text give the
numbers the reference computations give, and a text is tokenized once (xmtc/models/route_kernels.py,
xmtc/features/char_ngram_kernels.py, xmtc/features/tfidf.py, xmtc/models/ensemble.py, xmtc/native.py)."""

import gzip
import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.feature_extraction.text import CountVectorizer

import xmtc
from xmtc.cli import main
from xmtc.data import sample_path
from xmtc.features.char_ngrams import CharNgramFeaturizer
from xmtc.features.tfidf import TfidfFeaturizer
from xmtc.models.ensemble import average_topk
from xmtc.models.label_route import _top_cosines

ODD_TEXTS = ["İstanbul ÇAĞ straße ΣΊΣΥΦΟΣ", "a", "ab", "abc", "x\xa0y\u2003z\u3000w", "tab\tnew\nline\r\x0bv\x0cf\x1cg",
             "emoji 😀🚂 trains", "combining e\u0301cole", "\ud800 lone surrogate", "  lead and trail  ", "",
             "ǅemal ǈ ﬁne ﬂow", "x" * 40, "日本語のテキスト 鉄道", "Steam locomotives of the Finnish railways"]


@pytest.fixture(scope="module")
def route_model(tmp_path_factory):
    """A two-tree XR-Linear model with the sample's label file: the label-text route is part of every prediction."""
    d = tmp_path_factory.mktemp("route_model")
    with gzip.open(sample_path("train"), "rt", encoding="utf-8") as fh:
        lines = list(itertools.islice(fh, 800))
    (d / "t.tsv").write_text("".join(lines), encoding="utf-8")
    assert main(["train", str(d / "t.tsv"), "--label-file", str(sample_path("labels")), "-o", str(d / "m"),
                 "--n-trees", "2", "--valid-size", "0.3", "-q"]) == 0
    model = xmtc.load(d / "m")
    assert model.label_route_ is not None and len(model.label_route_) > 0 and len(model.models_) == 2
    return model, [line.split("\t", 1)[1].rstrip("\n") for line in lines[::4]]


def _reference_char_rows(feat: CharNgramFeaturizer, texts: list) -> sp.csr_matrix:
    """The featurizer's rows as scikit-learn's CountVectorizer and scipy's row sums give them."""
    cv = CountVectorizer(analyzer="char_wb", ngram_range=feat.ngram_range, dtype=np.float32,
                         vocabulary={g: i for i, g in enumerate(feat.ngrams_)})
    X = sp.csr_matrix(cv.transform(texts), dtype=np.float32)
    X.data = (1.0 + np.log(X.data)) * feat.idf_[X.indices]
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X.data /= np.repeat(np.where(norms > 0, norms, 1.0), np.diff(X.indptr)).astype(np.float32)
    return X


def test_char_ngram_rows_are_count_vectorizers_to_the_bit_through_the_kernel_and_without_it():
    feat = CharNgramFeaturizer().fit(ODD_TEXTS[::2] + ["railway history", "the steam age"])
    queries = ODD_TEXTS + ["railway locomotive ÅLAND", "zzzz qqqq", "ŞİŞLİ İstanbul"]
    ref = _reference_char_rows(feat, queries)
    got = feat.transform(queries)
    assert feat._table  # the compiled lookup served these
    assert np.array_equal(got.indptr, ref.indptr) and np.array_equal(got.indices, ref.indices)
    assert np.array_equal(got.data, ref.data)
    for i, q in enumerate(queries):  # one at a time, as a prediction asks
        one = feat.transform([q])
        assert np.array_equal(one.indices, ref[i].indices) and np.array_equal(one.data, ref[i].data), q
    feat._table = False  # the analyzer path (an alphabet too large for the kernel's keys)
    again = feat.transform(queries)
    assert np.array_equal(again.indices, ref.indices) and np.array_equal(again.data, ref.data)


def test_route_cosines_are_the_dense_products_best_first_ties_to_the_lower_row():
    rng = np.random.default_rng(3)
    X = sp.random(40, 30, density=0.3, format="csr", random_state=4, dtype=np.float32)
    M = sp.random(60, 30, density=0.2, format="csr", random_state=5, dtype=np.float32)
    M = sp.csr_matrix(sp.vstack([M, M[rng.choice(60, 25)]]))  # 25 rows twice: ties everywhere
    S = (X @ M.T).toarray()
    pos, val = _top_cosines(X, M, 9)
    for i in range(X.shape[0]):
        best = [j for j in np.lexsort((np.arange(S.shape[1]), -S[i])) if S[i, j] > 0][:9]
        assert pos[i].tolist() == best + [-1] * (9 - len(best))
        assert np.array_equal(val[i, :len(best)], S[i, best].astype(np.float32))  # the same sums, not close ones
    with pytest.raises(ValueError, match="non-negative"):
        _top_cosines(X, -M, 3)


def test_one_text_at_a_time_equals_the_batch(route_model):
    model, texts = route_model
    idx, sc = model.predict_topk(texts, 5)
    for i, text in enumerate(texts):
        one_i, one_s = model.predict_topk([text], 5)
        assert one_i[0].tolist() == idx[i].tolist() and np.array_equal(one_s[0], sc[i]), text
    route = model.label_route_
    ids, p = route.topk(texts, 5)
    cos = (route.featurizer.transform(texts) @ route.M.T).toarray()
    for i in range(len(texts)):
        best = [j for j in np.lexsort((np.arange(cos.shape[1]), -cos[i])) if cos[i, j] > 0][:5]
        assert ids[i, :len(best)].tolist() == route.label_ids[best].tolist()
        np.testing.assert_array_equal(p[i, :len(best)], route.probabilities(cos[i, best]).astype(np.float32))


def test_a_text_is_tokenized_once_per_prediction(route_model, monkeypatch):
    model, texts = route_model
    expected = model.predict([texts[0]], k=5)
    calls = []
    tokenize = TfidfFeaturizer._tokenize

    def counted(*args, **kwargs):
        calls.append(len(args[0]))
        return tokenize(*args, **kwargs)

    monkeypatch.setattr(TfidfFeaturizer, "_tokenize", staticmethod(counted))
    assert model.predict([texts[0]], k=5) == expected
    assert calls == [1]
    assert model.predict(texts[:7], k=5) == [model.predict([t], k=5)[0] for t in texts[:7]]
    assert calls == [1, 7] + [1] * 7  # a batch is tokenized once too


def test_kept_tokens_serve_only_the_same_texts():
    f = TfidfFeaturizer(min_df=1).fit(["steam trains", "bird watching", "old maps of lapland"])
    texts = ["steam trains", "old maps"]
    fresh = f.transform(["bird watching", "old maps"]).toarray()
    f.known_fraction(texts)
    texts[0] = "bird watching"  # the caller changes its list: the kept tokens are of the old texts
    assert np.array_equal(f.transform(texts).toarray(), fresh)
    f.known_fraction(["steam trains"])
    assert np.array_equal(f.transform(["old maps of lapland"]).toarray(),
                          TfidfFeaturizer(min_df=1).fit(["steam trains", "bird watching", "old maps of lapland"])
                          .transform(["old maps of lapland"]).toarray())


def test_tree_averaging_on_the_arrays_equals_the_sparse_sum():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n, L, m, k = rng.integers(1, 5), rng.integers(1, 30), rng.integers(1, 4), rng.integers(1, 10)
        parts = []
        for _ in range(m):
            width = min(int(rng.integers(1, 8)), L)
            idx = np.stack([rng.choice(L, size=width, replace=False) for _ in range(n)]).astype(np.int32)
            idx[rng.random(idx.shape) < 0.2] = -1
            parts.append((idx, rng.choice([0.0, 0.1, 0.25, 0.5, 1.0, rng.random()], size=idx.shape).astype(np.float32)))
        weights = None if rng.random() < 0.5 else [float(w) for w in rng.choice([0.5, 1.0, 2.0], size=m)]
        fast = average_topk(parts, L, k, weights)
        sparse = average_topk(parts, L, k, weights, known=[np.ones(L, bool)] * m)  # the scipy path
        assert np.array_equal(fast[0], sparse[0]) and np.array_equal(fast[1], sparse[1])
    none = (np.zeros((0, 4), np.int32), np.zeros((0, 4), np.float32))  # no text at all
    for got in (average_topk([none, none], 9, 3), average_topk([none, none], 9, 3, known=[np.ones(9, bool)] * 2)):
        assert got[0].shape == (0, 3) and got[1].shape == (0, 3)


def test_kernel_addresses_are_the_arrays_and_a_level_notices_a_new_array():
    from xmtc.linear.beam import BeamLevel
    from xmtc.native import ptr

    a = np.arange(6, dtype=np.float32)
    assert ptr(a, np.float32) == a.ctypes.data
    ro = a.copy()
    ro.flags.writeable = False
    assert ptr(ro, np.float32) == ro.ctypes.data and ptr(np.zeros(0, np.int32), np.int32) is not None
    with pytest.raises(TypeError):
        ptr(a.astype(np.float64), np.float32)
    W = sp.csc_matrix(np.array([[0.5, 0.0], [0.0, 0.25], [0.1, 0.2]], dtype=np.float32))
    level = BeamLevel.from_weights(W, np.array([0, 0]), 1)
    first = level.pointers()
    assert first[0] == level.child_ptr.ctypes.data and level.pointers() == first
    level.bias_w = level.bias_w.copy()
    assert level.pointers()[5] == level.bias_w.ctypes.data


def test_tree_averaging_is_the_same_numbers_on_either_side_of_the_array_path_limit():
    """average_topk sums small batches on the top-k arrays and large ones as sparse matrices (ARRAY_PATH_MAX):
    a batch past the limit gives what the array path gives for it."""
    from xmtc.models.ensemble import ARRAY_PATH_MAX, _summed_topk, average_topk

    rng = np.random.default_rng(5)
    n, k = ARRAY_PATH_MAX // 20 + 7, 10
    parts = [(np.argsort(rng.random((n, 50)), axis=1)[:, :k].astype(np.int32),  # a row names a label once
              np.round(rng.random((n, k)), 2).astype(np.float32)) for _ in range(2)]
    assert sum(i.size for i, _ in parts) > ARRAY_PATH_MAX
    got = average_topk(parts, 50, 7)
    want = _summed_topk(parts, [np.float32(0.5)] * 2, 7)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
