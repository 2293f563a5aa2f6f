"""One text at a time through the Python API: ``model.predict([text], k)`` latency of saved models.

    python benchmarks/latency.py /tmp/lat/reuters --test /work/shared/data/reuters21578-apte90/test.txt.gz
    python benchmarks/latency.py /tmp/lat/yso2k --test /work/shared/data/yso-finna-en-2k-20k/test.txt.gz \
        --steps --repeat 3

What it does: loads each model folder with ``xmtc.load`` (memory-mapped, as ``serve`` does), draws ``--n``
test texts with a seeded shuffle (the files are sorted by text, so the first N would be a biased sample),
predicts ``--warmup`` of them to warm caches, then times ``model.predict([text], k=--k)`` for
each text with ``time.perf_counter``: p50, p99, mean and max in milliseconds. ``--repeat`` runs the timed
pass several times (the best p99 of the passes is the quiet-machine figure; every pass is printed). The
1-minute load average from ``/proc/loadavg`` is printed before and after each pass: this project's
machine is shared, and a pass under load says little.

``--steps`` also times the steps of one prediction for the same texts (the known-word share, the features, the
model's top-k, the calibration, the label-text route's n-grams and cosines, the merge), by calling the model's
own stage methods in the order ``predict_topk`` calls them: where the time goes. ``--clock cpu`` times with the
thread's CPU time instead of the wall clock: on a loaded machine it leaves out the waits for a core (a wall
clock p99 there measures the scheduler), so it shows what the code costs; the bar is the wall clock on a
quiet machine.

Last line of stdout: one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _stats(seconds: np.ndarray) -> dict:
    ms = np.asarray(seconds) * 1e3
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "mean_ms": float(ms.mean()), "max_ms": float(ms.max()), "n": int(ms.size)}


def _load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0]) if Path("/proc/loadavg").exists() \
        else os.getloadavg()[0]


def _timed_pass(model, texts: list[str], k: int, clock) -> np.ndarray:
    lat = np.empty(len(texts))
    for j, text in enumerate(texts):
        t0 = clock()
        model.predict([text], k=k)
        lat[j] = clock() - t0
    return lat


def _step_times(model, texts: list[str], k: int, clock) -> dict:
    """Per step of ``predict_topk`` for one text at a time (an XR-Linear model): the same calls, timed one by
    one; "route" is the label-text route's n-grams and cosines, "merge" its merge with the model's top-k."""
    from xmtc.models.predictor import checked_k
    from xmtc.models.label_route import merge_topk

    route = getattr(model, "label_route_", None)
    steps: dict[str, list[float]] = {"known_words": [], "features": [], "model_topk": [], "calibrate": [],
                                     "route": [], "merge": []}
    k = checked_k(k, model.n_labels)
    k_ask = model._candidates(k)
    for text in texts:
        batch = [text]
        t0 = clock()
        known = model.known_fraction(batch)
        t1 = clock()
        X = model.transform(batch)
        t2 = clock()
        idx, sc = model._predict_features(X, k_ask)
        t3 = clock()
        idx, sc = model.calibrated_topk(idx, sc, batch, known=known)
        t4 = clock()
        for name, a, b in (("known_words", t0, t1), ("features", t1, t2), ("model_topk", t2, t3),
                           ("calibrate", t3, t4)):
            steps[name].append(b - a)
        if route is not None and len(route):
            t4 = clock()
            ri, rs = route.topk(batch, k)
            t5 = clock()
            merge_topk(idx, sc, ri, rs, k)
            steps["route"].append(t5 - t4)
            steps["merge"].append(clock() - t5)
    return {name: _stats(np.array(v)) for name, v in steps.items() if v}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="model folders (xmtc train -o ...)")
    ap.add_argument("--test", action="append", required=True,
                    help="the test file of each model, in the same order (one --test per model, or one for all)")
    ap.add_argument("--n", type=int, default=1000, help="timed texts per pass (default 1000)")
    ap.add_argument("--warmup", type=int, default=200, help="untimed predictions first (default 200)")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=1, help="timed passes per model (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", action="store_true", help="also time each step of one prediction (XR-Linear)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall: time.perf_counter, what a caller waits (default); cpu: time.thread_time, the CPU"
                         " time of the predicting thread, which leaves out the waits for a core on a loaded machine")
    args = ap.parse_args(argv)
    tests = args.test * len(args.models) if len(args.test) == 1 else args.test
    if len(tests) != len(args.models):
        ap.error("give one --test per model, or one for all")

    import xmtc
    from xmtc.data import read_inputs

    clock = time.perf_counter if args.clock == "wall" else time.thread_time

    report = []
    for folder, test in zip(args.models, tests):
        texts = read_inputs(test)
        rng = np.random.default_rng(args.seed)
        pick = rng.permutation(len(texts))[: args.n + args.warmup]
        sample = [texts[i] for i in pick]
        t0 = time.perf_counter()
        model = xmtc.load(folder)
        load_s = time.perf_counter() - t0
        for text in sample[args.n:]:
            model.predict([text], k=args.k)
        timed = sample[: args.n]
        route = getattr(model, "label_route_", None)
        entry = {"model": str(folder), "test": str(test), "load_s": load_s, "route_labels": len(route or ()),
                 "passes": []}
        for r in range(args.repeat):
            before = _load1()
            stats = _stats(_timed_pass(model, timed, args.k, clock))
            stats.update(load1_before=before, load1_after=_load1())
            entry["passes"].append(stats)
            print(f"{folder} pass {r + 1}: p50 {stats['p50_ms']:.3f} ms, p99 {stats['p99_ms']:.3f} ms, mean"
                  f" {stats['mean_ms']:.3f} ms, max {stats['max_ms']:.2f} ms over {stats['n']} texts; load"
                  f" {stats['load1_before']:.2f} -> {stats['load1_after']:.2f}", flush=True)
        if args.steps:
            entry["steps"] = _step_times(model, timed, args.k, clock)
            for name, s in entry["steps"].items():
                print(f"  {name:15s} p50 {s['p50_ms']:.3f} ms  p99 {s['p99_ms']:.3f} ms  mean {s['mean_ms']:.3f} ms")
        report.append(entry)
    print(json.dumps({"k": args.k, "n": args.n, "warmup": args.warmup, "clock": args.clock, "results": report}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
