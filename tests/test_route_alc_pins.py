"""Tests that pin the label-text route (``xmtc/models/label_route.py``), the label-text method
(``xmtc/methods/label_text/estimator.py``) and ALC (``xmtc/neural/alc.py``) against a definition or a
hand-computed case: each kills mutants of ``scripts/mutate.py`` that the older tests let pass (the harness picks
them by the ``pin_route`` / ``pin_label_text`` / ``pin_alc`` in their names)."""

import numpy as np
import pytest
import scipy.sparse as sp


# -- the label-text route -------------------------------------------------------------------------------------
def _route_featurizer():
    from xmtc.features.tfidf import TfidfFeaturizer

    return TfidfFeaturizer(min_df=1).fit(["steam trains", "bird watching", "old maps", "sea shells", "alpha beta",
                                          "gamma delta", "zeta eta"])


def test_pin_route_a_map_at_1_gives_odds_of_1e12_not_infinity():
    from xmtc.models.label_route import LabelRoute

    # a map that reaches 1.0 (one loaded from a file, say): q is clipped to 1 - 1e-12, so its odds stay finite
    # and the prior can still shift them
    route = LabelRoute(np.zeros(0), sp.csr_matrix((0, 3)), np.array([0.0, 1.0]), np.array([0.0, 1.0]),
                       unseen_mass=1e-3 / (1 + 1e-3), seen_labels=1)
    q = 1.0 - 1e-12
    np.testing.assert_allclose(route.map_odds(np.array([1.0, 0.5])), [q / (1.0 - q), 1.0], rtol=1e-9)
    assert route.prior_ratio() == pytest.approx(1e-3)          # m / (1 - m) * S / max(U, 1)
    odds = q / (1.0 - q) * 1e-3
    p = route.probabilities(np.array([1.0]))
    assert np.isfinite(p).all() and p[0] == pytest.approx(odds / (1.0 + odds), rel=1e-12)


def test_pin_route_removing_keeps_the_other_labels_rows():
    from xmtc.models.label_route import LabelRoute

    f = _route_featurizer()
    texts = ["steam trains", "bird watching", "old maps"]
    route = LabelRoute(np.array([5, 9, 11]), f.transform(texts), np.array([0.0, 1.0]), np.array([0.2, 0.8]), f)
    route.remove([9])
    assert route.label_ids.tolist() == [5, 11]
    np.testing.assert_allclose(route.M.toarray(), f.transform(["steam trains", "old maps"]).toarray(), rtol=1e-6)
    ids, _ = route.topk(["old maps", "steam trains", "bird watching"], 1)
    assert ids[:, 0].tolist() == [11, 5, -1]


def test_pin_route_removing_without_a_prior_or_from_an_empty_route_leaves_the_mass_alone():
    from xmtc.models.label_route import LabelRoute

    f = _route_featurizer()
    old = LabelRoute(np.array([5, 9]), f.transform(["steam trains", "old maps"]), np.array([0.0, 1.0]),
                     np.array([0.2, 0.8]), f)                   # a route saved before the prior: no mass
    old.remove([9])
    assert old.unseen_mass is None and old.label_ids.tolist() == [5] and old.prior_ratio() == 1.0
    empty = LabelRoute(np.zeros(0), sp.csr_matrix((0, f.n_features_)), np.array([0.0, 1.0]), np.array([0.2, 0.8]),
                       f, unseen_mass=0.2, seen_labels=3)
    empty.remove([4])
    assert empty.unseen_mass == 0.2 and len(empty) == 0
    four = LabelRoute(np.array([1, 2, 3, 4]), f.transform(["steam trains", "old maps", "sea shells", "zeta eta"]),
                      np.array([0.0, 1.0]), np.array([0.2, 0.8]), f, unseen_mass=0.2, seen_labels=3)
    four.remove([2, 7])                                         # 7 is not routed: one of four leaves
    assert four.unseen_mass == pytest.approx(0.2 * 3 / 4)


def test_pin_route_a_label_with_one_document_is_seen_and_one_seen_label_is_enough():
    from xmtc.models.label_route import LabelRoute

    f = _route_featurizer()
    Y = sp.csr_matrix(np.array([[1, 0, 0], [0, 1, 0]], dtype=np.float32))
    route = LabelRoute.fit(f, ["alpha beta", "gamma delta", "zeta eta"], np.array([1, 2, 0]),
                           ["alpha beta", "gamma delta"], Y)
    assert route.seen_labels == 2 and route.label_ids.tolist() == [2]
    one = LabelRoute.fit(f, ["alpha beta", "gamma delta", "zeta eta"], np.array([1, 0, 0]), ["alpha beta"],
                         sp.csr_matrix(np.array([[1, 0, 0]], dtype=np.float32)))
    assert one.seen_labels == 1 and one.label_ids.tolist() == [1, 2]
    from xmtc.errors import ConfigError

    with pytest.raises(ConfigError):
        LabelRoute.fit(f, ["alpha beta", "gamma delta"], np.array([0, 0]), ["alpha beta"],
                       sp.csr_matrix(np.array([[1, 0]], dtype=np.float32)))


def test_pin_route_a_map_of_one_block_is_its_laplace_rate():
    from xmtc.models.label_route import LabelRoute

    f = _route_featurizer()
    texts = ["alpha beta", "gamma delta", "zeta eta"]
    # every cosine of a validation text to a seen label is on one of its labels: (h + 1) / (n + 2), not 1.0 (whose
    # odds would be infinite whatever the prior)
    right = LabelRoute.fit(f, texts, np.array([2, 2, 0]), ["alpha", "gamma"],
                           sp.csr_matrix(np.array([[1, 0, 0], [0, 1, 0]], dtype=np.float32)))
    n = 2  # cosines above 0: each text's own label
    assert right.map_x.tolist() == [0.0, 1.0] and right.map_y.tolist() == [(n + 1) / (n + 2)] * 2
    assert np.isfinite(right.map_odds(np.array([0.5]))).all()
    # none is: 1 / (n + 2); a cosine of 0 still scores 0
    wrong = LabelRoute.fit(f, texts, np.array([2, 2, 0]), ["alpha", "gamma"],
                           sp.csr_matrix(np.array([[0, 1, 0], [1, 0, 0]], dtype=np.float32)))
    assert wrong.map_x.tolist() == [0.0, 1.0] and wrong.map_y.tolist() == [1 / (n + 2)] * 2
    odds = (1 / (n + 2)) / (1 - 1 / (n + 2)) * wrong.prior_ratio()
    np.testing.assert_allclose(wrong.probabilities(np.array([0.0, 0.3])), [0.0, odds / (1 + odds)])
    # no cosine above 0 at all: no evidence, the route stays quiet
    quiet = LabelRoute.fit(f, texts, np.array([2, 2, 0]), ["zeta", "zeta"],
                           sp.csr_matrix(np.array([[0, 0, 1], [0, 0, 1]], dtype=np.float32)))
    assert quiet.map_y.tolist() == [0.0, 0.0]


def test_pin_route_merge_drops_a_duplicate_that_is_not_the_smallest_id():
    from xmtc.models.label_route import merge_topk

    idx, sc = merge_topk(np.array([[1, 5]]), np.array([[0.9, 0.6]], np.float32),
                         np.array([[5, 2]]), np.array([[0.8, 0.1]], np.float32), 3)
    assert idx.tolist() == [[1, 5, 2]]
    np.testing.assert_allclose(sc, [[0.9, 0.8, 0.1]], rtol=1e-6)


# -- label-text similarity ------------------------------------------------------------------------------------
def test_pin_label_text_documents_need_both_the_texts_and_their_labels():
    from xmtc.data.labels import LabelVocab
    from xmtc.errors import ConfigError
    from xmtc.methods.label_text.estimator import resolve_label_texts

    vocab = LabelVocab(["p0", "p1"])
    Y = sp.csr_matrix(np.array([[1, 0], [1, 1]], dtype=np.float32))
    for texts, labels in ((["alpha", "beta"], None), (None, Y), (None, None)):
        with pytest.raises(ConfigError, match="label_texts=documents needs the training texts"):
            resolve_label_texts(vocab, "documents", "label-text", texts, labels)
    assert resolve_label_texts(vocab, "documents", "label-text", ["alpha", "beta"], Y) == ["alpha beta", "beta"]


def test_pin_label_text_a_batch_of_no_text_is_a_0_by_k_top_k():
    from xmtc.data.labels import LabelVocab
    from xmtc.methods.label_text.estimator import LabelText

    # the method's own batch (the hook predict_topk calls; it answers one row per text, none for none)
    vocab = LabelVocab(["A", "B"], texts=["red apple", "green tree"])
    model = LabelText(ngram_max=1).fit(["red car"], [["A"]], labels=vocab, progress=False)
    idx, sc = model._predict_batch([], 3)
    assert idx.shape == (0, 3) and sc.shape == (0, 3) and idx.dtype == np.int32 and sc.dtype == np.float32
    idx, sc = model._predict_batch(["green tree", "red"], 3)
    assert idx.shape == (2, 3) and idx[:, 0].tolist() == [1, 0]


# -- ALC ----------------------------------------------------------------------------------------------------
def _clip_case(aux_scale: float, base_scale: float, kappa: float = 0.5) -> dict:
    """:func:`relative_clip` on one tapped scalar x: |grad aux| = |aux_scale|, |grad base| = |base_scale|."""
    torch = pytest.importorskip("torch")
    from xmtc.neural.alc import Tap, relative_clip

    x = torch.tensor([2.0], requires_grad=True)
    tap = Tap()
    y = tap(x, "text")
    out = relative_clip(tap, (aux_scale * y).sum(), (base_scale * y).sum(), [], kappa)
    assert tap.factors == {"text": out["text"][1]}
    return out["text"]


def test_pin_alc_clip_factor_by_hand_and_at_a_zero_norm():
    ratio, factor = _clip_case(1.0, 0.1)            # |grad aux| = 1 exactly: kappa * 0.1 / 1
    assert ratio == pytest.approx(10.0) and factor == pytest.approx(0.05)
    ratio, factor = _clip_case(3.0, 2.0)            # kappa * 2 / 3
    assert ratio == pytest.approx(1.5) and factor == pytest.approx(1.0 / 3.0)
    assert _clip_case(0.2, 2.0) == (pytest.approx(0.1), 1.0)    # below kappa: untouched
    assert _clip_case(0.0, 2.0) == (0.0, 1.0)      # no auxiliary gradient: nothing to clip, no division by 0


def test_pin_alc_clip_ratio_without_a_base_gradient():
    # the base loss has no gradient on the group: any auxiliary gradient is infinitely larger, and is cut to 0
    assert _clip_case(0.5, 0.0) == (float("inf"), 0.0)
    assert _clip_case(3.0, 0.0) == (float("inf"), 0.0)
    assert _clip_case(0.0, 0.0) == (0.0, 1.0)


def test_pin_alc_warmup_of_one_batch():
    pytest.importorskip("torch")
    from xmtc.neural.alc import warmup_weight

    assert [warmup_weight(t, 1) for t in (0, 1, 2)] == [0.0, 1.0, 1.0]     # min(1, t / 1)
    assert [warmup_weight(t, 2) for t in (0, 1, 2, 5)] == [0.0, 0.5, 1.0, 1.0]
    assert [warmup_weight(t, -1) for t in (0, 1)] == [1.0, 1.0]


def test_pin_alc_log1mexp_in_float32_near_0_and_far_from_it_and_at_0():
    torch = pytest.importorskip("torch")
    from xmtc.neural.alc import log1mexp

    # float32, as the scores are: near 0, 1 - exp(x) cancels (log1p(-exp(x)) is off by 1% at x = -1e-6), far from
    # 0, -expm1(x) rounds to 1: each side of log 2 needs its own formula
    xs = [-1e-6, -1e-4, -0.01, -0.3, -0.69, -0.7, -1.0, -5.0, -20.0, -40.0]
    mp = pytest.importorskip("mpmath").mp           # the definition, at 50 digits (mpmath comes with torch's sympy)
    mp.dps = 50

    def exact(x: float) -> float:
        return float(mp.log(1 - mp.exp(mp.mpf(float(np.float32(x))))))   # of the float32 the function reads

    got = log1mexp(torch.tensor(xs, dtype=torch.float32)).double().numpy()
    np.testing.assert_allclose(got, [exact(x) for x in xs], rtol=2e-6)
    # a score of exactly 1 (a saturated sigmoid) or a hair above: clamped just below 0, finite
    at0 = log1mexp(torch.tensor([0.0, 1e-8], dtype=torch.float32)).double().numpy()
    np.testing.assert_allclose(at0, [exact(-1e-7)] * 2, rtol=1e-5)


def test_pin_alc_tcm_one_violating_negative_and_a_positive_at_the_margin():
    torch = pytest.importorskip("torch")
    from xmtc.neural.alc import tcm_loss

    # one negative at or above m-: its own excess, not halved
    p = torch.tensor([[0.95, 0.7, 0.25]], dtype=torch.float64)
    assert tcm_loss(p, torch.tensor([[True, False, False]]), 0.9, 0.5).item() == pytest.approx(0.2, rel=1e-12)
    # a positive exactly at m+ violates by 0 but counts among the violators: (0 + 0.5) / 2
    p = torch.tensor([[0.75, 0.25, 0.0]], dtype=torch.float64)
    assert tcm_loss(p, torch.tensor([[True, True, False]]), 0.75, 0.5).item() == pytest.approx(0.25, rel=1e-12)
