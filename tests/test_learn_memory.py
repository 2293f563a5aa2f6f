"""``learn`` from a few documents: the remembered training rows, fresh labels fitted against them, and the
open-world operations in sequence (labels remove / add, then learn)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import xmtc
from xmtc.data.labels import LabelVocab
from xmtc.linear.update import NEVER, fresh_columns
from xmtc.models.calibration import calibrate
from xmtc.models.memory import TrainingMemory
from xmtc.models.open_labels import add_labels, remove_labels

from xmtc.data import sample_path

from serve_support import sample_docs



@pytest.fixture(scope="module")
def trained():
    texts, labels = sample_docs(step=6)
    cut = int(len(texts) * 0.8)
    model = xmtc.XRLinear(n_trees=1, max_leaf_size=16, branching=4, n_threads=2)
    model.fit(texts[:cut], labels[:cut], progress=False)
    return model, texts, labels, cut


@pytest.fixture(scope="module")
def NEW(trained):
    """Three held-out titles about music: the documents of a new label "railways" in every test here."""
    texts, cut = trained[1], trained[3]
    return [t for t in texts[cut:] if "music" in t.lower().split()][:3]


def _copy(model, tmp_path, name="m"):
    model.save(tmp_path / name)
    return xmtc.load(tmp_path / name, mmap=False)


def _top1_share(model, texts, label) -> float:
    return float(np.mean([bool(p) and p[0][0] == label for p in model.predict(texts, k=1)]))


# -- the memory ----------------------------------------------------------------------------------------
def test_a_small_training_set_is_remembered_whole_and_in_order(trained):
    model, texts, labels, cut = trained
    mem = model.memory_
    assert len(mem) == mem.seen == cut
    X = model.transform(texts[:cut])
    assert abs(mem.X - X).max() == 0
    assert mem.Y.shape == (cut, model.n_labels) and mem.Y.nnz == sum(len(x) for x in labels[:cut])


def test_a_sample_holds_capacity_rows_drawn_without_replacement():
    X = sp.csr_matrix(np.arange(1, 101, dtype=np.float32)[:, None])
    mem = TrainingMemory.sample(X, sp.csr_matrix((100, 2), dtype=np.float32), capacity=10, seed=3)
    kept = mem.X.toarray().ravel()
    assert len(mem) == 10 and mem.seen == 100 and np.unique(kept).size == 10 and np.all(np.diff(kept) > 0)


def test_offer_is_a_reservoir_every_row_kept_with_probability_capacity_over_seen():
    """Algorithm R: after 40 rows seen with room for 10, each of the 40 is kept with probability 1/4 --
    the first 20 (sampled at fit) as much as the 20 offered later. Over 400 seeds each row's count is
    Binomial(400, 0.25): mean 100, sd 8.7; a reservoir that kept only new or only old rows fails by far."""
    counts = np.zeros(40)
    for seed in range(400):
        X = sp.csr_matrix(np.arange(40, dtype=np.float32)[:20, None] + 1)
        mem = TrainingMemory.sample(X, sp.csr_matrix((20, 1), dtype=np.float32), capacity=10, seed=seed)
        new = sp.csr_matrix(np.arange(20, 40, dtype=np.float32)[:, None] + 1)
        mem.offer(new, sp.csr_matrix((20, 1), dtype=np.float32))
        assert len(mem) == 10 and mem.seen == 40
        counts[mem.X.toarray().ravel().astype(int) - 1] += 1
    assert np.all(np.abs(counts - 100) < 40), counts


def test_offer_fills_free_room_first_and_grows_the_label_columns():
    mem = TrainingMemory(sp.csr_matrix(np.ones((2, 3), np.float32)), sp.csr_matrix(np.eye(2, dtype=np.float32)),
                         seen=2, capacity=5, seed=0)
    mem.offer(sp.csr_matrix(np.full((2, 3), 2, np.float32)), sp.csr_matrix(np.array([[0, 0, 1.0]], np.float32).repeat(2, 0)))
    assert len(mem) == 4 and mem.seen == 4 and mem.Y.shape == (4, 3)
    assert mem.X.toarray()[:, 0].tolist() == [1, 1, 2, 2] and mem.Y.toarray()[2:, 2].tolist() == [1, 1]


def test_the_memory_is_saved_checksummed_and_loaded(trained, tmp_path):
    model = trained[0]
    m = _copy(model, tmp_path)
    assert abs(m.memory_.X - model.memory_.X).max() == 0 and (m.memory_.Y != model.memory_.Y).nnz == 0
    assert (m.memory_.seen, m.memory_.capacity) == (model.memory_.seen, model.memory_.capacity)


# -- fresh labels --------------------------------------------------------------------------------------
def test_fresh_columns_are_new_ones_and_own_labels_without_documents():
    assert fresh_columns(5, 8, cold=[1, 6]).tolist() == [1, 5, 6, 7]
    assert fresh_columns(5, 5).tolist() == []


def test_three_documents_of_a_new_label_do_not_take_over_other_texts(trained, NEW, tmp_path):
    """Without negatives the new label's ranker says yes to every text near its cluster: the bug this fixes
    (the same learn with memory=False puts it first for a large share of unrelated texts)."""
    model, texts, labels, cut = trained
    others = [t for t in texts[cut:] if t not in NEW]
    with_memory = _copy(model, tmp_path, "a").learn(NEW, [["railways"]] * 3)
    without = _copy(model, tmp_path, "b").learn(NEW, [["railways"]] * 3, memory=False)
    assert _top1_share(without, others, "railways") > 0.05
    assert _top1_share(with_memory, others, "railways") < 0.01
    assert all(p[0][0] == "railways" for p in with_memory.predict(NEW, k=1))


def test_a_learn_with_the_whole_memory_is_the_replayed_refit(trained, NEW, tmp_path):
    """When every training row is remembered, learn refits exactly as replay of those rows would (the rows as
    featurized at training: the remembered rows hold none of the n-grams a learn adds to the vocabulary)."""
    model, texts, labels, cut = trained
    a = _copy(model, tmp_path, "a").learn(NEW, [["railways"]] * 3)
    b = _copy(model, tmp_path, "b").learn(NEW, [["railways"]] * 3, replay=(model.transform(texts[:cut]),
                                                                          labels[:cut]), memory=False)
    assert a.n_features_ == b.n_features_
    for la, lb in zip(a.models_[0].levels_, b.models_[0].levels_):
        assert abs(la.to_weights() - lb.to_weights()).max() == 0


def test_learning_few_documents_leaves_the_other_texts_top1_almost_unchanged(trained, NEW, tmp_path):
    model, texts, labels, cut = trained
    others = [t for t in texts[cut:] if t not in NEW]
    before = [p[0][0] if p else None for p in model.predict(others, k=1)]
    m = _copy(model, tmp_path).learn(NEW, [["railways"]] * 3)
    after = [p[0][0] if p else None for p in m.predict(others, k=1)]
    assert np.mean([a == b for a, b in zip(before, after)]) > 0.97


# -- operations in sequence ----------------------------------------------------------------------------
def test_remove_then_learn_predicts_saves_and_loads(trained, NEW, tmp_path):
    model, texts, labels, cut = trained
    m = _copy(model, tmp_path)
    gone = model.labels_.names[3]
    remove_labels(m, [gone])
    m.learn(NEW, [["railways"]] * 3)
    assert m.removed_.shape == (m.n_labels,) and m.removed_[m.labels_.index[gone]]
    m.save(tmp_path / "after")
    back = xmtc.load(tmp_path / "after")
    preds = back.predict(texts[cut:] + NEW, k=10)
    assert all(gone not in dict(p) for p in preds)
    assert back.predict(NEW, k=1)[0][0][0] == "railways"


def _with_route(trained, tmp_path):
    """The model with a label-text route fitted on the held-out part, and two labels added by text."""
    from xmtc.models.open_labels import attach_route

    model, texts, labels, cut = trained
    m = _copy(model, tmp_path)
    m.calibration_ = None
    calibrate(m, texts[cut:], labels[cut:])
    vocab = m.labels_
    m.labels_ = vocab.with_label_file(sample_path("labels"))
    attach_route(m, texts[cut:], xmtc.data.label_matrix(labels[cut:], m.labels_, unknown_labels="ignore")[0])
    add_labels(m, LabelVocab(["quarries", "lighthouses"], texts=["quarry quarries stone", "lighthouse coast light"]))
    return m


def test_a_label_added_by_text_keeps_its_suggestions_when_another_is_learned(trained, NEW, tmp_path):
    model, texts, labels, cut = trained
    m = _with_route(trained, tmp_path)
    probe = texts[cut:] + ["the old quarry and its stone", "lighthouses of the coast"]
    before = [i for i, p in enumerate(m.predict(probe, k=5)) if "lighthouses" in dict(p)]
    m.learn(NEW, [["quarries"]] * 3)
    j = m.labels_.index["lighthouses"]
    assert m.models_[0].levels_[-1].bias_w[j] == pytest.approx(NEVER / m.bias)
    after = [i for i, p in enumerate(m.predict(probe, k=5)) if "lighthouses" in dict(p)]
    assert after == before and len(before) >= 1
    # the learned label left the route: its ranker scores it
    assert m.labels_.index["quarries"] not in set(m.label_route_.label_ids.tolist())
    assert j in set(m.label_route_.label_ids.tolist())


def test_a_proximal_refit_holds_the_bias_bias_anchor_times_harder_a_second_solver_agrees():
    """_refit's proximal step minimises 1/2 ||w - w0||^2 + BIAS_ANCHOR^2 / 2 (b - b0)^2 + C sum sqhinge; the
    same objective minimised by scipy's L-BFGS lands on the same weights (and the plain proximal objective,
    the bias held like a feature, does not)."""
    from scipy.optimize import minimize

    from xmtc.linear.update import BIAS_ANCHOR, _refit

    rng = np.random.default_rng(0)
    n, d, C = 60, 5, 0.5
    X = sp.csr_matrix(rng.normal(size=(n, d)).astype(np.float32))
    y = (rng.random(n) < 0.3).astype(np.float32)
    w0 = np.r_[rng.normal(size=d), 0.7].astype(np.float32)
    got = _refit(X, sp.csr_matrix(y[:, None]), np.zeros(1, dtype=np.int32), sp.csr_matrix(np.ones((n, 1), np.float32)),
                 sp.csc_matrix(w0[:, None]), "proximal", 1,
                 dict(C_pos=C, C_neg=C, bias=1.0, tol=1e-6, max_iter=10000, threshold=0.0)).toarray().ravel()
    Xd, s = X.toarray().astype(np.float64), 2 * y.astype(np.float64) - 1

    def objective(v, k):
        w, b = v[:d], v[d]
        slack = np.maximum(0.0, 1 - s * (Xd @ w + b))
        return 0.5 * np.sum((w - w0[:d]) ** 2) + 0.5 * k ** 2 * (b - w0[d]) ** 2 + C * np.sum(slack ** 2)

    held = minimize(objective, w0.astype(np.float64), args=(BIAS_ANCHOR,), method="L-BFGS-B", tol=1e-12).x
    plain = minimize(objective, w0.astype(np.float64), args=(1.0,), method="L-BFGS-B", tol=1e-12).x
    np.testing.assert_allclose(got, held, atol=2e-3)
    assert np.abs(got - plain).max() > 0.05


def test_with_a_sampled_memory_few_documents_leave_the_other_texts_top1_almost_unchanged(trained, NEW, tmp_path):
    """A model that remembers a sample (300 of its rows): old nodes are refitted proximally, their biases held
    (BIAS_ANCHOR); held like a feature weight, the biases moved the top-1 of ~10% of other texts."""
    model, texts, labels, cut = trained
    small = xmtc.XRLinear(n_trees=1, max_leaf_size=16, branching=4, n_threads=2, memory_rows=300)
    small.fit(texts[:cut], labels[:cut], progress=False)
    assert len(small.memory_) == 300 and small.memory_.seen == cut
    others = [t for t in texts[cut:] if t not in NEW]
    before = [p[0][0] if p else None for p in small.predict(others, k=1)]
    m = _copy(small, tmp_path).learn(NEW, [["railways"]] * 3)
    after = [p[0][0] if p else None for p in m.predict(others, k=1)]
    assert np.mean([a == b for a, b in zip(before, after)]) > 0.97
    assert _top1_share(m, others, "railways") < 0.01
    assert m.memory_.seen == cut + 3 and len(m.memory_) == 300


def test_a_curvature_refit_holds_each_feature_by_its_own_h_a_second_solver_agrees():
    """With a curvature h, _refit's proximal step minimises 1/2 sum_j h_j (w_j - w0_j)^2 + BIAS_ANCHOR^2 / 2
    (b - b0)^2 + C sum sqhinge: scipy's L-BFGS on that objective lands on the same weights, and on the one
    without h (every feature held alike) it does not. old_curvature is 1 + 2 C weight sum_i x_ij^2."""
    from scipy.optimize import minimize

    from xmtc.linear.update import BIAS_ANCHOR, _refit, old_curvature

    X_old = sp.csr_matrix(np.array([[1.0, 0.0, 2.0], [0.5, 0.0, 0.0]], dtype=np.float32))
    np.testing.assert_allclose(old_curvature(X_old, 3.0, 0.5), [1 + 3.0 * 1.25, 1.0, 1 + 3.0 * 4.0])
    rng = np.random.default_rng(1)
    n, d, C = 60, 5, 0.5
    X = sp.csr_matrix(rng.normal(size=(n, d)).astype(np.float32))
    y = (rng.random(n) < 0.3).astype(np.float32)
    w0 = np.r_[rng.normal(size=d), 0.7].astype(np.float32)
    h = np.array([1.0, 30.0, 2.0, 300.0, 5.0])
    got = _refit(X, sp.csr_matrix(y[:, None]), np.zeros(1, dtype=np.int32), sp.csr_matrix(np.ones((n, 1), np.float32)),
                 sp.csc_matrix(w0[:, None]), "proximal", 1,
                 dict(C_pos=C, C_neg=C, bias=1.0, tol=1e-6, max_iter=10000, threshold=0.0), h).toarray().ravel()
    Xd, s = X.toarray().astype(np.float64), 2 * y.astype(np.float64) - 1

    def objective(v, hold):
        w, b = v[:d], v[d]
        slack = np.maximum(0.0, 1 - s * (Xd @ w + b))
        return 0.5 * np.sum(hold * (w - w0[:d]) ** 2) + 0.5 * BIAS_ANCHOR ** 2 * (b - w0[d]) ** 2 \
            + C * np.sum(slack ** 2)

    held = minimize(objective, w0.astype(np.float64), args=(h,), method="L-BFGS-B", tol=1e-12).x
    alike = minimize(objective, w0.astype(np.float64), args=(np.ones(d),), method="L-BFGS-B", tol=1e-12).x
    np.testing.assert_allclose(got, held, atol=2e-3)
    assert np.abs(got - alike).max() > 0.05
