"""Annif itself, as a client: a real Annif 1.4 project with backend ``http`` pointed at ``xmtc serve``.

    python benchmarks/annif_compat.py                       # yso-finna-en-2k-20k, ~5 min the first time

Steps, all on loopback: create ``benchmarks/.venv-annif`` and ``pip install "annif==1.4.*"`` there (once;
Annif's own dependencies stay out of the project's interpreter); train xmtc XR-Linear on the train
file with yso-finna-en's label file (so labels carry their YSO URIs) unless ``--model`` is given;
start ``xmtc serve``; write an Annif vocabulary (``<uri><TAB>label`` for every concept of the label file),
an Annif ``projects.cfg`` whose project has ``backend=http`` and ``endpoint=.../v1/projects/yso/suggest``,
and the test set as an Annif TSV corpus (``text<TAB><uri> <uri>``); run ``annif load-vocab`` and
``annif eval``; run ``xmtc evaluate`` on the same test file; compare Annif's Precision@1 with xmtc's P@1.

Why they can differ at all: Annif re-sorts the suggestions it receives (ties at equal scores may come
out in another order), and drops those with a score of 0. The bar: within 0.5 points.
Last line of stdout: one JSON object.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from xmtc.data.data_root import data_root  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = data_root()
ANNIF = "annif==1.4.*"


def ensure_annif(venv: Path) -> Path:
    annif = venv / "bin" / "annif"
    if annif.exists():
        return annif
    base = shutil.which("python3.11") or sys.executable
    subprocess.run([base, "-m", "venv", str(venv)], check=True)
    print(f"[annif] pip install {ANNIF} into {venv}", file=sys.stderr)
    proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                           "--disable-pip-version-check", ANNIF], capture_output=True, text=True)
    if proc.returncode != 0:
        errs = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip() and "is ignored" not in ln]
        raise SystemExit(f"pip install {ANNIF} failed: {(errs or ['?'])[-1]}")
    return annif


def env_with_repo() -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_label_file(path: Path) -> dict[str, tuple[str, str]]:
    """id -> (uri, prefLabel) from yso-finna-en's labels.txt.gz."""
    out = {}
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("#") or not line.strip():
                continue
            parts = line.rstrip("\n").split("\t")
            out[parts[0]] = (parts[1], parts[2])
    return out


def write_annif_files(work: Path, test_file: Path, labels: dict, port: int) -> None:
    with open(work / "vocab.tsv", "w", encoding="utf-8") as fh:
        for uri, name in labels.values():
            fh.write(f"<{uri}>\t{name}\n")
    missing = 0
    with gzip.open(test_file, "rt", encoding="utf-8") as src, \
            open(work / "test.tsv", "w", encoding="utf-8") as dst:
        for line in src:
            ids, text = line.rstrip("\n").split("\t", 1)
            uris = []
            for x in ids.split(","):
                if x in labels:
                    uris.append(f"<{labels[x][0]}>")
                elif x:
                    missing += 1
            dst.write(f"{text.replace(chr(9), ' ')}\t{' '.join(uris)}\n")
    if missing:
        print(f"[annif] {missing} test labels have no URI in the label file", file=sys.stderr)
    (work / "projects.cfg").write_text(
        "[xmtc-http]\nname=xmtc XR-Linear over HTTP\nlanguage=en\nbackend=http\nvocab=yso-xmtc\n"
        f"endpoint=http://127.0.0.1:{port}/v1/projects/yso/suggest\n", encoding="utf-8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="yso-finna-en-2k-20k")
    ap.add_argument("--label-file", type=Path, default=DATA / "yso-finna-en" / "labels.txt.gz")
    ap.add_argument("--model", type=Path, help="Serve this model folder instead of training one.")
    ap.add_argument("--venv", type=Path, default=HERE / ".venv-annif")
    ap.add_argument("--docs-limit", type=int, default=0, help="Evaluate only the first N test documents (0: all).")
    args = ap.parse_args(argv)

    annif = ensure_annif(args.venv)
    version = subprocess.run([str(annif), "--version"], capture_output=True, text=True).stdout.strip()
    test_file = DATA / args.dataset / "test.txt.gz"
    with tempfile.TemporaryDirectory(prefix="xmtc-annif-") as tmp:
        work = Path(tmp)
        model = args.model
        if model is None:
            model = work / "yso"
            subprocess.run([sys.executable, "-m", "xmtc.cli", "train", str(DATA / args.dataset / "train.txt.gz"),
                            "-o", str(model), "--label-file", str(args.label_file), "-q"], check=True, env=env_with_repo())
        if args.docs_limit:
            lines = gzip.open(test_file, "rt", encoding="utf-8").read().splitlines(keepends=True)[:args.docs_limit]
            test_file = work / "test.txt.gz"
            with gzip.open(test_file, "wt", encoding="utf-8") as fh:
                fh.writelines(lines)
        xm = subprocess.run([sys.executable, "-m", "xmtc.cli", "evaluate", str(model), str(test_file), "--json", "-q"],
                            check=True, capture_output=True, text=True, env=env_with_repo())
        xmtc_metrics = json.loads(xm.stdout.strip().splitlines()[-1])

        port = free_port()
        write_annif_files(work, test_file, read_label_file(args.label_file), port)
        server = subprocess.Popen([sys.executable, "-m", "xmtc.cli", "serve", "--name", f"yso={model}", "--port",
                                   str(port), "-q"], env=env_with_repo(), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise SystemExit("xmtc serve did not start")
                    time.sleep(0.2)
            aenv = dict(os.environ, ANNIF_PROJECTS=str(work / "projects.cfg"))
            aenv.pop("PYTHONPATH", None)
            subprocess.run([str(annif), "load-vocab", "yso-xmtc", str(work / "vocab.tsv"), "--language", "en"],
                           check=True, cwd=work, env=aenv, capture_output=True, text=True)
            t0 = time.perf_counter()
            proc = subprocess.run([str(annif), "eval", "xmtc-http", str(work / "test.tsv"), "--metrics-file",
                                   str(work / "metrics.json")], cwd=work, env=aenv, capture_output=True, text=True)
            eval_s = time.perf_counter() - t0
            if proc.returncode != 0:
                raise SystemExit(f"annif eval failed: {(proc.stderr or proc.stdout)[-2000:]}")
            annif_metrics = json.loads((work / "metrics.json").read_text())
        finally:
            server.terminate()
            server.wait(60)
    p1_annif = 100.0 * float(annif_metrics["Precision@1"])
    p1_xmtc = float(xmtc_metrics["P@1"])
    result = {"annif": version, "dataset": args.dataset, "documents": int(annif_metrics.get("Documents_evaluated", 0)),
              "annif_P@1": round(p1_annif, 2), "xmtc_P@1": round(p1_xmtc, 2),
              "difference": round(p1_annif - p1_xmtc, 2), "within_0.5": abs(p1_annif - p1_xmtc) <= 0.5,
              "annif_eval_s": round(eval_s, 1), "annif_metrics": annif_metrics}
    print(f"Annif ({version}) Precision@1 {p1_annif:.2f} vs xmtc evaluate P@1 {p1_xmtc:.2f} on"
          f" {result['documents']} documents: difference {result['difference']:+.2f}", file=sys.stderr)
    print(json.dumps(result))
    return 0 if result["within_0.5"] else 1


if __name__ == "__main__":
    sys.exit(main())
