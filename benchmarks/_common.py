"""What the side-by-side benchmarks (linear.py, transformer.py) share: machine facts, the shared
feature files, one child process per library, scoring in the parent, and the markdown table.

Runs on the project's interpreter (the parent); the children are benchmarks/_runners.py.
"""

from __future__ import annotations

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
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))
from xmtc.data.data_root import data_root  # noqa: E402

import _data  # noqa: E402
import _venv  # noqa: E402

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


def machine_line(machine: dict, threads: int) -> str:
    return (f"machine: {machine.get('cpu', '?')}, nproc {machine['nproc']}, RAM {machine.get('ram_gib', '?')} GiB, "
            f"load avg at start {machine['loadavg_at_start'][0]:.2f}; {machine['date']}; threads {threads}")


def child_env(threads: int, with_repo: bool) -> dict:
    """The child's environment: the thread variables of the libraries that read one (OpenMP, BLAS, rayon) set to
    ``threads``. xmtc's own kernels (C: solver, beam search, k-means, TF-IDF rows) read none; they take the model's
    ``n_threads``, which the runners set to ``--threads``."""
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS"):
        env[var] = str(threads)
    env["PYTHONHASHSEED"] = "0"
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if with_repo:
        paths.insert(0, str(REPO))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run_child(python: str, lib: str, extra: list[str], work: Path, logs: Path, timeout: float,
              threads: int, *, runner: str | None = None, k: int = K) -> tuple[dict | None, str | None]:
    """Run one library's child; return (result, None) or (None, short problem for the table).

    ``lib`` names the row and its files (logs/<lib>.json/.npz/.log); ``runner`` is the child's runner
    when it differs (methods.py runs one runner, ``xmtc-method``, for many rows); ``k`` the top-k asked.
    """
    runner = runner or lib
    result = logs / f"{lib}.json"
    for stale in (result, result.with_suffix(".npz")):
        stale.unlink(missing_ok=True)
    log_path = logs / f"{lib}.log"
    cmd = [python, str(HERE / "_runners.py"), runner, "--work", str(work), "--result", str(result),
           "--scratch", str(work / "scratch" / lib), "--threads", str(threads), "--k", str(k), *extra]
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=str(REPO), start_new_session=True,
                                env=child_env(threads, with_repo=runner.startswith("xmtc")))
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the child's own session: it and nothing else
            proc.wait()
            return None, f"timeout after {timeout:.0f} s (log: {log_path})"
        except BaseException:  # Ctrl-C, or SIGTERM via exit_on_sigterm(): the child must not outlive us
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    wall = time.perf_counter() - t0
    tail = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    if rc == 3:
        msg = next((ln for ln in tail if ln.startswith("NOT INSTALLED")), "NOT INSTALLED")
        what = "unavailable" if runner.startswith("xmtc") else "not installed"
        return None, f"{what}: " + msg.split(":", 1)[-1].strip()
    if rc != 0 or not result.exists():
        return None, f"failed (exit {rc}): {(tail or ['no output'])[-1][:160]} (log: {log_path})"
    res = json.loads(result.read_text())
    res["child_wall_s"] = wall
    return res, None


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit so that run_child kills the running child (its own session) first."""
    def _exit(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)


class Scorer:
    """Scores every library's predictions with ONE implementation, xmtc.metrics.evaluate."""

    def __init__(self, work: Path, ks: tuple[int, ...] = (1, 3, 5), scores: bool = False):
        import scipy.sparse as sp
        from xmtc.metrics import evaluate

        self._evaluate = evaluate
        self.ks, self.scores = tuple(ks), scores  # scores: also coverage@P90/P95 and ECE of the scores
        self.Y_test = sp.load_npz(work / "Y_test.npz").tocsr()
        Y_train = sp.load_npz(work / "Y_train.npz").tocsr()
        self.n_train = Y_train.shape[0]
        self.counts = np.zeros(self.Y_test.shape[1], dtype=np.int64)
        self.counts[: Y_train.shape[1]] = Y_train.getnnz(axis=0)

    def __call__(self, pred_npz: Path) -> dict:
        pred = np.load(pred_npz)
        return {k: float(v) for k, v in self._evaluate(
            self.Y_test, (pred["indices"], pred["scores"]), ks=self.ks, train_label_counts=self.counts,
            n_train=self.n_train, scores=self.scores).items()}


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


def render_table(rows: list[dict], display: dict[str, str], pair: tuple[str, str] = ("xmtc", "pecos"),
                 pair_label: str = "xmtc / PECOS") -> str:
    """Markdown table: one row per library plus the ratio row of ``pair`` (numerator, denominator)."""
    head = ["library", "train s", "predict ms/doc", "peak RSS MB", *METRIC_KEYS, "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by_lib = {r["library"]: r for r in rows}
    for r in rows:
        if r.get("problem"):
            lines.append(f"| {display[r['library']]} | " + " | ".join(["–"] * (len(head) - 2))
                         + f" | {r['problem']} |")
            continue
        m = r["metrics"]
        lines.append("| " + " | ".join([display[r["library"]], fmt(r["train_s"]), fmt(r["predict_ms_per_doc"], 3),
                                        fmt(r["peak_rss_mb"], 0), *[fmt(m.get(k)) for k in METRIC_KEYS],
                                        r.get("note", "")]) + " |")
    x, p = by_lib.get(pair[0]), by_lib.get(pair[1])
    if x and p and not x.get("problem") and not p.get("problem"):
        cells = [ratio(x["train_s"], p["train_s"]), ratio(x["predict_ms_per_doc"], p["predict_ms_per_doc"]),
                 ratio(x["peak_rss_mb"], p["peak_rss_mb"]),
                 *[ratio(x["metrics"].get(k), p["metrics"].get(k)) for k in METRIC_KEYS]]
        lines.append(f"| **{pair_label}** | " + " | ".join(f"{c:.2f}×" if c is not None else "–" for c in cells)
                     + " | ratio (<1 is faster/smaller; >1 is more accurate) |")
    return "\n".join(lines)


def ratios(rows: list[dict], pair: tuple[str, str] = ("xmtc", "pecos")) -> dict | None:
    by_lib = {r["library"]: r for r in rows if not r.get("problem")}
    x, p = by_lib.get(pair[0]), by_lib.get(pair[1])
    if not (x and p):
        return None
    out = {key: ratio(x[key], p[key]) for key in ("train_s", "predict_ms_per_doc", "peak_rss_mb")}
    out.update({k: ratio(x["metrics"].get(k), p["metrics"].get(k)) for k in METRIC_KEYS})
    return out


def work_dir(out: Path, args) -> Path:
    """out/work/<dataset>, or out/work/<dataset>-<train>x<test>-s<seed> for a --max-train/--max-test cut."""
    cut = (getattr(args, "max_train", None), getattr(args, "max_test", None))
    if cut == (None, None):
        return out / "work" / args.dataset
    return out / "work" / (f"{args.dataset}-{cut[0] or 'all'}x{cut[1] or 'all'}-s{args.seed}")


def prepare_features(args, out: Path) -> tuple[Path, dict]:
    """Load + featurize once (or re-use), write the shared files; return (work dir, meta).

    ``args`` needs dataset, data_root, featurizer, reuse_features, featurizer_race, seed and may have
    max_train/max_test (a seeded random cut of the train/test documents). Text datasets also get their
    texts written (``train_texts.json``, ``test_texts.json``) for the libraries that read texts.
    """
    work = work_dir(out, args)
    meta_path = work / "meta.json"
    max_train, max_test = getattr(args, "max_train", None), getattr(args, "max_test", None)
    if args.reuse_features and meta_path.exists() and all((work / f"{k}.npz").exists()
                                                         for k in ("X_train", "X_test", "Y_train", "Y_test")):
        meta = json.loads(meta_path.read_text())
        texts_ok = meta.get("featurizer_choice") == "none" or all(
            (work / f"{s}_texts.json").exists() for s in ("train", "test"))
        if args.featurizer == meta.get("featurizer_choice") and texts_ok:
            meta["reused"] = True
            return work, meta
    t0 = time.perf_counter()
    ds = _data.load_dataset(args.data_root, args.dataset, max_train=max_train, max_test=max_test, seed=args.seed)
    load_s = time.perf_counter() - t0
    race = _data.featurizer_race(ds, args.threads) if args.featurizer_race and ds.train_texts is not None else None
    name, feat_s = _data.featurize(ds, args.featurizer, args.threads)
    _data.save_work(ds, work)
    n_train_labels = ds.Y_train.shape[1]
    meta = {"dataset": args.dataset, "data_root": str(Path(args.data_root).resolve()),
            "featurizer": name, "featurizer_choice": "xmtc" if name.startswith("xmtc") else
            ("sklearn" if "scikit" in name else "none"), "featurize_s": feat_s, "read_s": load_s,
            "n_train": ds.Y_train.shape[0], "n_test": ds.Y_test.shape[0], "n_features": ds.X_train.shape[1],
            "n_labels_train": n_train_labels, "n_labels_test_only": ds.Y_test.shape[1] - n_train_labels,
            "train_nnz_per_doc": ds.X_train.nnz / max(ds.X_train.shape[0], 1),
            "labels_per_train_doc": ds.Y_train.nnz / max(ds.Y_train.shape[0], 1), "notes": ds.notes,
            "cut": {"max_train": max_train, "max_test": max_test, "seed": args.seed}
            if (max_train or max_test) else None,
            "reused": False, "featurizer_race": race}
    meta_path.write_text(json.dumps(meta, indent=1))
    return work, meta


def dataset_line(meta: dict) -> str:
    cut = meta.get("cut")
    cut_s = (f" (seeded cut: max {cut['max_train']} train / {cut['max_test']} test, seed {cut['seed']})"
             if cut else "")
    return (f"## {meta['dataset']}: {meta['n_train']:,} train / {meta['n_test']:,} test, "
            f"{meta['n_features']:,} features, {meta['n_labels_train']:,} labels{cut_s}")


def features_line(meta: dict) -> str:
    return (f"features: {meta['featurizer']}{' (re-used)' if meta['reused'] else ''}; "
            f"featurize {meta['featurize_s']:.1f} s (read {meta['read_s']:.1f} s); {meta['n_train']:,} train / "
            f"{meta['n_test']:,} test docs, {meta['n_features']:,} features, {meta['n_labels_train']:,} labels "
            f"(+{meta['n_labels_test_only']} test-only)")


def add_run_args(ap, libraries: tuple[str, ...], *, dataset: str, timeout: float) -> None:
    """The options both scripts take: what to run on, which libraries, threads, seeded cuts, where to write."""
    ap.add_argument("--dataset", default=dataset, help="dataset folder under the data root")
    ap.add_argument("--data-root", default=str(data_root()),
                    help="folder holding the datasets (env XMTC_DATA)")
    ap.add_argument("--libraries", default=",".join(libraries), help="comma-separated subset of "
                    + ",".join(libraries))
    ap.add_argument("--threads", type=int, default=2, help="threads for every library")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-train", type=int, default=None,
                    help="keep a seeded random sample of this many train documents (smoke tests)")
    ap.add_argument("--max-test", type=int, default=None,
                    help="keep a seeded random sample of this many test documents (smoke tests)")
    ap.add_argument("--timeout", type=float, default=timeout, help="seconds per library child")
    ap.add_argument("--reuse-features", action="store_true",
                    help="re-use the features (and texts) of an earlier run of this dataset, cut and featurizer")
    ap.add_argument("--venv", default=str(HERE / ".venv-peers"), help="the peers' virtual environment")
    ap.add_argument("--no-install", action="store_true", help="never create the venv or run pip")
    ap.add_argument("--out", default=str(HERE / "out"), help="where the JSON and work files go")


def check_libraries(ap, args, libraries: tuple[str, ...]) -> None:
    """--libraries as a list; an unknown name is a usage error."""
    args.libraries = [x.strip().lower() for x in args.libraries.split(",") if x.strip()]
    unknown = sorted(set(args.libraries) - set(libraries))
    if unknown:
        ap.error(f"unknown libraries {unknown}; choose from {','.join(libraries)}")


def start_run(args, title: str) -> tuple[Path, dict, Path, dict] | None:
    """Header, machine facts and the shared features: ``(out, machine, work, meta)``, or None (reported)."""
    exit_on_sigterm()
    out = Path(args.out)
    (out / "work").mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    print(f"# {title}: {args.dataset}  ({machine['date']})", flush=True)
    try:
        work, meta = prepare_features(args, out)
    except (FileNotFoundError, ValueError) as exc:
        print(f"benchmark: cannot prepare {args.dataset}: {exc}", file=sys.stderr)
        return None
    print(features_line(meta), flush=True)
    return out, machine, work, meta


def peer_setup(args, peers: list[str], work: Path) -> tuple[dict, str, Path]:
    """The peers' venv (created on demand) and the logs folder: ``(problems, peer python, logs)``."""
    problems = _venv.ensure_peers(Path(args.venv), peers, install=not args.no_install) if peers else {}
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    return problems, str(_venv.venv_python(Path(args.venv))), logs


def write_results(out: Path, kind: str, dataset: str, payload: dict) -> Path:
    """The run's raw numbers as out/<kind>-<dataset>-<time>.json."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = out / f"{kind}-{dataset}-{stamp}.json"
    path.write_text(json.dumps(payload, indent=2, default=str))
    return path


def run_libraries(libraries, problems: dict, work: Path, logs: Path, args, *, python_for, extra_for,
                  note_for=None) -> list[dict]:
    """Run each library's child in turn, score its predictions, print a progress line; one row per library.

    ``python_for(lib)`` is the interpreter, ``extra_for(lib)`` the child's extra arguments, ``note_for(lib, res)``
    the table's note. A library in ``problems`` (not installed) or whose child fails gets a row saying so.
    """
    score = Scorer(work)
    rows: list[dict] = []
    for lib in libraries:
        if lib in problems:
            rows.append({"library": lib, "problem": "not installed: " + problems[lib]})
            print(f"[{lib}] {rows[-1]['problem']}", flush=True)
            continue
        print(f"[{lib}] running ... (log: {logs / (lib + '.log')})", flush=True)
        res, problem = run_child(python_for(lib), lib, extra_for(lib), work, logs, args.timeout, args.threads)
        if problem:
            rows.append({"library": lib, "problem": problem})
            print(f"[{lib}] {problem}", flush=True)
            continue
        res["metrics"] = score(logs / f"{lib}.npz")
        if note_for is not None:
            res["note"] = note_for(lib, res)
        rows.append(res)
        print(f"[{lib}] train {res['train_s']:.2f} s, predict {res['predict_ms_per_doc']:.3f} ms/doc, "
              f"peak RSS {res['peak_rss_mb']:.0f} MB, P@1 {res['metrics']['P@1']:.2f}", flush=True)
    return rows
