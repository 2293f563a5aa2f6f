"""``xmtc serve``: the Annif-compatible API, its errors, micro-batching, the pages' API, the command."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the serve extra (fastapi) is not installed")
httpx = pytest.importorskip("httpx", reason="httpx is not installed")
from fastapi.testclient import TestClient  # noqa: E402

import xmtc  # noqa: E402
from xmtc.serve.app import create_app  # noqa: E402
from xmtc.serve.batching import MicroBatcher  # noqa: E402
from xmtc.serve.config import ServeConfig  # noqa: E402
from xmtc.serve.registry import project_specs  # noqa: E402

from serve_support import Server, build_model  # noqa: E402

TEXT = "History of the Finnish railways and their locomotives"
ANNIF_PROJECT_KEYS = ["project_id", "name", "language", "backend", "vocab", "vocab_language", "is_trained",
                      "modification_time"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("serve") / "yso-sample")


@pytest.fixture(scope="module")
def model(model_dir):
    return xmtc.load(model_dir)


@pytest.fixture(scope="module")
def client(model_dir):
    app = create_app({"yso": str(model_dir)}, ServeConfig(batch_wait_ms=0.0))
    with TestClient(app) as c:
        yield c


def expected(model, text, k, threshold=0.0):
    """The API's answer by definition: predict_topk, drop padding and scores <= 0 or < threshold."""
    idx, scores = model.predict_topk([text], k)
    lab = model.labels_
    return [{"uri": lab.uris[j] or lab.names[j], "label": lab.display[j] or lab.names[j], "notation": None,
             "score": float(s)} for j, s in zip(idx[0], scores[0]) if j >= 0 and s > 0 and s >= threshold]


def is_problem(resp, status):
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    body = resp.json()
    assert body["status"] == status and body["title"] and body["detail"] and body["type"] == "about:blank"
    return body


# -- read-only endpoints ------------------------------------------------------------------------------
def test_info_projects_and_vocabs(client, model, model_dir):
    assert client.get("/v1/").json()["version"] == xmtc.__version__
    projects = client.get("/v1/projects").json()["projects"]
    assert [p["project_id"] for p in projects] == ["yso"]
    one = client.get("/v1/projects/yso").json()
    assert one == projects[0] and list(one) == ANNIF_PROJECT_KEYS
    assert one["backend"] == {"backend_id": "xr-linear"} and one["is_trained"] is True
    assert one["vocab"] == {"vocab_id": "yso", "languages": ["en"], "size": len(model.labels_), "loaded": True}
    mtime = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((model_dir / "manifest.json").stat().st_mtime))
    assert one["modification_time"] == mtime
    assert client.get("/v1/vocabs").json() == {"vocabs": [one["vocab"]]}
    assert "/v1/projects/{project_id}/suggest" in client.get("/openapi.json").json()["paths"]
    assert client.get("/docs").status_code == 200


# -- suggest --------------------------------------------------------------------------------------------
def test_suggest_is_predict_topk_with_uris(client, model):
    resp = client.post("/v1/projects/yso/suggest", data={"text": TEXT})
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/json"
    results = resp.json()["results"]
    assert results == expected(model, TEXT, 10)          # Annif's default limit is 10
    assert len(results) == 10 and all(r["uri"].startswith("http://www.yso.fi/onto/yso/p") for r in results)
    j = model.labels_.index[results[0]["uri"].rsplit("/", 1)[1]]
    assert results[0]["label"] == model.labels_.display[j] != ""


def test_suggest_limit_threshold_and_metadata(client, model):
    full = expected(model, TEXT, 10)
    r = client.post("/v1/projects/yso/suggest", data={"text": TEXT, "limit": "3"}).json()["results"]
    assert r == full[:3]
    cut = (full[2]["score"] + full[3]["score"]) / 2
    r = client.post("/v1/projects/yso/suggest", data={"text": TEXT, "threshold": str(cut)}).json()["results"]
    assert r == full[:3]
    assert client.post("/v1/projects/yso/suggest", data={"text": TEXT, "limit": "0"}).json() == {"results": []}
    r = client.post("/v1/projects/yso/suggest", data={"text": TEXT, "limit": "2", "language": "en",
                                                      "metadata_title": "x", "project": "yso"}).json()
    assert r["results"] == full[:2]
    multipart = client.post("/v1/projects/yso/suggest", files={"text": (None, TEXT), "limit": (None, "2")})
    assert multipart.json()["results"] == full[:2]                 # curl -F works too (FastAPI's route)...
    form = client.post("/v1/projects/yso/suggest", data={"text": TEXT, "limit": "2"})  # ...the fast path:
    assert form.content == multipart.content and form.headers["content-type"] == multipart.headers["content-type"]
    big = client.post("/v1/projects/yso/suggest", data={"text": TEXT, "limit": str(10**9)}).json()["results"]
    assert big == expected(model, TEXT, len(model.labels_))


def test_suggest_batch_shapes_and_document_ids(client, model):
    docs = [{"text": TEXT, "document_id": "a"}, {"text": "Birds of Lapland"}, {"text": "", "document_id": "e"}]
    resp = client.post("/v1/projects/yso/suggest-batch?limit=4&threshold=0.0", json={"documents": docs})
    assert resp.status_code == 200
    out = resp.json()
    assert [d["document_id"] for d in out] == ["a", None, "e"]
    for d, doc in zip(out, docs):
        # a text with no word the model knows (the empty one) is flagged, an extra key Annif's clients ignore
        assert list(d) == (["results", "warning", "document_id"] if doc["text"] == "" else ["results", "document_id"])
        assert d["results"] == expected(model, doc["text"], 4)
    assert "vocabulary" in out[2]["warning"]
    assert client.post("/v1/projects/yso/suggest-batch", json={"documents": []}).json() == []


# -- errors: every bad request is a 4xx problem+json -----------------------------------------------------
BAD_SUGGEST = [
    ({}, 400, "text"),                                              # no text
    ({"text": TEXT, "limit": "-1"}, 400, "limit"),
    ({"text": TEXT, "limit": "ten"}, 400, "limit"),
    ({"text": TEXT, "threshold": "1.5"}, 400, "threshold"),
    ({"text": TEXT, "threshold": "nan"}, 400, "threshold"),
    ({"text": TEXT, "language": "fi"}, 400, 'language "fi" not supported'),
    ("text=%ff%fe", 400, "not UTF-8"),
]


@pytest.mark.parametrize("form,status,word", BAD_SUGGEST)
def test_suggest_bad_form(client, form, status, word):
    if isinstance(form, str):  # raw bytes of a form body
        resp = client.post("/v1/projects/yso/suggest", content=form,
                           headers={"content-type": "application/x-www-form-urlencoded"})
    else:
        resp = client.post("/v1/projects/yso/suggest", data=form)
    assert word in is_problem(resp, status)["detail"]


@pytest.mark.parametrize("body,word", [
    (b'{"documents": [{"text": ', "not valid JSON"),
    (b'[1, 2]', "request body: Input should be a valid dictionary"),
    (b'{"documents": "text"}', "documents"),
    (b'{"documents": [{"document_id": "x"}]}', "text"),
    (b'{"documents": [{"text": 5}]}', "text"),
    (json.dumps({"documents": [{"text": "a"}] * 33}).encode(), "documents"),
    (b'{"documents": [{"text": "a"}]}\xff', "parsing the body"),
])
def test_suggest_batch_bad_json(client, body, word):
    resp = client.post("/v1/projects/yso/suggest-batch", content=body, headers={"content-type": "application/json"})
    assert word in is_problem(resp, 400)["detail"]


def test_suggest_batch_bad_query(client):
    is_problem(client.post("/v1/projects/yso/suggest-batch?limit=-1", json={"documents": []}), 400)
    is_problem(client.post("/v1/projects/yso/suggest-batch?threshold=2", json={"documents": []}), 400)


def test_unknown_project_path_method_and_learn(client):
    for resp in (client.get("/v1/projects/nope"), client.post("/v1/projects/nope/suggest", data={"text": "x"}),
                 client.post("/v1/projects/nope/suggest-batch", json={"documents": []})):
        assert is_problem(resp, 404)["detail"] == "Project 'nope' not found"
    is_problem(client.get("/v1/no-such-path"), 404)
    is_problem(client.get("/v1/projects/yso/suggest"), 405)
    body = is_problem(client.post("/v1/projects/yso/learn", json=[{"text": "x", "subjects": []}]), 403)
    assert body["title"] == "Learning not allowed"


def test_body_limit_413(client):
    big = "a" * (10 * 1024 * 1024)
    assert "over the limit" in is_problem(client.post("/v1/projects/yso/suggest", data={"text": big}), 413)["detail"]

    def chunks():  # no Content-Length: the limit is enforced while reading
        for _ in range(11):
            yield b"a" * (1024 * 1024)
    resp = client.post("/v1/projects/yso/suggest-batch", content=chunks(), headers={"content-type": "application/json"})
    is_problem(resp, 413)


def test_model_that_cannot_read_text_is_503(model):
    X = model.transform(["a text", "another text"])
    feat = xmtc.XRLinear(max_leaf_size=32).fit(X, [["p3"], ["p4"]], progress=False)
    with TestClient(create_app({"feat": feat})) as c:
        body = is_problem(c.post("/v1/projects/feat/suggest", data={"text": "x"}), 503)
        assert "precomputed features" in body["detail"]


# -- micro-batching ----------------------------------------------------------------------------------------
class CountingModel:
    """A model whose predict_topk records each call's batch size (the batching under test is real)."""

    def __init__(self, model):
        self.model, self.calls, self.labels_, self.method = model, [], model.labels_, model.method

    def predict_topk(self, texts, k):
        self.calls.append(len(texts))
        return self.model.predict_topk(texts, k)


def _concurrent(client, texts, path="/v1/projects/yso/suggest"):
    out = [None] * len(texts)
    barrier = threading.Barrier(len(texts))

    def one(i):
        barrier.wait()
        out[i] = client.post(path, data={"text": texts[i], "limit": str(3 + i % 4)})
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_concurrent_requests_share_one_predict_call(model):
    counting = CountingModel(model)
    texts = [f"{TEXT} {i}" if i % 2 else f"Birds of Lapland, part {i}" for i in range(12)]
    app = create_app({"yso": counting}, ServeConfig(batch_size=12, batch_wait_ms=2000.0))
    assert counting.calls == [1]                           # the warm-up call, before any request
    with TestClient(app) as c:
        counting.calls.clear()
        resps = _concurrent(c, texts)
        assert counting.calls == [12]                      # twelve requests, one predict call
        for i, r in enumerate(resps):                      # each got its own row, cut to its own limit
            assert r.json()["results"] == expected(model, texts[i], 3 + i % 4)
        counting.calls.clear()
        c.post("/v1/projects/yso/suggest", data={"text": TEXT})  # a lone request: scored alone when the
        assert counting.calls == [1]                                # window closes...
    app = create_app({"yso": counting}, ServeConfig(batch_wait_ms=0.0))
    with TestClient(app) as c:
        counting.calls.clear()
        t0 = time.perf_counter()
        c.post("/v1/projects/yso/suggest", data={"text": TEXT})
        assert counting.calls == [1] and time.perf_counter() - t0 < 1.0  # ...and with no window, at once


def test_batcher_slices_errors_and_drains():
    async def main():
        calls = []

        def predict(texts, k):
            calls.append((list(texts), k))
            if "boom" in texts:
                raise ValueError("boom")
            n = len(texts)
            return np.arange(n * k, dtype=np.int32).reshape(n, k), np.ones((n, k), np.float32)
        b = MicroBatcher(predict, max_batch=3, max_wait_s=0.05)
        await b.start()
        rows = await asyncio.gather(*(b.submit(t, k) for t, k in [("a", 1), ("b", 3), ("c", 2), ("d", 2)]))
        assert calls[0] == (["a", "b", "c"], 3) and calls[1] == (["d"], 2)   # max_batch closes a batch
        assert [r[0].tolist() for r in rows] == [[0], [3, 4, 5], [6, 7], [0, 1]]
        with pytest.raises(ValueError, match="boom"):
            await asyncio.gather(b.submit("boom", 1), b.submit("x", 1))
        pending = [asyncio.create_task(b.submit(t, 1)) for t in "uvw"]
        await asyncio.sleep(0)
        await b.close()                                    # queued texts are scored before it stops
        assert [len(r[0]) for r in await asyncio.gather(*pending)] == [1, 1, 1]
        assert b.stats.calls == len(calls) - 1             # the failed call is not counted as scored
    asyncio.run(main())


# -- pages and their API ---------------------------------------------------------------------------------
def test_pages_and_static_files(client):
    page = client.get("/")
    assert page.status_code == 200 and 'id="suggest-form"' in page.text and '<script src="static/app.js">' in page.text
    assert 'id="documents"' in client.get("/label").text
    assert "suggestPage" in client.get("/static/app.js").text
    is_problem(client.get("/static/../manifest.json"), 404)
    is_problem(client.get("/static/nothing.js"), 404)
    info = client.get("/ui/api/projects").json()["projects"][0]
    assert info["project_id"] == "yso" and info["label_pool"] is False


def test_label_search(client, model):
    j = model.labels_.index[expected(model, TEXT, 1)[0]["uri"].rsplit("/", 1)[1]]
    name = model.labels_.display[j]
    hits = client.get("/ui/api/projects/yso/labels", params={"q": name.upper()}).json()["labels"]
    assert {"id": model.labels_.names[j], "label": name, "uri": model.labels_.uris[j]} in hits
    assert all(name.lower() in h["label"].lower() for h in hits)


def test_active_learning_queue_saves_jsonl(model_dir, model, tmp_path):
    pool = tmp_path / "pool.txt"
    pool.write_text("Birds of Lapland\nA history of Helsinki\nKnitting patterns\n", encoding="utf-8")
    out = tmp_path / "labelled.jsonl"
    cfg = ServeConfig(label_pool=str(pool), label_output=str(out))
    with TestClient(create_app({"yso": str(model_dir)}, cfg)) as c:
        nxt = c.get("/ui/api/projects/yso/next?n=2&limit=3").json()
        assert nxt["remaining"] == 3 and len(nxt["documents"]) == 2
        doc = nxt["documents"][0]
        assert [s["uri"] for s in doc["suggestions"]] == [r["uri"] for r in expected(model, doc["text"], 3)]
        assert all(model.labels_.uris[model.labels_.index[s["id"]]] == s["uri"] for s in doc["suggestions"])
        keep = [doc["suggestions"][0]["id"], "p99999999"]            # accept one, remove others, extend
        assert c.post("/ui/api/projects/yso/labelled", json={"text": doc["text"], "labels": keep}).json()["saved"] == 1
        assert json.loads(out.read_text(encoding="utf-8")) == {"text": doc["text"], "labels": keep}
        assert c.get("/ui/api/projects/yso/next?n=5").json()["remaining"] == 2
        is_problem(c.post("/ui/api/projects/yso/labelled", json={"text": "x", "labels": ["a\tb"]}), 400)
        is_problem(c.post("/ui/api/projects/yso/labelled", json={"text": "x"}), 400)
    ds = xmtc.data.read_dataset(out)                                   # what `xmtc train` reads
    assert ds.texts == [doc["text"]]
    assert sorted(ds.labels.names[j] for j in ds.Y[0].indices) == sorted(keep)


def test_active_learning_without_pool_is_404(client):
    assert "--label-pool" in is_problem(client.get("/ui/api/projects/yso/next"), 404)["detail"]


# -- projects and the command ---------------------------------------------------------------------------
def test_project_specs(tmp_path):
    a, b = tmp_path / "one" / "m", tmp_path / "two" / "m"
    assert project_specs([str(a)]) == {"m": str(a)}
    assert project_specs([str(a), str(b)], [f"other={b}"]) == {"other": str(b), "m": str(a)}
    for dirs, names, msg in [([str(a), str(b)], [], "already used"), ([], ["x"], "ID=MODEL_DIR"),
                             ([], [f"a b={a}"], "letters, digits"), ([], [f"x={a}", f"x={b}"], "given twice"),
                             ([], [], "no model folders")]:
        with pytest.raises(xmtc.errors.ConfigError, match=msg):
            project_specs(dirs, names)


def test_ensemble_specs(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert project_specs([a], [], [f"both={a},{b}"]) == {"both": [a, b], "a": a}
    for ens, msg in [([f"e={a}"], "two or more folders"), ([f"{a},{b}"], "two or more folders"),
                     ([f"e e={a},{b}"], "letters, digits"), ([f"e={a},{b}", f"e={b},{a}"], "given twice")]:
        with pytest.raises(xmtc.errors.ConfigError, match=msg):
            project_specs([], [], ens)
    with pytest.raises(xmtc.errors.ConfigError, match="already used"):
        project_specs([str(tmp_path / "x" / "e")], [], [f"e={a},{b}"])


def test_an_ensemble_is_one_project(model_dir, tmp_path):
    """--ensemble: the members' scores combined as `xmtc ensemble` combines them, behind the same API."""
    from xmtc.models.ensemble import Ensemble

    other = build_model(tmp_path / "unigrams", ngram_max=1, seed=1)
    cfg = ServeConfig(batch_wait_ms=0.0, ensemble_combine="rank-average")
    ens = Ensemble([xmtc.load(model_dir), xmtc.load(other)], combine="rank-average")
    with TestClient(create_app({"yso": str(model_dir), "both": [str(model_dir), str(other)]}, cfg)) as c:
        one = c.get("/v1/projects/both").json()
        assert list(one) == ANNIF_PROJECT_KEYS and one["backend"] == {"backend_id": "ensemble"}
        newest = max((d / "manifest.json").stat().st_mtime for d in (model_dir, other))
        assert one["modification_time"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(newest))
        got = c.post("/v1/projects/both/suggest", data={"text": TEXT, "limit": 8}).json()["results"]
        assert got == expected(ens, TEXT, 8) and len(got) == 8
        alone = c.post("/v1/projects/yso/suggest", data={"text": TEXT, "limit": 8}).json()["results"]
        assert [r["score"] for r in got] != [r["score"] for r in alone]  # rank-average scores, not the member's
        batch = c.post("/v1/projects/both/suggest-batch?limit=8",
                       json={"documents": [{"text": TEXT, "document_id": "d"}]}).json()
        assert batch == [{"document_id": "d", "results": got}]


def test_a_port_in_use_is_one_line_before_serving(model_dir, capsys):
    """A taken port: one line naming it, and no "serving ..." first (uvicorn's own failure came after it)."""
    import logging
    import socket

    from xmtc.cli import main
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        try:
            assert main(["serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port)]) == 2
        finally:
            root.handlers[:], root.level = handlers, level
    err = capsys.readouterr().err
    assert err.endswith(f"xmtc: error: port {port} on 127.0.0.1 is in use (another server?); choose another with"
                        " --port\n") and "serving" not in err


@pytest.mark.parametrize("args,msg", [(["/nonexistent/model"], "model folder not found"),
                                      (["--ensemble", "e=/a"], "two or more folders"),
                                      (["--ensemble", "e=/nonexistent/a,/nonexistent/b"], "model folder not found"),
                                      (["--name", "bad"], "ID=MODEL_DIR"),
                                      (["--port", "99999", "x"], "--port must be <= 65535"),
                                      (["--batch-size", "0", "x"], "--batch-size must be >= 1")])
def test_cli_errors_are_one_line(args, msg, capsys):
    import logging
    from xmtc.cli import main
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        assert main(["serve", *args]) == 2
    finally:  # main() points logging at this test's captured stderr; later tests must not write there
        root.handlers[:] = handlers
        root.setLevel(level)
    err = capsys.readouterr().err
    assert err.startswith("xmtc: error: ") and err.count("\n") == 1 and msg in err, err


def test_cli_error_in_a_subprocess(tmp_path):
    (tmp_path / "m").mkdir()
    proc = subprocess.run([sys.executable, "-m", "xmtc.cli", "serve", str(tmp_path / "m")], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "manifest.json: missing" in proc.stderr


def test_real_server_sigterm_finishes_in_flight_requests(model_dir):
    """uvicorn in a subprocess: requests held in a long batching window when SIGTERM arrives still get
    their 200 answers, and the process ends by that SIGTERM (uvicorn re-raises it after its graceful
    shutdown, so the status is -SIGTERM) without being killed."""
    with Server(str(model_dir), "--name", f"yso={model_dir}", "--batch-wait-ms", "3000", "--batch-size", "64") as srv:
        results = [None] * 6
        with httpx.Client(base_url=srv.url, timeout=30) as http:
            assert http.get("/v1/projects").status_code == 200   # connection pool and TLS-free client warm

            def one(i):
                results[i] = http.post("/v1/projects/yso/suggest", data={"text": f"{TEXT} {i}"})
            threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
            for t in threads:
                t.start()
            time.sleep(1.0)                                # all six are waiting in the batcher now
            t0 = time.monotonic()
            srv.proc.send_signal(signal.SIGTERM)
            for t in threads:
                t.join()
            assert srv.proc.wait(30) in (0, -signal.SIGTERM) and time.monotonic() - t0 < 10
    assert [r.status_code for r in results] == [200] * 6
    assert all(len(r.json()["results"]) == 10 for r in results)


@pytest.mark.slow
def test_load_script_short_run(model_dir):
    """benchmarks/serve_load.py, short: concurrent good and malformed requests, zero 5xx, every malformed
    kind answered 4xx, RSS flat after warm-up, SIGTERM finishing in-flight requests."""
    from serve_support import ROOT
    from xmtc.data import sample_path

    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "serve_load.py"), "--model", str(model_dir),
                           "--texts", str(sample_path("test")), "--requests", "400", "--warmup", "80",
                           "--clients", "4", "--malformed-every", "4", "--duration", "60"],
                          capture_output=True, text=True, timeout=300)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0, proc.stderr
    assert out["requests"] == 400 and out["errors"] == 0 and out["n_5xx"] == 0 and out["first_errors"] == []
    kinds = {k.rsplit(": ", 1)[0]: int(k.rsplit(": ", 1)[1]) for k in out["statuses"]}
    assert kinds.pop("suggest") == 200 and len(kinds) == 9 and all(400 <= s < 500 for s in kinds.values())
    assert out["rss_growth_mb"] < 16                      # 400 requests leaking 40 KB each would fail
    assert out["sigterm"]["ok"] and out["sigterm"]["answered"] == [200] * 8


@pytest.mark.slow
def test_real_server_with_two_workers(model_dir, model):
    """--workers 2: uvicorn's worker processes each build the app from the parent's spec and load the model."""
    with Server(str(model_dir), "--workers", "2") as srv:
        with httpx.Client(base_url=srv.url, timeout=30) as http:
            name = model_dir.name
            assert [p["project_id"] for p in http.get("/v1/projects").json()["projects"]] == [name]
            for _ in range(4):
                r = http.post(f"/v1/projects/{name}/suggest", data={"text": TEXT, "limit": "3"}, headers={"connection": "close"})
                assert r.json()["results"] == expected(model, TEXT, 3)
        assert srv.stop() in (0, -signal.SIGTERM)


# -- fuzzing: whatever a client sends, never a 5xx -------------------------------------------------------
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

_PATHS = st.sampled_from(["/v1/projects/yso/suggest", "/v1/projects/yso/suggest-batch", "/v1/projects/yso",
                          "/v1/projects/x%00y/suggest", "/ui/api/projects/yso/explain",
                          "/ui/api/projects/yso/labelled", "/ui/api/projects/yso/labels", "/v1/projects/yso/learn"])
_TYPES = st.sampled_from(["application/json", "application/x-www-form-urlencoded", "multipart/form-data",
                          "multipart/form-data; boundary=b", "text/plain", ""])
_QUERY = st.dictionaries(st.sampled_from(["limit", "threshold", "language", "q", "n"]),
                         st.one_of(st.integers(-10**12, 10**12).map(str), st.text(max_size=8),
                                   st.sampled_from(["nan", "inf", "-0", "1e309", "0x10"])), max_size=3)
_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                         st.sampled_from(["documents", "text", "document_id", "labels", "limit", "metadata"]),
                         inner, max_size=4), max_leaves=12)
_BODY = st.one_of(st.binary(max_size=300), _JSON.map(lambda v: json.dumps(v).encode()),
                  st.dictionaries(st.sampled_from(["text", "limit", "threshold", "language", "metadata_x"]),
                                  st.text(max_size=30), max_size=4).map(lambda d: __import__("urllib.parse").parse.urlencode(d).encode()))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(path=_PATHS, ctype=_TYPES, query=_QUERY, body=_BODY, method=st.sampled_from(["POST", "POST", "GET", "PUT"]))
def test_fuzzed_requests_never_get_a_5xx(client, path, ctype, query, body, method):
    headers = {"content-type": ctype} if ctype else {}
    resp = client.request(method, path, params=query, content=body if method != "GET" else None, headers=headers)
    assert resp.status_code < 500, (resp.status_code, resp.text[:300])
    if resp.status_code >= 400:
        assert resp.headers["content-type"].startswith("application/problem+json")
        assert resp.json()["status"] == resp.status_code
