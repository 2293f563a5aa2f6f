"""Active learning strategies against their definitions on hand-made top-k scores."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

import xmtc
from xmtc.cli import main
from xmtc.errors import ConfigError
from xmtc.select import select_documents
from xmtc.select.strategies import coverage_scores, kcenter_greedy, pick_top, rank_mean, uncertainty_scores


def test_margin_and_entropy_by_hand():
    scores = np.array([[0.9, 0.1, 0.0], [0.5, 0.45, 0.05], [0.0, 0.0, 0.0], [0.4, 0.4, 0.2]])
    np.testing.assert_allclose(uncertainty_scores(scores, "margin"), [-0.8, -0.05, 0.0, 0.0])
    ent = uncertainty_scores(scores, "entropy")
    p1 = np.array([0.9, 0.1])
    p2 = np.array([0.5, 0.45, 0.05])
    p4 = np.array([0.4, 0.4, 0.2])
    np.testing.assert_allclose(ent, [-(p1 * np.log(p1)).sum(), -(p2 * np.log(p2)).sum(), np.log(3),
                                     -(p4 * np.log(p4)).sum()])
    assert pick_top(uncertainty_scores(scores, "margin"), 2).tolist() == [2, 3]  # ties: smaller index first
    assert pick_top(ent, 1).tolist() == [2]


def test_label_coverage_by_hand():
    idx = np.array([[0, 1], [2, -1], [1, 2]])
    scores = np.array([[0.5, 0.5], [0.3, 0.0], [0.2, 0.1]])
    counts = np.array([9, 0, 1])            # label 1 never labelled, label 2 once
    # row 0: .5/10 + .5/1 = .55 ; row 1: .3/2 = .15 ; row 2: .2/1 + .1/2 = .25
    np.testing.assert_allclose(coverage_scores(idx, scores, counts), [0.55, 0.15, 0.25])


def test_kcenter_greedy_by_hand():
    # points on a line (1-d after normalisation would collapse them, so use unit vectors at angles)
    ang = np.array([0.0, 0.1, 1.5, 3.0, 3.05])
    X = np.stack([np.cos(ang), np.sin(ang)], axis=1)
    # from labelled point at angle 0: farthest is angle 3.05, then from {0, 3.05}: angle 1.5
    lab = np.array([[1.0, 0.0]])
    assert kcenter_greedy(X, 2, labelled=lab).tolist() == [4, 2]
    Xs = sp.csr_matrix(X)
    assert kcenter_greedy(Xs, 2, labelled=sp.csr_matrix(lab)).tolist() == [4, 2]
    # without a labelled set: a seeded first point, then always the farthest; never a repeat
    picks = kcenter_greedy(X, 5, seed=1)
    assert sorted(picks.tolist()) == [0, 1, 2, 3, 4]
    d = lambda a, b: np.sum((X[a] - X[b]) ** 2)
    for i in range(1, 4):  # greedy property: each pick maximises the distance to the chosen set
        best = max(min(d(j, c) for c in picks[:i]) for j in range(5) if j not in picks[:i])
        assert min(d(picks[i], c) for c in picks[:i]) == pytest.approx(best)


def test_rank_mean():
    np.testing.assert_allclose(rank_mean(np.array([3.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0])), [1.0, 1.5, 0.5])


class FakeModel:
    """predict_topk from a fixed table: tests a strategy without training anything."""

    def __init__(self, idx, scores, counts, feats):
        self.idx, self.scores, self.label_counts_, self.feats = idx, scores, counts, feats

    def predict_topk(self, texts, k):
        rows = [int(t) for t in texts]
        return self.idx[rows, :k], self.scores[rows, :k]

    def transform(self, texts):
        return self.feats[[int(t) for t in texts]]


def test_select_documents_strategies_on_a_table():
    idx = np.array([[0, 1], [1, 2], [2, 0], [0, 2]])
    scores = np.array([[0.9, 0.1], [0.5, 0.49], [0.6, 0.1], [0.3, 0.2]])
    counts = np.array([100, 0, 4])
    feats = sp.csr_matrix(np.eye(4))
    model = FakeModel(idx, scores, counts, feats)
    texts = ["0", "1", "2", "3"]
    # margins 0.8, 0.01, 0.5, 0.1 -> most uncertain: 1, 3
    assert select_documents(model, texts, 2, "uncertainty", k=2) == [1, 3]
    # coverage: .9/101+.1/1 = .1089, .5/1+.49/5=.598, .6/5+.1/101=.121, .3/101+.2/5=.043
    assert select_documents(model, texts, 2, "label-coverage", k=2) == [1, 2]
    # hybrid: candidates = top 6 -> all 4 by mean rank; k-center from a seeded start picks distinct docs
    assert sorted(select_documents(model, texts, 4, "hybrid", k=2)) == [0, 1, 2, 3]
    r = select_documents(model, texts, 3, "random", seed=5)
    assert r == np.random.default_rng(5).choice(4, size=3, replace=False).tolist()
    assert select_documents(model, texts, 10, "uncertainty", k=2) == [1, 3, 2, 0]
    with pytest.raises(ConfigError, match="unknown strategy"):
        select_documents(model, texts, 2, "best")


@pytest.fixture(scope="module")
def fitted(reuters_small):
    (texts, labels), _ = reuters_small
    return xmtc.XRLinear(max_leaf_size=8, branching=4, n_threads=2).fit(texts[:800], labels[:800], progress=False)


def test_select_on_a_real_model_uses_its_topk(fitted, reuters_small):
    (texts, _), (pool, _) = reuters_small
    idx, scores = fitted.predict_topk(pool, 10)
    want = pick_top(coverage_scores(idx, scores, fitted.label_counts_), 20).tolist()
    assert select_documents(fitted, pool, 20, "label-coverage") == want
    div = select_documents(fitted, pool, 20, "diversity", labelled=texts[:800])
    assert div == kcenter_greedy(fitted.transform(pool), 20, labelled=fitted.transform(texts[:800])).tolist()


def test_cli_select_writes_jsonl_that_train_reads(fitted, reuters_small, tmp_path, capsys):
    from xmtc.data import read_dataset

    fitted.save(tmp_path / "m")
    pool = reuters_small[1][0][:100]
    (tmp_path / "pool.txt").write_text("\n".join(t.replace("\n", " ") for t in pool) + "\n")
    out = tmp_path / "to_label.jsonl"
    assert main(["select", str(tmp_path / "m"), str(tmp_path / "pool.txt"), "-n", "7", "--strategy", "uncertainty",
                 "-k", "3", "-o", str(out), "-q"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    texts = [t.replace("\n", " ") for t in pool]
    chosen = select_documents(fitted, texts, 7, "uncertainty", k=3)
    assert [r["pool_line"] - 1 for r in rows] == chosen
    assert all(r["text"] == texts[r["pool_line"] - 1] and r["labels"] == [] and len(r["suggested"]) <= 3 for r in rows)
    ds = read_dataset(out)  # the annotation file is valid training input
    assert len(ds) == 7
    assert main(["train", str(out), "-o", str(tmp_path / "m2"), "-q"]) == 2  # ... once someone has labelled it
    assert "no document has a label" in capsys.readouterr().err
    rows[0]["labels"] = rows[0]["suggested"][:1]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["train", str(out), "-o", str(tmp_path / "m2"), "-q", "--max-leaf-size", "4"]) == 0
    assert main(["select", str(tmp_path / "m"), str(tmp_path / "pool.txt"), "-n", "0", "-o", str(out)]) == 2
    assert "-n must be a positive integer" in capsys.readouterr().err
