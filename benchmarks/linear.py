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

    def extra_for(lib: str) -> list[str]:
        extra = ["--seed", str(args.seed), "--params", json.dumps(getattr(args, f"{lib}_params"))]
        return extra + (["--omikuji-predict", args.omikuji_predict] if lib == "omikuji" else [])

    rows = _common.run_libraries(
        args.libraries, problems, work, logs, args, extra_for=extra_for,
        python_for=lambda lib: sys.executable if lib == "xmtc" else peer_python,
        note_for=lambda lib, res: res.get("predict_api", "") if lib == "omikuji" else "")

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
    print(render_table(rows))
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
        "ratios_xmtc_over_pecos": ratios(rows), "single_text_latency": latency})
    print(f"\nraw numbers: {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
