#!/usr/bin/env python3
"""xmtc XR-Linear against its peers (PECOS XR-Linear, omikuji, napkinXC PLT) on the SAME features.

    python benchmarks/linear.py --dataset reuters21578-apte90

Featurizes once (TF-IDF, 1-2 grams, min_df 2, sublinear tf), writes the matrices as .npz, then runs
each library in its own child process (xmtc on this interpreter, the peers in benchmarks/.venv-peers)
so that each reports its own peak RSS. All predictions are scored here by one metrics
implementation. Prints one markdown table with xmtc/PECOS ratios and writes the raw numbers as JSON
to benchmarks/out/. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))

import numpy as np  # noqa: E402

import _common  # noqa: E402
from _common import K, run_child  # noqa: E402

LIBRARIES = ("xmtc", "pecos", "omikuji", "napkinxc")
DISPLAY = {"xmtc": "xmtc XR-Linear", "pecos": "PECOS XR-Linear 1.2.8",
           "omikuji": "omikuji 0.5.2", "napkinxc": "napkinXC 0.7.2 PLT"}


def render_table(rows: list[dict]) -> str:
    """Markdown table: one row per library plus the xmtc / PECOS ratio row."""
    return _common.render_table(rows, DISPLAY, ("xmtc", "pecos"), "xmtc / PECOS")


def ratios(rows: list[dict]) -> dict | None:
    return _common.ratios(rows, ("xmtc", "pecos"))


def _seed_list(text: str) -> list[int]:
    try:
        seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not seeds or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative seeds, got {text!r}")
    return seeds


def write_same_tree(work: Path, xmtc_params: dict, seed: int, threads: int) -> tuple[Path, list[int]]:
    """xmtc's label tree for these parameters and tree seed, as parent arrays both runners read."""
    import scipy.sparse as sp

    from xmtc import XRLinear
    from xmtc.index.kmeans import build_label_tree
    from xmtc.index.pifa import pifa

    cfg = XRLinear(**{k: v for k, v in xmtc_params.items() if k != "n_threads"}).config
    X = sp.load_npz(work / "X_train.npz").tocsr().astype(np.float32)
    Y = sp.load_npz(work / "Y_train.npz").tocsr()
    tree = build_label_tree(pifa(X, Y), branching=cfg.branching, max_leaf_size=cfg.max_leaf_size, seed=seed,
                            max_iter=cfg.kmeans_max_iter, n_threads=threads, shape=cfg.tree_shape)
    path = work / f"same-tree-s{seed}.npz"
    np.savez(path, n_levels=len(tree.parents), **{f"parents{t}": p for t, p in enumerate(tree.parents)})
    return path, tree.level_sizes


def seeded_params(lib: str, params: dict, seed: int, tree_file: Path | None = None) -> dict:
    """A library's parameters with its tree (k-means) seed set; libraries without one are unchanged."""
    params = json.loads(json.dumps(params))
    if lib == "xmtc":
        params["seed"] = seed
    elif lib == "pecos":
        params.setdefault("indexer", {})["seed"] = seed
    if tree_file is not None and lib in ("xmtc", "pecos"):
        params["tree_file"] = str(tree_file)
    return params


def seed_spread(runs: dict[int, list[dict]]) -> list[dict]:
    """Per library: every metric's and time's mean and sample sd over the seeds that ran."""
    by_lib: dict[str, list[dict]] = {}
    for rows in runs.values():
        for r in rows:
            if not r.get("problem"):
                by_lib.setdefault(r["library"], []).append(r)
    out = []
    for lib, rows in by_lib.items():
        entry = {"library": lib, "n_seeds": len(rows)}
        for key in _common.METRIC_KEYS:
            vals = np.array([r["metrics"][key] for r in rows], dtype=np.float64)
            entry[key] = (float(vals.mean()), float(vals.std(ddof=1)) if vals.size > 1 else 0.0)
        for key in ("train_s", "predict_ms_per_doc"):
            vals = np.array([r[key] for r in rows], dtype=np.float64)
            entry[key] = (float(vals.mean()), float(vals.std(ddof=1)) if vals.size > 1 else 0.0)
        out.append(entry)
    return out


def render_spread(spread: list[dict], seeds: list[int]) -> str:
    head = ["library", "seeds", "train s", *_common.METRIC_KEYS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for e in spread:
        cells = [DISPLAY[e["library"]], str(e["n_seeds"]), f"{e['train_s'][0]:.2f} ± {e['train_s'][1]:.2f}"]
        cells += [f"{e[k][0]:.2f} ± {e[k][1]:.2f}" for k in _common.METRIC_KEYS]
        lines.append("| " + " | ".join(cells) + " |")
    by = {e["library"]: e for e in spread}
    if "xmtc" in by and "pecos" in by:
        cells = ["**xmtc − PECOS**", "", ""]
        cells += [f"{by['xmtc'][k][0] - by['pecos'][k][0]:+.2f}" for k in _common.METRIC_KEYS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + f"\n\nseeds {','.join(map(str, seeds))}; mean ± sample sd over the seeds"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    _common.add_run_args(ap, LIBRARIES, dataset="reuters21578-apte90", timeout=3600)
    ap.add_argument("--xmtc-params", type=json.loads, default={}, help='JSON keywords for xmtc.XRLinear, '
                    'e.g. \'{"n_trees": 3}\' (n_threads defaults to --threads)')
    ap.add_argument("--pecos-params", type=json.loads, default={},
                    help='JSON {"indexer": {...Indexer.gen kw}, "train": {...XLinearModel.train kw}}')
    ap.add_argument("--omikuji-params", type=json.loads, default={}, help="JSON HyperParam overrides")
    ap.add_argument("--napkinxc-params", type=json.loads, default={}, help="JSON PLT keyword overrides")
    ap.add_argument("--omikuji-predict", choices=("threads", "sequential"), default="threads",
                    help="omikuji has only a per-text predict: run it on --threads Python threads or in one")
    ap.add_argument("--featurizer", choices=("xmtc", "sklearn"), default="xmtc",
                    help="TF-IDF implementation whose features every library gets")
    ap.add_argument("--featurizer-race", action="store_true",
                    help="also time xmtc's and scikit-learn's TF-IDF on the train texts (fit + transform)")
    ap.add_argument("--single-text-latency", action="store_true",
                    help="also time one-text predict of a saved+loaded xmtc model (texts -> labels)")
    ap.add_argument("--latency-n", type=int, default=1000, help="texts timed for --single-text-latency")
    ap.add_argument("--tree-seeds", type=_seed_list, default=None,
                    help="comma-separated tree seeds, e.g. 0,1,2,3,4: run xmtc (seed) and PECOS (indexer seed)"
                         " once per seed and print each metric's mean ± sd over the seeds")
    ap.add_argument("--same-tree", action="store_true",
                    help="xmtc and PECOS train on the SAME label tree: xmtc's (from --xmtc-params and the tree"
                         " seed), built here and handed to both; train s then excludes indexing")
    args = ap.parse_args(argv)
    _common.check_libraries(ap, args, LIBRARIES)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    started = _common.start_run(args, "xmtc linear benchmark")
    if started is None:
        return 2
    out, machine, work, meta = started
    problems, peer_python, logs = _common.peer_setup(args, [lib for lib in args.libraries if lib != "xmtc"], work)

    same_trees: dict[int, list[int]] = {}

    def extra_for(lib: str, tree_seed: int | None = None) -> list[str]:
        params = getattr(args, f"{lib}_params")
        tree_file = None
        if args.same_tree:
            s = args.seed if tree_seed is None else tree_seed
            tree_file = work / f"same-tree-s{s}.npz"
            if s not in same_trees:
                tree_file, same_trees[s] = write_same_tree(work, args.xmtc_params, s, args.threads)
        if tree_seed is not None or tree_file is not None:
            params = seeded_params(lib, params, args.seed if tree_seed is None else tree_seed, tree_file)
        extra = ["--seed", str(args.seed), "--params", json.dumps(params)]
        return extra + (["--omikuji-predict", args.omikuji_predict] if lib == "omikuji" else [])

    def run_all(tree_seed: int | None = None) -> list[dict]:
        return _common.run_libraries(
            args.libraries, problems, work, logs, args, extra_for=lambda lib: extra_for(lib, tree_seed),
            python_for=lambda lib: sys.executable if lib == "xmtc" else peer_python,
            note_for=lambda lib, res: res.get("predict_api", "") if lib == "omikuji" else "")

    spread = None
    if args.tree_seeds:
        runs = {}
        for s in args.tree_seeds:
            print(f"[tree seed {s}]", flush=True)
            runs[s] = run_all(s)
        rows = runs[args.tree_seeds[0]]
        spread = {"seeds": args.tree_seeds, "runs": {str(s): r for s, r in runs.items()},
                  "summary": seed_spread(runs)}
    else:
        rows = run_all()

    latency = None
    if args.single_text_latency:
        if meta["featurizer_choice"] == "none":
            latency = {"problem": "needs a text dataset"}
        else:
            print("[xmtc-latency] training on texts, save, load, one-text predict ...", flush=True)
            extra = ["--seed", str(args.seed), "--params", json.dumps(args.xmtc_params), "--data-root",
                     str(args.data_root), "--dataset", args.dataset, "--latency-n", str(args.latency_n)]
            latency, problem = run_child(sys.executable, "xmtc-latency", extra, work, logs, args.timeout,
                                         args.threads)
            if problem:
                latency = {"problem": problem}

    print()
    print(_common.dataset_line(meta))
    print(_common.machine_line(machine, args.threads))
    print(f"features: {meta['featurizer']}, featurize {meta['featurize_s']:.1f} s (not in train s)")
    race = meta.get("featurizer_race")
    if race:
        print(f"TF-IDF race on the {meta['n_train']:,} train texts (fit + transform): xmtc {race['xmtc_s']:.1f} s,"
              f" scikit-learn {race['sklearn_s']:.1f} s ({race['xmtc_s'] / race['sklearn_s']:.2f}x);"
              f" features {race['xmtc_n_features']:,} vs {race['sklearn_n_features']:,}")
    print(f"metrics: xmtc.metrics.evaluate for every library; train s includes indexing; predict = whole test set, top {K}, "
          f"wall / n_test; peak RSS = the library's own child process (includes loading the data)")
    print()
    if same_trees:
        print("same tree for xmtc and PECOS (xmtc's, built once per seed; train s excludes indexing): levels "
              + "; ".join(f"seed {s}: {sizes}" for s, sizes in same_trees.items()))
    print(render_table(rows))
    if spread is not None:
        print(f"\n(table above: tree seed {args.tree_seeds[0]}) seed spread:\n")
        print(render_spread(spread["summary"], args.tree_seeds))
    if latency is not None:
        print()
        if latency.get("problem"):
            print(f"single-text latency: {latency['problem']}")
        else:
            verdict = "PASS" if latency["p99_ms"] <= 5.0 else "FAIL"
            print(f"single-text latency (xmtc, saved+loaded, {latency['n']} texts, texts -> labels): "
                  f"p50 {latency['p50_ms']:.2f} ms, p90 {latency['p90_ms']:.2f} ms, p99 {latency['p99_ms']:.2f} ms,"
                  f" max {latency['max_ms']:.2f} ms -> p99 <= 5 ms: {verdict}")

    json_path = _common.write_results(out, "linear", args.dataset, {
        "dataset": meta, "machine": machine, "args": vars(args), "results": rows,
        "ratios_xmtc_over_pecos": ratios(rows), "single_text_latency": latency,
        "seed_spread": spread,
        "same_tree_levels": {str(s): v for s, v in same_trees.items()} or None})
    print(f"\nraw numbers: {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
