#!/usr/bin/env python3
"""Wall time of `xmtc train` with and without `--ray local:N`, and whether the model folders are identical.

    python benchmarks/ray_fit.py --dataset yso-finna-en --workers 1,2
    python benchmarks/ray_fit.py --dataset yso-finna-en --train-args "--negatives tfn+man"   # level by level

Runs the CLI as a user would (one process per run, TF-IDF included), in turn: the plain run, then
``--ray local:N`` for each N. Reports wall seconds, the ratio to the plain run, peak RSS of the
CLI process (the Ray workers are separate processes: their peak is not in it) and whether every
file of the model folder equals the plain run's byte for byte. The load average before and after
each run is printed with it: the machine is shared.
"""

from __future__ import annotations

import argparse
import datetime as dt
import filecmp
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from xmtc.data.data_root import data_root  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def same_folder(a: Path, b: Path) -> bool:
    fa = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    fb = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    return fa == fb and all(filecmp.cmp(a / f, b / f, shallow=False) for f in fa)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="yso-finna-en")
    ap.add_argument("--data-root", default=str(data_root()))
    ap.add_argument("--workers", default="1,2", help="comma-separated local worker counts")
    ap.add_argument("--threads", type=int, default=2, help="--n-threads of every run (the driver's levels)")
    ap.add_argument("--train-args", default="", help="more `xmtc train` arguments for every run (e.g."
                    " '--negatives tfn+man', which Ray trains level by level)")
    ap.add_argument("--out", default=str(HERE / "out" / "ray_fit"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train = Path(args.data_root) / args.dataset / "train.txt.gz"
    runs = [("plain", [])] + [(f"ray local:{w}", ["--ray", f"local:{int(w)}"]) for w in args.workers.split(",")]
    rows = []
    for name, extra in runs:
        folder = out / name.replace(" ", "_").replace(":", "")
        cmd = [sys.executable, "-m", "xmtc.cli", "train", str(train), "-o", str(folder), "-q",
               "--n-threads", str(args.threads), *args.train_args.split(), *extra]
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=str(REPO))
        wall = time.perf_counter() - t0
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # max over the CLI runs so far
        row = {"run": name, "wall_s": wall, "rc": proc.returncode, "load_before": load0,
               "load_after": os.getloadavg()[0], "max_cli_rss_mb_so_far": rss,
               "error": proc.stderr.strip().splitlines()[-1:] if proc.returncode else None}
        rows.append(row)
        print(json.dumps(row), flush=True)
    plain = out / "plain"
    print(f"\n## {args.dataset}: xmtc train wall time, plain vs --ray local:N  ({dt.datetime.now().astimezone():%Y-%m-%d %H:%M %Z})")
    print(f"machine: nproc {os.cpu_count()}, --n-threads {args.threads} {args.train_args}; TF-IDF, indexing and"
          " saving included\n")
    print("| run | wall s | vs plain | model folder identical to plain | load avg before / after |")
    print("|---|---|---|---|---|")
    for r in rows:
        if r["rc"]:
            print(f"| {r['run']} | – | – | failed: {r['error']} | {r['load_before']:.1f} / {r['load_after']:.1f} |")
            continue
        folder = out / r["run"].replace(" ", "_").replace(":", "")
        same = "(reference)" if r["run"] == "plain" else ("yes" if same_folder(plain, folder) else "NO")
        print(f"| {r['run']} | {r['wall_s']:.1f} | {r['wall_s'] / rows[0]['wall_s']:.2f}× | {same} |"
              f" {r['load_before']:.1f} / {r['load_after']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
