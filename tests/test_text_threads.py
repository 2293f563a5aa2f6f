"""The TF-IDF row builder (xmtc/csrc/text.c's ``xmtc_rows_fill``) takes its thread count the way the rest of xmtc
does: a model's ``n_threads`` (through the featurizer it fits) bounds it, and None or 0 means every available CPU
(:func:`xmtc.native.resolve_threads`). The tests record the count handed to the C call."""

from __future__ import annotations

import pytest

from xmtc import native
from xmtc.features import tfidf_kernels
from xmtc.features.params import TfidfParams
from xmtc.features.tfidf import TfidfFeaturizer

# 600 texts of 60 tokens: 72,000 unigram + bigram entries, above the 20,000 below which one thread builds the rows
TEXTS = [" ".join(f"w{(i * 7 + j * 13) % 211}" for j in range(60)) for i in range(600)]


@pytest.fixture
def requested(monkeypatch):
    """The ``n_threads`` argument of every ``xmtc_rows_fill`` call, with 16 CPUs "available" (more than this
    machine has, so that a count taken from the affinity mask shows)."""
    calls: list[int] = []
    real = tfidf_kernels.lib

    class Recording:
        def __init__(self, kernels):
            self._kernels = kernels

        def __getattr__(self, name):
            fn = getattr(self._kernels, name)
            if name != "xmtc_rows_fill":
                return fn

            def fill(*args):
                calls.append(args[9])  # featpos, L, T, doc_ptr, n_docs, ub_ptr, idf, sublinear, norm, n_threads
                return fn(*args)
            return fill

    monkeypatch.setattr(tfidf_kernels, "lib", lambda: Recording(real()))
    monkeypatch.setattr(native, "available_threads", lambda: 16)
    return calls


def test_the_featurizer_s_n_threads_reaches_the_kernel(requested):
    featurizer = TfidfFeaturizer(min_df=1)
    featurizer.n_threads = 3
    X3 = featurizer.fit_transform(TEXTS)
    assert requested == [3]
    featurizer.transform(TEXTS[:5])  # a small batch: one thread, whatever the setting
    assert requested == [3, 1]
    featurizer.n_threads = None
    X_all = featurizer.transform(TEXTS)
    featurizer.n_threads = 0
    featurizer.transform(TEXTS)
    assert requested == [3, 1, 16, 16]  # None and 0: every available CPU, as resolve_threads has it
    assert (X3 != X_all).nnz == 0 and X3.data.tobytes() == X_all.data.tobytes()  # the split changes nothing


def test_copies_and_grown_vocabularies_keep_the_bound(requested):
    featurizer = TfidfParams(min_df=1).make_featurizer(2)
    assert featurizer.n_threads == 2
    featurizer.fit(TEXTS[:300])
    grown, added = featurizer.extended([t.replace("w1", "v1") for t in TEXTS[300:]], 300)
    assert added > 0 and grown.n_threads == 2
    unchanged, none_added = featurizer.extended(TEXTS[:2], 300)
    assert none_added == 0 and unchanged.n_threads == 2
    grown.transform(TEXTS)
    assert requested == [2, 1, 2]  # the fresh fits inside extended (the second: 2 texts, one thread), the grown one


def test_a_model_s_n_threads_bounds_the_rows_it_builds(requested):
    from xmtc import XRLinear

    labels = [[f"l{i % 7}", f"m{i % 3}"] for i in range(len(TEXTS))]
    model = XRLinear(n_threads=3, min_df=1).fit(TEXTS, labels)
    assert requested == [3]  # the training texts' rows, on the model's threads
    model.predict(TEXTS[:400], k=2)
    assert requested == [3, 3]


def test_a_model_s_n_threads_bounds_its_beam_search(monkeypatch):
    from xmtc import XRLinear
    from xmtc.linear import hierarchy

    labels = [[f"l{i % 7}", f"m{i % 3}"] for i in range(len(TEXTS))]
    model = XRLinear(n_threads=3, min_df=1, n_trees=2).fit(TEXTS[:200], labels[:200], progress=False)
    seen: list = []
    real = hierarchy.beam_search

    def recording(*args, **kwargs):
        seen.append(kwargs.get("n_threads"))
        return real(*args, **kwargs)

    monkeypatch.setattr(hierarchy, "beam_search", recording)
    model.predict(TEXTS[:50], k=2)
    assert seen == [3, 3]  # one search per tree, each on the model's threads
    model.n_threads = 0
    model.predict(TEXTS[:5], k=2)
    assert seen[2:] == [0, 0]  # 0: every available CPU, resolved by the kernel as everywhere
