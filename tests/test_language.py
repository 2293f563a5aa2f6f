"""Language detection (xmtc/models/language.py): Annif's ``detect-language`` endpoint and command, and the
warning ``predict`` and ``serve`` give for a text that is not in the model's language."""

from __future__ import annotations

import json

import pytest

simplemma = pytest.importorskip("simplemma", reason="simplemma is not installed")

import xmtc  # noqa: E402
from xmtc.cli import main  # noqa: E402
from xmtc.models import language as L  # noqa: E402

from serve_support import build_model  # noqa: E402

EN = "The history of the railways and their locomotives in the northern countries of Europe"
FI = "Suomen rautateiden historia kertoo höyryvetureista ja asemista sekä radan rakentamisesta"
SV = "Järnvägarnas historia i Sverige och Finland under artonhundratalet och början av nittonhundratalet"


def annif_answer(text, languages):
    """Annif 1.4's answer, its code copied: annif/simplemma_util.py detect_language + annif/rest.py."""
    detector = simplemma.LanguageDetector(tuple(languages))
    proportions = dict(sorted(detector.proportion_in_each_language(text).items(), key=lambda x: x[1],
                              reverse=True))
    return {"results": [{"language": lang if lang != "unk" else None, "score": score}
                        for lang, score in proportions.items()]}


def ours(text, languages):
    return {"results": [{"language": lang, "score": s} for lang, s in L.detect(text, languages)]}


CASES = [(EN, ["en", "fi", "sv"]), (FI, ["en", "fi", "sv"]), (SV, ["en", "fi", "sv"]), (SV, ["sv", "de"]),
         ("example text", ["en", "fi", "sv"]), ("exampley texty", ["fi", "sv"]), ("", ["en"]), ("ja", ["fi"]),
         ("Helsinki Stockholm Oslo", ["fi", "sv", "en"]), ("Finland och Sverige", ["sv", "en", "fi", "de", "fr"])]


@pytest.mark.parametrize("text,langs", CASES)
def test_detect_gives_annifs_answer(text, langs):
    assert ours(text, langs) == annif_answer(text, langs)
    assert ours(text, langs) == annif_answer(text, langs)  # the second time from the word cache


def test_annifs_own_test_cases():
    assert ours("example text", ["en", "fi", "sv"])["results"][0] == {"language": "en", "score": 1}
    assert ours("exampley texty", ["fi", "sv"])["results"][0] == {"language": None, "score": 1}
    assert ours("", ["en"])["results"][0] == {"language": None, "score": 1}
    with pytest.raises(ValueError):
        L.detect("example text", ["unk"])


# -- POST /v1/detect-language -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def en_model_dir(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("lang") / "yso-en", language="en")


@pytest.fixture(scope="module")
def client(en_model_dir):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from xmtc.serve.app import create_app
    from xmtc.serve.config import ServeConfig

    with TestClient(create_app({"yso": str(en_model_dir)}, ServeConfig(batch_wait_ms=0.0, reload_s=0.0,
                                                                        language_check="en,fi,sv"))) as c:
        yield c


def test_endpoint_answers_as_annif(client):
    for text, langs in CASES:
        r = client.post("/v1/detect-language", json={"text": text, "languages": langs})
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert r.json() == annif_answer(text, langs)
    r = client.post("/v1/detect-language", data={"text": FI, "languages": "en,fi"})  # a form body too
    assert r.json() == annif_answer(FI, ["en", "fi"])


@pytest.mark.parametrize("body,detail", [
    ({"text": "x"}, "'languages' is a required property"), ({"languages": ["en"]}, "'text' is a required"),
    ({"text": "x", "languages": []}, "1 to 5"), ({"text": "x", "languages": ["en"] * 6}, "1 to 5"),
    ({"text": "x", "languages": "en"}, "1 to 5"), ({"text": 5, "languages": ["en"]}, "'text'"),
    ({"text": "x", "languages": ["english"]}, "2 or 3 letters"), ({"text": "x", "languages": [1]}, "2 or 3"),
    ({"text": "example text", "languages": ["unk"]}, "unsupported candidate languages"),
    ({"text": "example text", "languages": ["en", "zz"]}, "unsupported candidate languages"), ([1], "object")])
def test_endpoint_errors_are_annifs_400(client, body, detail):
    r = client.post("/v1/detect-language", json=body)
    assert r.status_code == 400 and r.headers["content-type"].startswith("application/problem+json")
    assert detail in r.json()["detail"] and r.json()["title"] == "Bad Request"
    assert client.post("/v1/detect-language", content=b"{not json", headers={"content-type": "application/json"}
                       ).status_code == 400


def test_suggest_warns_for_a_text_in_another_language(client):
    fi = client.post("/v1/projects/yso/suggest", data={"text": FI}).json()
    assert fi["detected_language"] == "fi" and "'fi'" in fi["warning"] and "'en'" in fi["warning"]
    en = client.post("/v1/projects/yso/suggest", data={"text": EN}).json()
    assert "detected_language" not in en and "warning" not in en and en["results"]
    short = client.post("/v1/projects/yso/suggest", data={"text": "Suomen rautatiet"}).json()
    assert "detected_language" not in short  # a title this short is no evidence
    multi = client.post("/v1/projects/yso/suggest", files={"text": (None, SV)}).json()
    assert multi["detected_language"] == "sv"
    batch = client.post("/v1/projects/yso/suggest-batch", json={"documents": [
        {"text": EN, "document_id": "a"}, {"text": SV, "document_id": "b"}]}).json()
    assert [d.get("detected_language") for d in batch] == [None, "sv"]


def test_no_check_when_switched_off_or_the_model_has_no_language(en_model_dir, tmp_path):
    from fastapi.testclient import TestClient

    from xmtc.serve.app import create_app
    from xmtc.serve.config import ServeConfig

    plain = build_model(tmp_path / "plain")
    for folder, check in ((en_model_dir, "none"), (plain, "en,fi,sv")):
        with TestClient(create_app({"p": str(folder)}, ServeConfig(reload_s=0.0, language_check=check))) as c:
            assert "detected_language" not in c.post("/v1/projects/p/suggest", data={"text": FI}).json()


def test_endpoint_never_answers_5xx(client):
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=60, deadline=None,
                         suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])
    @hypothesis.given(body=st.recursive(st.none() | st.integers() | st.text(max_size=12), lambda inner: st.lists(
        inner, max_size=6) | st.dictionaries(st.sampled_from(["text", "languages"]), inner, max_size=2), max_leaves=8))
    def check(body):
        assert client.post("/v1/detect-language", json=body).status_code in (200, 400)

    check()


# -- the check's rule ------------------------------------------------------------------------------------
class Shares:
    """A stand-in detector answering fixed shares (to pin the rule, not simplemma's dictionaries)."""

    def __init__(self, shares, n):
        self.shares, self.n, self.calls = shares, n, 0

    def proportions(self, text):
        self.calls += 1
        return dict(self.shares), self.n


@pytest.mark.parametrize("shares,n,warn", [
    ({"en": 0.0, "fi": 1.0}, 4, True), ({"en": 0.0, "fi": 1.0}, 3, False),      # MIN_WORDS
    ({"en": 0.25, "fi": 0.75}, 4, True), ({"en": 0.2, "fi": 0.7}, 10, False),     # MIN_SHARE
    ({"en": 0.5, "fi": 1.0}, 4, True), ({"en": 0.6, "fi": 1.0}, 5, False),        # MIN_MARGIN
    ({"en": 0.3, "fi": 0.75}, 4, False), ({"en": 0.0, "fi": 0.0}, 9, False)])
def test_the_rule(shares, n, warn):
    check = L.LanguageCheck("en", ("en", "fi"))
    check.own = Shares({"en": shares["en"], "unk": 1 - shares["en"]}, n)
    check.detector = Shares(dict(shares, unk=0.0), n)
    assert (check.foreign("text") is not None) is warn
    if warn:
        assert check.foreign("text") == ("fi", shares["fi"])
    if n < L.MIN_WORDS or shares["en"] > 1 - L.MIN_MARGIN:
        assert check.detector.calls == 0  # settled by the model's own dictionary: the others never load


def test_the_check_on_real_sentences():
    en, sv = L.LanguageCheck("en"), L.LanguageCheck("sv")
    assert en.foreign(EN) is None and sv.foreign(SV) is None
    assert en.foreign(FI)[0] == "fi" and en.foreign(SV)[0] == "sv" and sv.foreign(EN)[0] == "en"
    assert en.foreign("Suomen rautateiden historia") is None  # three words: no evidence


def test_model_language(en_model_dir, tmp_path):
    from xmtc.models.ensemble import Ensemble

    en = xmtc.load(en_model_dir)
    plain = xmtc.load(build_model(tmp_path / "plain"))
    assert L.model_language(en) == "en" and L.model_language(plain) is None
    assert L.model_language(Ensemble([en, en])) == "en" and L.model_language(Ensemble([en, plain])) is None
    assert L.LanguageCheck.for_model(plain) is None


# -- the commands ------------------------------------------------------------------------------------------
def test_detect_language_command_as_annifs(capsys, monkeypatch, tmp_path):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("This is some example text"))
    assert main(["detect-language", "fi,sv,en"]) == 0
    out = capsys.readouterr().out.split("\n")
    assert out[0] == "en\t1.0000" and out[-2] == "?\t0.0000"
    doc = tmp_path / "doc-1.txt"
    doc.write_text("nothing special")
    monkeypatch.setattr("sys.stdin", io.StringIO("kissa"))
    assert main(["detect-language", "fi,en", str(doc), "-"]) == 0
    out = capsys.readouterr().out
    assert f"Detected languages for {doc}\nen\t1.0000" in out and "Detected languages for -\nfi\t1.0000" in out
    assert main(["detect-language", "xxx", str(doc)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unsupported language 'xxx'" in err[0]


def test_detect_language_lines(capsys, tmp_path):
    f = tmp_path / "titles.txt"
    f.write_text(f"{EN}\n{FI}\n{SV}\nzzzz qqqq\n", encoding="utf-8")
    assert main(["detect-language", "en,fi,sv", str(f), "--lines", "-q"]) == 0
    rows = [line.split("\t")[:2] for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows == [["1", "en"], ["2", "fi"], ["3", "sv"], ["4", "?"]]


def test_predict_warns_with_the_line(en_model_dir, tmp_path, capsys):
    f = tmp_path / "in.txt"
    f.write_text(f"{EN}\n{FI}\nSuomen rautatiet\n", encoding="utf-8")
    assert main(["predict", str(en_model_dir), str(f), "-k", "2", "--log-level", "WARNING"]) == 0
    captured = capsys.readouterr()
    warnings = [w for w in captured.err.splitlines() if "looks like" in w]
    assert len(warnings) == 1 and "line 2:" in warnings[0] and "'fi'" in warnings[0]
    assert len([json.loads(x) for x in captured.out.splitlines()]) == 3


def test_predict_summarises_many(en_model_dir, tmp_path, capsys):
    f = tmp_path / "in.txt"
    f.write_text("\n".join([FI] * 4 + [SV] * 4 + [EN]) + "\n", encoding="utf-8")
    assert main(["predict", str(en_model_dir), str(f), "--log-level", "WARNING"]) == 0
    err = capsys.readouterr().err
    assert err.count("looks like") == 5 and "8 of 9 texts look like another language than the model's 'en'" in err
    assert "fi 4" in err and "sv 4" in err


def test_predict_without_a_language_is_silent(tmp_path, capsys):
    plain = build_model(tmp_path / "plain")
    f = tmp_path / "in.txt"
    f.write_text(f"{FI}\n", encoding="utf-8")
    assert main(["predict", str(plain), str(f), "--log-level", "WARNING"]) == 0
    assert "looks like" not in capsys.readouterr().err


def test_annif_client_against_a_real_server(en_model_dir):
    annif_client = pytest.importorskip("annif_client")
    from serve_support import Server

    with Server(f"--name=yso={en_model_dir}", "--language-check", "en,fi,sv", "--reload-s", "0") as srv:
        client = annif_client.AnnifClient(api_base=srv.url + "/v1/")
        for text, top in ((EN, "en"), (FI, "fi"), (SV, "sv")):
            answer = client.detect_language(text, ["en", "fi", "sv"])
            assert answer == annif_answer(text, ["en", "fi", "sv"]) and answer["results"][0]["language"] == top
        assert client.suggest("yso", FI, limit=3) == client.suggest("yso", FI, limit=3)  # extra keys ignored
