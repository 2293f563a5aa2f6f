"""The web pages in a real headless Chromium (Debian's chromium + chromium-driver, through Selenium).

Marked slow (run by .ci/run's ``pytest -m slow``); skipped, saying why, where Selenium, chromium or chromedriver
is missing; CI installs them (.ci/run).
Set XMTC_SCREENSHOTS=DIR to keep a PNG of each page.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.parse
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the serve extra (fastapi) is not installed")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

import xmtc  # noqa: E402

from serve_support import Server, build_model  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver")
                                                else None)
pytestmark = [pytest.mark.slow,  # a server and a Chromium per module: CI's `pytest -m slow` run (.ci/run)
              pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                 reason="no headless browser: install Debian's chromium and chromium-driver"
                                        " (apt-get install chromium chromium-driver)")]
TEXT = "History of the Finnish railways and their locomotives"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    model_dir = build_model(root / "yso")
    pool = root / "pool.txt"
    pool.write_text("Birds of Lapland\nA history of Helsinki\nKnitting patterns for winter\n", encoding="utf-8")
    out = root / "labelled.jsonl"
    with Server(str(model_dir), "--label-pool", str(pool), "--label-output", str(out)) as srv:
        yield srv, xmtc.load(model_dir), out


@pytest.fixture(scope="module")
def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage",
                 "--window-size=1200,900"):
        opts.add_argument(flag)
    from selenium.webdriver.chrome.service import Service
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    yield driver
    driver.quit()


def _screenshot(driver, name):
    folder = os.environ.get("XMTC_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(folder) / name))


def test_text_link_shows_label_names_within_5_s(setup, browser):
    srv, model, _ = setup
    idx, _ = model.predict_topk([TEXT], 10)
    want = [model.labels_.display_name(j) for j in idx[0] if j >= 0]
    t0 = time.monotonic()
    browser.get(f"{srv.url}/?text={urllib.parse.quote(TEXT)}")
    WebDriverWait(browser, 5).until(EC.presence_of_element_located((By.CSS_SELECTOR, "#results li .name")))
    elapsed = time.monotonic() - t0
    names = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#results li .name")]
    assert names == want and elapsed < 5.0
    assert browser.find_element(By.ID, "text").get_attribute("value") == TEXT
    bars = browser.find_elements(By.CSS_SELECTOR, "#results li .bar span")
    assert len(bars) == len(want) and bars[0].get_attribute("style").startswith("width")
    if callable(getattr(model, "explain", None)):           # the words that led to each label
        WebDriverWait(browser, 5).until(EC.presence_of_element_located((By.CSS_SELECTOR, "#results li .terms")))
    _screenshot(browser, "serve_index.png")


def test_typing_and_clicking_suggest(setup, browser):
    srv, model, _ = setup
    browser.get(srv.url + "/")
    box = browser.find_element(By.ID, "text")
    box.clear()
    box.send_keys("Birds of Lapland")
    browser.find_element(By.ID, "suggest").click()
    idx, _ = model.predict_topk(["Birds of Lapland"], 10)
    first = model.labels_.display_name(idx[0][0])
    WebDriverWait(browser, 5).until(EC.text_to_be_present_in_element((By.CSS_SELECTOR, "#results li .name"), first))
    assert "text=Birds+of+Lapland" in browser.current_url or "text=Birds%20of%20Lapland" in browser.current_url


def test_label_page_saves_a_jsonl_line(setup, browser):
    srv, model, out = setup
    browser.get(srv.url + "/label")
    WebDriverWait(browser, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, ".doc .save")))
    doc = browser.find_element(By.CSS_SELECTOR, ".doc")
    text = doc.find_element(By.CSS_SELECTOR, ".text").text
    boxes = doc.find_elements(By.CSS_SELECTOR, ".choices input[type=checkbox]")
    scores = [float(b.find_element(By.XPATH, "..").get_attribute("title").rsplit("score ", 1)[1].rstrip(")"))
              for b in boxes]
    assert boxes and [b.is_selected() for b in boxes] == [s >= 0.5 for s in scores]
    for b in boxes[:2]:                                        # accept one the model was unsure of, or remove
        b.click()                                              # one it was sure of: the expert decides
    keep = [b.get_attribute("value") for b in boxes if b.is_selected()]
    extra = doc.find_element(By.CSS_SELECTOR, "input[type=text]")
    extra.send_keys("p99999999")                                # extend with a label of one's own
    doc.find_element(By.XPATH, ".//button[text()='Add']").click()
    _screenshot(browser, "serve_label.png")
    doc.find_element(By.CSS_SELECTOR, ".save").click()
    WebDriverWait(browser, 5).until(lambda d: "saved" in doc.get_attribute("class"))
    line = json.loads(out.read_text(encoding="utf-8").splitlines()[-1])
    assert line == {"text": text, "labels": keep + ["p99999999"]}
