#!/usr/bin/env python
"""SIGKILL ``xmtc train -o M`` over an existing model M at random moments; M must stay old or new.

Each trial starts a real ``xmtc train NEW -o M`` while M holds a model trained on OLD, and kills it
with SIGKILL from outside: on odd trials at a random moment of the whole run (reading, fitting,
saving), on even trials at a random moment after the save began (when ``.M.tmp-...`` appears
beside M), the narrow window a uniform draw rarely hits. After each kill, M must load and predict
exactly as the old model or as the new one; the temporaries the killed save left are removed by
the next save (checked at the end). Prints one JSON line of counts. Usage::

    python scripts/kill_trials.py --trials 20 --data ../shared/data
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import xmtc  # noqa: E402
from xmtc.data.data_root import data_root  # noqa: E402

PROBE = ["oil prices rise", "wheat and corn exports", "bank interest rates", "gold", "sugar harvest"]


def env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def train(data: Path, out: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "xmtc.cli", "train", str(data), "-o", str(out), "-q"],
                          env=env(), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(proc.stderr)


def predictions(folder: Path):
    idx, scores = xmtc.load(folder).predict_topk(PROBE, 5)
    return idx.tobytes() + scores.tobytes()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", type=Path, default=data_root())
    ap.add_argument("--docs", type=int, default=2000, help="Training documents per model (Reuters).")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    lines = gzip.open(args.data / "reuters21578-apte90" / "train.txt.gz", "rt", encoding="utf-8").read().splitlines()
    with tempfile.TemporaryDirectory(prefix="xmtc-kill-") as tmp:
        work = Path(tmp)
        old, new = work / "old.tsv", work / "new.tsv"
        old.write_text("\n".join(lines[:args.docs]) + "\n", encoding="utf-8")
        new.write_text("\n".join(lines[args.docs:2 * args.docs]) + "\n", encoding="utf-8")
        train(old, work / "ref_old")
        t0 = time.perf_counter()
        train(new, work / "ref_new")
        full = time.perf_counter() - t0
        expected = {"old": predictions(work / "ref_old"), "new": predictions(work / "ref_new")}
        M = work / "M"
        counts = {"trials": args.trials, "full_run_s": round(full, 1), "old": 0, "new": 0, "in_save_kills": 0,
                  "bad": 0}
        for trial in range(args.trials):
            if M.exists():
                shutil.rmtree(M)
            shutil.copytree(work / "ref_old", M)
            proc = subprocess.Popen([sys.executable, "-m", "xmtc.cli", "train", str(new), "-o", str(M), "-q"],
                                    env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if trial % 2:
                time.sleep(rng.uniform(0.0, 1.1) * full)
            else:  # wait for the save to begin, then kill within it
                while proc.poll() is None and not any(p.name.startswith(".M.tmp-") for p in work.iterdir()):
                    time.sleep(0.002)
                time.sleep(rng.uniform(0.0, 0.05))
                counts["in_save_kills"] += proc.poll() is None
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            try:
                got = predictions(M)
                which = next((k for k, v in expected.items() if v == got), None)
            except xmtc.errors.XmtcError as exc:
                which, got = None, str(exc)
            if which is None:
                counts["bad"] += 1
                print(f"trial {trial}: M is neither the old nor the new model ({got!r:.200})", file=sys.stderr)
            else:
                counts[which] += 1
        train(old, M)  # a save after the kills: no temporaries left
        left = [p.name for p in work.iterdir() if p.name.startswith(".M.")]
        counts["temporaries_after_next_save"] = len(left)
        print(json.dumps(counts))
        return 0 if counts["bad"] == 0 and not left else 1


if __name__ == "__main__":
    sys.exit(main())
