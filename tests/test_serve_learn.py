"""``xmtc serve --allow-learn``: Annif's learn endpoint, driven by Annif's own Python client."""

from __future__ import annotations

import gzip

import pytest

import xmtc
from xmtc.cli import main
from xmtc.data import sample_path

from serve_support import Server, build_model

annif_client = pytest.importorskip("annif_client")
requests = pytest.importorskip("requests")


def unseen_docs(n: int, offset: int = 3):
    """``n`` sample documents the served model was not trained on (``build_model`` takes every 8th)."""
    texts, labels = [], []
    with gzip.open(sample_path("train"), "rt", encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i % 8 != offset:
                continue
            lab, text = line.rstrip("\n").split("\t", 1)
            texts.append(text)
            labels.append([x for x in lab.split(",") if x])
            if len(texts) == n:
                break
    return texts, labels


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("serve-learn") / "yso")


def _p_at_1(client, project, texts, uris):
    hits = 0
    for text, truth in zip(texts, uris):
        results = client.suggest(project, text, limit=1)
        hits += bool(results) and results[0]["uri"] in truth
    return 100.0 * hits / len(texts)


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    """One ``xmtc serve --allow-learn`` on a copy of the model, for the tests that learn."""
    import shutil

    folder = tmp_path_factory.mktemp("served") / "yso"
    shutil.copytree(model_dir, folder)
    with Server(str(folder), "--allow-learn") as srv:
        srv.folder = folder
        yield srv


def _learn_and_compare(server, n, offset=3):
    model = xmtc.load(server.folder)
    texts, labels = unseen_docs(n, offset)
    vocab = model.labels_
    uri = {name: vocab.uri(j) for j, name in enumerate(vocab.names)}
    docs = [{"text": t, "subjects": [{"uri": uri.get(x, x), "label": x} for x in ls]} for t, ls in zip(texts, labels)]
    truth = [{uri.get(x, x) for x in ls} for ls in labels]
    client = annif_client.AnnifClient(api_base=server.url + "/v1/")
    before = _p_at_1(client, "yso", texts, truth)
    response = client.learn("yso", docs)
    assert response.status_code == 204 and response.content == b""
    after = _p_at_1(client, "yso", texts, truth)
    return before, after


def test_learning_through_annifs_client_improves_the_served_suggestions(server):
    labels_before = xmtc.load(server.folder).n_labels
    before, after = _learn_and_compare(server, 60)
    assert after >= before + 10, (before, after)
    assert xmtc.load(server.folder).n_labels >= labels_before  # the folder holds the learned model


@pytest.mark.slow
def test_learning_300_documents_lifts_p_at_1_by_ten_points(server):
    before, after = _learn_and_compare(server, 300, offset=1)
    assert after >= before + 10, (before, after)


def test_a_new_subject_becomes_a_label_the_server_suggests(server):
    texts, _ = unseen_docs(10, offset=5)
    texts = [t + " quasarwidget" for t in texts]
    new_uri = "http://example.org/subjects/quasar-widgets"
    client = annif_client.AnnifClient(api_base=server.url + "/v1/")
    client.learn("yso", [{"text": t, "subjects": [{"uri": new_uri, "label": "Quasar widgets"}]} for t in texts])
    top = [client.suggest("yso", t, limit=1)[0] for t in texts]
    assert sum(r["uri"] == new_uri for r in top) >= 8
    assert any(r["label"] == "Quasar widgets" for r in top)
    assert client.get_project("yso")["vocab"]["size"] == xmtc.load(server.folder).n_labels


def test_bad_bodies_get_400_and_skipped_documents_204(server):
    import httpx

    url = server.url + "/v1/projects/yso/learn"
    assert httpx.post(url, json={"text": "not a list"}).status_code == 400
    assert httpx.post(url, json=[{"text": "x", "subjects": [{"label": "no uri"}]}]).status_code == 400
    assert httpx.post(url, json=[{"text": "no subjects key"}]).status_code == 204
    client = annif_client.AnnifClient(api_base=server.url + "/v1/")
    with pytest.raises(ValueError, match="not found"):
        client.learn("nope", [])


def test_learn_is_forbidden_without_allow_learn(model_dir):
    from fastapi.testclient import TestClient

    from xmtc.serve.app import create_app

    with TestClient(create_app({"yso": str(model_dir)})) as c:
        r = c.post("/v1/projects/yso/learn", json=[{"text": "x", "subjects": [{"uri": "p1"}]}])
    assert r.status_code == 403 and r.json()["title"] == "Learning not allowed"


def test_allow_learn_needs_one_worker(model_dir, capsys):
    assert main(["serve", str(model_dir), "--allow-learn", "--workers", "2", "-q"]) == 2
    assert "--allow-learn needs --workers 1" in capsys.readouterr().err
