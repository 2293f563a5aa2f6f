#!/usr/bin/env python3
"""The peer our librarians run: Annif 1.4.3's own recommended setups side by side with xmtc, in one run.

    python benchmarks/annif_peer.py --dataset yso-finna-en-2k-20k
    python benchmarks/annif_peer.py --dataset yso-finna-en --train-docs 100000 --test-docs 10000
    python benchmarks/annif_peer.py --dataset yso-finna-sv --train-docs 100000 --test-docs 10000

Annif is installed from PyPI into its own venv, ``benchmarks/.venv-annif`` (``annif[omikuji,fasttext]``,
then ``annif[nn]`` for nn_ensemble; by benchmarks/_venv.py, as PECOS is), never into the project's
interpreter. What this script does, in a work folder ``benchmarks/out/annif-peer/<set>[-<cut>]``:

1. Reads the set's train/test files (``label1,label2<TAB>text``), optionally a seeded sample of each
   (``--train-docs`` / ``--test-docs``, ``random.Random(seed).sample``), and splits the training documents
   as Annif's documentation says to: the associative backends (omikuji, fastText) train on the bulk;
   MLLM (a lexical backend, "100-10,000" training documents) on its own small split; ``nn_ensemble``
   ("1,000-10,000" documents, which its sources must not have seen) on a held-out split. Both splits are
   ``min(--holdout-cap, 10 %)`` of the training documents; the MLLM split stays in the bulk (MLLM's
   training does not look at the associative models), the nn split does not.
2. Writes Annif's inputs: a TSV vocabulary ``<uri><TAB>prefLabel`` of every concept in the set's
   ``labels.txt.gz`` (loaded with ``annif load-vocab --language LANG``), the corpora in Annif's short-text
   TSV format ``text<TAB><uri> <uri>``, and ``projects.cfg`` with the setups from Annif's wiki and
   ``projects.cfg.dist``: omikuji Parabel (defaults) and Bonsai (``cluster_balanced=False, cluster_k=100,
   max_depth=3``), MLLM (defaults), fastText (``dim=500 lr=0.25 epoch=30 loss=hs chunksize=24``), a simple
   ``ensemble`` and an ``nn_ensemble`` (``nodes=100 dropout_rate=0.2 epochs=10``) of Bonsai, fastText and MLLM
   ("for best results, try fastText, Omikuji and MLLM combined in ensembles"). Every project: analyzer
   ``snowball(english)`` / ``snowball(swedish)``, ``limit=100``.
3. Times ``annif train`` for each (wall clock of the command) and the suggestions for every test document
   in-process (benchmarks/_annif_suggest.py: ``suggest_corpus``, Annif's batches, after loading and warming).
4. Trains xmtc on the same documents as Annif's associative backends (``xmtc train TRAIN -o M``, and the
   variants below), times the command, predicts the test documents in-process (``predict_topk`` after a
   warm-up), and combines the variants with ``xmtc.models.ensemble.Ensemble`` (what ``xmtc ensemble``
   runs).
5. Scores every system's top 10 for the same test documents with xmtc.metrics.evaluate (the code behind
   ``xmtc evaluate``): labels are mapped to the set's ids (URIs through labels.txt.gz), so the numbers are
   comparable. An ensemble's train time is its members' plus its own training.

/proc/loadavg is recorded with every timing. Results: ``OUT/results.json`` and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for p in (str(HERE), str(REPO)):
    if p not in sys.path:
        sys.path.insert(0, p)

import _common  # noqa: E402
import _venv  # noqa: E402

from xmtc.data.data_root import data_root  # noqa: E402

VENV = HERE / ".venv-annif"
LANGS = {"en": "english", "sv": "swedish", "fi": "finnish"}
ANNIF_SYSTEMS = ("parabel", "bonsai", "mllm", "fasttext", "ensemble", "nn_ensemble")
ENSEMBLE_SOURCES = ("bonsai", "fasttext", "mllm")


# -- format conversion ---------------------------------------------------------------------------------

def read_labels(path: Path) -> list[tuple[str, str, str]]:
    """(id, uri, prefLabel) of every concept of a ``labels.txt.gz`` (id, uri, prefLabel, label_text, n_docs)."""
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            cols = line.rstrip("\n").split("\t")
            out.append((cols[0], cols[1], cols[2]))
    return out


def write_vocab(labels, path: Path) -> None:
    """Annif's TSV vocabulary: ``<uri><TAB>label`` a line."""
    with open(path, "w", encoding="utf-8") as f:
        for _, uri, pref in labels:
            f.write(f"<{uri}>\t{_clean(pref)}\n")


def _clean(text: str) -> str:
    return " ".join(text.replace("\t", " ").split())


def parse_line(line: str) -> tuple[list[str], str]:
    """xmtc's TSV line ``label1,label2<TAB>text`` -> (labels, text)."""
    labels, _, text = line.rstrip("\n").partition("\t")
    return [lab for lab in labels.split(",") if lab], text


def to_annif_line(labels: list[str], text: str, id2uri: dict[str, str]) -> str | None:
    """Annif's short-text TSV corpus line ``text<TAB><uri> <uri>``; None if no label has a URI."""
    uris = [f"<{id2uri[lab]}>" for lab in labels if lab in id2uri]
    if not uris:
        return None
    return f"{_clean(text)}\t{' '.join(uris)}\n"


def write_annif_corpus(lines: list[str], id2uri: dict[str, str], path: Path) -> int:
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            out = to_annif_line(*parse_line(line), id2uri)
            if out is not None:
                f.write(out)
                n += 1
    return n


def projects_cfg(lang: str, analyzer: str, nn: bool) -> str:
    """Annif's recommended setups (wiki pages of the backends, projects.cfg.dist), one vocabulary 'yso'."""
    common = f"language={lang}\nvocab=yso\nanalyzer={analyzer}\nlimit=100\n"
    sources = ",".join(ENSEMBLE_SOURCES)
    parts = [
        f"[parabel]\nname=Omikuji Parabel\nbackend=omikuji\n{common}",
        f"[bonsai]\nname=Omikuji Bonsai\nbackend=omikuji\n{common}cluster_balanced=False\ncluster_k=100\nmax_depth=3\n",
        f"[mllm]\nname=MLLM\nbackend=mllm\n{common}",
        f"[fasttext]\nname=fastText\nbackend=fasttext\n{common}dim=500\nlr=0.25\nepoch=30\nloss=hs\nchunksize=24\n",
        f"[ensemble]\nname=Ensemble\nbackend=ensemble\nlanguage={lang}\nvocab=yso\nlimit=100\nsources={sources}\n",
    ]
    if nn:
        parts.append(f"[nn_ensemble]\nname=NN ensemble\nbackend=nn_ensemble\nlanguage={lang}\nvocab=yso\nlimit=100\n"
                     f"sources={sources}\nnodes=100\ndropout_rate=0.2\nepochs=10\n")
    return "\n".join(parts)


def ensure_punkt(venv: Path) -> str | None:
    """Annif's analyzers need NLTK's ``punkt_tab`` and download it on first use, which fails without the
    internet. Then an untrained Punkt (empty parameter files: no abbreviation list, no collocations) is
    written where NLTK looks inside the venv; word tokens are the same, sentence breaks may fall after an
    abbreviation. Returns a note when it did so."""
    py = str(venv / "bin" / "python")
    probe = "import nltk.data; nltk.data.find('tokenizers/punkt_tab/english/')"
    if subprocess.run([py, "-c", probe], capture_output=True).returncode == 0:
        return None
    for lang in ("english", "swedish", "finnish"):
        d = venv / "nltk_data" / "tokenizers" / "punkt_tab" / lang
        d.mkdir(parents=True, exist_ok=True)
        for name in ("collocations.tab", "sent_starters.txt", "abbrev_types.txt", "ortho_context.tab"):
            (d / name).touch()
    return "NLTK punkt_tab not downloadable here: an untrained Punkt (empty parameters) stands in"


# -- timing helpers ------------------------------------------------------------------------------------

def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def timed(cmd: list[str], env: dict | None = None, log: Path | None = None) -> dict:
    la0 = loadavg()
    t0 = time.perf_counter()
    with open(log or os.devnull, "a") as lf:
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=lf, text=True)
    wall = time.perf_counter() - t0
    return {"cmd": " ".join(str(c) for c in cmd), "seconds": round(wall, 2), "rc": proc.returncode,
            "stdout": proc.stdout, "loadavg_start": la0, "loadavg_end": loadavg()}


# -- scoring -------------------------------------------------------------------------------------------

def score(truth: list[list[str]], predicted: list[list[str]], ks=(1, 3, 5)) -> dict[str, float]:
    """xmtc.metrics.evaluate over one label index built from the truth and every prediction."""
    from xmtc.metrics import evaluate

    index: dict[str, int] = {}
    for labs in truth:
        for lab in labs:
            index.setdefault(lab, len(index))
    for labs in predicted:
        for lab in labs[:10]:
            index.setdefault(lab, len(index))
    rows, cols = [], []
    for i, labs in enumerate(truth):
        for lab in labs:
            rows.append(i)
            cols.append(index[lab])
    Y = sp.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=(len(truth), max(len(index), 1)))
    idx = np.full((len(truth), 10), -1, dtype=np.int64)
    for i, labs in enumerate(predicted):
        ids = [index[lab] for lab in labs[:10]]
        idx[i, :len(ids)] = ids
    return {k: round(v, 2) for k, v in evaluate(Y, idx, ks=ks).items() if k in ("P@1", "P@3", "P@5", "nDCG@5")}


# -- the two sides -------------------------------------------------------------------------------------

def annif_env(work: Path) -> dict:
    env = dict(os.environ)
    env.update({"ANNIF_PROJECTS": str(work / "projects.cfg"), "ANNIF_DATADIR": str(work / "annif-data"),
                "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore"})
    return env


def run_annif(work: Path, systems: list[str], lang: str, uri2id: dict[str, str], n_test: int,
              log=print) -> dict[str, dict]:
    annif = str(VENV / "bin" / "annif")
    env = annif_env(work)
    logf = work / "annif.log"
    res: dict[str, dict] = {}
    r = timed([annif, "load-vocab", "--language", lang, "--force", "yso", str(work / "vocab.tsv")], env, logf)
    if r["rc"] != 0:
        raise SystemExit(f"annif load-vocab failed, see {logf}")
    train_of = {"parabel": "annif-train.tsv", "bonsai": "annif-train.tsv", "fasttext": "annif-train.tsv",
                "mllm": "annif-mllm.tsv", "nn_ensemble": "annif-nn.tsv"}
    for name in systems:
        row: dict = {"system": f"Annif {name}"}
        if name in train_of:
            log(f"[annif] train {name} on {train_of[name]}  (load {loadavg()})")
            r = timed([annif, "train", name, str(work / train_of[name])], env, logf)
            row["train"] = {k: r[k] for k in ("cmd", "seconds", "rc", "loadavg_start", "loadavg_end")}
            if r["rc"] != 0:
                row["error"] = f"annif train {name} failed (rc {r['rc']}), see {logf}"
                log(f"[annif] {row['error']}")
                res[name] = row
                continue
            row["own_train_s"] = r["seconds"]
        else:
            row["own_train_s"] = 0.0
        if name in ("ensemble", "nn_ensemble"):
            row["train_s"] = round(row["own_train_s"] + sum(res[s].get("train_s", 0.0) for s in ENSEMBLE_SOURCES), 2)
        else:
            row["train_s"] = row["own_train_s"]
        log(f"[annif] suggest {name}  (load {loadavg()})")
        out = work / f"pred-annif-{name}.jsonl"
        r = timed([str(VENV / "bin" / "python"), str(HERE / "_annif_suggest.py"), name,
                   str(work / "annif-test.tsv"), str(out)], env, logf)
        if r["rc"] != 0:
            row["error"] = f"suggest {name} failed (rc {r['rc']}), see {logf}"
            log(f"[annif] {row['error']}")
            res[name] = row
            continue
        info = json.loads(r["stdout"].strip().splitlines()[-1])
        row["suggest"] = {**info, "loadavg_start": r["loadavg_start"]}
        row["suggest_ms_per_doc"] = round(1000 * info["suggest_s"] / max(info["n_docs"], 1), 3)
        with open(out, encoding="utf-8") as f:
            row["predicted"] = [[uri2id.get(u, u) for u in json.loads(line)] for line in f]
        res[name] = row
        log(f"[annif] {name}: train {row['train_s']} s, suggest {row['suggest_ms_per_doc']} ms/doc")
    return res


def run_xmtc(work: Path, variants: dict[str, list[str]], test_texts: list[str], ensemble: bool,
             log=print) -> dict[str, dict]:
    from xmtc.models import load
    from xmtc.models.ensemble import Ensemble

    env = _common.child_env(2, with_repo=True)
    logf = work / "xmtc.log"
    res: dict[str, dict] = {}
    models = {}
    for name, args in variants.items():
        out = work / f"xmtc-{name}"
        cmd = [sys.executable, "-m", "xmtc", "train", str(work / "xmtc-train.tsv"), "-o", str(out), *args]
        log(f"[xmtc] train {name}: {' '.join(cmd[2:])}  (load {loadavg()})")
        r = timed(cmd, env, logf)
        row: dict = {"system": f"xmtc {name}", "train": {k: r[k] for k in ("cmd", "seconds", "rc", "loadavg_start",
                                                                                "loadavg_end")}}
        if r["rc"] != 0:
            row["error"] = f"xmtc train failed (rc {r['rc']}), see {logf}"
            res[name] = row
            continue
        row["train_s"] = r["seconds"]
        models[name] = load(out)
        res[name] = row
    todo = [(name, models[name]) for name in models]
    if ensemble and len(models) > 1:
        todo.append(("ensemble", Ensemble(list(models.values()))))
        res["ensemble"] = {"system": f"xmtc ensemble ({' + '.join(models)})",
                           "train_s": round(sum(res[n]["train_s"] for n in models), 2)}
    for name, model in todo:
        model.predict_topk(test_texts[:50], 10, progress=False)  # warm-up (lazy loads: kernels, word table, analyzers)
        la = loadavg()
        t0 = time.perf_counter()
        idx, _scores = model.predict_topk(test_texts, 10, progress=False)
        sec = time.perf_counter() - t0
        names = list(model.labels_.names)
        res[name]["predicted"] = [[names[j] for j in row if j >= 0] for row in np.asarray(idx)]
        res[name]["suggest"] = {"suggest_s": round(sec, 3), "n_docs": len(test_texts), "loadavg_start": la}
        res[name]["suggest_ms_per_doc"] = round(1000 * sec / max(len(test_texts), 1), 3)
        log(f"[xmtc] {name}: train {res[name]['train_s']} s, suggest {res[name]['suggest_ms_per_doc']} ms/doc")
    return res


# -- main ----------------------------------------------------------------------------------------------

def read_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [ln for ln in f if "\t" in ln and ln.strip()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="yso-finna-en-2k-20k")
    ap.add_argument("--labels-from", default=None, help="set whose labels.txt.gz to use (default: by language)")
    ap.add_argument("--language", default=None, help="en or sv (default: from the set's name)")
    ap.add_argument("--train-docs", type=int, default=0, help="seeded sample of the training documents (0: all)")
    ap.add_argument("--test-docs", type=int, default=0, help="seeded sample of the test documents (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--holdout-cap", type=int, default=5000, help="most documents in the MLLM and nn splits")
    ap.add_argument("--annif", default=",".join(ANNIF_SYSTEMS), help="Annif projects to run ('' for none)")
    ap.add_argument("--xmtc-variant", action="append", default=None, metavar="NAME=ARGS",
                    help="xmtc train variant, e.g. 'labels=--label-file L' (default: defaults and label-file)")
    ap.add_argument("--no-xmtc-ensemble", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-install", action="store_true")
    args = ap.parse_args(argv)

    lang = args.language or ("sv" if args.dataset.endswith("-sv") or "-sv-" in args.dataset else "en")
    analyzer = f"snowball({LANGS[lang]})"
    root = data_root()
    ds = root / args.dataset
    labels_path = root / (args.labels_from or ("yso-finna-sv" if lang == "sv" else "yso-finna-en")) / "labels.txt.gz"
    cut = f"-{args.train_docs // 1000}k-{args.test_docs // 1000}k" if args.train_docs or args.test_docs else ""
    work = Path(args.out) if args.out else HERE / "out" / "annif-peer" / f"{args.dataset}{cut}"
    work.mkdir(parents=True, exist_ok=True)
    systems = [s for s in args.annif.split(",") if s]
    if args.xmtc_variant is None:
        variants = {"defaults": [], "label-file": ["--label-file", str(labels_path)]}
        if lang != "en":
            variants = {k: [*v, "--language", lang] for k, v in variants.items()}
    else:
        variants = {v.split("=", 1)[0]: v.split("=", 1)[1].split() for v in args.xmtc_variant}

    problems = {}
    if systems:
        problems = _venv.ensure_peers(VENV, ["annif"], install=not args.no_install)
        if problems:
            raise SystemExit(f"Annif did not install: {problems}")
        punkt = ensure_punkt(VENV)
        if punkt:
            print(f"[annif] {punkt}")
            problems["punkt_tab"] = punkt
        if "nn_ensemble" in systems:
            nn_problem = _venv.ensure_peers(VENV, ["annif-nn"], install=not args.no_install)
            if nn_problem:
                print(f"[annif] nn_ensemble left out: {nn_problem}")
                problems.update(nn_problem)
                systems.remove("nn_ensemble")

    machine = _common.machine_info()
    # the documents: a seeded sample, then the splits
    train = read_lines(ds / "train.txt.gz")
    test = read_lines(ds / "test.txt.gz")
    rng = random.Random(args.seed)
    if args.train_docs and args.train_docs < len(train):
        train = rng.sample(train, args.train_docs)
    else:
        rng.shuffle(train)
    if args.test_docs and args.test_docs < len(test):
        test = rng.sample(test, args.test_docs)
    n_hold = min(args.holdout_cap, len(train) // 10)
    nn_split, bulk = train[:n_hold], train[n_hold:]
    mllm_split = bulk[:n_hold]
    labels = read_labels(labels_path)
    id2uri = {i: u for i, u, _ in labels}
    uri2id = {u: i for i, u, _ in labels}

    (work / "xmtc-train.tsv").write_text("".join(bulk), encoding="utf-8")
    (work / "xmtc-test.tsv").write_text("".join(test), encoding="utf-8")
    write_vocab(labels, work / "vocab.tsv")
    n_a = write_annif_corpus(bulk, id2uri, work / "annif-train.tsv")
    write_annif_corpus(mllm_split, id2uri, work / "annif-mllm.tsv")
    write_annif_corpus(nn_split, id2uri, work / "annif-nn.tsv")
    # test: every document, even one whose labels have no URI (it then counts as all misses on both sides)
    with open(work / "annif-test.tsv", "w", encoding="utf-8") as f:
        for line in test:
            labs, text = parse_line(line)
            f.write(f"{_clean(text)}\t{' '.join('<' + id2uri[lab] + '>' for lab in labs if lab in id2uri)}\n")
    (work / "projects.cfg").write_text(projects_cfg(lang, analyzer, "nn_ensemble" in systems), encoding="utf-8")
    shutil.rmtree(work / "annif-data", ignore_errors=True)
    truth = [parse_line(line)[0] for line in test]
    test_texts = [parse_line(line)[1] for line in test]
    print(f"[data] {args.dataset}{cut}: bulk {len(bulk)} (Annif corpus {n_a}), MLLM split {len(mllm_split)}, "
          f"nn split {len(nn_split)}, test {len(test)}; load {loadavg()}", flush=True)

    def log(msg):
        print(msg, flush=True)

    annif_res = run_annif(work, systems, lang, uri2id, len(test), log) if systems else {}
    xmtc_res = run_xmtc(work, variants, test_texts, not args.no_xmtc_ensemble, log)

    rows = []
    for side in (annif_res, xmtc_res):
        for row in side.values():
            if "predicted" in row:
                row["metrics"] = score(truth, row.pop("predicted"))
            rows.append(row)
    result = {"dataset": args.dataset, "train_docs": args.train_docs, "test_docs": args.test_docs, "seed": args.seed,
              "language": lang, "analyzer": analyzer, "n_bulk": len(bulk), "n_mllm": len(mllm_split),
              "n_nn": len(nn_split), "n_test": len(test), "machine": machine, "loadavg_end": loadavg(),
              "install_problems": problems, "xmtc_variants": variants, "rows": rows,
              "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    (work / "results.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(markdown(result))
    return 0


def markdown(result: dict) -> str:
    lines = ["| system | P@1 | P@5 | nDCG@5 | train s | suggest ms/doc | load at train start |",
             "|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        m = row.get("metrics", {})
        la = row.get("train", {}).get("loadavg_start", ["—"])[0]
        if "error" in row:
            lines.append(f"| {row['system']} | — | — | — | {row.get('train_s', '—')} | — | {la} ({row['error']}) |")
            continue
        lines.append(f"| {row['system']} | {m.get('P@1', '—')} | {m.get('P@5', '—')} | {m.get('nDCG@5', '—')} | "
                     f"{row.get('train_s', '—')} | {row.get('suggest_ms_per_doc', '—')} | {la} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
