"""Simulated active learning on yso-finna-en-2k-20k, the true labels playing the expert.

Loop, per strategy (every strategy of :mod:`xmtc.select` and random), same start for all: shuffle the
20,000 training documents with the seed, label the first 2,000, keep the other 18,000 as the
unlabelled pool; then 5 rounds: train XR-Linear (default parameters) on the labelled documents,
select 1,000 pool documents with the strategy, "label" them from the data, and retrain. After every
training, P@1 and P@5 on the 5,000 test documents (labels the model never saw count as misses) and
the number of distinct labels in the labelled set.

    python benchmarks/active_learning.py [--seeds 1] [--rounds 5] [--plot benchmarks/active_learning.png]

There is no peer run side by side here (the libraries benchmarks/linear.py compares with are trained
and scored, not asked which documents to label); random selection is the baseline every strategy must beat. The last stdout line is one JSON object
``{"<strategy>": [P@1 after round 1..R, mean over seeds], ..., "default": "<xmtc's default>"}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from xmtc.data.data_root import data_root  # noqa: E402

from _data import read_tsv  # noqa: E402

DATA = data_root() / "yso-finna-en-2k-20k"


def simulate(strategy: str, texts, labels, test, *, seed: int, start: int, rounds: int, batch: int,
             threads: int) -> dict:
    import xmtc
    from xmtc.select import select_documents

    order = np.random.default_rng(seed).permutation(len(texts))
    labelled = list(order[:start])
    pool = list(order[start:])
    out = {"P@1": [], "P@5": [], "labels": [], "n_labelled": [], "select_s": [], "train_s": []}
    for r in range(rounds + 1):
        t0 = time.perf_counter()
        model = xmtc.XRLinear(n_threads=threads, seed=seed).fit([texts[i] for i in labelled],
                                                               [labels[i] for i in labelled], progress=False)
        out["train_s"].append(round(time.perf_counter() - t0, 2))
        m = model.evaluate(test[0], test[1], ks=(1, 5))
        out["P@1"].append(round(m["P@1"], 3))
        out["P@5"].append(round(m["P@5"], 3))
        out["labels"].append(len({x for i in labelled for x in labels[i]}))
        out["n_labelled"].append(len(labelled))
        print(f"  {strategy:15s} seed {seed} round {r}: {len(labelled)} labelled, P@1 {m['P@1']:.2f},"
              f" P@5 {m['P@5']:.2f}, labels {out['labels'][-1]}", file=sys.stderr, flush=True)
        if r == rounds:
            break
        t0 = time.perf_counter()
        pool_texts = [texts[i] for i in pool]
        picked = select_documents(model, pool_texts, batch, strategy, seed=seed + r,
                                  labelled=[texts[i] for i in labelled])
        out["select_s"].append(round(time.perf_counter() - t0, 2))
        chosen = set(picked)
        labelled += [pool[i] for i in picked]
        pool = [p for i, p in enumerate(pool) if i not in chosen]
    return out


def plot(results: dict, path: str, default: str, n_seeds: int) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    for name, res in results.items():
        x = res["n_labelled"]
        style = dict(marker="o", lw=2.4 if name in ("random", default) else 1.4,
                     ls="--" if name == "random" else "-", color="black" if name == "random" else None)
        for ax, key in zip(axes, ("P@1", "P@5", "labels")):
            ax.plot(x, res[key], label=name + (" (default)" if name == default else ""), **style)
    for ax, title in zip(axes, ("P@1 on the test set (%)", "P@5 on the test set (%)",
                                "distinct labels in the labelled set")):
        ax.set_title(title)
        ax.set_xlabel("labelled training documents")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=9)
    fig.suptitle("Active learning on yso-finna-en-2k-20k (XR-Linear, start 2,000, +1,000 per round; "
                 f"mean over {n_seeds} seed{'s' if n_seeds > 1 else ''})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--start", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--strategies", default="random,uncertainty,label-coverage,diversity,hybrid")
    ap.add_argument("--plot", default=str(HERE / "active_learning.png"))
    ap.add_argument("--json-out", default=None, help="Also write every curve here.")
    ap.add_argument("--cache", default=None, help="Folder of finished (strategy, seed) runs: reused, and new"
                                                  " ones written there, so runs split over processes combine.")
    ap.add_argument("--only-seeds", default=None, help="Run just these seeds (comma-separated) into --cache.")
    args = ap.parse_args()
    from xmtc.select import DEFAULT_STRATEGY

    texts, labels = read_tsv(DATA / "train.txt.gz")
    test = read_tsv(DATA / "test.txt.gz")
    print(f"load at start: {os.getloadavg()[0]:.2f}; {len(texts)} train, {len(test[0])} test", file=sys.stderr)
    results = {}
    seeds = [int(x) for x in args.only_seeds.split(",")] if args.only_seeds else list(range(args.seeds))

    def run(strategy: str, seed: int) -> dict:
        path = Path(args.cache) / f"{strategy}-s{seed}-{args.start}-{args.batch}x{args.rounds}.json" if args.cache else None
        if path is not None and path.exists():
            return json.loads(path.read_text())
        out = simulate(strategy, texts, labels, test, seed=seed, start=args.start, rounds=args.rounds,
                       batch=args.batch, threads=args.threads)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(out))
        return out

    for strategy in args.strategies.split(","):
        runs = [run(strategy, s) for s in seeds]
        if args.only_seeds:
            continue
        results[strategy] = {k: np.mean([r[k] for r in runs], axis=0).round(3).tolist()
                             for k in ("P@1", "P@5", "labels", "n_labelled")}
        results[strategy]["per_seed_P@1"] = [r["P@1"] for r in runs]
    print(f"load at end: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    if args.only_seeds:
        return
    if args.plot:
        plot(results, args.plot, DEFAULT_STRATEGY, len(seeds))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1))
    for name, res in results.items():
        print(f"{name:15s} P@1 {res['P@1']}  P@5 {res['P@5']}  labels {res['labels']}")
    summary = {name: res["P@1"][1:] for name, res in results.items()}
    summary["default"] = DEFAULT_STRATEGY
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
