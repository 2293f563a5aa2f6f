"""Learning after training: the solver's warm starts, the tree update, ``XRLinear.learn`` and ``xmtc learn``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import xmtc
from xmtc.cli import main
from xmtc.errors import ConfigError
from xmtc.linear.hierarchy import HierarchicalLinearModel
from xmtc.linear.solver import _train, primal_objective
from xmtc.linear.update import changed_nodes, update

from serve_support import sample_docs

SOLVER = dict(C_pos=1.0, C_neg=1.0, bias=1.0, tol=0.1, max_iter=100, threshold=0.0, n_threads=2)


def _problem(n=600, d=80, K=6, seed=0):
    X = sp.random(n, d, density=0.08, format="csr", random_state=seed, dtype=np.float32)
    Y = sp.random(n, K, density=0.1, format="csr", random_state=seed + 1, dtype=np.float32)
    return X, Y, np.zeros(K, dtype=np.int64), sp.csr_matrix(np.ones((n, 1), np.float32))


def _objective(X, Y, W):
    d = X.shape[1]
    W = W.toarray()
    return sum(primal_objective(X, Y[:, k].toarray(), W[:d, k], W[d, k], 1.0, 1.0, 1.0) for k in range(Y.shape[1]))


# -- the solver's warm starts -------------------------------------------------------------------------
def test_proximal_from_zero_is_the_cold_solve_bit_for_bit():
    X, Y, par, act = _problem()
    cold, _ = _train(X, Y, par, act, **SOLVER)
    warm, _ = _train(X, Y, par, act, init=sp.csc_matrix((X.shape[1] + 1, Y.shape[1]), dtype=np.float32),
                     warm="proximal", **SOLVER)
    assert (cold != warm).nnz == 0


def test_proximal_without_rows_returns_the_old_weights():
    X, Y, par, act = _problem()
    W, _ = _train(X, Y, par, act, **SOLVER)
    empty = sp.csr_matrix(act.shape, dtype=np.float32)
    out, _ = _train(X, sp.csr_matrix(Y.shape, dtype=np.float32), par, empty, init=W, warm="proximal", **SOLVER)
    assert abs(out - W).max() == 0


def test_proximal_keeps_old_weights_on_features_the_rows_lack():
    X, Y, par, act = _problem()
    W, _ = _train(X, Y, par, act, **SOLVER)
    keep = sp.diags((np.arange(X.shape[1]) < 40).astype(np.float32))
    X2 = sp.csr_matrix(X[:200] @ keep)  # the new rows never touch features 40..79
    X2.eliminate_zeros()
    out, _ = _train(X2, Y[:200], par, act[:200], init=W, warm="proximal", **SOLVER)
    assert abs(out[40:80] - W[40:80]).max() == 0
    assert abs(out[:40] - W[:40]).max() > 0


def test_dual_warm_start_reaches_the_cold_optimum_in_fewer_epochs():
    X, Y, par, act = _problem()
    cold, it_cold = _train(X, Y, par, act, **{**SOLVER, "tol": 1e-3})
    warm, it_warm = _train(X, Y, par, act, init=cold, warm="dual", **{**SOLVER, "tol": 1e-3})
    assert _objective(X, Y, warm) == pytest.approx(_objective(X, Y, cold), rel=1e-3)
    assert it_warm.sum() < it_cold.sum()


def test_unknown_warm_mode_is_refused():
    X, Y, par, act = _problem()
    with pytest.raises(ConfigError, match="warm must be"):
        _train(X, Y, par, act, init=None, warm="hot", **SOLVER)


# -- the tree update ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small():
    from serve_support import learn_split_model

    return learn_split_model()


def test_nodes_whose_data_did_not_change_keep_their_weights_bytes(small):
    model, texts, labels, cut = small
    h = model.models_[0]
    # documents of one leaf cluster's labels only
    leaf_of = h.levels_[-1].parent_of
    cluster = int(leaf_of[0])
    in_cluster = set(np.flatnonzero(leaf_of == cluster).tolist())
    names = model.labels_.names
    rows = [i for i in range(cut, len(texts)) if labels[i] and all(model.labels_.index.get(x, -1) in in_cluster
                                                                   for x in labels[i])][:20]
    assert rows, "no document of the chosen cluster"
    X = model.transform([texts[i] for i in rows])
    Y, _ = xmtc.data.label_matrix([labels[i] for i in rows], model.labels_)
    new, report = update(h, X, Y, threshold=0.05)
    old_W, new_W = h.levels_[-1].to_weights(), new.levels_[-1].to_weights()
    changed = np.flatnonzero(leaf_of == cluster)
    assert report["refitted"][-1] == changed.size
    same = np.setdiff1d(np.arange(len(names)), changed)
    diff = old_W[:, same] != new_W[:, same]
    assert diff.nnz == 0
    assert (old_W[:, changed] != new_W[:, changed]).nnz > 0


def test_changed_nodes_follow_the_definition():
    parent_of = np.array([0, 0, 1, 1, 2])
    active_new = sp.csr_matrix(np.array([[0, 1, 0], [0, 0, 0]], dtype=np.float32))
    targets_new = sp.csr_matrix(np.array([[0, 0, 0, 0, 0], [0, 0, 0, 0, 1]], dtype=np.float32))
    assert changed_nodes(parent_of, active_new, targets_new).tolist() == [2, 3, 4]


def test_a_new_label_is_placed_and_suggested_for_its_documents(small):
    model, texts, labels, cut = small
    m = _copy(model)
    docs = [t + " zyxwv" for t in texts[cut:cut + 12]]
    before = m.n_labels
    m.learn(docs, [["brand-new"]] * len(docs))
    assert m.n_labels == before + 1 and m.labels_.names[-1] == "brand-new"
    assert m.labels_.names[:before] == model.labels_.names
    assert m.label_counts_[-1] == len(docs) and m.n_train_ == model.n_train_ + len(docs)
    assert m.models_[0].n_labels == before + 1
    top = [p[0][0] for p in m.predict(docs, k=1)]
    assert sum(t == "brand-new" for t in top) >= len(docs) * 0.75


def test_update_places_a_new_label_from_one_document_and_keeps_a_documentless_one_in_cluster_0(small):
    """Two new label columns: the first without a document (a vocabulary's label), the second with one. The first
    stays under leaf cluster 0 with the ranker that says no; the second is placed by the matcher
    (``place_new_labels``) and fitted: one document is enough."""
    from xmtc.linear.update import place_new_labels

    model, texts, labels, cut = small
    h = model.models_[0]
    L = h.n_labels
    X = model.transform([texts[cut]])
    Y = sp.csr_matrix((np.ones(1, np.float32), ([0], [L + 1])), shape=(1, L + 2))
    new, report = update(h, X, Y, threshold=0.0)
    want = place_new_labels(h, X, sp.csr_matrix(Y[:, [L + 1]]), post_processor="l3-hinge")
    assert report["fresh"] == 1 and report["placement"] == [0, int(want[0])]
    leaves = new.levels_[-1]
    assert leaves.parent_of[L] == 0 and leaves.parent_of[L + 1] == int(want[0])
    W = leaves.to_weights()
    assert W[:-1, L].nnz == 0 and W[-1, L] < 0  # no document: a bias that says no
    assert W[:-1, L + 1].nnz > 0  # one document: a ranker fitted on it


def test_update_refuses_a_sampled_replay_with_man_negatives_or_a_dual_refit(small):
    """A sampled replay is a proximal refit with teacher-forced negatives: either other choice alone is refused."""
    model, texts, labels, cut = small
    h = model.models_[0]
    X = model.transform(texts[cut:cut + 3])
    Y, _ = xmtc.data.label_matrix(labels[cut:cut + 3], model.labels_)
    sample = (model.memory_.X[:5], model.memory_.Y[:5])
    with pytest.raises(ConfigError, match="sampled replay"):
        update(h, X, Y, sample=sample, negatives="tfn+man")
    with pytest.raises(ConfigError, match="sampled replay"):
        update(h, X, Y, sample=sample, warm="dual", replay=(X, Y))


def test_update_runs_its_levels_side_by_side_to_the_same_levels_as_one_after_the_other(small):
    """Teacher-forced negatives make the levels independent: two workers (two threads) give each level exactly
    what one thread, level after level, gives, sampled replay and new labels included."""
    model, texts, labels, cut = small
    h = model.models_[0]
    known = [[x for x in ls if x in model.labels_.index] for ls in labels[cut:cut + 40]]
    X = model.transform(texts[cut:cut + 40])
    Y, _ = xmtc.data.label_matrix(known, model.labels_)
    Y = sp.hstack([Y, sp.csr_matrix((np.ones(3, np.float32), ([0, 1, 2], [0, 0, 0])), shape=(40, 1))], format="csr")
    sample = (model.memory_.X[:30], model.memory_.Y[:30])
    one, r1 = update(h, X, Y, sample=sample, n_threads=1)
    two, r2 = update(h, X, Y, sample=sample, n_threads=2)
    assert r1["refitted"] == r2["refitted"] and len(one.levels_) == len(two.levels_) > 1
    for a, b in zip(one.levels_, two.levels_):
        assert np.array_equal(a.ent, b.ent) and np.array_equal(a.bias_w, b.bias_w) and np.array_equal(a.feat, b.feat)


def test_learning_the_held_out_part_improves_on_it_and_grows_the_vocabulary(small, tmp_path):
    model, texts, labels, cut = small
    held, held_labels = texts[cut:], labels[cut:]
    before = model.evaluate(held, held_labels)["P@1"]
    kept = _copy(model).learn(held, held_labels, new_words=False)
    assert kept.featurizer_.n_features_ == model.featurizer_.n_features_ == kept.n_features_
    m = _copy(model).learn(held, held_labels)
    assert m.evaluate(held, held_labels)["P@1"] > before + 5
    d, grown = model.n_features_, m.featurizer_.n_features_
    assert grown == m.n_features_ == m.models_[0].n_features > d
    assert m.memory_.X.shape[1] == grown
    # the grown vocabulary is the old one plus what a fit on the held-out texts adds (the featurizer's own test)
    ref, added = model.featurizer_.extended(held, model.n_train_)
    assert added == grown - d and ref.feature_names() == m.featurizer_.feature_names()
    # old features keep their idf; a text without new words gets the row it got before
    assert np.array_equal(m.featurizer_.idf_[:d], model.featurizer_.idf_)
    plain = [t for t in texts[:cut] if m.transform([t])[:, d:].nnz == 0][:20]
    assert plain and (m.transform(plain)[:, :d] != model.transform(plain)).nnz == 0
    # some node learned weights on the new features, and the model saves and loads as it predicts
    W = m.models_[0].levels_[-1].to_weights()
    assert W.shape[0] == grown + 1 and W[d:grown].nnz > 0
    back = xmtc.load(m.save(tmp_path / "m"))
    assert back.n_features_ == grown
    assert back.predict(held[:50], k=3) == m.predict(held[:50], k=3)


def test_replay_refits_on_old_and_new(small):
    model, texts, labels, cut = small
    m = _copy(model)
    old_names = set(model.labels_.names)
    keep = [i for i in range(cut, len(texts)) if labels[i] and set(labels[i]) <= old_names]
    m.learn([texts[i] for i in keep], [labels[i] for i in keep], replay=(texts[:cut], labels[:cut]))
    full = HierarchicalLinearModel().fit(
        m.transform(texts[:cut] + [texts[i] for i in keep]),
        xmtc.data.label_matrix(labels[:cut] + [labels[i] for i in keep], model.labels_)[0],
        [lv for lv in model.models_[0].chain], negatives="tfn", threshold=model.threshold)
    X = m.transform(texts)
    a = m.models_[0].predict_topk(X, 1)[0]
    b = full.predict_topk(X, 1)[0]
    assert np.mean(a == b) > 0.95  # the same objective on the same tree, from another starting point


def test_methods_that_cannot_learn_say_so_in_one_line():
    from xmtc.models import estimator_class
    from xmtc.models.learning import learners, refusal

    assert learners() == ["xr-linear"]
    for method in ("lightxml", "cascadexml", "elias", "aplc", "xr-transformer", "x-transformer"):
        assert not estimator_class(method).can_learn
        msg = refusal(method)
        assert "\n" not in msg and "xr-linear" in msg and method in msg


def _copy(model):
    import copy

    return copy.deepcopy(model)


# -- the command line -----------------------------------------------------------------------------------
def _write_tsv(path: Path, texts, labels):
    path.write_text("".join(f"{','.join(ls)}\t{t}\n" for t, ls in zip(texts, labels)), encoding="utf-8")


def _write_jsonl(path: Path, texts, labels):
    path.write_text("".join(json.dumps({"text": t, "labels": ls}) + "\n" for t, ls in zip(texts, labels)),
                    encoding="utf-8")


def _digest(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("learn")
    texts, labels = sample_docs(step=16)
    cut = int(len(texts) * 0.8)
    _write_tsv(tmp / "old.tsv", texts[:cut], labels[:cut])
    _write_jsonl(tmp / "new.jsonl", texts[cut:], [ls + ["fresh-label"] for ls in labels[cut:]])
    assert main(["train", str(tmp / "old.tsv"), "-o", str(tmp / "model"), "-q", "--n-trees", "1",
                 "--valid-size", "0"]) == 0
    return tmp


def test_train_reads_several_files_of_mixed_formats(files, tmp_path):
    assert main(["train", str(files / "old.tsv"), str(files / "new.jsonl"), "-o", str(tmp_path / "m"), "-q",
                 "--n-trees", "1", "--valid-size", "0"]) == 0
    assert "fresh-label" in xmtc.load(tmp_path / "m").labels_.names


def test_cli_learn_writes_elsewhere_and_adds_labels(files, tmp_path):
    before = _digest(files / "model")
    out = tmp_path / "learned"
    assert main(["learn", str(files / "model"), str(files / "new.jsonl"), "-o", str(out), "-q"]) == 0
    assert _digest(files / "model") == before
    m, old = xmtc.load(out), xmtc.load(files / "model")
    assert m.labels_.names[:old.n_labels] == old.labels_.names
    assert m.labels_.index["fresh-label"] >= old.n_labels


def test_cli_learn_of_new_labels_names_them_and_warns_of_nothing(files, tmp_path, capsys):
    """New labels are what a learn is for: not the evaluation's warning that the file's labels are unknown to the
    model (every metric 0), but one line naming them."""
    rail = tmp_path / "railways.tsv"
    rail.write_text("railways\tsteam trains of finland\nrailways\tthe railway age\nrailways\tnarrow gauge\n",
                    encoding="utf-8")
    assert main(["learn", str(files / "model"), str(rail), "-o", str(tmp_path / "m"), "--log-level", "INFO"]) == 0
    err = capsys.readouterr().err
    assert "every metric" not in err and "xmtc.commands.learn: 1 new label: railways\n" in err
    assert main(["learn", str(files / "model"), str(rail), "-o", str(tmp_path / "m2"), "-q"]) == 0
    assert capsys.readouterr().err == ""
    assert xmtc.load(tmp_path / "m").labels_.names[-1] == "railways"


def test_cli_learn_in_place_is_atomic_when_it_fails_midway(files, tmp_path, monkeypatch, capsys):
    import shutil

    import xmtc.linear.solver as solver

    target = tmp_path / "model"
    shutil.copytree(files / "model", target)
    before = _digest(target)
    real, calls = solver.train_level, []

    def failing(*args, **kw):
        calls.append(1)
        if len(calls) == 2:  # the second level of the first tree
            raise MemoryError("simulated failure")
        return real(*args, **kw)

    monkeypatch.setattr(solver, "train_level", failing)
    assert main(["learn", str(target), str(files / "new.jsonl"), "-q"]) == 1
    assert len(calls) == 2
    assert _digest(target) == before
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temporary folder left behind
    monkeypatch.setattr(solver, "train_level", real)
    assert main(["learn", str(target), str(files / "new.jsonl"), "-q"]) == 0
    assert _digest(target) != before


def test_cli_learn_refuses_a_model_that_cannot_learn(files, monkeypatch, capsys):
    import xmtc.models

    class Neural:
        method = "lightxml"
        can_learn = False

    monkeypatch.setattr(xmtc.models, "load", lambda folder, **kw: Neural())
    assert main(["learn", str(files / "model"), str(files / "new.jsonl"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "lightxml" in err and "xr-linear" in err


def test_read_datasets_refuses_mixed_kinds_and_widths(files, tmp_path):
    from xmtc.data import Dataset, LabelVocab, read_datasets, write_dataset
    from xmtc.errors import DataFormatError

    vocab = LabelVocab(["a", "b"])
    Y = sp.csr_matrix(np.array([[1, 0], [0, 1]], dtype=np.float32))
    a, b = tmp_path / "X.a.npz", tmp_path / "X.b.npz"
    write_dataset(a, Dataset(None, sp.csr_matrix(np.eye(2, 3, dtype=np.float32)), Y, vocab))
    write_dataset(b, Dataset(None, sp.csr_matrix(np.eye(2, 4, dtype=np.float32)), Y, vocab))
    with pytest.raises(DataFormatError, match=r"X\.b\.npz.*4 feature columns.*X\.a\.npz has 3"):
        read_datasets([a, b])
    with pytest.raises(DataFormatError, match=r"X\.a\.npz.*feature vectors.*old\.tsv holds texts"):
        read_datasets([files / "old.tsv", a])
    ds = read_datasets([a, a])
    assert ds.X.shape == (4, 3) and ds.Y.shape == (4, 2)


def test_read_datasets_names_file_and_line_of_a_bad_line(files, tmp_path):
    from xmtc.data import read_datasets
    from xmtc.errors import DataFormatError

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok", "labels": ["a"]}\n{"text": 3}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"bad\.jsonl.*2"):
        read_datasets([files / "old.tsv", bad])


# -- the score calibration across a learn ---------------------------------------------------------------
def _two_band_calibration(counts):
    from xmtc.models.calibration import Calibration

    maps = [{"x": np.array([0.0]), "y": np.array([0.2])}, {"x": np.array([0.0]), "y": np.array([0.8])}]
    return Calibration("isotonic", np.array([10.0]), np.asarray(counts), maps)


def test_a_learn_rereads_each_labels_band_from_its_grown_count_against_scaled_edges():
    from xmtc.models.learning import carry_calibration
    from xmtc.models.calibration import TIE_BREAK

    cal = _two_band_calibration([12, 4])  # edge 10 over 100 documents: label 0 in band 1, label 1 in band 0
    # 100 more documents: label 0 gained nothing (12 of 200 <= 20: band 0), label 1 grew to 14 (band 0),
    # new label 2 has 15 (band 0; against the unscaled edge it would be band 1)
    carry_calibration(cal, np.array([12, 14, 15]), 100, 200)
    assert cal.edges.tolist() == [20.0]
    assert cal.label_counts.tolist() == [12, 14, 15]
    p = cal.probabilities(np.array([[0, 1, 2]]), np.array([[0.5, 0.5, 0.5]]))
    assert np.allclose(p, (1 - TIE_BREAK) * 0.2 + TIE_BREAK * 0.5)


def test_a_labels_band_stays_when_its_count_grows_with_the_documents():
    from xmtc.models.learning import carry_calibration

    cal = _two_band_calibration([12, 4])
    carry_calibration(cal, np.array([30, 8]), 100, 250)  # edge 25: 30 stays above, 8 below
    assert cal.edges.tolist() == [25.0]
    bands = np.searchsorted(cal.edges, cal.label_counts, side="left")
    assert bands.tolist() == [1, 0]


def test_the_calibration_counts_documents_of_the_fit_it_was_made_on():
    from xmtc.models.learning import docs_before

    assert docs_before(_two_band_calibration([60, 40]), np.array([60, 40]), 1000) == 1000.0  # the model's own
    cal = _two_band_calibration([45, 45])  # refitted on all 1,000 after calibrating on a 10% split
    assert docs_before(cal, np.array([50, 50]), 1000) == 900.0
    assert docs_before(None, np.array([50, 50]), 1000) == 1000.0


def test_learn_keeps_calibration_counts_and_scales_its_edges(small):
    from xmtc.models.calibration import calibrate

    model, texts, labels, cut = small
    m = _copy(model)
    calibrate(m, texts[cut:cut + 60], labels[cut:cut + 60], n_bands=3)
    edges, n_before = m.calibration_.edges.copy(), m.n_train_
    held = list(range(cut + 60, len(texts)))
    m.learn([texts[i] for i in held], [labels[i] + ["brand-new"] for i in held])
    assert m.n_train_ == n_before + len(held)
    assert np.array_equal(m.calibration_.label_counts, m.label_counts_)
    assert np.allclose(m.calibration_.edges, edges * (n_before + len(held)) / n_before)


def test_new_words_are_held_by_the_regulariser_alone_old_ones_by_the_anchor(small, monkeypatch):
    """The anchor stands for the old documents' pull; no old document holds a word first seen in the new ones,
    so its weight gets the fit's own regulariser: 1/anchor in the proximal refit's units."""

    model, texts, labels, cut = small
    from serve_support import update_calls

    calls = update_calls(monkeypatch)
    m = _copy(model).learn(texts[cut:], labels[cut:], anchor=5.0, whole_memory_refit=False, sampled_replay=False)
    d, grown = model.n_features_, m.n_features_
    h = calls[-1]["curvature"]
    assert grown > d and h.shape == (grown,)
    assert np.all(h[:d] == 1.0) and np.allclose(h[d:], 1 / 5.0)
    _copy(model).learn(texts[cut:], labels[cut:], anchor=5.0, whole_memory_refit=False, new_words=False)
    assert calls[-1]["curvature"] is None


def test_widened_weights_keep_every_weight_and_move_the_bias_row_past_the_new_features():
    from xmtc.linear.beam_edit import widened
    from xmtc.linear.update import widened_rows

    rng = np.random.default_rng(0)
    A = sp.random(7, 5, density=0.5, dtype=np.float32, random_state=1).toarray()
    A[6] = rng.normal(size=5)  # the bias row of d_old = 6 features
    W = sp.csc_matrix(A)
    V = widened(W, 9).toarray()
    assert V.shape == (10, 5)
    np.testing.assert_array_equal(V[:6], A[:6])
    np.testing.assert_array_equal(V[6:9], 0)
    np.testing.assert_array_equal(V[9], A[6])
    assert widened(W, 6) is W
    X = sp.random(4, 6, density=0.5, format="csr", dtype=np.float32, random_state=2)
    np.testing.assert_array_equal(widened_rows(X, 9).toarray(), np.hstack([X.toarray(), np.zeros((4, 3))]))
    with pytest.raises(ConfigError):
        widened(W, 5)


def test_learn_refuses_the_inputs_check_texts_refuses_in_its_words(small):
    from xmtc.errors import DataFormatError
    from xmtc.models.base import check_texts

    model = small[0]
    for bad in ("one string", ["a text", 3]):
        with pytest.raises(DataFormatError) as learned:
            _copy(model).learn(bad, [["x"], ["y"]])
        with pytest.raises(DataFormatError) as checked:
            check_texts(bad)
        assert str(learned.value) == str(checked.value)


# -- the sampled replay -----------------------------------------------------------------------------------
def _sampled_problem(seed=0, n=300, d=40, P=3, per=4):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.15, format="csr", random_state=seed, dtype=np.float32)
    parent_of = np.repeat(np.arange(P), per).astype(np.int32)
    K = parent_of.size
    Y = sp.random(n, K, density=0.08, format="csr", random_state=seed + 1, dtype=np.float32)
    Y.data[:] = 1.0
    active = sp.csr_matrix((rng.random((n, P)) < 0.5).astype(np.float32))
    active = sp.csr_matrix(((active + Y @ sp.csr_matrix((np.ones(K), (np.arange(K), parent_of)), shape=(K, P)))
                            > 0).astype(np.float32))
    W = sp.csc_matrix(rng.normal(0, 0.5, (d + 1, K)).astype(np.float32))
    return X, Y, active, parent_of, W


def _sampled_centre(X_s, Y_s, active_s, parent_of, init, bias, solver_kw, curvature=None) -> sp.csc_matrix:
    """The numpy reference of the centre the solver's kernel computes (``train_level(sample_rows=)``,
    ``update._refit_sampled``): ``c = w_old + H^-1 C grad loss(sample, w_old)`` of a proximal refit with a sampled
    replay, per column of ``init`` (the old weights, bias last; ``C``: ``solver_kw``'s ``C_pos`` / ``C_neg``, already
    divided by the anchor; ``H``: ``update._refit``'s holds, :data:`BIAS_ANCHOR` squared on the bias and
    ``curvature`` on the features), so that ``1/2 ||w - c||_H^2 + C loss(sample, w)`` has gradient 0 at
    ``w_old``. The loss is the squared hinge, ``max(0, 1 - y f)^2``, ``d/df = -2 y max(0, 1 - y f)``, over
    the rows ``active_s`` makes active for the node's parent and the node's positives (:func:`train_level`'s
    rule: under teacher forcing those are active already)."""
    from xmtc.linear.update import BIAS_ANCHOR

    W = sp.csc_matrix(init, dtype=np.float32)
    d = W.shape[0] - 1
    n = X_s.shape[0]
    # the rows with the bias feature appended, and everything per output as rows (csr): slices stay cheap
    Xb = sp.hstack([sp.csr_matrix(X_s, dtype=np.float32), sp.csr_matrix(np.full((n, 1), bias, dtype=np.float32))],
                   format="csr")
    Y_s = sp.csr_matrix(Y_s, dtype=np.float32)
    onehot = sp.csr_matrix((np.ones(parent_of.size, dtype=np.float32), (np.arange(parent_of.size), parent_of)),
                           shape=(parent_of.size, active_s.shape[1]))  # output k's parent
    A = sp.csc_matrix(sp.csr_matrix(active_s) + Y_s @ onehot)
    C_pos, C_neg = float(solver_kw.get("C_pos", 1.0)), float(solver_kw.get("C_neg", 1.0))
    order = np.argsort(parent_of, kind="stable")
    Wt = sp.csr_matrix(W.T)[order]  # (K, d + 1)
    Yt = sp.csr_matrix(Y_s.T)[order]  # (K, n)
    parents, starts = np.unique(parent_of[order], return_index=True)
    ends = np.r_[starts[1:], order.size]
    blocks = []
    for p, s0, s1 in zip(parents, starts, ends):
        rows = A.indices[A.indptr[p]:A.indptr[p + 1]]
        if rows.size == 0:
            blocks.append(sp.csr_matrix((s1 - s0, d + 1), dtype=np.float64))
            continue
        Xr = Xb[rows]
        f = (Wt[s0:s1] @ sp.csr_matrix(Xr.T)).toarray()  # (outputs, rows)
        y = 2.0 * Yt[s0:s1][:, rows].toarray() - 1.0
        grad = (-2.0 * y * np.maximum(0.0, 1.0 - y * f) * np.where(y > 0, C_pos, C_neg)).astype(np.float32)
        blocks.append(sp.csr_matrix(grad) @ Xr)
    G = sp.vstack(blocks, format="csr") if blocks else sp.csr_matrix((0, d + 1))
    hold = np.ones(d + 1) if curvature is None else np.r_[np.asarray(curvature, dtype=np.float64), 1.0]
    hold[d] = BIAS_ANCHOR ** 2 if solver_kw.get("bias", 1.0) else 1.0
    G.data = G.data / hold[G.indices]
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size)
    return sp.csc_matrix((Wt + G)[inverse].T, dtype=np.float32)


def test_sampled_centre_cancels_the_samples_gradient_at_the_old_weights():
    """Against the definition, summed row by row in numpy: the centred objective
    1/2 sum_j h_j (w_j - c_j)^2 + 1/2 BIAS_ANCHOR^2 (b - c_b)^2 + sum_i C_yi max(0, 1 - y_i (x_i w + bias b))^2
    over each output's rows (its parent's active rows) has gradient 0 at the old weights."""
    from xmtc.linear.update import BIAS_ANCHOR

    X, Y, active, parent_of, W = _sampled_problem()
    d = X.shape[1]
    h = np.r_[np.ones(d - 5), np.full(5, 0.25)]  # a grown vocabulary's new words, held more loosely
    kw = dict(C_pos=0.7, C_neg=0.3, bias=1.0)
    c = _sampled_centre(X, Y, active, parent_of, W, 1.0, kw, h).toarray().astype(np.float64)
    Xd, Yd, Ad, Wd = X.toarray().astype(np.float64), Y.toarray(), active.toarray(), W.toarray().astype(np.float64)
    hold = np.r_[h, BIAS_ANCHOR ** 2]
    for k, p in enumerate(parent_of):
        grad = hold * (Wd[:, k] - c[:, k])
        for i in np.flatnonzero(Ad[:, p]):
            y = 1.0 if Yd[i, k] > 0 else -1.0
            xi = np.r_[Xd[i], 1.0]
            slack = max(0.0, 1.0 - y * xi @ Wd[:, k])
            grad += (kw["C_pos"] if y > 0 else kw["C_neg"]) * -2.0 * y * slack * xi
        assert np.abs(grad).max() < 1e-4, k


def test_the_solvers_sampled_centre_is_the_reference_centre():
    """The kernel moves the centre block by block (``train_level(sample_rows=)``); the refit it gives equals the
    proximal refit around :func:`_sampled_centre`'s numpy centre, with new rows, a grown vocabulary's looser hold
    and the bias hold; a centre that drops the sample's gradient, or doubles it, is far from it."""
    from xmtc.linear.update import _refit, _refit_sampled

    X_s, Y_s, A_s, parent_of, W = _sampled_problem(seed=5)
    X_n, Y_n, A_n, _, _ = _sampled_problem(seed=6)
    d = X_s.shape[1]
    h = np.r_[np.ones(d - 5), np.full(5, 0.25)]
    kw = dict(C_pos=0.6, C_neg=0.4, bias=1.0, tol=1e-6, max_iter=5000, threshold=0.0)
    got = _refit_sampled(X_n, Y_n, A_n, X_s, Y_s, A_s, parent_of, W, 1.0, 1, kw, h).toarray()
    both = [sp.vstack([a, b], format="csr") for a, b in ((X_s, X_n), (Y_s, Y_n), (A_s, A_n))]
    centre = _sampled_centre(X_s, Y_s, A_s, parent_of, W, 1.0, kw, h)
    want = _refit(both[0], both[1], parent_of, both[2], centre, "proximal", 1, kw, h).toarray()
    np.testing.assert_allclose(got, want, atol=2e-4)
    assert np.abs(want - W.toarray()).max() > 0.05  # the new rows move the weights: the comparison has teeth
    for wrong in (W, sp.csc_matrix(2 * centre - W)):  # no shift; the shift doubled
        other = _refit(both[0], both[1], parent_of, both[2], wrong, "proximal", 1, kw, h).toarray()
        assert np.abs(other - got).max() > 0.01


def test_a_sampled_replay_without_new_rows_keeps_the_old_weights_the_unshifted_one_drifts():
    """The old weights minimise the old objective, so the sample may only add curvature: with no new row active
    the refit stays where it was. The sample replayed around the old weights themselves (the remembered rows
    added at weight 1, which lost P@1 on yso-finna-en: 35.76) moves them toward fitting the sample."""
    from xmtc.linear.update import _refit, _refit_sampled

    X, Y, active, parent_of, W = _sampled_problem(seed=3)
    kw = dict(C_pos=0.25, C_neg=0.25, bias=1.0, tol=1e-5, max_iter=2000, threshold=0.0)
    none = sp.csr_matrix((0, X.shape[1]), dtype=np.float32)
    out = _refit_sampled(none, sp.csr_matrix((0, Y.shape[1]), dtype=np.float32),
                         sp.csr_matrix((0, active.shape[1]), dtype=np.float32), X, Y, active, parent_of, W, 1.0, 1,
                         kw, None)
    assert np.abs((out - W).toarray()).max() < 1e-3
    unshifted = _refit(X, Y, parent_of, active, W, "proximal", 1, kw)
    assert np.abs((unshifted - W).toarray()).max() > 0.05


def test_learn_replays_a_sample_of_the_memory_unless_told_not_to(small, monkeypatch):
    from serve_support import update_calls

    from xmtc.models import learning

    model, texts, labels, cut = small
    calls = update_calls(monkeypatch)
    monkeypatch.setattr(learning, "SAMPLED_ROWS", 50)
    mem = model.memory_
    _copy(model).learn(texts[cut:], labels[cut:], anchor=4.0, whole_memory_refit=False)
    assert calls[-1]["sample"][0].shape[0] == 50
    assert np.isclose(calls[-1]["C_neg"], model.config.C_neg / (1 + 3.0 * (1 - 50 / mem.seen)))
    _copy(model).learn(texts[cut:], labels[cut:], anchor=4.0, whole_memory_refit=False, sampled_replay=False)
    assert calls[-1]["sample"] is None and np.isclose(calls[-1]["C_neg"], model.config.C_neg / 4.0)


def test_cli_learn_few_shot_chooses_the_flat_scorer(files, tmp_path):
    """``--few-shot``: chars (default) gives the stage a character featurizer, words a ranker on the model's own
    features, off no stage; anything else is refused by argparse. (The new file brings labels the 80% never had,
    a few of them on 2-5 documents: those join the stage.)"""
    kinds = {}
    for choice in ("chars", "words", "off"):
        out = tmp_path / choice
        assert main(["learn", str(files / "model"), str(files / "new.jsonl"), "-o", str(out), "-q",
                     "--few-shot", choice]) == 0
        stage = xmtc.load(out).few_shot_
        kinds[choice] = None if stage is None or not len(stage) else ("chars" if stage.chars is not None else "words")
    assert kinds == {"chars": "chars", "words": "words", "off": None}
    with pytest.raises(SystemExit):
        main(["learn", str(files / "model"), str(files / "new.jsonl"), "-q", "--few-shot", "bytes"])


def test_a_sampled_replay_refit_refuses_a_level_bias_that_is_not_the_solvers():
    """The kernel moves the centre with the solver's bias value (``solver_kw``): a level with another bias would get
    a centre for the wrong bias feature, so :func:`_refit_sampled` refuses it (a7b833b)."""
    from xmtc.linear.update import _refit_sampled

    X, Y, active, parent_of, W = _sampled_problem(seed=2, n=20)
    kw = dict(C_pos=1.0, C_neg=1.0, bias=1.0, tol=1e-3, max_iter=50, threshold=0.0)
    with pytest.raises(ConfigError, match="the level's bias 0.5 is not the solver's 1.0"):
        _refit_sampled(X, Y, active, X, Y, active, parent_of, W, 0.5, 1, kw, None)


def test_a_proximal_refit_without_a_bias_feature_is_the_solvers_own_and_keeps_the_old_bias_weight():
    """With ``bias=0`` the bias weight is in no loss term: there is nothing to hold harder (``b_hold`` 1), so
    :func:`_refit` is the solver's proximal refit itself, bit for bit, and each bias weight stays its old value
    exactly (a BIAS_ANCHOR round trip, ``b * 10 * 0.1`` in float32, moves some by an ulp)."""
    from xmtc.linear.solver import train_level
    from xmtc.linear.update import _refit

    X, Y, active, parent_of, W = _sampled_problem(seed=4, n=60)
    kw = dict(C_pos=1.0, C_neg=1.0, bias=0.0, tol=1e-4, max_iter=200, threshold=0.0)
    got = _refit(X, Y, parent_of, active, W, "proximal", 1, kw).toarray()
    want = train_level(X, Y, parent_of, active, init=W, warm="proximal", n_threads=1, **kw).toarray()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got[-1], W.toarray()[-1])
    assert np.abs(got[:-1] - W.toarray()[:-1]).max() > 0.01  # the feature weights did move


def test_update_refuses_a_sampled_replay_whose_rows_or_label_columns_do_not_fit(small):
    """A sampled replay needs one label row per sampled document and at most the model's label columns; either
    mismatch alone is refused before any refit."""
    model, texts, labels, cut = small
    h = model.models_[0]
    X = model.transform(texts[cut:cut + 3])
    Y, _ = xmtc.data.label_matrix(labels[cut:cut + 3], model.labels_)
    L = h.n_labels
    X_s = model.transform(texts[:4])
    for Y_s in (sp.csr_matrix((3, L), dtype=np.float32), sp.csr_matrix((4, L + 1), dtype=np.float32)):
        with pytest.raises(ConfigError, match="the sample has shape"):
            update(h, X, Y, warm="proximal", negatives="tfn", sample=(X_s, Y_s), threshold=0.05)


def test_a_sampled_replay_refits_on_the_samples_own_feature_rows(small, monkeypatch):
    """The sampled rows each level refits on are the sample's feature rows ``sample[0]`` (not its label rows)."""
    import xmtc.linear.update as upd

    model, texts, labels, cut = small
    h = model.models_[0]
    X = model.transform(texts[cut:cut + 3])
    Y, _ = xmtc.data.label_matrix(labels[cut:cut + 3], model.labels_)
    X_s = model.transform(texts[:6])
    Y_s, _ = xmtc.data.label_matrix(labels[:6], model.labels_)
    seen, real = [], upd._refit_sampled
    monkeypatch.setattr(upd, "_refit_sampled", lambda X_, Y_, a_, Xs, *rest: seen.append(Xs) or real(X_, Y_, a_, Xs,
                                                                                                       *rest))
    update(h, X, Y, warm="proximal", negatives="tfn", sample=(X_s, Y_s), threshold=0.05, n_threads=1)
    assert seen
    for Xs in seen:
        assert Xs.shape == X_s.shape and np.array_equal(Xs.toarray(), X_s.toarray())
