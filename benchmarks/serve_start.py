#!/usr/bin/env python3
"""Seconds from starting ``xmtc serve MODEL_DIR`` to its first answered request, and from starting a
fresh Python to the first top-5 of one feature row through the API (``xmtc.load`` memory-mapped).

    python benchmarks/serve_start.py MODEL_DIR [--features X.npz] [--repeat 3] [--full-checks]

Serve: the clock starts just before the server process is spawned; the script then polls every 20 ms
with the first request, ``POST /v1/projects/ID/suggest`` (one text, limit 5). A model trained on given
features (``benchmarks/scale.py``'s) cannot score text and answers 503 once loaded; for it the first
request is ``GET /v1/projects/ID``, which the server answers only after loading the model (its lifespan
loads every project before the socket opens). API: ``python -c`` importing xmtc, loading the model and
predicting the first row of ``--features``, with the times of each step.

``--full-checks`` sets ``XMTC_VERIFY=full`` (every file hashed and checked as at a first load); without
it a load may use the verification stamp that a save or an earlier full load wrote
(:mod:`xmtc.models.verified`). The LAST line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

API = r"""
import sys, time, json
t0 = time.perf_counter()
import xmtc, scipy.sparse as sp
t1 = time.perf_counter()
m = xmtc.load(sys.argv[1])
t2 = time.perf_counter()
X = sp.load_npz(sys.argv[2])[:1] if sys.argv[2] else None
t3 = time.perf_counter()
if X is not None:
    m.predict_topk(X, k=5)
t4 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "first_predict_s": t4 - t3}))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(url: str, data: bytes | None) -> int:
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def serve_once(model: Path, text: str, env: dict, timeout: float) -> dict:
    port = _free_port()
    pid = model.resolve().name
    base = f"http://127.0.0.1:{port}/v1/projects/{urllib.parse.quote(pid)}"
    body = urllib.parse.urlencode({"text": text, "limit": 5}).encode()
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "xmtc", "serve", str(model), "--port", str(port), "-q"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=str(REPO))
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"xmtc serve exited {proc.returncode}: {proc.stderr.read().decode()[-400:]}")
            if time.perf_counter() - t0 > timeout:
                raise RuntimeError(f"no answer in {timeout:.0f} s")
            try:
                status = _request(base + "/suggest", body)
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.02)
                continue
            first = time.perf_counter() - t0
            if status == 200:
                return {"first_request_s": first, "request": "POST suggest (one text, limit 5)"}
            if status == 503:  # a model of given features: loaded, but it cannot score text
                t1 = time.perf_counter()
                status = _request(base, None)
                if status == 200:
                    return {"first_request_s": first, "request": "GET project (the model scores features,"
                            " not text: suggest answered 503)", "get_project_s": time.perf_counter() - t1}
            raise RuntimeError(f"first answer was HTTP {status}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def api_once(model: Path, features: str, env: dict) -> dict:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", API, str(model), features], env=env, capture_output=True,
                         text=True, cwd=str(REPO), check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["process_s"] = time.perf_counter() - t0
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--features", default="", help=".npz of feature rows for the API timing (first row used)")
    ap.add_argument("--text", default="a short text about reading and writing")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--full-checks", action="store_true", help="XMTC_VERIFY=full: hash and check every file")
    ap.add_argument("--no-serve", action="store_true")
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args(argv)
    model = Path(args.model_dir)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if args.full_checks:
        env["XMTC_VERIFY"] = "full"
    out = {"model": str(model), "full_checks": args.full_checks, "loadavg_at_start": os.getloadavg()[0],
           "api": [], "serve": []}
    for i in range(args.repeat):
        r = api_once(model, args.features, env)
        out["api"].append(r)
        print(f"api {i}: import {r['import_s']:.2f} s, load {r['load_s']:.2f} s, first predict"
              f" {r['first_predict_s'] * 1e3:.1f} ms, process {r['process_s']:.2f} s", flush=True)
        if not args.no_serve:
            s = serve_once(model, args.text, env, args.timeout)
            out["serve"].append(s)
            print(f"serve {i}: first answer after {s['first_request_s']:.2f} s ({s['request']})", flush=True)
    out["loadavg_at_end"] = os.getloadavg()[0]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
