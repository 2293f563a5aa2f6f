#!/usr/bin/env python3
"""The command a user runs, timed: ``xmtc train`` against PECOS 1.2.8's own text-to-model path, in one run.

    python benchmarks/train_command.py --dataset reuters21578-apte90
    python benchmarks/train_command.py --dataset yso-finna-en-2k-20k --repeat 3
    python benchmarks/train_command.py --dataset reuters21578-apte90 \\
        --xmtc-args "" --label defaults --xmtc-args "--refit false" --label "no refit"

xmtc: ``xmtc train TRAIN -o MODEL --log-level INFO [ARGS]`` as a child process; its wall time is the whole
command (interpreter start, imports, reading, TF-IDF, trees, linear fits, calibration, refit, label route,
save, exit). Its stderr is read as it arrives, so every INFO line gets an arrival time to the millisecond,
and :func:`phase_table` turns the lines into a phase table (the log's own clock has one-second steps).
Then ``xmtc evaluate MODEL TEST --json`` gives P@1/P@3/P@5 (not part of the train time).

PECOS: ``_train_command_pecos.py train`` on the peers' interpreter (benchmarks/.venv-peers, created on
demand): read the texts, PECOS's TF-IDF ``Vectorizer.train`` + ``predict``, PIFA, ``Indexer.gen``,
``XLinearModel.train`` at beam 10, save. Its wall time (imports included) is what its user waits for; the
child also reports its in-process featurize and train seconds. Then a ``predict`` child writes the test
top-5, scored here with xmtc.metrics.evaluate, the code behind ``xmtc evaluate``.

Labels: xmtc reads its label strings itself (inside the timed command); PECOS reads none, so its Y is built
here from the same training file in the same label order (xmtc's reader), before any timing.

``--repeat N`` runs each side N times, alternating (ABBA: xmtc first in odd rounds, PECOS first in even ones),
and reports medians; the models of the first round are the ones evaluated. /proc/loadavg is recorded at the
start and end of every child: this machine's cores are shared, so the ratios within one run are what count.
The JSON goes to ``OUT/train-command-SET.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import _common  # noqa: E402
import _venv  # noqa: E402

from xmtc.data.data_root import data_root  # noqa: E402

DATASETS = ("reuters21578-apte90", "yso-finna-en-2k-20k")
KS = (1, 3, 5)

# -- the INFO log of `xmtc train` ------------------------------------------------------------------------
LOG_LINE = re.compile(r"(\d\d):(\d\d):(\d\d) (xmtc[\w.]*): ")
_F = r"([\d.]+)s"
PATTERNS = {
    "read": re.compile(rf"^read (\d+) training documents with (\d+) labels in {_F}"),
    "holdout": re.compile(r"^holding out (\d+) of (\d+) documents"),
    "tfidf": re.compile(rf"^TF-IDF: (\d+) documents -> (\d+) features in {_F}"),
    "trees": re.compile(rf"^label trees (.*) built in {_F}"),
    "tree": re.compile(rf"^tree (\d+)/(\d+): levels .*, linear models {_F}"),
    "trained": re.compile(rf"^trained XR-Linear on (\d+) documents, (\d+) features, (\d+) labels in {_F}"),
    "calibrated": re.compile(rf"^calibrated the scores on (\d+) validation documents in {_F}"),
    "fold": re.compile(r"^learning the (\d+) validation documents into the model"),
    "refit": re.compile(r"^fitting again on all (\d+) documents"),
    "learned": re.compile(rf"^tree (\d+): learned (\d+) documents, (\d+) new labels, .* in {_F}"),
    "refit_done": re.compile(rf"^(folded in|refitted) on all (\d+) documents in {_F}"),
    "saved": re.compile(rf"^saved (\S+) model to .* \({_F} in all\)"),
}


def log_events(chunks: list[tuple[float, str]]) -> list[dict]:
    """INFO records out of (arrival seconds, stderr text) chunks, progress bars and all.

    tqdm redraws with \\r and a record may follow a bar on the same line, so each \\r/\\n segment is
    searched for ``HH:MM:SS xmtc...: message``. A record split across two chunks gets the later arrival.
    """
    events, pending, pending_t = [], "", 0.0
    for t, text in chunks:
        pending += text
        pending_t = t
        *done, pending = re.split(r"[\r\n]", pending)
        for seg in done:
            m = LOG_LINE.search(seg)
            if m:
                h, mi, s = (int(x) for x in m.groups()[:3])
                events.append({"t": pending_t, "clock": h * 3600 + mi * 60 + s, "logger": m.group(4),
                               "msg": seg[m.end():]})
    if pending:
        m = LOG_LINE.search(pending)
        if m:
            h, mi, s = (int(x) for x in m.groups()[:3])
            events.append({"t": pending_t, "clock": h * 3600 + mi * 60 + s, "logger": m.group(4),
                           "msg": pending[m.end():]})
    return events


def events_from_log(text: str) -> list[dict]:
    """Records of a saved log, timed by the log's own clock (one-second steps, seconds after the first)."""
    events = log_events([(0.0, text)])
    if events:
        c0 = events[0]["clock"]
        for e in events:
            e["t"] = float((e["clock"] - c0) % 86400)
    return events


def _classify(events: list[dict]) -> list[tuple[str, re.Match, dict]]:
    out = []
    for e in events:
        for kind, pat in PATTERNS.items():
            m = pat.search(e["msg"])
            if m:
                out.append((kind, m, e))
                break
    return out


def phase_table(events: list[dict], wall_s: float | None = None, *, arrival: bool = True) -> list[dict]:
    """The command's phases: ``[{key, label, s, depth}]``, top-level rows (depth 0) adding up to the wall.

    Durations the log states (read, TF-IDF, trees, linear models, each fit's total, calibration, the refit
    or fold-in) are taken from it. With ``arrival`` (the events' ``t`` are seconds since the child was
    spawned) the gaps are rows too: startup (spawn to the start of reading), what follows the last logged
    phase (label route, save), the exit, and ``unaccounted``, the wall time no row covers. A TF-IDF line
    that ended before its fit began (by arrival; without arrival times: when the fit's parts would add up to
more than its total) is a TF-IDF of its own, shared by the fits.
    Lines of other methods or of a changed pipeline are simply not rows (they land in ``unaccounted``).
    """
    rows: list[dict] = []

    def add(key, label, s, depth=0):
        rows.append({"key": key, "label": label, "s": None if s is None else max(float(s), 0.0), "depth": depth})

    def add_fit(key, label, fit, depth):
        add(key, label, fit["total"], depth)
        if fit["tfidf"]:  # a fit on shared features logs no TF-IDF of its own
            add(f"{key}.tfidf", "TF-IDF", sum(s for _, s in fit["tfidf"]), depth + 1)
        if fit["trees_logged"]:
            add(f"{key}.trees", "label trees (PIFA + k-means)", fit["trees"], depth + 1)
        lin = fit["linear"]
        add(f"{key}.linear", f"linear models ({len(lin)} trees)" if len(lin) > 1 else "linear models", sum(lin),
            depth + 1)
        if len(lin) > 1:
            for j, x in enumerate(lin, 1):
                add(f"{key}.linear.tree{j}", f"tree {j}", x, depth + 2)
        add(f"{key}.other", "other (label matrix, memory rows)",
            fit["total"] - sum(s for _, s in fit["tfidf"]) - fit["trees"] - sum(lin), depth + 1)

    pending = {"tfidf": [], "trees": 0.0, "trees_logged": False, "linear": []}
    fits, shared_tfidf, learned = [], [], []
    read = holdout = calibrated = refit_mode = refit_done = saved = None
    for kind, m, e in _classify(events):
        t = e["t"]
        if kind == "read":
            read = (t, float(m.group(3)), int(m.group(1)), int(m.group(2)))
        elif kind == "holdout":
            holdout = (int(m.group(1)), int(m.group(2)))
        elif kind == "tfidf":
            pending["tfidf"].append((t, float(m.group(3))))
        elif kind == "trees":
            pending["trees"] += float(m.group(2))
            pending["trees_logged"] = True
        elif kind == "tree":
            pending["linear"].append(float(m.group(3)))
        elif kind == "trained":
            total = float(m.group(4))
            if arrival:  # a TF-IDF that ended before this fit began is not part of it
                outside = [x for x in pending["tfidf"] if x[0] < t - total + 0.05]
            else:  # the log's clock has one-second steps: a fit's parts cannot add up to more than its total
                parts = sum(s for _, s in pending["tfidf"]) + pending["trees"] + sum(pending["linear"])
                outside = pending["tfidf"][:1] if pending["tfidf"] and parts > total + 0.25 else []
            shared_tfidf += outside
            pending["tfidf"] = [x for x in pending["tfidf"] if x not in outside]
            fits.append({**pending, "total": total, "docs": int(m.group(1)), "features": int(m.group(2)),
                         "labels": int(m.group(3)), "t_end": t, "after_cal": calibrated is not None})
            pending = {"tfidf": [], "trees": 0.0, "trees_logged": False, "linear": []}
        elif kind == "calibrated":
            calibrated = (t, float(m.group(2)), int(m.group(1)))
        elif kind in ("fold", "refit"):
            refit_mode = kind
        elif kind == "learned":
            learned.append((int(m.group(1)), float(m.group(4))))
        elif kind == "refit_done":
            refit_done = (t, float(m.group(3)), int(m.group(2)))
        elif kind == "saved":
            saved = (t, float(m.group(2)))

    if read and arrival:
        add("startup", "startup (interpreter, imports, arguments)", read[0] - read[1])
    if read:
        add("read", f"read {read[2]:,} documents, {read[3]:,} labels", read[1])
    for i, (_, s) in enumerate(shared_tfidf):
        add("tfidf" if i == 0 else f"tfidf{i + 1}", "TF-IDF of every document (shared by the fits)", s)
    first = [f for f in fits if not f["after_cal"]]
    later = [f for f in fits if f["after_cal"]]
    for i, f in enumerate(first, 1):
        what = "fit on the training part" if holdout else "fit"
        add_fit(f"fit{i}", f"fit {i}: {what} ({f['docs']:,} docs, {f['features']:,} features)", f, 0)
    if calibrated:
        add("calibration", f"calibration on {calibrated[2]:,} held-out docs", calibrated[1])
    if refit_done:
        if refit_mode == "fold":
            add("refit", f"fold the held-out docs in (learn), {refit_done[2]:,} docs in all", refit_done[1])
            for tree, s in learned:
                add(f"refit.learn{tree}", f"learn, tree {tree + 1}", s, 1)
            add("refit.other", "other", refit_done[1] - sum(s for _, s in learned), 1)
        else:
            add("refit", f"refit on all {refit_done[2]:,} docs", refit_done[1])
            for j, f in enumerate(later, 1):
                add_fit("refit.fit" if j == 1 else f"refit.fit{j}", f"the fit ({f['features']:,} features)", f, 1)
            add("refit.other", "other (outside the fit)", refit_done[1] - sum(f["total"] for f in later), 1)
    else:
        for j, f in enumerate(later, 1):
            add_fit("refit" if j == 1 else f"refit{j}", f"refit on all {f['docs']:,} docs "
                    f"({f['features']:,} features)", f, 0)
    if saved and arrival:
        ends = [f["t_end"] for f in fits] + [x[0] for x in (calibrated, refit_done) if x]
        if ends:
            add("after_fit", "after the last logged phase: label route, save", saved[0] - max(ends))
        if wall_s is not None:
            add("exit", "exit (interpreter shutdown)", wall_s - saved[0])
    if wall_s is not None and arrival:
        covered = sum(r["s"] or 0.0 for r in rows if r["depth"] == 0)
        add("unaccounted", "unaccounted (between logged phases)", wall_s - covered)
    return rows


# -- running a child, timed --------------------------------------------------------------------------------
def loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return list(os.getloadavg())


def run_timed(cmd: list[str], log_path: Path, timeout: float, *, stdout_path: Path | None = None,
              env: dict | None = None) -> dict:
    """Run ``cmd`` in its own session; stderr is read as it arrives (chunks with arrival seconds since the
    spawn) and copied to ``log_path``. Returns wall seconds, exit code, CPU seconds (wait4) and peak RSS (the
    child's VmHWM, sampled every 0.2 s while it runs)."""
    load_start = loadavg()
    chunks: list[tuple[float, str]] = []
    out_fh = open(stdout_path, "wb") if stdout_path else subprocess.DEVNULL
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=out_fh, stderr=subprocess.PIPE, cwd=str(_common.REPO),
                            start_new_session=True, env=env)

    def reader():
        with open(log_path, "wb") as log:
            while True:
                data = os.read(proc.stderr.fileno(), 65536)
                if not data:
                    break
                chunks.append((time.perf_counter() - t0, data.decode("utf-8", "replace")))
                log.write(data)
                log.flush()  # the log can be watched while the child runs

    hwm = [0]

    def sample_hwm():  # the child's own high-water mark: wait4's ru_maxrss carries the parent's over at exec
        status = Path(f"/proc/{proc.pid}/status")
        while proc.returncode is None:
            try:
                for line in status.read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        hwm[0] = max(hwm[0], int(line.split()[1]))
            except (OSError, ValueError):
                pass
            time.sleep(0.2)

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    threading.Thread(target=sample_hwm, daemon=True).start()
    killed = threading.Event()

    def kill():
        killed.set()
        with_suppress(os.killpg, proc.pid, signal.SIGKILL)

    timer = threading.Timer(timeout, kill)
    timer.start()
    try:
        _, status, ru = os.wait4(proc.pid, 0)
    except BaseException:  # Ctrl-C / SIGTERM: the child must not outlive us
        with_suppress(os.killpg, proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        timer.cancel()
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    th.join(timeout=10)
    proc.stderr.close()
    if stdout_path:
        out_fh.close()
    # what the reader took from the pipe after wait4 returned was written before the exit: stamp it at the exit
    chunks = [(min(t, wall), data) for t, data in chunks]
    return {"wall_s": wall, "rc": proc.returncode, "timed_out": killed.is_set(),
            "cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss_mb": hwm[0] / 1024,
            "loadavg_start": load_start, "loadavg_end": loadavg(), "chunks": chunks}


def with_suppress(fn, *a):
    try:
        fn(*a)
    except (ProcessLookupError, PermissionError):
        pass


def tail(path: Path, n: int = 3) -> str:
    lines = [ln for ln in re.split(r"[\r\n]", path.read_text(errors="replace")) if ln.strip()]
    return " | ".join(lines[-n:])[-400:]


def xmtc_executable() -> list[str]:
    """The ``xmtc`` console script of this interpreter (no pyenv shim in front), else ``python -m xmtc``."""
    script = Path(sys.executable).parent / "xmtc"
    return [str(script)] if script.exists() else [sys.executable, "-m", "xmtc"]


# -- the two sides ------------------------------------------------------------------------------------------
def run_xmtc_train(variant: dict, train: Path, work: Path, rep: int, timeout: float) -> dict:
    model = work / f"model-xmtc-{variant['slug']}"
    shutil.rmtree(model, ignore_errors=True)
    log = work / f"xmtc-{variant['slug']}-r{rep}.log"
    cmd = [*xmtc_executable(), "train", str(train), "-o", str(model), "--log-level", "INFO", *variant["args"]]
    res = run_timed(cmd, log, timeout)
    chunks = res.pop("chunks")
    out = {**res, "cmd": shlex.join(cmd), "log": str(log), "model": str(model)}
    if res["rc"] != 0:
        out["problem"] = ("timeout" if res["timed_out"] else f"exit {res['rc']}") + f": {tail(log)}"
        return out
    events = log_events(chunks)
    out["events"] = [{"t": round(e["t"], 3), "msg": e["msg"]} for e in events
                     if not e["msg"].startswith("level ")]
    out["phases"] = phase_table(events, res["wall_s"])
    return out


def run_xmtc_evaluate(model: Path, test: Path, work: Path, slug: str, timeout: float) -> dict:
    stdout = work / f"xmtc-{slug}-evaluate.json"
    res = run_timed([*xmtc_executable(), "evaluate", str(model), str(test), "--json", "-q"],
                    work / f"xmtc-{slug}-evaluate.log", timeout, stdout_path=stdout)
    res.pop("chunks")
    if res["rc"] != 0:
        return {"problem": f"evaluate exit {res['rc']}: {tail(work / f'xmtc-{slug}-evaluate.log')}"}
    text = stdout.read_text()
    metrics = json.loads(text[text.index("{"):])
    return {"metrics": {k: metrics[k] for k in metrics if isinstance(metrics[k], (int, float))},
            "evaluate_wall_s": res["wall_s"]}


def run_pecos_train(python: str, train: Path, work: Path, rep: int, args) -> dict:
    model = work / "model-pecos"
    shutil.rmtree(model, ignore_errors=True)
    result = work / f"pecos-r{rep}.json"
    result.unlink(missing_ok=True)
    log = work / f"pecos-r{rep}.log"
    cmd = [python, str(HERE / "_train_command_pecos.py"), "train", "--train", str(train), "--y",
           str(work / "Y_train.npz"), "--model-dir", str(model), "--result", str(result), "--text", args.pecos_text]
    res = run_timed(cmd, log, args.timeout)
    res.pop("chunks")
    out = {**res, "cmd": shlex.join(cmd), "log": str(log), "model": str(model)}
    if res["rc"] != 0 or not result.exists():
        out["problem"] = ("timeout" if res["timed_out"] else f"exit {res['rc']}") + f": {tail(log)}"
        return out
    out.update(json.loads(result.read_text()))
    return out


def run_pecos_predict(python: str, test: Path, work: Path, args, scorer) -> dict:
    pred, result = work / "pecos-pred.npz", work / "pecos-predict.json"
    cmd = [python, str(HERE / "_train_command_pecos.py"), "predict", "--test", str(test), "--pred", str(pred),
           "--model-dir", str(work / "model-pecos"), "--result", str(result), "--text", args.pecos_text]
    res = run_timed(cmd, work / "pecos-predict.log", args.timeout)
    res.pop("chunks")
    if res["rc"] != 0:
        return {"problem": f"predict exit {res['rc']}: {tail(work / 'pecos-predict.log')}"}
    return {"metrics": scorer(pred), "predict_wall_s": res["wall_s"]}


# -- labels for PECOS and the scorer (untimed) --------------------------------------------------------------
def prepare_labels(train: Path, test: Path, work: Path) -> dict:
    """Y_train / Y_test (.npz) in xmtc's label order, read with xmtc's own reader; checks that the PECOS
    child's text reader sees the same texts."""
    import scipy.sparse as sp
    from _train_command_pecos import read_texts
    from xmtc.data import read_dataset

    tr = read_dataset(str(train))
    te = read_dataset(str(test), labels=tr.labels, unknown_labels="extend")
    for ds, path in ((tr, train), (te, test)):
        if ds.texts != read_texts(str(path)):
            raise SystemExit(f"{path}: the PECOS child would read other texts than xmtc's reader")
    sp.save_npz(work / "Y_train.npz", tr.Y.tocsr())
    sp.save_npz(work / "Y_test.npz", te.Y.tocsr())
    return {"n_train": len(tr), "n_test": len(te), "n_labels": int(tr.Y.shape[1]),
            "n_labels_test_only": int(te.Y.shape[1] - tr.Y.shape[1])}


class Scorer:
    """xmtc.metrics.evaluate (what ``xmtc evaluate`` calls) on a top-k .npz, against Y_test."""

    def __init__(self, work: Path):
        import scipy.sparse as sp

        self.Y = sp.load_npz(work / "Y_test.npz").tocsr()

    def __call__(self, pred: Path) -> dict:
        import numpy as np
        from xmtc.metrics import evaluate

        z = np.load(pred)
        return {k: float(v) for k, v in evaluate(self.Y, (z["indices"], z["scores"]), ks=KS).items()}


# -- tables -------------------------------------------------------------------------------------------------
def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def f1(x, nd=1):
    return "–" if x is None else f"{x:,.{nd}f}"


def fx(x):
    return "–" if x is None else f"{x:.2f}×"


def summarize(variant_runs: list[dict], pecos_runs: list[dict]) -> dict:
    ok = [r for r in variant_runs if "problem" not in r]
    pk = [r for r in pecos_runs if "problem" not in r]
    s = {"xmtc_wall_s": med([r["wall_s"] for r in ok]), "xmtc_cpu_s": med([r["cpu_s"] for r in ok]),
         "xmtc_peak_rss_mb": med([r["peak_rss_mb"] for r in ok]),
         "pecos_wall_s": med([r["wall_s"] for r in pk]), "pecos_cpu_s": med([r["cpu_s"] for r in pk]),
         "pecos_featurize_s": med([r["times"]["featurize_s"] for r in pk]),
         "pecos_train_s": med([r["times"]["train_s"] for r in pk]),
         "pecos_peak_rss_mb": med([r["peak_rss_mb"] for r in pk]),
         "xmtc_walls": [round(r["wall_s"], 2) for r in ok], "pecos_walls": [round(r["wall_s"], 2) for r in pk]}
    s["pecos_feat_train_s"] = (None if s["pecos_featurize_s"] is None else
                               s["pecos_featurize_s"] + s["pecos_train_s"])
    s["ratio_wall"] = _common.ratio(s["xmtc_wall_s"], s["pecos_wall_s"])
    s["ratio_feat_train"] = _common.ratio(s["xmtc_wall_s"], s["pecos_feat_train_s"])
    keys = sorted({p["key"] for r in ok for p in r.get("phases", [])},
                  key=lambda k: next(i for r in ok for i, p in enumerate(r["phases"]) if p["key"] == k))
    s["phases"] = []
    for k in keys:
        found = [p for r in ok for p in r["phases"] if p["key"] == k]
        s["phases"].append({"key": k, "label": found[0]["label"], "depth": found[0]["depth"],
                            "s": med([p["s"] for p in found])})
    if pk:
        s["pecos_phases"] = {k: med([r["times"].get(k) for r in pk]) for k in pk[0]["times"]}
    return s


def render(dataset: str, meta: dict, variants: list[dict], pecos_eval: dict | None, summaries: dict,
           repeat: int) -> str:
    head = ["set", "variant", "xmtc wall s", "PECOS wall s", "PECOS featurize + train s (in-process)",
            "xmtc / PECOS wall", "xmtc / PECOS feat+train", "xmtc P@1", "PECOS P@1", "xmtc P@5", "PECOS P@5",
            "xmtc CPU s", "PECOS CPU s", "load avg (1 min) xmtc; PECOS"]
    lines = [f"### {dataset}: {meta['n_train']:,} train / {meta['n_test']:,} test docs, {meta['n_labels']:,} labels"
             + (f" — median of {repeat}" if repeat > 1 else ""), "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    pm = (pecos_eval or {}).get("metrics", {})
    for v in variants:
        s = summaries[v["label"]]
        xm = v.get("eval", {}).get("metrics", {})
        loads = v["loads"]
        lines.append("| " + " | ".join([
            dataset, v["label"], f1(s["xmtc_wall_s"]), f1(s["pecos_wall_s"]),
            (f"{f1(s['pecos_featurize_s'])} + {f1(s['pecos_train_s'])} = {f1(s['pecos_feat_train_s'])}"
             if s["pecos_feat_train_s"] is not None else "–"),
            fx(s["ratio_wall"]), fx(s["ratio_feat_train"]), f1(xm.get("P@1"), 2), f1(pm.get("P@1"), 2),
            f1(xm.get("P@5"), 2), f1(pm.get("P@5"), 2), f1(s["xmtc_cpu_s"]), f1(s["pecos_cpu_s"]),
            "; ".join("–" if ld is None else f"{ld[0]:.2f} → {ld[1]:.2f}" for ld in loads)]) + " |")
    for v in variants:
        s = summaries[v["label"]]
        if not s["phases"]:
            continue
        wall = s["xmtc_wall_s"]
        lines += ["", f"xmtc phases, {v['label']} (`{shlex.join(['xmtc', 'train', *v['args']])}`"
                  f"{', medians' if repeat > 1 else ''}; wall {f1(wall)} s):", "",
                  "| phase | s | share of wall |", "|---|---|---|"]
        for p in s["phases"]:
            name = ("&nbsp;&nbsp;&nbsp;&nbsp;" * p["depth"]) + p["label"]
            share = f"{100 * p['s'] / wall:.0f}%" if p["s"] is not None and wall else "–"
            lines.append(f"| {name} | {f1(p['s'], 2)} | {share} |")
    pp = next((summaries[v["label"]].get("pecos_phases") for v in variants
               if summaries[v["label"]].get("pecos_phases")), None)
    if pp:
        s0 = summaries[variants[0]["label"]]
        lines += ["", f"PECOS in-process seconds{' (medians)' if repeat > 1 else ''}; wall {f1(s0['pecos_wall_s'])} s:",
                  "", "| import | read | tokenize | TF-IDF | PIFA | Indexer.gen | XLinearModel.train | save |"
                  " interpreter start + exit |", "|---|---|---|---|---|---|---|---|---|",
                  "| " + " | ".join(f1(pp.get(k), 2) for k in ("import_s", "read_s", "tokenize_s", "tfidf_s",
                                                               "pifa_s", "indexer_s", "xlinear_s", "save_s"))
                  + f" | {f1(s0['pecos_wall_s'] - pp['in_process_s'], 2)} |"]
    return "\n".join(lines)


# -- main ---------------------------------------------------------------------------------------------------
def parse_variants(ap, args) -> list[dict]:
    raw = args.xmtc_args if args.xmtc_args is not None else [""]
    labels = args.label or []
    if len(labels) > len(raw):
        ap.error("more --label than --xmtc-args")
    variants = []
    for i, text in enumerate(raw):
        argv = shlex.split(text)
        label = labels[i] if i < len(labels) else (text.strip() or "defaults")
        slug = re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-").lower() or f"v{i}"
        if any(v["slug"] == slug for v in variants):
            slug = f"{slug}-{i}"
        variants.append({"label": label, "args": argv, "slug": slug})
    return variants


def run_dataset(dataset: str, args, variants: list[dict], python: str | None, machine: dict) -> dict:
    root = Path(args.data_root) / dataset
    train, test = root / "train.txt.gz", root / "test.txt.gz"
    for p in (train, test):
        if not p.exists():
            raise SystemExit(f"train_command: {p} not found")
    work = Path(args.out) / "train-command" / dataset
    work.mkdir(parents=True, exist_ok=True)
    print(f"# {dataset}: preparing PECOS's label matrix (untimed) ...", flush=True)
    meta = prepare_labels(train, test, work)
    scorer = Scorer(work)
    load_start = loadavg()
    runs = {v["label"]: [] for v in variants}
    pecos_runs: list[dict] = []
    pecos_eval = None
    for rep in range(1, args.repeat + 1):
        xmtc_first = rep % 2 == 1
        order = (["xmtc", "pecos"] if xmtc_first else ["pecos", "xmtc"])
        for side in order:
            if side == "pecos" and python:
                print(f"[{dataset} r{rep}] PECOS train ...", flush=True)
                r = run_pecos_train(python, train, work, rep, args)
                pecos_runs.append(r)
                print(f"[{dataset} r{rep}] PECOS " + (r.get("problem") or
                      f"wall {r['wall_s']:.1f} s (featurize {r['times']['featurize_s']:.1f} + train "
                      f"{r['times']['train_s']:.1f}), load {r['loadavg_start'][0]:.2f} → {r['loadavg_end'][0]:.2f}"),
                      flush=True)
            elif side == "xmtc":
                for v in variants:
                    print(f"[{dataset} r{rep}] xmtc train ({v['label']}) ...", flush=True)
                    r = run_xmtc_train(v, train, work, rep, args.timeout)
                    runs[v["label"]].append(r)
                    print(f"[{dataset} r{rep}] xmtc {v['label']}: " + (r.get("problem") or
                          f"wall {r['wall_s']:.1f} s, CPU {r['cpu_s']:.1f} s, load {r['loadavg_start'][0]:.2f} → "
                          f"{r['loadavg_end'][0]:.2f}"), flush=True)
                    if rep == 1 and "problem" not in r:
                        v["eval"] = run_xmtc_evaluate(Path(r["model"]), test, work, v["slug"], args.timeout)
                        shutil.rmtree(r["model"], ignore_errors=True)
            if side == "pecos" and python and rep == 1 and "problem" not in pecos_runs[-1]:
                pecos_eval = run_pecos_predict(python, test, work, args, scorer)
    load_end = loadavg()
    summaries = {}
    for v in variants:
        v["loads"] = [(rs[0]["loadavg_start"][0], rs[-1]["loadavg_end"][0]) if rs else None
                      for rs in (runs[v["label"]], pecos_runs)]
        summaries[v["label"]] = summarize(runs[v["label"]], pecos_runs)
    table = render(dataset, meta, variants, pecos_eval, summaries, args.repeat)
    payload = {"dataset": dataset, "date": machine["date"], "machine": machine,
               "machine_line": _common.machine_line(machine, "library defaults (all cores)"),
               "loadavg_start": load_start, "loadavg_end": load_end, "repeat": args.repeat, "meta": meta,
               "pecos_text": args.pecos_text,
               "variants": [{"label": v["label"], "args": v["args"], "summary": summaries[v["label"]],
                             "evaluate": v.get("eval"), "runs": runs[v["label"]]} for v in variants],
               "pecos": {"runs": pecos_runs, "evaluate": pecos_eval}, "table": table}
    path = Path(args.out) / f"train-command-{dataset}.json"
    path.write_text(json.dumps(payload, indent=1, default=str))
    print(f"\n{table}\n\n(load avg at start {' '.join(f'{x:.2f}' for x in load_start)}, at end "
          f"{' '.join(f'{x:.2f}' for x in load_end)}; JSON: {path})\n", flush=True)
    return payload


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", action="append", help=f"dataset folder (repeatable; default: {', '.join(DATASETS)})")
    ap.add_argument("--data-root", default=str(data_root()), help="folder of the data sets (env XMTC_DATA)")
    ap.add_argument("--xmtc-args", action="append", metavar="ARGS",
                    help="extra `xmtc train` flags of one variant, one string (repeatable: one variant each; "
                         "\"\" is the defaults; default: one variant, the defaults)")
    ap.add_argument("--label", action="append", help="the name of the matching --xmtc-args variant in the tables")
    ap.add_argument("--repeat", type=int, default=1, help="runs per side, alternating; medians are reported")
    ap.add_argument("--pecos-text", choices=("words", "raw"), default="words",
                    help="words: lower-cased \\w\\w+ tokens joined by spaces before PECOS's vectorizer (timed); "
                         "raw: the text as it is")
    ap.add_argument("--no-pecos", action="store_true", help="only the xmtc variants")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per child")
    ap.add_argument("--venv", default=str(HERE / ".venv-peers"))
    ap.add_argument("--no-install", action="store_true", help="never create the venv or run pip")
    ap.add_argument("--out", default=str(HERE / "out"))
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    _common.exit_on_sigterm()
    variants = parse_variants(ap, args)
    python = None
    if not args.no_pecos:
        problems = _venv.ensure_peers(Path(args.venv), ["pecos"], install=not args.no_install)
        if problems:
            print(f"PECOS not available: {problems['pecos']}", file=sys.stderr)
            return 2
        python = str(_venv.venv_python(Path(args.venv)))
    machine = _common.machine_info()
    print(_common.machine_line(machine, "library defaults (all cores)"), flush=True)
    for dataset in args.dataset or DATASETS:
        run_dataset(dataset, args, [dict(v) for v in variants], python, machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
