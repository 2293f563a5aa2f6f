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
import datetime as _dt
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))

import _data  # noqa: E402
import _venv  # noqa: E402

LIBRARIES = ("xmtc", "pecos", "omikuji", "napkinxc")
DISPLAY = {"xmtc": "xmtc XR-Linear", "pecos": "PECOS XR-Linear 1.2.8",
           "omikuji": "omikuji 0.5.2", "napkinxc": "napkinXC 0.7.2 PLT"}
METRIC_KEYS = ("P@1", "P@3", "P@5", "nDCG@5", "PSP@5")
K = 5


def machine_info() -> dict:
    info = {"date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "cpu_count": os.cpu_count(), "platform": platform.platform(),
            "python": sys.version.split()[0], "loadavg_at_start": list(os.getloadavg())}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["ram_gib"] = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return info


def child_env(threads: int, with_repo: bool) -> dict:
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS",
                "RAYON_NUM_THREADS"):
        env[var] = str(threads)
    env["PYTHONHASHSEED"] = "0"
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if with_repo:
        paths.insert(0, str(REPO))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run_child(python: str, lib: str, extra: list[str], work: Path, logs: Path, timeout: float,
              threads: int) -> tuple[dict | None, str | None]:
    """Run one library's child; return (result, None) or (None, short problem for the table)."""
    result = logs / f"{lib}.json"
    for stale in (result, result.with_suffix(".npz")):
        stale.unlink(missing_ok=True)
    log_path = logs / f"{lib}.log"
    cmd = [python, str(HERE / "_runners.py"), lib, "--work", str(work), "--result", str(result),
           "--scratch", str(work / "scratch" / lib), "--threads", str(threads), "--k", str(K), *extra]
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=str(REPO), start_new_session=True,
                                env=child_env(threads, with_repo=lib.startswith("xmtc")))
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the child's own session: it and nothing else
            proc.wait()
            return None, f"timeout after {timeout:.0f} s (log: {log_path})"
    wall = time.perf_counter() - t0
    tail = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    if rc == 3:
        msg = next((ln for ln in tail if ln.startswith("NOT INSTALLED")), "NOT INSTALLED")
        what = "unavailable" if lib.startswith("xmtc") else "not installed"
        return None, f"{what}: " + msg.split(":", 1)[-1].strip()
    if rc != 0 or not result.exists():
        return None, f"failed (exit {rc}): {(tail or ['no output'])[-1][:160]} (log: {log_path})"
    res = json.loads(result.read_text())
    res["child_wall_s"] = wall
    return res, None


def fmt(x, nd=2):
    if x is None:
        return "–"
    if isinstance(x, float) and (np.isnan(x) or np.isinf(x)):
        return "–"
    return f"{x:,.{nd}f}"


def ratio(a, b):
    if a is None or b is None or not b:
        return None
    return a / b


def render_table(rows: list[dict]) -> str:
    """Markdown table: one row per library plus the xmtc / PECOS ratio row."""
    head = ["library", "train s", "predict ms/doc", "peak RSS MB", *METRIC_KEYS, "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by_lib = {r["library"]: r for r in rows}
    for r in rows:
        if r.get("problem"):
            lines.append(f"| {DISPLAY[r['library']]} | " + " | ".join(["–"] * (len(head) - 2))
                         + f" | {r['problem']} |")
            continue
        m = r["metrics"]
        lines.append("| " + " | ".join([DISPLAY[r["library"]], fmt(r["train_s"]), fmt(r["predict_ms_per_doc"], 3),
                                        fmt(r["peak_rss_mb"], 0), *[fmt(m.get(k)) for k in METRIC_KEYS],
                                        r.get("note", "")]) + " |")
    x, p = by_lib.get("xmtc"), by_lib.get("pecos")
    if x and p and not x.get("problem") and not p.get("problem"):
        cells = [ratio(x["train_s"], p["train_s"]), ratio(x["predict_ms_per_doc"], p["predict_ms_per_doc"]),
                 ratio(x["peak_rss_mb"], p["peak_rss_mb"]),
                 *[ratio(x["metrics"].get(k), p["metrics"].get(k)) for k in METRIC_KEYS]]
        lines.append("| **xmtc / PECOS** | " + " | ".join(f"{c:.2f}×" if c is not None else "–" for c in cells)
                     + " | ratio (<1 is faster/smaller; >1 is more accurate) |")
    return "\n".join(lines)


def ratios(rows: list[dict]) -> dict | None:
    by_lib = {r["library"]: r for r in rows if not r.get("problem")}
    x, p = by_lib.get("xmtc"), by_lib.get("pecos")
    if not (x and p):
        return None
    out = {key: ratio(x[key], p[key]) for key in ("train_s", "predict_ms_per_doc", "peak_rss_mb")}
    out.update({k: ratio(x["metrics"].get(k), p["metrics"].get(k)) for k in METRIC_KEYS})
    return out


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--dataset", default="reuters21578-apte90", help="folder name under the data root")
    ap.add_argument("--data-root", default=os.environ.get("XMTC_DATA_ROOT", str(REPO.parent / "shared" / "data")),
                    help="folder holding the datasets (env XMTC_DATA_ROOT)")
    ap.add_argument("--libraries", default=",".join(LIBRARIES), help="comma-separated subset of "
                    + ",".join(LIBRARIES))
    ap.add_argument("--xmtc-params", type=json.loads, default={}, help='JSON keywords for xmtc.XRLinear, '
                    'e.g. \'{"n_trees": 3}\' (n_threads defaults to --threads)')
    ap.add_argument("--pecos-params", type=json.loads, default={},
                    help='JSON {"indexer": {...Indexer.gen kw}, "train": {...XLinearModel.train kw}}')
    ap.add_argument("--omikuji-params", type=json.loads, default={}, help="JSON HyperParam overrides")
    ap.add_argument("--napkinxc-params", type=json.loads, default={}, help="JSON PLT keyword overrides")
    ap.add_argument("--omikuji-predict", choices=("threads", "sequential"), default="threads",
                    help="omikuji has only a per-text predict: run it on --threads Python threads or in one")
    ap.add_argument("--threads", type=int, default=2, help="threads for every library")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per library child")
    ap.add_argument("--featurizer", choices=("xmtc", "sklearn"), default="xmtc",
                    help="TF-IDF implementation whose features every library gets")
    ap.add_argument("--featurizer-race", action="store_true",
                    help="also time xmtc's and scikit-learn's TF-IDF on the train texts (fit + transform)")
    ap.add_argument("--reuse-features", action="store_true",
                    help="re-use the .npz features of an earlier run of this dataset/featurizer")
    ap.add_argument("--venv", default=str(HERE / ".venv-peers"), help="the peers' virtual environment")
    ap.add_argument("--no-install", action="store_true", help="never create the venv or run pip")
    ap.add_argument("--out", default=str(HERE / "out"), help="where the JSON and work files go")
    ap.add_argument("--single-text-latency", action="store_true",
                    help="also time one-text predict of a saved+loaded xmtc model (texts -> labels)")
    ap.add_argument("--latency-n", type=int, default=1000, help="texts timed for --single-text-latency")
    args = ap.parse_args(argv)
    args.libraries = [x.strip().lower() for x in args.libraries.split(",") if x.strip()]
    unknown = sorted(set(args.libraries) - set(LIBRARIES))
    if unknown:
        ap.error(f"unknown libraries {unknown}; choose from {','.join(LIBRARIES)}")
    return args


def prepare_features(args, out: Path) -> tuple[Path, dict]:
    """Load + featurize once (or re-use), write the shared .npz files; return (work dir, meta)."""
    work = out / "work" / args.dataset
    meta_path = work / "meta.json"
    if args.reuse_features and meta_path.exists() and all((work / f"{k}.npz").exists()
                                                         for k in ("X_train", "X_test", "Y_train", "Y_test")):
        meta = json.loads(meta_path.read_text())
        if args.featurizer == meta.get("featurizer_choice"):
            meta["reused"] = True
            return work, meta
    t0 = time.perf_counter()
    ds = _data.load_dataset(args.data_root, args.dataset)
    load_s = time.perf_counter() - t0
    race = _data.featurizer_race(ds) if args.featurizer_race and ds.train_texts is not None else None
    name, feat_s = _data.featurize(ds, args.featurizer)
    _data.save_work(ds, work)
    n_train_labels = ds.Y_train.shape[1]
    meta = {"dataset": args.dataset, "data_root": str(Path(args.data_root).resolve()),
            "featurizer": name, "featurizer_choice": "xmtc" if name.startswith("xmtc") else
            ("sklearn" if "scikit" in name else "none"), "featurize_s": feat_s, "read_s": load_s,
            "n_train": ds.Y_train.shape[0], "n_test": ds.Y_test.shape[0], "n_features": ds.X_train.shape[1],
            "n_labels_train": n_train_labels, "n_labels_test_only": ds.Y_test.shape[1] - n_train_labels,
            "train_nnz_per_doc": ds.X_train.nnz / max(ds.X_train.shape[0], 1),
            "labels_per_train_doc": ds.Y_train.nnz / max(ds.Y_train.shape[0], 1), "notes": ds.notes,
            "reused": False, "featurizer_race": race}
    meta_path.write_text(json.dumps(meta, indent=1))
    return work, meta


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    (out / "work").mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    print(f"# xmtc linear benchmark: {args.dataset}  ({machine['date']})", flush=True)
    try:
        work, meta = prepare_features(args, out)
    except (FileNotFoundError, ValueError) as exc:
        print(f"benchmark: cannot prepare {args.dataset}: {exc}", file=sys.stderr)
        return 2
    print(f"features: {meta['featurizer']}{' (re-used)' if meta['reused'] else ''}; "
          f"featurize {meta['featurize_s']:.1f} s (read {meta['read_s']:.1f} s); {meta['n_train']:,} train / "
          f"{meta['n_test']:,} test docs, {meta['n_features']:,} features, {meta['n_labels_train']:,} labels "
          f"(+{meta['n_labels_test_only']} test-only)", flush=True)

    peers = [lib for lib in args.libraries if lib != "xmtc"]
    problems = _venv.ensure_peers(Path(args.venv), peers, install=not args.no_install) if peers else {}
    peer_python = str(_venv.venv_python(Path(args.venv)))
    logs = out / "work" / args.dataset / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    from xmtc.metrics import evaluate

    import scipy.sparse as sp
    Y_test = sp.load_npz(work / "Y_test.npz").tocsr()
    Y_train = sp.load_npz(work / "Y_train.npz").tocsr()
    counts = np.zeros(Y_test.shape[1], dtype=np.int64)
    counts[: Y_train.shape[1]] = Y_train.getnnz(axis=0)

    rows: list[dict] = []
    for lib in args.libraries:
        if lib in problems:
            rows.append({"library": lib, "problem": "not installed: " + problems[lib]})
            print(f"[{lib}] {rows[-1]['problem']}", flush=True)
            continue
        extra = ["--seed", str(args.seed), "--params", json.dumps(getattr(args, f"{lib}_params"))]
        if lib == "omikuji":
            extra += ["--omikuji-predict", args.omikuji_predict]
        print(f"[{lib}] running ...", flush=True)
        res, problem = run_child(sys.executable if lib == "xmtc" else peer_python, lib, extra, work, logs,
                                 args.timeout, args.threads)
        if problem:
            rows.append({"library": lib, "problem": problem})
            print(f"[{lib}] {problem}", flush=True)
            continue
        pred = np.load(logs / f"{lib}.npz")
        res["metrics"] = {k: float(v) for k, v in evaluate(
            Y_test, (pred["indices"], pred["scores"]), ks=(1, 3, 5), train_label_counts=counts,
            n_train=Y_train.shape[0]).items()}
        if lib == "omikuji":
            res["note"] = res.get("predict_api", "")
        rows.append(res)
        print(f"[{lib}] train {res['train_s']:.2f} s, predict {res['predict_ms_per_doc']:.3f} ms/doc, "
              f"peak RSS {res['peak_rss_mb']:.0f} MB, P@1 {res['metrics']['P@1']:.2f}", flush=True)

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
    print(f"## {args.dataset}: {meta['n_train']:,} train / {meta['n_test']:,} test, "
          f"{meta['n_features']:,} features, {meta['n_labels_train']:,} labels")
    print(f"machine: {machine.get('cpu', '?')}, nproc {machine['nproc']}, RAM {machine.get('ram_gib', '?')} GiB, "
          f"load avg at start {machine['loadavg_at_start'][0]:.2f}; {machine['date']}; threads {args.threads}")
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

    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    json_path = out / f"linear-{args.dataset}-{stamp}.json"
    json_path.write_text(json.dumps({"dataset": meta, "machine": machine, "args": {
        k: v for k, v in vars(args).items()}, "results": rows,
        "ratios_xmtc_over_pecos": ratios(rows), "single_text_latency": latency}, indent=2, default=str))
    print(f"\nraw numbers: {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
