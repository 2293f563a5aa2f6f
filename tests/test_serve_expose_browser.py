"""The web pages under a root path (``--root-path /xmtc/``) with a token, in a real headless Chromium.

The page's links and requests resolve against its ``<base href>``; a save on ``/label`` is refused without
the token, the page asks for it (a prompt), and retries. Marked slow and skipped without Chromium, as
tests/test_serve_browser.py.
"""

from __future__ import annotations

import json
import urllib.parse

import pytest

pytest.importorskip("fastapi", reason="the serve extra (fastapi) is not installed")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

import test_serve_browser  # noqa: E402
from serve_support import Server, build_model  # noqa: E402
from test_serve_browser import CHROMEDRIVER, CHROMIUM  # noqa: E402

shared_browser = test_serve_browser.browser  # one headless Chromium per module (the fixture, reused)

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason="no headless browser")]
TOKEN = "browser-token-0123456789"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser-prefix")
    model_dir = build_model(root / "yso")
    (root / "pool.txt").write_text("Birds of Lapland\nA history of Helsinki\n", encoding="utf-8")
    (root / "token").write_text(TOKEN + "\n")
    (root / "token").chmod(0o600)
    out = root / "labelled.jsonl"
    with Server(str(model_dir), "--label-pool", str(root / "pool.txt"), "--label-output", str(out),
                "--root-path", "/xmtc/", "--token-file", str(root / "token")) as srv:
        yield srv, out


def test_suggest_page_under_the_prefix(setup, shared_browser):
    srv, _ = setup
    browser = shared_browser
    browser.get(f"{srv.url}/xmtc/?text={urllib.parse.quote('Birds of Lapland')}")
    WebDriverWait(browser, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "#results li .name")))
    links = {a.text: a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "nav a")}
    assert links == {"Suggest": f"{srv.url}/xmtc/", "Label documents": f"{srv.url}/xmtc/label",
                     "API": f"{srv.url}/xmtc/docs"}
    assert browser.execute_script("return getComputedStyle(document.querySelector('header')).display") != ""


def test_label_page_asks_for_the_token_then_saves(setup, shared_browser):
    srv, out = setup
    browser = shared_browser
    browser.get(f"{srv.url}/xmtc/label")
    browser.execute_script("sessionStorage.clear()")
    WebDriverWait(browser, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, ".doc .save")))
    doc = browser.find_element(By.CSS_SELECTOR, ".doc")
    text = doc.find_element(By.CSS_SELECTOR, ".text").text
    doc.find_element(By.CSS_SELECTOR, ".save").click()
    prompt = WebDriverWait(browser, 5).until(EC.alert_is_present())
    assert "token" in prompt.text
    prompt.send_keys(TOKEN)
    prompt.accept()
    WebDriverWait(browser, 5).until(lambda d: "saved" in doc.get_attribute("class"))
    assert json.loads(out.read_text(encoding="utf-8").splitlines()[-1])["text"] == text
    assert browser.execute_script("return sessionStorage.getItem('xmtc-token')") == TOKEN
