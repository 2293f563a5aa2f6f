#!/usr/bin/env python3
"""XR-Linear at 10^5 to 10^6 labels on one machine: xmtc and PECOS side by side on a synthetic corpus.

    python benchmarks/scale.py --labels 100000
    python benchmarks/scale.py --labels 1000000 --libraries xmtc

Generates the seeded corpus of ``benchmarks/_synth.py`` (power-law labels, a hidden label hierarchy
that the sparse features reveal), writes it once as .npz under ``--out``/work, then trains and
predicts with each library in its own child process so that each reports its own peak RSS (VmHWM;
loading the data is included). Each child: train (indexing included), save the model, measure its
size on disk, predict the whole test set, then load the saved model again (xmtc: memory-mapped
weights) and time single-row predictions (features in, top-5 out) on a seeded sample of test rows.
The parent scores every library's predictions with xmtc.metrics.evaluate.

The LAST line of stdout is one JSON object: ``labels, train_s, peak_rss_mb, model_mb, P@1, P@5,
p50_ms, p99_ms`` for xmtc, plus the corpus and machine facts and the PECOS row where it ran.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

LIBRARIES = ("xmtc", "pecos")
DISPLAY = {"xmtc": "xmtc XR-Linear", "pecos": "PECOS XR-Linear 1.2.8"}


# ------------------------------------------------------------------------------------------------------
# child side: runs in the project's interpreter (xmtc) or the peers' venv (pecos); numpy/scipy only here
# ------------------------------------------------------------------------------------------------------
def _folder_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) / 2**20


def _latency(predict_one, X, n: int, seed: int) -> dict:
    import numpy as np

    rng = np.random.default_rng(seed)
    pick = rng.choice(X.shape[0], size=min(n, X.shape[0]), replace=False)
    rows = [X[int(i):int(i) + 1] for i in pick]
    for r in rows[:50]:
        predict_one(r)
    lat = np.empty(len(rows))
    for j, r in enumerate(rows):
        t0 = time.perf_counter()
        predict_one(r)
        lat[j] = time.perf_counter() - t0
    ms = lat * 1e3
    return {"latency_n": int(ms.size), "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99)), "max_ms": float(ms.max())}


class _MemoryFilter:
    """Adds the process's current and peak RSS to every log record: the memory profile per phase."""

    def filter(self, record) -> bool:
        rss = hwm = 0
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) // 1024
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) // 1024
        record.mem = f"rss {rss} MB, peak {hwm} MB"
        return True


def _status_mb(*keys: str) -> dict:
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key = line.split(":")[0]
            if key in keys:
                out[key] = int(line.split()[1]) / 1024
    return out


def _log_with_memory() -> None:
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_MemoryFilter())
    handler.setFormatter(logging.Formatter("%(asctime)s [%(mem)s] %(name)s: %(message)s", "%H:%M:%S"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)


def child_xmtc(d, args, scratch: Path) -> tuple:
    import logging

    import xmtc
    from xmtc import XRLinear, load
    from _memory import peak_rss_mb

    params = dict(args.params)
    params.setdefault("n_threads", args.threads)
    model = XRLinear(**params)
    t0 = time.perf_counter()
    model.fit(d["X_train"], d["Y_train"], progress=False)
    train_s = time.perf_counter() - t0
    rss_train = peak_rss_mb()
    path = scratch / "xmtc_model"
    t0 = time.perf_counter()
    log = logging.getLogger("scale")
    model.save(path)
    save_s = time.perf_counter() - t0
    log.info("saved in %.1fs", save_s)
    del model
    import gc

    gc.collect()
    before = _status_mb("RssAnon", "RssFile")
    t0 = time.perf_counter()
    model = load(path)  # memory-mapped weights (the default load path)
    load_s = time.perf_counter() - t0
    log.info("loaded (memory-mapped) in %.1fs", load_s)
    t0 = time.perf_counter()
    idx, sc = model.predict_topk(d["X_test"], k=args.k)
    predict_s = time.perf_counter() - t0
    log.info("predicted %d test rows in %.1fs", d["X_test"].shape[0], predict_s)
    lat = _latency(lambda r: model.predict_topk(r, k=args.k), d["X_test"], args.latency_n, args.seed)
    log.info("single-row latency: p50 %.3f ms, p99 %.3f ms", lat["p50_ms"], lat["p99_ms"])
    after = _status_mb("RssAnon", "RssFile")
    # private (anonymous) memory the loaded model added, against file pages mapped from the model folder
    lat["loaded_model_anon_mb"] = after["RssAnon"] - before["RssAnon"]
    lat["loaded_model_file_mb"] = after["RssFile"] - before["RssFile"]
    log.info("loaded model + predictions: +%.0f MB private, +%.0f MB file-backed (page cache)",
             lat["loaded_model_anon_mb"], lat["loaded_model_file_mb"])
    info = {"version": xmtc.__version__, "params": model.get_params(), "train_s": train_s, "save_s": save_s,
            "load_s": load_s, "predict_s": predict_s, "model_mb": _folder_mb(path),
            "peak_rss_train_mb": rss_train, **lat}
    return idx, sc, info


def child_pecos(d, args, scratch: Path) -> tuple:
    import pecos
    from pecos.xmc import Indexer, LabelEmbeddingFactory
    from pecos.xmc.xlinear.model import XLinearModel
    from _memory import peak_rss_mb
    from _runner_base import topk_from_csr

    X, Y = d["X_train"], d["Y_train"]
    t0 = time.perf_counter()
    label_feat = LabelEmbeddingFactory.create(Y, X, method="pifa")
    chain = Indexer.gen(label_feat, threads=args.threads)
    model = XLinearModel.train(X, Y, C=chain, threads=args.threads, beam_size=10)
    train_s = time.perf_counter() - t0
    rss_train = peak_rss_mb()
    del label_feat, chain
    path = scratch / "pecos_model"
    t0 = time.perf_counter()
    model.save(str(path))
    save_s = time.perf_counter() - t0
    del model
    t0 = time.perf_counter()
    model = XLinearModel.load(str(path), is_predict_only=True)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    P = model.predict(d["X_test"], only_topk=args.k, threads=args.threads)
    predict_s = time.perf_counter() - t0
    idx, sc = topk_from_csr(P, args.k)
    lat = _latency(lambda r: model.predict(r, only_topk=args.k, threads=1), d["X_test"], args.latency_n,
                   args.seed)
    info = {"version": getattr(pecos, "__version__", "?"), "train_s": train_s, "save_s": save_s,
            "load_s": load_s, "predict_s": predict_s, "model_mb": _folder_mb(path),
            "peak_rss_train_mb": rss_train, "latency_api": "XLinearModel.load(is_predict_only=True).predict"
            " (one row, threads=1)", **lat}
    return idx, sc, info


def child_main(argv) -> int:
    import numpy as np
    from _memory import peak_rss_mb
    from _runner_base import EXIT_NOT_INSTALLED, _load

    ap = argparse.ArgumentParser()
    ap.add_argument("child")
    ap.add_argument("library", choices=LIBRARIES)
    ap.add_argument("--work", required=True)
    ap.add_argument("--result", required=True)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--latency-n", type=int, default=1000)
    ap.add_argument("--params", type=json.loads, default={})
    args = ap.parse_args(argv)
    scratch = Path(args.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    if args.library == "xmtc":
        _log_with_memory()
    t0 = time.perf_counter()
    d = _load(Path(args.work), ("X_train", "Y_train", "X_test"))
    load_data_s = time.perf_counter() - t0
    rss_data = peak_rss_mb()
    try:
        idx, sc, info = (child_xmtc if args.library == "xmtc" else child_pecos)(d, args, scratch)
    except ImportError as exc:
        print(f"NOT INSTALLED: {exc}", file=sys.stderr)
        return EXIT_NOT_INSTALLED
    result = Path(args.result)
    np.savez(result.with_suffix(".npz"), indices=np.asarray(idx, dtype=np.int32),
             scores=np.asarray(sc, dtype=np.float32))
    n_test = d["X_test"].shape[0]
    info.update({"library": args.library, "peak_rss_mb": peak_rss_mb(), "rss_after_data_load_mb": rss_data,
                 "load_data_s": load_data_s, "n_test": int(n_test),
                 "predict_ms_per_doc": 1e3 * info["predict_s"] / max(n_test, 1), "threads": args.threads})
    result.write_text(json.dumps(info, indent=2, default=str))
    return 0


# ------------------------------------------------------------------------------------------------------
# parent side
# ------------------------------------------------------------------------------------------------------
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--labels", type=int, default=100_000, help="number of labels L")
    ap.add_argument("--train-docs", type=int, default=None, help="training documents (default 2 L)")
    ap.add_argument("--test-docs", type=int, default=10_000, help="test documents")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--alpha", type=float, default=1.0, help="power-law exponent of label popularity")
    ap.add_argument("--libraries", default=",".join(LIBRARIES), help="comma-separated subset of xmtc,pecos")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--latency-n", type=int, default=1000, help="single rows timed per library")
    ap.add_argument("--xmtc-params", type=json.loads, default={}, help="JSON keywords for xmtc.XRLinear")
    ap.add_argument("--timeout", type=float, default=7200, help="seconds per library child")
    ap.add_argument("--venv", default=str(HERE / ".venv-peers"), help="the peers' virtual environment")
    ap.add_argument("--no-install", action="store_true", help="never create the venv or run pip")
    ap.add_argument("--out", default=str(HERE / "out"), help="where the JSON and work files go")
    args = ap.parse_args(argv)
    args.libraries = [x.strip().lower() for x in args.libraries.split(",") if x.strip()]
    bad = sorted(set(args.libraries) - set(LIBRARIES))
    if bad:
        ap.error(f"unknown libraries {bad}; choose from {','.join(LIBRARIES)}")
    if args.labels < 2:
        ap.error("--labels must be at least 2")
    if args.train_docs is None:
        args.train_docs = 2 * args.labels
    return args


def prepare(args, out: Path) -> tuple[Path, dict]:
    """Generate (or re-use) the corpus files in out/work/synth-<L>-<n>-s<seed>."""
    import numpy as np
    import scipy.sparse as sp
    import _synth

    spec = _synth.SynthSpec(labels=args.labels, train_docs=args.train_docs, test_docs=args.test_docs,
                            seed=args.seed, alpha=args.alpha)
    work = out / "work" / f"synth-{args.labels}-{args.train_docs}-a{args.alpha:g}-s{args.seed}"
    meta_path = work / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("spec") == spec.as_dict():
            meta["reused"] = True
            return work, meta
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    meta = {"spec": spec.as_dict()}
    for split in ("train", "test"):
        X, Y = _synth.generate(spec, split)
        for key, M in (("X", X), ("Y", Y)):
            M = sp.csr_matrix(M, dtype=np.float32)
            M.indices = M.indices.astype(np.int32)
            M.indptr = M.indptr.astype(np.int64 if M.nnz > np.iinfo(np.int32).max else np.int32)
            sp.save_npz(work / f"{key}_{split}.npz", M, compressed=False)
        meta[split] = {"docs": int(X.shape[0]), "x_nnz_per_doc": X.nnz / X.shape[0],
                       "labels_per_doc": Y.nnz / Y.shape[0]}
        if split == "train":
            counts = np.asarray(Y.getnnz(axis=0))
            meta["n_features"] = int(X.shape[1])
            meta["labels_with_train_docs"] = int((counts > 0).sum())
            meta["max_label_docs"] = int(counts.max())
        del X, Y
    meta["generate_s"] = time.perf_counter() - t0
    meta["reused"] = False
    meta_path.write_text(json.dumps(meta, indent=1))
    return work, meta


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "child":
        return child_main(argv)
    args = parse_args(argv)
    sys.path.insert(1, str(REPO))
    import _common
    import _venv

    _common.exit_on_sigterm()
    out = Path(args.out)
    machine = _common.machine_info()
    print(f"# xmtc scale benchmark: {args.labels:,} labels  ({machine['date']})", flush=True)
    work, meta = prepare(args, out)
    print(f"corpus: {meta['train']['docs']:,} train / {meta['test']['docs']:,} test docs, {meta['n_features']:,}"
          f" features ({meta['train']['x_nnz_per_doc']:.1f} per doc), {args.labels:,} labels"
          f" ({meta['labels_with_train_docs']:,} with train docs, {meta['train']['labels_per_doc']:.2f} per doc,"
          f" most frequent in {meta['max_label_docs']:,}){' (re-used)' if meta['reused'] else ''}", flush=True)
    peers = [lib for lib in args.libraries if lib != "xmtc"]
    problems = _venv.ensure_peers(Path(args.venv), peers, install=not args.no_install) if peers else {}
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    score = _common.Scorer(work)
    rows = []
    for lib in args.libraries:
        if lib in problems:
            rows.append({"library": lib, "problem": "not installed: " + problems[lib]})
            continue
        python = sys.executable if lib == "xmtc" else str(_venv.venv_python(Path(args.venv)))
        res, problem = _run_child(python, lib, args, work, logs, _common)
        if problem:
            rows.append({"library": lib, "problem": problem})
            print(f"[{lib}] {problem}", flush=True)
            continue
        res["metrics"] = score(logs / f"{lib}.npz")
        rows.append(res)
        print(f"[{lib}] train {res['train_s']:.1f} s, peak RSS {res['peak_rss_mb']:.0f} MB, model"
              f" {res['model_mb']:.0f} MB, P@1 {res['metrics']['P@1']:.2f}, P@5 {res['metrics']['P@5']:.2f},"
              f" single-row p50 {res['p50_ms']:.3f} ms p99 {res['p99_ms']:.3f} ms", flush=True)
    load_end = list(os.getloadavg())
    print()
    print(f"## synthetic, {args.labels:,} labels: {meta['train']['docs']:,} train / {meta['test']['docs']:,} test,"
          f" {meta['n_features']:,} features")
    print(_common.machine_line(machine, args.threads) + f"; load avg at end {load_end[0]:.2f}")
    print()
    print(render_table(rows))
    json_path = _common.write_results(out, "scale", f"synth-{args.labels}", {
        "corpus": meta, "machine": machine, "load_at_end": load_end, "args": vars(args), "results": rows})
    print(f"\nraw numbers: {json_path}")
    x = next((r for r in rows if r["library"] == "xmtc" and not r.get("problem")), None)
    summary = {"labels": args.labels, "train_docs": meta["train"]["docs"], "test_docs": meta["test"]["docs"],
               "features": meta["n_features"], "threads": args.threads, "load_at_start": machine["loadavg_at_start"][0],
               "load_at_end": load_end[0]}
    if x:
        summary.update({"train_s": round(x["train_s"], 2), "peak_rss_mb": round(x["peak_rss_mb"], 1),
                        "model_mb": round(x["model_mb"], 1), "P@1": round(x["metrics"]["P@1"], 2),
                        "P@5": round(x["metrics"]["P@5"], 2), "p50_ms": round(x["p50_ms"], 3),
                        "p99_ms": round(x["p99_ms"], 3)})
    else:
        summary["problem"] = next((r["problem"] for r in rows if r["library"] == "xmtc"), "xmtc not run")
    p = next((r for r in rows if r["library"] == "pecos" and not r.get("problem")), None)
    if p:
        summary["pecos"] = {"train_s": round(p["train_s"], 2), "peak_rss_mb": round(p["peak_rss_mb"], 1),
                            "model_mb": round(p["model_mb"], 1), "P@1": round(p["metrics"]["P@1"], 2),
                            "P@5": round(p["metrics"]["P@5"], 2), "p99_ms": round(p["p99_ms"], 3)}
    print(json.dumps(summary))
    return 0 if x else 1


def _run_child(python, lib, args, work, logs, _common):
    """One library's child process, in its own session, killed on timeout; (result, None) or (None, problem)."""
    import signal
    import subprocess

    result = logs / f"{lib}.json"
    result.unlink(missing_ok=True)
    log_path = logs / f"{lib}.log"
    params = args.xmtc_params if lib == "xmtc" else {}
    cmd = [python, str(Path(__file__).resolve()), "child", lib, "--work", str(work), "--result", str(result),
           "--scratch", str(work / "scratch" / lib), "--threads", str(args.threads), "--seed", str(args.seed),
           "--latency-n", str(args.latency_n), "--params", json.dumps(params)]
    print(f"[{lib}] running ... (log: {log_path})", flush=True)
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=str(REPO), start_new_session=True,
                                env=_common.child_env(args.threads, with_repo=lib == "xmtc"))
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None, f"timeout after {args.timeout:.0f} s (log: {log_path})"
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    tail = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    if rc == 3:
        return None, "not installed: " + (tail or ["?"])[-1]
    if rc != 0 or not result.exists():
        return None, f"failed (exit {rc}): {(tail or ['no output'])[-1][:160]} (log: {log_path})"
    res = json.loads(result.read_text())
    res["child_wall_s"] = time.perf_counter() - t0
    return res, None


def render_table(rows: list[dict]) -> str:
    from _common import fmt, ratio

    head = ["library", "train s", "peak RSS MB", "model MB", "P@1", "P@5", "batch ms/doc", "1-row p50 ms",
            "1-row p99 ms", "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r.get("problem"):
            lines.append(f"| {DISPLAY[r['library']]} | " + " | ".join(["–"] * (len(head) - 2)) + f" | {r['problem']} |")
            continue
        m = r["metrics"]
        lines.append("| " + " | ".join([DISPLAY[r["library"]], fmt(r["train_s"], 1), fmt(r["peak_rss_mb"], 0),
                                        fmt(r["model_mb"], 0), fmt(m["P@1"]), fmt(m["P@5"]),
                                        fmt(r["predict_ms_per_doc"], 3), fmt(r["p50_ms"], 3), fmt(r["p99_ms"], 3),
                                        ""]) + " |")
    by = {r["library"]: r for r in rows if not r.get("problem")}
    if "xmtc" in by and "pecos" in by:
        x, p = by["xmtc"], by["pecos"]
        cells = [ratio(x["train_s"], p["train_s"]), ratio(x["peak_rss_mb"], p["peak_rss_mb"]),
                 ratio(x["model_mb"], p["model_mb"]), ratio(x["metrics"]["P@1"], p["metrics"]["P@1"]),
                 ratio(x["metrics"]["P@5"], p["metrics"]["P@5"]),
                 ratio(x["predict_ms_per_doc"], p["predict_ms_per_doc"]), ratio(x["p50_ms"], p["p50_ms"]),
                 ratio(x["p99_ms"], p["p99_ms"])]
        lines.append("| **xmtc / PECOS** | " + " | ".join(f"{c:.2f}×" if c is not None else "–" for c in cells)
                     + " | ratio (<1 is faster/smaller; >1 is more accurate) |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
