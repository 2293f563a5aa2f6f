#!/usr/bin/env python3
"""The methods table: any xmtc methods by registry name, an ensemble of them and PECOS XR-Transformer, one run.

    python benchmarks/methods.py --methods xr-linear,xr-transformer,x-transformer      # + PECOS (~25 min)
    python benchmarks/methods.py --methods xr-linear,lightxml --params lightxml='{"epochs":3}' \\
        --ensemble xr-linear,lightxml --pecos-from benchmarks/methods-yso-finna-en-2k-20k.json
    python benchmarks/methods.py --full --methods xr-linear --no-pecos       # a seeded sample of yso-finna-en
    python benchmarks/methods.py --methods '' --no-pecos --rows-from a.json --rows-from b.json   # merge tables

Every row runs in its own child process (benchmarks/_runners.py: ``xmtc-method`` fits the registered
estimator on the raw train texts and predicts the top 100 of the test texts; ``pecos-xrt`` runs PECOS
XR-Transformer 1.2.8 in benchmarks/.venv-peers with transformer.py's shared settings), so each row's peak
RSS is its own. The parent scores every prediction with ONE implementation, xmtc.metrics.evaluate:
P@1/3/5, PSP@5, R@100 and coverage@P90 of the top-1 scores; then prints a markdown table with each row's
ratios to PECOS XR-Transformer and writes the raw numbers as JSON; the last stdout line is one JSON
object (the file's path and each row's key figures).

- A method name this xmtc does not register gives an "unknown method" row, never a crash; so do bad
  ``--params`` (checked against the method's config before anything runs) and a failing child.
- ``--pecos-from FILE`` re-uses the PECOS row recorded in an earlier methods.py (or transformer.py) JSON
  instead of re-running its ~25-minute training; the table's note says so, with the recorded date.
- ``--rows-from FILE`` (repeatable) adds the rows of earlier methods.py runs on the same data to the table
  (rows of this run replace recorded rows of the same name), so separately run methods merge into one table;
  ``--ensemble`` may name their rows too where that run saved the model (it was an ensemble member there).
- ``NAME#TAG`` in ``--methods`` runs a method a second time under its own row name (e.g. two clusterings
  of one method for an ensemble); ``--params NAME#TAG='{...}'`` addresses it.
- xmtc methods get their own defaults, plus the run's threads, seed, ``--encoder``, ``--max-length`` and
  ``--device`` where their config has those fields, then the row's parameter file, then ``--params``.
- **Parameter files** (PECOS's ``params/<dataset>/<model>/params.json`` layout): the row ``NAME#TAG`` on
  dataset D reads ``benchmarks/params/D/NAME/TAG.json`` and the row ``NAME`` reads ``.../NAME/default.json``
  where they exist (``--params-dir`` moves the root; ``none`` reads none). A file is a JSON object of the
  estimator's parameters; its optional ``"predict_variants"`` list of objects gives rows
  ``NAME@VARIANT`` that predict the test set again with the same trained model and those parameters set
  (a beam width, a prediction mode, a score rule), each timed on its own. So a method's variants are
  files, not scripts: ``--methods xr-transformer,xr-transformer#binary`` runs the default and
  ``params/yso-finna-en-2k-20k/xr-transformer/binary.json``. The XR-Transformer
  options below (epochs, tree, beam ...) are what PECOS gets, as in transformer.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PARAMS_DIR = HERE / "params"
sys.path.insert(0, str(HERE))
if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))

import _common  # noqa: E402
import transformer  # noqa: E402

KS = (1, 3, 5, 100)  # R@100 needs the top 100, so every row predicts 100
K_PRED = max(KS)
COLUMNS = (("P@1", "P@1"), ("P@3", "P@3"), ("P@5", "P@5"), ("PSP@5", "PSP@5"), ("R@100", "R@100"),
           ("coverage@P90", "cov@P90"))
COSTS = (("train_s", "train s", 1), ("predict_ms_per_doc", "predict ms/doc", 3), ("peak_rss_mb", "peak RSS MB", 0))
RATIO_KEYS = ("P@1", "P@5", "PSP@5", "R@100", "coverage@P90", "train_s", "predict_ms_per_doc", "peak_rss_mb")
TABLE_RATIOS = (("P@1", "P@1 ×"), ("train_s", "train ×"), ("predict_ms_per_doc", "predict ×"),
                ("peak_rss_mb", "RSS ×"))
PECOS = "pecos-xrt"
ENSEMBLE = "ensemble"
FULL_CUT = (50000, 5000)  # --full: seeded random train / test documents of yso-finna-en


def parse_params(items: list[str]) -> dict[str, dict]:
    """``--params NAME=JSON`` (repeatable) -> {NAME: dict}; malformed items raise ValueError."""
    out: dict[str, dict] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--params {item!r}: expected NAME=JSON, e.g. lightxml='{{\"epochs\": 3}}'")
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--params {name}: not JSON ({exc})") from None
        if not isinstance(value, dict):
            raise ValueError(f"--params {name}: expected a JSON object, got {type(value).__name__}")
        out[name.strip()] = value
    return out


def params_file(params_dir: str, dataset: str, row: str) -> Path | None:
    """The parameter file of row ``NAME`` / ``NAME#TAG`` on ``dataset`` (see the module doc), or None."""
    if params_dir == "none":
        return None
    method, _, tag = row.partition("#")
    path = Path(params_dir) / dataset / method / f"{tag or 'default'}.json"
    return path if path.is_file() else None


def read_params_file(path: Path) -> tuple[dict, list[dict]]:
    """(estimator parameters, prediction variants) of one parameter file; ValueError naming the file."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a JSON file ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a JSON object of parameters, got {type(value).__name__}")
    variants = value.pop("predict_variants", [])
    if not isinstance(variants, list) or not all(isinstance(v, dict) and v for v in variants):
        raise ValueError(f"{path}: predict_variants must be a list of non-empty JSON objects")
    return value, variants


def variant_name(row: str, variant: dict) -> str:
    """``xr-transformer@beam_size=20``: the row of one prediction variant."""
    return row + "@" + ",".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in variant.items())


def method_of(row: str) -> str:
    """``lightxml#b`` -> ``lightxml``: the registry name behind a row name."""
    return row.split("#", 1)[0]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    _common.add_run_args(ap, (), dataset="yso-finna-en-2k-20k", timeout=7200)
    ap.add_argument("--methods", default="xr-linear,xr-transformer,x-transformer",
                    help="comma-separated xmtc registry names (NAME#TAG for a second row of one method)")
    ap.add_argument("--params", action="append", default=[], metavar="NAME=JSON",
                    help="JSON keywords for one method's estimator (repeatable), over its parameter file")
    ap.add_argument("--params-dir", default=str(PARAMS_DIR),
                    help="root of the parameter files DATASET/NAME/TAG.json ('none': read none)")
    ap.add_argument("--ensemble", default="", help="comma-separated rows of --methods whose trained models "
                    "form one more row, xmtc.models.ensemble.Ensemble (train s = the members' sum)")
    ap.add_argument("--ensemble-combine", default="average", choices=("average", "rank-average", "sigmoid-average"),
                    help="how the ensemble combines its members' scores (as `xmtc ensemble --combine`)")
    ap.add_argument("--no-pecos", action="store_true", help="no PECOS XR-Transformer row")
    ap.add_argument("--pecos-from", default=None, metavar="JSON",
                    help="re-use the PECOS XR-Transformer row recorded in this methods.py/transformer.py JSON")
    ap.add_argument("--pecos-params", type=json.loads, default={},
                    help='JSON deep-merged into PECOS\'s settings (see transformer.py)')
    ap.add_argument("--rows-from", action="append", default=[], metavar="JSON",
                    help="add the rows of an earlier methods.py JSON on the same data (repeatable)")
    ap.add_argument("--device", default="cpu", help="'device' of the xmtc methods that have one")
    ap.add_argument("--full", action="store_true",
                    help=f"the full yso-finna-en, a seeded sample of --max-train/--max-test documents (default "
                         f"{FULL_CUT[0]} / {FULL_CUT[1]})")
    ap.add_argument("--json", default=None, help="where the JSON goes (default: --out/methods-<dataset>-<time>.json)")
    transformer.add_shared_args(ap)
    args = ap.parse_args(argv)
    args.libraries = []  # add_run_args' --libraries is not used here
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if len(set(args.methods)) != len(args.methods):
        ap.error(f"--methods lists a row twice: {args.methods} (use NAME#TAG for a second row)")
    bad = [m for m in args.methods if m in (PECOS, ENSEMBLE) or not method_of(m)]
    if bad:
        ap.error(f"--methods: {bad} are not method names (PECOS has its own options, the ensemble --ensemble)")
    try:
        args.params = parse_params(args.params)
    except ValueError as exc:
        ap.error(str(exc))
    stray = sorted(set(args.params) - set(args.methods))
    if stray:
        ap.error(f"--params for {stray}, which --methods does not list")
    args.ensemble = [m.strip() for m in args.ensemble.split(",") if m.strip()]
    missing = sorted(set(args.ensemble) - set(args.methods))
    if missing and not args.rows_from:
        ap.error(f"--ensemble members {missing} are not in --methods (or in a --rows-from run that saved them)")
    if args.ensemble and len(args.ensemble) < 2:
        ap.error("--ensemble needs at least two members")
    if args.pecos_from and args.no_pecos:
        ap.error("--pecos-from and --no-pecos contradict each other")
    if args.full:
        args.dataset = "yso-finna-en"
        args.max_train = args.max_train or FULL_CUT[0]
        args.max_test = args.max_test or FULL_CUT[1]
    args.params_files, args.variants = {}, {}
    for name in args.methods:
        path = params_file(args.params_dir, args.dataset, name)
        if path is None:
            continue
        try:
            from_file, args.variants[name] = read_params_file(path)
        except ValueError as exc:
            ap.error(str(exc))
        args.params_files[name] = str(path)
        args.params[name] = {**from_file, **args.params.get(name, {})}
    args.featurizer, args.featurizer_race = "xmtc", False  # PECOS is handed xmtc's TF-IDF, as in transformer.py
    if args.encoder is not None or transformer.default_encoder() is not None or (
            not args.no_pecos and not args.pecos_from):
        transformer.resolve_encoder(ap, args)  # PECOS needs a folder; xmtc methods also take their own default
    return args


# -- rows ------------------------------------------------------------------------------------------
def method_params(method: str, given: dict, args) -> dict:
    """The estimator's keywords: the run's settings for the fields its config has, then ``given``."""
    from xmtc.models import estimator_class

    fields = {f.name for f in dataclasses.fields(estimator_class(method).config_class)}
    run = {"n_threads": args.threads, "seed": args.seed, "encoder": args.encoder, "max_length": args.max_length,
           "device": args.device}
    return {**{k: v for k, v in run.items() if k in fields and v is not None}, **given}


def check_method(method: str, params: dict) -> str | None:
    """None if ``method`` is registered and accepts ``params``, else the table's note."""
    from xmtc.errors import XmtcError
    from xmtc.models import estimator_class, method_names

    if method not in method_names():
        return f"unknown method {method!r}: not registered in this xmtc (it has {', '.join(method_names())})"
    try:
        estimator_class(method)(**params)
    except (XmtcError, TypeError, ValueError) as exc:
        return f"bad params for {method}: {exc}"
    return None


def load_recorded(path: str) -> dict:
    """An earlier run's JSON: ``{"dataset": meta, "rows": [...], ...}`` (transformer.py's "results" too)."""
    data = json.loads(Path(path).read_text())
    rows = data.get("rows", data.get("results"))
    if not isinstance(rows, list) or not isinstance(data.get("dataset"), dict):
        raise ValueError(f"{path}: not a methods.py or transformer.py JSON (no dataset/rows)")
    return {**data, "rows": rows}


def same_data(meta: dict, recorded: dict) -> str | None:
    """None if the recorded run used the same documents, else why not."""
    rec = recorded["dataset"]
    for key in ("dataset", "n_train", "n_test", "n_labels_train"):
        if rec.get(key) != meta.get(key):
            return f"{key} {rec.get(key)!r} there, {meta.get(key)!r} here"
    if (rec.get("cut") or None) != (meta.get("cut") or None):
        return f"cut {rec.get('cut')} there, {meta.get('cut')} here"
    return None


def pecos_from(path: str, meta: dict) -> dict:
    """The recorded PECOS row, marked as such (its note says where and when it was measured)."""
    recorded = load_recorded(path)
    why = same_data(meta, recorded)
    if why:
        raise ValueError(f"--pecos-from {path}: other data ({why})")
    rows = [r for r in recorded["rows"] if r.get("library") == PECOS and not r.get("problem")]
    if not rows:
        raise ValueError(f"--pecos-from {path}: no measured {PECOS} row in it")
    row = dict(rows[0])
    when = (recorded.get("machine") or {}).get("date", "?")
    row["recorded"] = {"file": str(path), "date": when, "loadavg_at_start": (recorded.get("machine") or {}).get(
        "loadavg_at_start")}
    k_pred = row.get("k", _common.K)
    row["note"] = (f"recorded {when} ({Path(path).name}), not re-run"
                   + ("" if k_pred >= K_PRED else f"; predicted top {k_pred}, so no R@{K_PRED}"))
    return row


def add_ratios(rows: list[dict]) -> None:
    """Each measured row's ratio to the PECOS row (metrics: >1 more accurate; costs: <1 cheaper)."""
    pecos = next((r for r in rows if r["library"] == PECOS and not r.get("problem")), None)
    for r in rows:
        if r.get("problem") or pecos is None:
            r["ratios_to_pecos"] = None
            continue
        mine = {**r.get("metrics", {}), **{k: r.get(k) for k, _, _ in COSTS}}
        theirs = {**pecos.get("metrics", {}), **{k: pecos.get(k) for k, _, _ in COSTS}}
        r["ratios_to_pecos"] = {k: _common.ratio(mine.get(k), theirs.get(k)) for k in RATIO_KEYS}


def display_name(r: dict) -> str:
    if r["library"] == PECOS:
        return "PECOS XR-Transformer 1.2.8"
    if r["library"] == ENSEMBLE:
        return "ensemble (" + " + ".join(r.get("members_rows", [])) + ")"
    return "xmtc " + r["library"]


def fmt_ratio(x) -> str:
    """2 decimals, 3 below 0.1 (XR-Linear's train time is ~0.001x PECOS's: 0.00x would hide it)."""
    if x is None:
        return "–"
    return f"{x:.2f}×" if x >= 0.1 else f"{x:.3f}×"


def render_table(rows: list[dict]) -> str:
    head = ["row", *[h for _, h in COLUMNS], *[h for _, h, _ in COSTS], *[h for _, h in TABLE_RATIOS], "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r.get("problem"):
            lines.append(f"| {display_name(r)} | " + " | ".join(["–"] * (len(head) - 2)) + f" | {r['problem']} |")
            continue
        m, rat = r.get("metrics", {}), r.get("ratios_to_pecos") or {}
        cells = [display_name(r), *[_common.fmt(m.get(k)) for k, _ in COLUMNS],
                 *[_common.fmt(r.get(k), nd) for k, _, nd in COSTS],
                 *[fmt_ratio(rat.get(k)) for k, _ in TABLE_RATIOS], r.get("note", "")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(rows: list[dict], json_path: Path, meta: dict) -> dict:
    """The last stdout line: where the JSON is and each row's key figures."""
    out = []
    for r in rows:
        item = {"row": r["library"]}
        if r.get("problem"):
            item["problem"] = r["problem"]
        else:
            item.update({k: r.get("metrics", {}).get(k) for k, _ in COLUMNS})
            item.update({k: r.get(k) for k, _, _ in COSTS})
            if r.get("recorded"):
                item["recorded"] = r["recorded"]["date"]
        out.append(item)
    return {"json": str(json_path), "dataset": meta.get("dataset"), "n_test": meta.get("n_test"), "rows": out}


def _load1() -> float:
    return round(os.getloadavg()[0], 2)


def recorded_members(args, saved: dict[str, str]) -> dict[str, dict]:
    """Ensemble members not trained in this run: their rows in the --rows-from runs, where those saved
    the model (a member of that run's ensemble) and the folder is still there."""
    found = {}
    for path in args.rows_from:
        for r in load_recorded(path)["rows"]:
            name = r.get("library")
            if (name in args.ensemble and name not in saved and not r.get("problem") and r.get("saved_to")
                    and Path(r["saved_to"]).is_dir()):
                found[name] = r
    return found


def variant_rows(row: dict, score) -> list[dict]:
    """One row per prediction variant of a trained row: its metrics, its own predict time, the rest the
    trained row's (the same model)."""
    out = []
    for v in row.get("variants", []):
        name = variant_name(row["library"], v["params"])
        vrow = {k: row[k] for k in ("kind", "method", "train_s", "peak_rss_mb", "n_test", "params_passed")
                if k in row}
        vrow.update({"library": name, "k": row.get("k"), "variant_of": row["library"], "variant": v["params"],
                     "predict_s": v["predict_s"], "metrics": score(Path(v["file"])),
                     "predict_ms_per_doc": 1e3 * v["predict_s"] / max(row.get("n_test") or 1, 1),
                     "note": f"the model of row {row['library']}, predicted with {json.dumps(v['params'])}"})
        print(f"[{name}] predict {vrow['predict_ms_per_doc']:.3f} ms/doc, P@1 {vrow['metrics']['P@1']:.2f}",
              flush=True)
        out.append(vrow)
    return out


def run_rows(args, work: Path, logs: Path, peer_python: str | None, peer_problem: str | None,
             recorded_pecos: dict | None = None) -> list[dict]:
    score = _common.Scorer(work, ks=KS, scores=True)
    rows: list[dict] = []

    def child(name: str, python: str, runner: str, extra: list[str], row: dict) -> dict:
        print(f"[{name}] running ... (log: {logs / (name + '.log')})", flush=True)
        row["load1_before"] = _load1()
        res, problem = _common.run_child(python, name, extra, work, logs, args.timeout, args.threads,
                                         runner=runner, k=K_PRED)
        row["load1_after"] = _load1()
        if problem:
            row["problem"] = problem
            print(f"[{name}] {problem}", flush=True)
            return row
        row.update(res)
        row["library"], row["k"] = name, K_PRED
        row["metrics"] = score(logs / f"{name}.npz")
        print(f"[{name}] train {row.get('train_s') or 0:.1f} s, predict {row['predict_ms_per_doc']:.3f} ms/doc, "
              f"peak RSS {row['peak_rss_mb']:.0f} MB, P@1 {row['metrics']['P@1']:.2f}, "
              f"coverage@P90 {row['metrics']['coverage@P90']:.2f}", flush=True)
        return row

    saved: dict[str, str] = {}
    for name in args.methods:
        method = method_of(name)
        row: dict = {"library": name, "kind": "xmtc", "method": method}
        params = None
        try:
            params = method_params(method, args.params.get(name, {}), args)
        except Exception:  # noqa: BLE001  (an unregistered method has no config: check_method says so)
            params = args.params.get(name, {})
        problem = check_method(method, params)
        for variant in args.variants.get(name, []):  # a bad prediction variant is found before training
            problem = problem or check_method(method, {**params, **variant})
        row["params_passed"] = params
        if problem:
            row["problem"] = problem
            print(f"[{name}] {problem}", flush=True)
            rows.append(row)
            continue
        if name in args.params_files:
            row["params_file"] = args.params_files[name]
        spec = {"method": method, "params": params, "predict_variants": args.variants.get(name, [])}
        if name in args.ensemble:
            spec["save"] = str(work / "scratch" / name / "model")
        row = child(name, sys.executable, "xmtc-method", ["--seed", str(args.seed), "--params", json.dumps(spec)], row)
        row["note"] = row.get("note", "texts in: featurizing and tokenizing in the times") if not row.get("problem") else ""
        if not row.get("problem") and spec.get("save"):
            saved[name] = row.get("saved_to") or spec["save"]
        rows.append(row)
        if not row.get("problem"):
            rows.extend(variant_rows(row, score))

    if args.ensemble:
        row = {"library": ENSEMBLE, "kind": "ensemble", "members_rows": list(args.ensemble),
               "combine": args.ensemble_combine}
        earlier = recorded_members(args, saved)
        saved.update({m: r["saved_to"] for m, r in earlier.items()})
        failed = [m for m in args.ensemble if m not in saved]
        if failed:
            row["problem"] = f"members {failed} did not train"
            print(f"[{ENSEMBLE}] {row['problem']}", flush=True)
        else:
            spec = {"members": [saved[m] for m in args.ensemble], "combine": args.ensemble_combine, "k_each": K_PRED}
            row = child(ENSEMBLE, sys.executable, "xmtc-ensemble", ["--params", json.dumps(spec)], row)
            if not row.get("problem"):
                by = {**earlier, **{r["library"]: r for r in rows}}
                row["train_s"] = sum(by[m]["train_s"] for m in args.ensemble)
                row["note"] = (f"{args.ensemble_combine} of the members' top {K_PRED}; train s = members' sum; "
                               f"predict and RSS: all members in one process (loading them not timed: "
                               f"{row.get('load_models_s', 0):.1f} s)")
        rows.append(row)

    if not args.no_pecos:
        row = {"library": PECOS, "kind": "pecos"}
        if recorded_pecos is not None:
            row = recorded_pecos
        elif peer_problem:
            row["problem"] = "not installed: " + peer_problem
        else:
            extra = ["--seed", str(args.seed), "--params", json.dumps(args.pecos_params),
                     "--shared", json.dumps(transformer.shared_settings(args))]
            row = child(PECOS, peer_python, PECOS, extra, row)
            if not row.get("problem"):
                row["note"] = "handed the TF-IDF matrices; measured in this run"
        rows.append(row)
    return rows


def merge_recorded(rows: list[dict], files: list[str], meta: dict) -> list[dict]:
    """Recorded rows first (file order, later files win), then this run's rows, which replace same names."""
    merged: dict[str, dict] = {}
    for path in files:
        recorded = load_recorded(path)
        why = same_data(meta, recorded)
        if why:
            raise ValueError(f"--rows-from {path}: other data ({why})")
        for r in recorded["rows"]:
            r = dict(r)
            if not r.get("recorded"):
                r["recorded"] = {"file": str(path), "date": (recorded.get("machine") or {}).get("date", "?")}
                r["note"] = "; ".join(x for x in (r.get("note"), f"recorded {r['recorded']['date']} "
                                                  f"({Path(path).name})") if x)
            merged[r["library"]] = r
    for r in rows:
        merged[r["library"]] = r
    pecos = merged.pop(PECOS, None)  # PECOS last, as in a fresh run
    return list(merged.values()) + ([pecos] if pecos else [])


def main(argv=None) -> int:
    args = parse_args(argv)
    nothing_to_run = not args.methods and (args.no_pecos or args.pecos_from) and not args.ensemble
    if nothing_to_run and args.rows_from:  # merging recorded tables: no data needed
        first = load_recorded(args.rows_from[0])
        out, machine, meta, work = Path(args.out), first.get("machine", {}), first["dataset"], None
        print(f"# xmtc methods table (merged): {meta['dataset']}", flush=True)
    else:
        started = _common.start_run(args, "xmtc methods table")
        if started is None:
            return 2
        out, machine, work, meta = started
        if meta["featurizer_choice"] == "none":
            print(f"benchmark: {args.dataset} has no texts (bag of words only); these methods need texts",
                  file=sys.stderr)
            return 2
    rows: list[dict] = []
    try:  # recorded rows are checked before anything trains
        recorded_pecos = pecos_from(args.pecos_from, meta) if args.pecos_from else None
        merge_recorded([], args.rows_from, meta)
    except (ValueError, OSError) as exc:
        print(f"benchmark: {exc}", file=sys.stderr)
        return 2
    if work is not None:
        run_pecos = not args.no_pecos and not args.pecos_from
        problems, peer_python, logs = _common.peer_setup(args, [PECOS] if run_pecos else [], work)
        rows = run_rows(args, work, logs, peer_python, problems.get(PECOS), recorded_pecos)
    rows = merge_recorded(rows, args.rows_from, meta)
    if recorded_pecos is not None and work is None:
        rows = merge_recorded(rows + [recorded_pecos], [], meta)
    add_ratios(rows)
    table = render_table(rows)

    shared = transformer.shared_settings(args)
    notes = [_common.dataset_line(meta), _common.machine_line(machine, args.threads),
             f"xmtc methods: their defaults + n_threads {args.threads}, seed {args.seed}, encoder {args.encoder}, "
             f"max_length {args.max_length}, device {args.device} where they have the field; --params: "
             f"{json.dumps(args.params) if args.params else 'none'}; each fits on the raw train texts (own TF-IDF in "
             f"the times)",
             f"PECOS XR-Transformer: transformer.py's shared settings {json.dumps(shared)}, handed the TF-IDF "
             f"matrices" + (f"; ROW RECORDED EARLIER, not re-run ({args.pecos_from})" if args.pecos_from else ""),
             f"every row predicts the top {K_PRED} of the test texts (predict ms/doc = wall / n_test, texts in); "
             f"peak RSS = the row's own child (VmHWM); metrics: xmtc.metrics.evaluate in the parent; coverage@P90 "
             f"= share of test documents whose top-1 is accepted above one score threshold at precision >= 90%; "
             f"ratios = row / PECOS XR-Transformer; load1 = 1-min load average before/after each row in the JSON"]
    if args.rows_from:
        notes.append(f"rows merged from earlier runs: {', '.join(args.rows_from)} (each row's note gives its date)")
    print()
    print("\n".join(notes))
    print()
    print(table)
    payload = {"kind": "methods", "dataset": meta, "machine": machine, "args": vars(args), "shared_settings": shared,
               "ks": list(KS), "notes": notes, "rows": rows, "table": table}
    if args.json:
        json_path = Path(args.json)
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(payload, indent=2, default=str))
    else:
        json_path = _common.write_results(out, "methods", meta["dataset"], payload)
    print(f"\nraw numbers: {json_path}")
    print(json.dumps(summary(rows, json_path, meta), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
