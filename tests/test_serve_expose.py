"""``xmtc serve`` made safe to expose: bearer tokens on the write endpoints, the refusal to serve them open on
a non-loopback address, and ``--root-path`` behind a reverse proxy (xmtc/serve/auth.py, app.py, pages.py)."""

from __future__ import annotations

import json
import re
from urllib.parse import urljoin, urlsplit

import pytest

pytest.importorskip("fastapi", reason="the serve extra (fastapi) is not installed")
httpx = pytest.importorskip("httpx", reason="httpx is not installed")
from fastapi import APIRouter, FastAPI  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from xmtc.cli import main  # noqa: E402
from xmtc.errors import ConfigError  # noqa: E402
from xmtc.serve import auth  # noqa: E402
from xmtc.serve.app import create_app, normalize_root_path  # noqa: E402
from xmtc.serve.config import ServeConfig  # noqa: E402

from serve_support import ROOT, Server, build_model  # noqa: E402

TOKEN = "s3cret-token-0123456789abcdef"
DOC = [{"text": "Steam locomotives of the Finnish state railways",
        "subjects": [{"uri": "http://example.org/railways", "label": "railways"}]}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("expose") / "yso")


def is_problem(resp, status, title):
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    body = resp.json()
    assert body["status"] == status and body["title"] == title and body["detail"]
    return body


@pytest.fixture(scope="module")
def guarded(model_dir, tmp_path_factory):
    """A server with a token, learn switched on and a /label output file."""
    d = tmp_path_factory.mktemp("guarded")
    (d / "pool.txt").write_text("Birds of Lapland\nFinnish folk music\n", encoding="utf-8")
    cfg = ServeConfig(batch_wait_ms=0.0, label_pool=str(d / "pool.txt"), label_output=str(d / "out.jsonl"),
                      reload_s=0.0, language_check="none")
    with TestClient(create_app({"yso": str(model_dir)}, cfg, allow_learn=True, token=TOKEN)) as c:
        c.out = d / "out.jsonl"
        yield c


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def test_learn_needs_the_token_401_without_403_wrong_204_right(guarded):
    r = guarded.post("/v1/projects/yso/learn", json=DOC)
    is_problem(r, 401, "Unauthorized")
    assert r.headers["www-authenticate"].startswith("Bearer")
    for wrong in ("nope", TOKEN[:-1], TOKEN + "x", TOKEN[:-1] + "g", TOKEN.upper(), "x" * len(TOKEN)):
        r = guarded.post("/v1/projects/yso/learn", json=DOC, headers=bearer(wrong))
        is_problem(r, 403, "Forbidden")
        assert 'error="invalid_token"' in r.headers["www-authenticate"]
    for no_bearer in ({"Authorization": TOKEN}, {"Authorization": f"Basic {TOKEN}"}, {"Authorization": "Bearer "}):
        is_problem(guarded.post("/v1/projects/yso/learn", json=DOC, headers=no_bearer), 401, "Unauthorized")
    assert guarded.post("/v1/projects/yso/learn", json=DOC, headers=bearer(TOKEN)).status_code == 204
    assert guarded.post("/v1/projects/yso/learn", json=DOC, headers={"authorization": f"bearer  {TOKEN} "}
                        ).status_code == 204


def test_the_token_is_checked_before_the_body(guarded):
    is_problem(guarded.post("/v1/projects/yso/learn", content=b"not json"), 401, "Unauthorized")
    is_problem(guarded.post("/ui/api/projects/yso/labelled", json={"text": 1}), 401, "Unauthorized")


def test_the_label_page_saves_need_the_token(guarded):
    doc = {"text": "Birds of Lapland", "labels": ["birds"]}
    is_problem(guarded.post("/ui/api/projects/yso/labelled", json=doc), 401, "Unauthorized")
    is_problem(guarded.post("/ui/api/projects/yso/labelled", json=doc, headers=bearer("wrong-token-000000")),
               403, "Forbidden")
    assert not guarded.out.exists()  # nothing written by a refused save
    r = guarded.post("/ui/api/projects/yso/labelled", json=doc, headers=bearer(TOKEN))
    assert r.status_code == 200 and r.json()["saved"] == 1
    assert [json.loads(x) for x in guarded.out.read_text(encoding="utf-8").splitlines()] == [doc]


def test_read_endpoints_stay_open(guarded):
    assert guarded.get("/v1/projects").status_code == 200
    assert guarded.get("/v1/projects/yso").status_code == 200
    assert guarded.post("/v1/projects/yso/suggest", data={"text": "Birds of Lapland"}).status_code == 200
    assert guarded.post("/v1/projects/yso/suggest", files={"text": (None, "Birds")}).status_code == 200
    assert guarded.post("/v1/projects/yso/suggest-batch", json={"documents": [{"text": "Birds"}]}).status_code == 200
    assert guarded.post("/v1/detect-language", json={"text": "birds of the north", "languages": ["en"]}
                        ).status_code == 200
    assert guarded.post("/ui/api/projects/yso/explain", json={"text": "Birds of Lapland"}).status_code == 200
    assert guarded.get("/ui/api/projects/yso/next?n=1").status_code == 200
    for page in ("/", "/label", "/docs", "/openapi.json", "/static/app.js"):
        assert guarded.get(page).status_code == 200, page


def test_the_comparison_is_constant_time(guarded, monkeypatch):
    calls = []
    real = auth.hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    guarded.post("/v1/projects/yso/learn", json=[], headers=bearer("guess-guess-guess"))
    assert calls == [(b"guess-guess-guess", TOKEN.encode())]


def test_without_a_token_writes_are_open_as_before(model_dir):
    with TestClient(create_app({"yso": str(model_dir)}, ServeConfig(reload_s=0.0, language_check="none"),
                               allow_learn=True, token=None)) as c:
        assert c.post("/v1/projects/yso/learn", json=[]).status_code == 204


def test_every_write_route_is_guarded_and_an_unguarded_one_is_refused(guarded):
    assert auth.unguarded_writes(guarded.app) == []
    routes = list(auth.iter_routes(guarded.app.routes))
    assert len(routes) >= 12 and "/v1/projects/{project_id}/suggest" in {p for p, _, _ in routes}
    writes = {(m, path) for path, methods, _ in routes for m in methods
              if m not in ("GET", "HEAD") and path not in auth.READ_ROUTES}
    assert writes == {("POST", "/v1/projects/{project_id}/learn"), ("POST", "/ui/api/projects/{project_id}/labelled")}
    app = FastAPI()
    router = APIRouter()

    @router.delete("/admin/projects/{project_id}")
    async def drop(project_id: str):
        return {}

    app.include_router(router)
    assert auth.unguarded_writes(app) == ["DELETE /admin/projects/{project_id}"]
    with pytest.raises(RuntimeError, match="without the token check"):
        auth.check_routes(app)


def test_read_token_from_file_or_environment(tmp_path):
    f = tmp_path / "token"
    f.write_text(f"  {TOKEN}\nsecond line\n", encoding="utf-8")
    f.chmod(0o600)
    assert auth.read_token(str(f), {}) == TOKEN
    assert auth.read_token(str(f), {"XMTC_TOKEN": "another-token-0123456789"}) == TOKEN  # the file wins
    assert auth.read_token(None, {"XMTC_TOKEN": f" {TOKEN} "}) == TOKEN
    assert auth.read_token(None, {}) is None and auth.read_token(None, {"XMTC_TOKEN": " "}) is None
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="empty"):
        auth.read_token(str(tmp_path / "empty"), {})
    with pytest.raises(ConfigError, match="cannot read"):
        auth.read_token(str(tmp_path / "missing"), {})
    with pytest.raises(ConfigError, match="at least 16"):
        auth.read_token(None, {"XMTC_TOKEN": "short"})


@pytest.mark.parametrize("host,loopback", [("127.0.0.1", True), ("127.0.1.1", True), ("::1", True),
                                           ("[::1]", True), ("localhost", True), ("0.0.0.0", False),
                                           ("::", False), ("192.168.1.10", False), ("example.org", False)])
def test_loopback_hosts(host, loopback):
    assert auth.is_loopback(host) is loopback


def test_exposure_rule():
    auth.check_exposure("0.0.0.0", [], None)  # read only: fine anywhere
    auth.check_exposure("0.0.0.0", ["--allow-learn"], TOKEN)
    auth.check_exposure("127.0.0.1", ["--allow-learn"], None)
    with pytest.raises(ConfigError, match="without a token"):
        auth.check_exposure("0.0.0.0", ["--allow-learn"], None)


@pytest.mark.parametrize("extra", [["--allow-learn"], ["--label-output", "out.jsonl"]])
def test_serve_refuses_a_write_endpoint_on_the_network_without_a_token(model_dir, capsys, monkeypatch, extra):
    monkeypatch.delenv("XMTC_TOKEN", raising=False)
    assert main(["serve", str(model_dir), "--host", "0.0.0.0", *extra, "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("xmtc: error: --host 0.0.0.0") and "--token-file" in err[0]


def test_serve_rejects_bad_settings_in_one_line(model_dir, capsys, tmp_path):
    short = tmp_path / "t"
    short.write_text("abc\n")
    for args, text in ((["--token-file", str(short)], "at least 16"), (["--root-path", "xmtc"], "--root-path"),
                       (["--language-check", "en,xx"], "unsupported language 'xx'")):
        assert main(["serve", str(model_dir), *args, "-q"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and text in err[0], err


def test_root_path_normalised():
    assert normalize_root_path("") == "" and normalize_root_path("/") == ""
    assert normalize_root_path("/xmtc/") == "/xmtc" and normalize_root_path("/a/b") == "/a/b"
    for bad in ("xmtc", "/x mtc", '/x"', "/x<y"):
        with pytest.raises(ConfigError):
            normalize_root_path(bad)


# -- behind a reverse proxy under /xmtc/ ---------------------------------------------------------------
PAGE_URLS = re.compile(r'(?:href|src)="([^"]*)"')
SCRIPT_URLS = re.compile(r'(?:json|write)\(\s*[`"]([^`"]*)')


def page_links(client, page_url):
    """Every URL the page and its script reach, resolved as a browser does (against the <base href>)."""
    html = client.get(page_url).text
    base = re.search(r'<base href="([^"]*)"', html).group(1)
    urls = [u for u in PAGE_URLS.findall(html) if u != base]
    script = client.get(urljoin(urljoin(page_url, base), "static/app.js")).text
    urls += [u.replace("${encodeURIComponent(project)}", "yso").split("?")[0] for u in SCRIPT_URLS.findall(script)]
    return base, [urljoin(urljoin(page_url, base), u) for u in urls]


@pytest.mark.parametrize("strip", [True, False], ids=["proxy strips the prefix", "proxy keeps the prefix"])
def test_pages_and_api_work_under_a_root_path(model_dir, strip):
    cfg = ServeConfig(root_path="/xmtc/", reload_s=0.0, language_check="none", label_pool=None)
    with TestClient(create_app({"yso": str(model_dir)}, cfg), base_url="http://proxy") as c:

        def via_proxy(method, url, **kw):  # what nginx's `location /xmtc/ { proxy_pass ...; }` sends on
            path = urlsplit(url).path
            assert path.startswith("/xmtc/"), f"{url} leaves the prefix"
            return c.request(method, path[len("/xmtc"):] if strip else path, **kw)

        for page in ("http://proxy/xmtc/", "http://proxy/xmtc/label"):
            r = via_proxy("GET", page)
            assert r.status_code == 200
            base, urls = page_links(type("P", (), {"get": lambda self, u: via_proxy("GET", u)})(), page)
            assert base == "/xmtc/"
            assert len(urls) >= 6
            for url in urls:
                if url.endswith(("/suggest", "/explain", "/labelled")):
                    continue  # POSTs, below
                assert via_proxy("GET", url).status_code in (200, 404), url  # 404: no pool configured
        ok = via_proxy("POST", "http://proxy/xmtc/v1/projects/yso/suggest", data={"text": "Birds of Lapland"})
        assert ok.status_code == 200 and "results" in ok.json()
        assert via_proxy("POST", "http://proxy/xmtc/v1/projects/yso/suggest", files={"text": (None, "Birds")}
                         ).status_code == 200
        assert via_proxy("POST", "http://proxy/xmtc/ui/api/projects/yso/explain", json={"text": "Birds"}
                         ).status_code == 200
        docs = via_proxy("GET", "http://proxy/xmtc/docs").text
        assert "'/xmtc/openapi.json'" in docs or '"/xmtc/openapi.json"' in docs
        assert via_proxy("GET", "http://proxy/xmtc/openapi.json").json()["servers"] == [{"url": "/xmtc"}]


def test_pages_are_relative_without_a_root_path(model_dir):
    with TestClient(create_app({"yso": str(model_dir)}, ServeConfig(reload_s=0.0, language_check="none"))) as c:
        base, urls = page_links(c, "http://testserver/")
        assert base == "/"
        for url in urls:
            assert urlsplit(url).path.startswith("/")
        assert c.get("/ui/api/projects").status_code == 200


def test_script_has_no_absolute_urls():
    script = (ROOT / "xmtc" / "serve" / "static" / "app.js").read_text(encoding="utf-8")
    assert not re.search(r'(?:fetch|json|write)\(\s*[`"]/', script)
    for page in ("index.html", "label.html"):
        html = (ROOT / "xmtc" / "serve" / "static" / page).read_text(encoding="utf-8")
        assert [u for u in PAGE_URLS.findall(html) if u.startswith("/")] == ["/"]  # the <base href> alone


# -- a real server: the bar of issue 34, through annif-client ---------------------------------------------
def test_real_server_with_token_file_and_root_path(model_dir, tmp_path):
    annif_client = pytest.importorskip("annif_client")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    with Server(str(model_dir), "--name", f"yso={model_dir}", "--allow-learn", "--token-file", str(token_file),
                "--root-path", "/xmtc/", "--language-check", "none", "--reload-s", "0") as srv:
        url = srv.url + "/xmtc/v1/projects/yso/learn"
        assert httpx.post(url, json=DOC, timeout=60).status_code == 401
        assert httpx.post(url, json=DOC, headers=bearer("wrong-wrong-wrong-wrong"), timeout=60).status_code == 403
        assert httpx.post(url, json=DOC, headers=bearer(TOKEN), timeout=60).status_code == 204
        client = annif_client.AnnifClient(api_base=srv.url + "/xmtc/v1/")
        assert client.suggest("yso", "Steam locomotives of the railways", limit=3)  # reads stay open
        with pytest.raises(Exception, match="401"):
            client.learn("yso", DOC)
        client._headers["Authorization"] = f"Bearer {TOKEN}"
        assert client.learn("yso", DOC).status_code == 204
        assert httpx.get(srv.url + "/xmtc/", timeout=30).text.count('<base href="/xmtc/">') == 1
