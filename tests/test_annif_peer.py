"""benchmarks/annif_peer.py: the conversion into Annif's inputs (vocabulary, short-text TSV corpus,
projects.cfg) and the common scoring (Annif itself needs its own venv, which CI does not build)."""

from __future__ import annotations

import configparser
import gzip
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import annif_peer as ap  # noqa: E402

LABELS = (
    "#id\turi\tprefLabel\tlabel_text(pref+alt)\tn_docs\n"
    "p10\thttp://www.yso.fi/onto/yso/p10\tenvironmental awareness\tenvironmental awareness consciousness\t168\n"
    "p22\thttp://www.yso.fi/onto/yso/p22\thousekeeping\tadvice\thousekeeping advice\t18\n"
)


@pytest.fixture()
def labels_file(tmp_path):
    path = tmp_path / "labels.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(LABELS)
    return path


def test_vocab_is_uri_tab_preflabel(labels_file, tmp_path):
    labels = ap.read_labels(labels_file)
    assert [lab[0] for lab in labels] == ["p10", "p22"]
    out = tmp_path / "vocab.tsv"
    ap.write_vocab(labels, out)
    assert out.read_text(encoding="utf-8").splitlines() == [
        "<http://www.yso.fi/onto/yso/p10>\tenvironmental awareness",
        "<http://www.yso.fi/onto/yso/p22>\thousekeeping",
    ]


def test_corpus_line_is_text_tab_uris(labels_file):
    id2uri = {i: u for i, u, _ in ap.read_labels(labels_file)}
    labels, text = ap.parse_line("p22,p10\tCleaning  the\thouse\n")
    assert labels == ["p22", "p10"] and text == "Cleaning  the\thouse"
    line = ap.to_annif_line(labels, text, id2uri)
    # the text loses its tab (Annif splits the line at the first one), the labels keep their order
    assert line == "Cleaning the house\t<http://www.yso.fi/onto/yso/p22> <http://www.yso.fi/onto/yso/p10>\n"
    assert ap.to_annif_line(["p99"], "no uri", id2uri) is None
    assert ap.to_annif_line(["p99", "p10"], "one uri", id2uri) == "one uri\t<http://www.yso.fi/onto/yso/p10>\n"


def test_write_corpus_drops_documents_without_uris(labels_file, tmp_path):
    id2uri = {i: u for i, u, _ in ap.read_labels(labels_file)}
    out = tmp_path / "c.tsv"
    n = ap.write_annif_corpus(["p10\ta\n", "p99\tb\n", "p22\tc\n"], id2uri, out)
    assert n == 2
    assert [ln.split("\t")[0] for ln in out.read_text().splitlines()] == ["a", "c"]


def test_projects_cfg_has_the_recommended_setups():
    cfg = configparser.ConfigParser()
    cfg.read_string(ap.projects_cfg("sv", "snowball(swedish)", nn=True))
    assert cfg.sections() == ["parabel", "bonsai", "mllm", "fasttext", "ensemble", "nn_ensemble"]
    assert cfg["bonsai"]["cluster_balanced"] == "False" and cfg["bonsai"]["cluster_k"] == "100"
    assert cfg["bonsai"]["max_depth"] == "3"
    assert "cluster_k" not in cfg["parabel"]
    assert all(cfg[s]["analyzer"] == "snowball(swedish)" for s in ("parabel", "bonsai", "mllm", "fasttext"))
    assert cfg["ensemble"]["sources"] == cfg["nn_ensemble"]["sources"] == "bonsai,fasttext,mllm"
    assert "nn_ensemble" not in ap.projects_cfg("en", "snowball(english)", nn=False)


def test_score_uses_xmtc_metrics_on_shared_ids():
    truth = [["p1", "p2"], ["p3"]]
    predicted = [["p2", "p9", "p1"], ["p9", "p3"]]
    m = ap.score(truth, predicted)
    assert m["P@1"] == 50.0
    assert m["P@5"] == pytest.approx(100 * 3 / 10)
