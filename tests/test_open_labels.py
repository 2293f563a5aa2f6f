"""Open label sets for the methods that learn labels from documents: the label-text route, `labels add`
and `labels remove` (xmtc/models/label_route.py, xmtc/models/open_labels.py)."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

import xmtc
from xmtc.cli import main
from xmtc.features.tfidf import TfidfFeaturizer
from xmtc.models.label_route import LabelRoute, merge_topk
from xmtc.models.route_prior import unseen_mass

from serve_support import write_open_split


def test_merge_topk_keeps_the_best_of_both_and_a_duplicate_once():
    ia = np.array([[3, 1, -1], [0, 2, 4]])
    sa = np.array([[0.9, 0.2, 0.0], [0.5, 0.4, 0.1]], dtype=np.float32)
    ib = np.array([[7, 1], [-1, -1]])
    sb = np.array([[0.3, 0.6], [0.0, 0.0]], dtype=np.float32)
    idx, sc = merge_topk(ia, sa, ib, sb, 3)
    assert idx.tolist() == [[3, 1, 7], [0, 2, 4]]           # label 1 once, with its higher score 0.6
    np.testing.assert_allclose(sc, [[0.9, 0.6, 0.3], [0.5, 0.4, 0.1]], rtol=1e-6)


def test_route_scores_by_cosine_through_the_fitted_map():
    f = TfidfFeaturizer(min_df=1).fit(["steam trains", "railway history", "bird watching", "lapland birds"])
    route = LabelRoute(np.array([5, 9]), f.transform(["steam trains", "bird watching"]),
                       np.array([0.0, 0.5, 1.0]), np.array([0.1, 0.3, 0.8]), f)
    ids, p = route.topk(["steam trains", "railway history"], 2)
    cos = (f.transform(["steam trains"]) @ f.transform(["steam trains"]).T).toarray()[0, 0]
    assert ids[0, 0] == 5 and p[0, 0] == pytest.approx(np.interp(cos, [0, 0.5, 1], [0.1, 0.3, 0.8]), rel=1e-5)
    # "railway history" shares no word with either label text: cosine 0 is no evidence, no suggestion
    assert ids[1].tolist() == [-1, -1] and p[1].tolist() == [0.0, 0.0]


def test_route_map_is_fitted_on_seen_labels_as_if_unseen():
    f = TfidfFeaturizer(min_df=1).fit(["alpha beta", "gamma delta", "alpha", "gamma"])
    texts = ["alpha beta", "gamma delta", "", "zeta"]     # labels 0, 1 seen; 2 (no text) and 3 (no docs)
    counts = np.array([5, 5, 5, 0])
    valid = ["alpha beta", "gamma delta", "alpha beta", "gamma"]
    Y = sp.csr_matrix(np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 1, 0, 0], [0, 1, 0, 0]], dtype=np.float32))
    route = LabelRoute.fit(f, texts, counts, valid, Y)
    assert route.label_ids.tolist() == [3]                 # only the label with a text and no document
    # the map's points (cosine, right): "alpha beta" -> label 0 (1, yes), (1, no); "gamma delta" -> 1 (1, yes);
    # "gamma" -> 1 (c < 1, yes). Pool-adjacent-violators pools them all (1 above 2/3): 3 right of 4, whose
    # Laplace step is (3 + 1) / (4 + 2) = 2/3, odds 2.
    assert route.map_odds(np.array([1.0]))[0] == pytest.approx(2.0)
    # the prior: no validation occurrence of an unseen label, no unlabelled text: m = 1 / (4 + 2); S = 2 seen
    # labels with a text, U = 1 routed: rho = (1/6) / (5/6) * 2 / 1 = 0.4; odds 0.8, P = 0.8 / 1.8 = 4/9
    assert route.unseen_mass == pytest.approx(1 / 6) and route.prior_ratio() == pytest.approx(0.4)
    assert route.probabilities(np.array([1.0]))[0] == pytest.approx(4 / 9)
    assert route.probabilities(np.array([0.0]))[0] == 0.0
    # the same labels one column on (column 0: a label without a text): the seen labels are columns 1 and 2,
    # and the map reads those columns (not the seen labels' positions 0 and 1): the same map
    Y_on = sp.csr_matrix(np.array([[0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 0], [0, 0, 1, 0]], dtype=np.float32))
    on = LabelRoute.fit(f, ["", "alpha beta", "gamma delta", "zeta"], counts, valid, Y_on)
    assert on.map_odds(np.array([1.0]))[0] == pytest.approx(2.0) and on.label_ids.tolist() == [3]


def test_unseen_mass_counts_unseen_occurrences_and_unlabelled_texts():
    Y = sp.csr_matrix(np.array([[1, 0, 0, 0], [0, 0, 1, 1], [0, 0, 0, 0], [1, 1, 0, 0]], dtype=np.float32))
    # label 2 has no document in the fitting part, column 3 is beyond its labels: u = 2 of N = 5; z = 1
    assert unseen_mass(Y, np.array([3, 1, 0])) == pytest.approx((2 + 1 + 1) / (5 + 1 + 2))
    assert unseen_mass(Y[[0, 3]], np.array([3, 1, 0])) == pytest.approx(1 / (3 + 2))


def test_the_prior_splits_the_mass_among_the_routed_labels_and_a_learned_one_takes_its_share():
    f = TfidfFeaturizer(min_df=1).fit(["steam trains", "bird watching", "old maps", "sea shells"])
    route = LabelRoute(np.array([5, 9]), f.transform(["steam trains", "bird watching"]), np.array([0.0, 1.0]),
                       np.array([0.5, 0.5]), f, unseen_mass=0.2, seen_labels=8)
    assert route.prior_ratio() == pytest.approx(0.2 / 0.8 * 8 / 2)
    route.add([11, 12], ["old maps", "sea shells"])          # twice the labels: half the share each
    assert route.prior_ratio() == pytest.approx(0.2 / 0.8 * 8 / 4)
    route.remove([11])                                       # learned: it leaves with its share of m
    assert route.unseen_mass == pytest.approx(0.15) and route.prior_ratio() == pytest.approx(0.15 / 0.85 * 8 / 3)


@pytest.fixture(scope="module")
def open_split(tmp_path_factory):
    """2,000 sample titles with a fifth of their labels stripped (the documents stay), and label files."""
    d = tmp_path_factory.mktemp("open")
    rows, unseen, header, keep = write_open_split(d, 2000)
    (d / "seen.tsv").write_text("\n".join([header] + [ln for ln in keep if ln.split("\t")[0] not in unseen]) + "\n")
    (d / "new.tsv").write_text("\n".join([header] + [ln for ln in keep if ln.split("\t")[0] in unseen]) + "\n")
    texts = {ln.split("\t")[0]: ln.split("\t")[3] for ln in keep}
    return d, sorted(unseen), texts


def _suggested(model, text, k=10):
    idx, _ = model.predict_topk([text], k)
    return [model.labels_.names[j] for j in idx[0] if j >= 0]


def test_label_file_labels_without_documents_are_suggested_from_their_text(open_split):
    d, unseen, texts = open_split
    assert main(["train", str(d / "train.tsv"), "--label-file", str(d / "all.tsv"), "-o", str(d / "m_all"),
                 "--n-trees", "1", "-q"]) == 0
    model = xmtc.load(d / "m_all")
    assert set(unseen) <= set(model.labels_.names) and all(model.label_counts_[model.labels_.index[u]] == 0
                                                            for u in unseen)
    found = sum(u in _suggested(model, texts[u]) for u in unseen)
    assert found >= 0.8 * len(unseen)  # a text that is the label's own text finds it
    manifest = json.loads((d / "m_all" / "manifest.json").read_text())
    assert "label-route" in [st["name"] for st in manifest["stages"]]


def test_labels_add_then_remove(open_split, capsys):
    d, unseen, texts = open_split
    assert main(["train", str(d / "train.tsv"), "--label-file", str(d / "seen.tsv"), "-o", str(d / "m"),
                 "--n-trees", "1", "-q"]) == 0
    before = xmtc.load(d / "m")
    assert not set(unseen) & set(before.labels_.names)
    assert main(["labels", "add", str(d / "m"), str(d / "new.tsv"), "-q"]) == 0
    after = xmtc.load(d / "m")
    assert after.labels_.names[:len(before.labels_)] == before.labels_.names
    assert set(unseen) <= set(after.labels_.names) and after.label_counts_.shape == (len(after.labels_),)
    u = unseen[0]
    assert u in _suggested(after, texts[u]) and after.labels_.display_name(after.labels_.index[u])
    # texts whose best added label scores below the old model's fifth suggestion keep the old model's
    # suggestions and scores exactly; the others gain an added label only above their old fifth score
    pool = [line.split("\t", 1)[1] for line in (d / "train.tsv").read_text().splitlines()[:300]]
    idx0, sc0 = before.predict_topk(pool, 5)
    idx1, sc1 = after.predict_topk(pool, 5)
    best_added = after.label_route_.topk(pool, 1)[1][:, 0]
    untouched = best_added <= sc0[:, 4]
    assert 20 < untouched.sum() < len(pool)
    # (labels of the label file without a document keep their place but score lower: the mass of labels without
    # documents is shared by more of them, Calibration.unseen_ratio)
    documented = before.label_counts_ > 0
    for i in np.flatnonzero(untouched):
        keep0, keep1 = documented[idx0[i]], documented[idx1[i]]
        assert idx0[i][keep0].tolist() == idx1[i][keep1].tolist() and np.array_equal(sc0[i][keep0], sc1[i][keep1])
    assert before.calibration_.unseen_ratio(before.label_counts_) > after.calibration_.unseen_ratio(after.label_counts_)
    new_ids = set(after.label_route_.label_ids.tolist())
    for i in np.flatnonzero(~untouched):
        added = [j for j in idx1[i] if j in new_ids]
        assert added and min(sc1[i][np.isin(idx1[i], added)]) > sc0[i, 4]
    # the same labels again: known, nothing changes; removing masks one for good
    capsys.readouterr()
    assert main(["labels", "add", str(d / "m"), str(d / "new.tsv"), "-q"]) == 0
    assert capsys.readouterr().out == f"added 0, updated 0, unchanged {len(unseen)} labels\n"
    (d / "ids.txt").write_text(u + "\n")
    assert main(["labels", "remove", str(d / "m"), str(d / "ids.txt"), "-q"]) == 0
    removed = xmtc.load(d / "m")
    assert u not in _suggested(removed, texts[u], k=20)
    idx, _ = removed.predict_topk([texts[u]], 5)
    assert (idx[0] >= 0).sum() == 5  # still k suggestions: the masked one is replaced, not left out
    capsys.readouterr()


def test_a_label_without_text_is_routed_by_its_name_and_one_with_neither_is_not_routed_and_said_so(
        open_split, capsys):
    """The training rule (``read_label_file`` + ``LabelRoute.fit``): a label's text, else its display name;
    with neither it is not routed. ``labels add`` follows it whatever columns the new labels come with
    (a file with empty cells, a vocabulary without a names column), and so does the saved model."""
    from xmtc.data import LabelVocab
    from xmtc.models.open_labels import add_labels

    d, unseen, texts = open_split
    header = "#id\turi\tprefLabel\tlabel_text"
    (d / "anon.tsv").write_text(f"{header}\np-named\t\tmedieval castles\t\np-anon\t\t\t\n", encoding="utf-8")
    assert main(["train", str(d / "train.tsv"), "--label-file", str(d / "seen.tsv"), "-o", str(d / "m_anon"),
                 "--n-trees", "1", "-q"]) == 0
    capsys.readouterr()
    assert main(["labels", "add", str(d / "m_anon"), str(d / "anon.tsv"), "-q"]) == 0   # not refused as a whole
    out = capsys.readouterr().out
    assert out.startswith("added 2, updated 0, unchanged 0 labels") and "1 without a name or text" in out
    model = xmtc.load(d / "m_anon")
    named, anon = model.labels_.index["p-named"], model.labels_.index["p-anon"]
    routed = dict(zip(model.label_route_.label_ids.tolist(), range(len(model.label_route_))))
    assert named in routed and anon not in routed
    assert model.labels_.texts[named] == "medieval castles" and model.labels_.texts[anon] == ""
    want = model.label_route_.featurizer.transform(["medieval castles"]).toarray()[0]
    np.testing.assert_allclose(model.label_route_.M[routed[named]].toarray()[0], want, rtol=1e-6)
    assert "p-named" in _suggested(model, "medieval castles", 5) and "p-anon" not in _suggested(model, "p-anon", 50)
    # the same through the API with no names column: the id is not a text, the label is not routed either
    n_routed = len(model.label_route_)
    changes = add_labels(model, LabelVocab(["p-bare"]))
    assert changes.added == 1 and changes.unrouted == 1 and len(model.label_route_) == n_routed
    assert model.labels_.texts[-1] == "" and "p-bare" not in _suggested(model, "p-bare", 50)
    # a known label without text given a name later (names column only) is routed by that name, as in training
    changes = add_labels(model, LabelVocab(["p-anon"], display=["wooden sailing boats"]))
    assert changes.updated == 1 and changes.unrouted == 0
    assert anon in model.label_route_.label_ids.tolist() and model.labels_.texts[anon] == "wooden sailing boats"
    assert "p-anon" in _suggested(model, "wooden sailing boats", 5)
    model.save(d / "m_anon2")
    loaded = xmtc.load(d / "m_anon2")
    assert loaded.label_route_.label_ids.tolist() == model.label_route_.label_ids.tolist()
    assert loaded.labels_ == model.labels_


def test_serve_reloads_a_rewritten_folder_and_answers_for_new_labels_with_their_uris(open_split, tmp_path):
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    import shutil
    import time

    from fastapi.testclient import TestClient

    from xmtc.serve.app import create_app
    from xmtc.serve.config import ServeConfig

    d, unseen, texts = open_split
    folder = tmp_path / "served"
    if not (d / "m_seen").exists():
        assert main(["train", str(d / "train.tsv"), "--label-file", str(d / "seen.tsv"), "-o", str(d / "m_seen"),
                     "--n-trees", "1", "-q"]) == 0
    shutil.copytree(d / "m_seen", folder)
    u = unseen[1]
    uri = next(ln.split("\t")[1] for ln in (d / "new.tsv").read_text().splitlines() if ln.startswith(u + "\t"))

    def uris(client):
        r = client.post("/v1/projects/p/suggest", data={"text": texts[u], "limit": 10})
        assert r.status_code == 200
        return [x["uri"] for x in r.json()["results"]]

    with TestClient(create_app({"p": str(folder)}, ServeConfig(reload_s=0.1, batch_wait_ms=0.0))) as client:
        assert uri not in uris(client)
        assert main(["labels", "add", str(folder), str(d / "new.tsv"), "-q"]) == 0
        deadline = time.monotonic() + 20
        while uri not in uris(client) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert uri in uris(client)
