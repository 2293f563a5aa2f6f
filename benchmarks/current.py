#!/usr/bin/env python3
"""The current tables at the top of benchmarks/RESULTS.md: one per comparison, made from the JSON in benchmarks/results/.

    python benchmarks/current.py            # rewrite the block between the two markers in RESULTS.md
    python benchmarks/current.py --check    # exit 1 when the block is not what the JSON gives (stale or missing)
    python benchmarks/current.py --print    # the block on stdout; RESULTS.md untouched

``benchmarks/results/current.json`` (the spec) names, for each table, its kind (which renderer), a title, a
one-line note, the command that makes its JSON and the JSON files under ``benchmarks/results/``; a spec entry
may add ``recorded`` (where a JSON does not carry its date and machine, what the log says). To update a table,
copy the new JSON from ``benchmarks/out/`` (or where the script wrote it) into ``benchmarks/results/``, name
it in the spec instead of the old one, run this script and commit the three together. The dated log below
the block is never touched; the block is replaced in one read-modify-write of RESULTS.md.

Tables reuse the harness's own formatting: ``_common`` (numbers, ratios, machine and dataset lines),
``methods.render_table`` and ``methods.fmt_ratio``, ``ann.table``, ``open_labels.render_table`` and
``analyzers.render_table``.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _common  # noqa: E402
import analyzers  # noqa: E402
import ann  # noqa: E402
import linear  # noqa: E402
import methods  # noqa: E402
import open_labels  # noqa: E402

SPEC = HERE / "results" / "current.json"
RESULTS = HERE / "RESULTS.md"
SHOWN_DIR = "benchmarks/results"  # how the block names the JSON files (whatever folder the spec is read from)
BEGIN = "<!-- current-tables:begin"
BEGIN_LINE = (BEGIN + " (made by `python benchmarks/current.py` from benchmarks/results/current.json and the JSON it"
              " names; edit those, not this block) -->")
END_LINE = "<!-- current-tables:end -->"
INTRO = ("## Current tables\n\n"
         "One table per comparison, made by `python benchmarks/current.py` from the JSON in `benchmarks/results/`"
         " (which file feeds which table: `benchmarks/results/current.json`); `python benchmarks/current.py --check`"
         " fails when this block and the JSON disagree. Each table gives the command that makes its JSON and the"
         " date and machine recorded there. Times come from shared 2-core machines: compare them within a row"
         " (one run), not down a column. The dated log of every run follows below this block.")


COSTS = (("train_s", 2), ("predict_ms_per_doc", 3), ("peak_rss_mb", 0))


class SpecError(Exception):
    """The spec names a file that is missing or a JSON without what its table needs."""


def _load(folder: Path, name: str):
    path = folder / name
    if not path.exists():
        raise SpecError(f"{path}: named in the spec but missing")
    return json.loads(path.read_text(encoding="utf-8"))


def _pair(x, p, ratio, nd: int) -> str:
    """'xmtc / PECOS (ratio)' in one cell."""
    return f"{_common.fmt(x, nd)} / {_common.fmt(p, nd)} ({methods.fmt_ratio(ratio)})"


# ------------------------------------------------------------------------------------------------ renderers
# each returns (table markdown, recorded lines: date and machine of every JSON it read)


def render_linear(data: dict[str, dict], table: dict) -> tuple[str, list[str]]:
    """One row per dataset: xmtc XR-Linear and PECOS XR-Linear from one linear.py run, and their ratios."""
    head = ["dataset", "train / test docs", "labels", "train s", "predict ms/doc", "peak RSS MB", "P@1", "P@5"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    recorded = []
    for name, d in data.items():
        by_lib = {r["library"]: r for r in d["results"]}
        if not {"xmtc", "pecos"} <= set(by_lib):
            raise SpecError(f"{name}: a linear.py JSON with both xmtc and pecos rows is needed")
        x, p = by_lib["xmtc"], by_lib["pecos"]
        meta = d["dataset"]
        cells = [meta["dataset"], f"{meta['n_train']:,} / {meta['n_test']:,}", f"{meta['n_labels_train']:,}"]
        problems = [f"{lib}: {r['problem']}" for lib, r in (("xmtc", x), ("pecos", p)) if r.get("problem")]
        if problems:
            cells += ["; ".join(problems)] + ["–"] * (len(head) - len(cells) - 1)
        else:
            rat = linear.ratios(d["results"])
            cells += [_pair(x[k], p[k], rat[k], nd) for k, nd in COSTS]
            cells += [_pair(x["metrics"][k], p["metrics"][k], rat[k], 2) for k in ("P@1", "P@5")]
        lines.append("| " + " | ".join(cells) + " |")
        a = d["args"]
        given = "".join(f"; --{key.replace('_', '-')} {json.dumps(a[key])}" for key in
                        ("xmtc_params", "pecos_params", "same_tree", "tree_seeds", "max_train", "max_test") if a.get(key))
        recorded.append(f"{meta['dataset']} (`{name}`): {_common.machine_line(d['machine'], d['args']['threads'])}"
                        f"{given}")
    lines.append("")
    lines.append("Each cell: xmtc / PECOS (ratio); a ratio below 1 is faster or smaller, above 1 more accurate.")
    return "\n".join(lines), recorded


def render_methods(data: dict[str, dict], table: dict) -> tuple[str, list[str]]:
    """Every row of one methods.py run (recorded rows merged there say so in their note)."""
    out, recorded = [], []
    for name, d in data.items():
        out.append(methods.render_table(d["rows"]))
        recorded.append(f"`{name}`: {_common.dataset_line(d['dataset']).removeprefix('## ')}; "
                        f"{_common.machine_line(d['machine'], d['args']['threads'])}")
    return "\n\n".join(out), recorded


def render_transformer(data: dict[str, dict], table: dict) -> tuple[str, list[str]]:
    """The xmtc rows of several methods.py runs that share one recorded PECOS XR-Transformer row, in one table.

    The JSON holds ``runs``: file name -> that run's JSON (transformer.py's for PECOS, methods.py's for the rest),
    in the order they ran. A row name measured again in a later run shows the later row (in the earlier row's
    place); each row's note gets its run's start time. Failed rows are left out and counted below the table."""
    rows, pecos, failed, superseded, recorded = {}, None, [], [], []
    for name, d in data.items():
        for run_name, run in d["runs"].items():
            threads = (run.get("args") or {}).get("threads", "?")
            recorded.append(f"`{run_name}` (in `{name}`): {_common.machine_line(run['machine'], threads)}")
            started = run["machine"].get("date", "?")
            for r in run.get("rows", []):
                if r["library"] == methods.PECOS:
                    pecos = pecos or (None if r.get("problem") else r)  # a run whose PECOS failed has none
                elif r.get("problem"):
                    failed.append(r["library"])
                else:
                    if r["library"] in rows:
                        superseded.append(r["library"])
                    rows[r["library"]] = {**r, "note": "; ".join(x for x in (r.get("note"), f"run {started}") if x)}
    if pecos is None:
        raise SpecError("XR-Transformer table: no PECOS XR-Transformer row (pecos-xrt) in its runs")
    table_rows = [*rows.values(), pecos]
    methods.add_ratios(table_rows)  # a run without its own PECOS row (--no-pecos) recorded no ratios
    text = methods.render_table(table_rows)
    if superseded:
        text += (f"\n\nMeasured again in a later run, the later row shown: {', '.join(dict.fromkeys(superseded))} (the JSON has "
                 "both; an ensemble of an earlier run combined the earlier row).")
    if failed:
        text += f"\n\nLeft out: {len(failed)} failed row(s) ({', '.join(failed)}); the JSON has their errors."
    return text, recorded


def render_ann(data: dict[str, dict], table: dict) -> tuple[str, list[str]]:
    """ann.py's rows, the latest measurement of each (n, library) over the files' runs in spec order."""
    latest, recorded, notes = {}, [], []
    for name, d in data.items():
        for run in d["runs"]:
            m = run["machine"]
            line = (f"`{name}`{', ' + run['label'] if run.get('label') else ''}: {m.get('date', '?')}; "
                    f"{m.get('platform', '?')}; cpu_count {m.get('cpu_count', '?')}; threads {m.get('threads', '?')}; "
                    f"dim {m.get('dim')}, k {m.get('k')}, {m.get('queries')} queries, target recall@10 "
                    f"{m.get('target_recall')}")
            recorded.append(line)
            if m.get("note") and f"note in `{name}`: {m['note']}" not in notes:
                notes.append(f"note in `{name}`: {m['note']}")
            for r in run["rows"] + run.get("crossover", []):
                latest[(r["n"], r["library"])] = r
    order = {"exact": 0}
    rows = [latest[key] for key in sorted(latest, key=lambda k: (k[0], order.get(k[1], 1), k[1]))]
    return ann.table(rows), recorded + notes


def render_open_labels(data: dict[str, dict], table: dict) -> tuple[str, list[str]]:
    out, recorded = [], []
    for name, d in data.items():
        s, m = d["split"], d.get("machine", {})
        out.append(open_labels.render_table(d))
        recorded.append(f"`{name}`: {d['dataset']}, {s['labels']:,} labels of which {s['hidden']} hidden (share "
                        f"{s['share']}, seed {s['seed']}), {s['unseen_in_test']} unseen in test; {s['train_docs']:,} "
                        f"train / {s['test_docs']:,} test docs; encoder {d['encoder']['encoder']} (max length "
                        f"{d['encoder']['max_length']}); machine: {m.get('cpu', '?')}, Python {m.get('python', '?')}"
                        + (f"; {m['date']}" if m.get("date") else ""))
    return "\n\n".join(out), recorded


def render_analyzers(data: dict[str, dict], table: dict) -> tuple[str, list[str]]:
    """One table per analyzers.py JSON (a list of rows, or a dict with rows and machine)."""
    out, recorded = [], []
    for name, d in data.items():
        rows = d if isinstance(d, list) else d["rows"]
        dataset = name.removeprefix("analyzers-").removesuffix(".json")
        out.append(f"**{dataset}**\n\n" + analyzers.render_table(rows))
        if isinstance(d, dict) and d.get("machine"):
            recorded.append(f"`{name}`: {_common.machine_line(d['machine'], 'default')}")
    return "\n\n".join(out), recorded


RENDERERS = {"linear": render_linear, "methods": render_methods, "transformer": render_transformer,
             "ann": render_ann, "open_labels": render_open_labels, "analyzers": render_analyzers}


# ---------------------------------------------------------------------------------------------------- block


def render_section(table: dict, folder: Path) -> str:
    kind = table.get("kind")
    if kind not in RENDERERS:
        raise SpecError(f"table {table.get('title')!r}: unknown kind {kind!r} (one of {', '.join(RENDERERS)})")
    data = {name: _load(folder, name) for name in table["files"]}
    text, recorded = RENDERERS[kind](data, table)
    files = ", ".join(f"`{SHOWN_DIR}/{name}`" for name in table["files"])
    parts = [f"### Current: {table['title']}", table["note"], f"Made by: `{table['command']}`. JSON: {files}.",
             text]
    lines = [f"- {line}" for line in recorded]
    if table.get("recorded"):
        lines.append(f"- not in the JSON, from the log: {table['recorded']}")
    parts.append("Recorded:\n\n" + "\n".join(lines))
    return "\n\n".join(parts)


def render_block(spec_path: Path = SPEC) -> str:
    """The whole block, markers included (no trailing newline)."""
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    sections = [render_section(t, spec_path.parent) for t in spec["tables"]]
    return "\n\n".join([BEGIN_LINE, INTRO, *sections, END_LINE])


def find_block(text: str) -> tuple[int, int] | None:
    """(start, end) character offsets of the block in RESULTS.md, markers included; None when it has none."""
    start = text.find("\n" + BEGIN)
    if start < 0:
        return None
    start += 1
    end = text.find(END_LINE, start)
    if end < 0:
        raise SpecError(f"RESULTS.md has {BEGIN!r} but no {END_LINE!r}")
    return start, end + len(END_LINE)


def insertion_point(text: str) -> int:
    """Where a new block goes: after the title and its introduction, before the first section heading."""
    at = text.find("\n## ")
    return len(text) if at < 0 else at + 1


def replace_block(text: str, block: str) -> str:
    where = find_block(text)
    if where is not None:
        return text[:where[0]] + block + text[where[1]:]
    at = insertion_point(text)
    return text[:at] + block + "\n\n" + text[at:]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", type=Path, default=SPEC, help="the tables' spec (default benchmarks/results/current.json)")
    ap.add_argument("--results", type=Path, default=RESULTS, help="the file whose block is replaced")
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--check", action="store_true", help="exit 1 if the block differs from what the JSON gives")
    what.add_argument("--print", action="store_true", help="print the block, write nothing")
    args = ap.parse_args(argv)
    try:
        block = render_block(args.spec)
    except SpecError as exc:
        print(f"current.py: {exc}", file=sys.stderr)
        return 2
    if args.print:
        print(block)
        return 0
    text = args.results.read_text(encoding="utf-8")  # read, replace, write at once: others append to this file
    try:
        where = find_block(text)
    except SpecError as exc:
        print(f"current.py: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if where is None:
            print(f"current.py: {args.results} has no current-tables block; run python benchmarks/current.py",
                  file=sys.stderr)
            return 1
        have = text[where[0]:where[1]]
        if have == block:
            return 0
        diff = difflib.unified_diff(have.splitlines(), block.splitlines(), "RESULTS.md block", "from the JSON",
                                    lineterm="", n=0)
        print(f"current.py: the current tables in {args.results} are stale; run python benchmarks/current.py",
              file=sys.stderr)
        print("\n".join(list(diff)[:40]), file=sys.stderr)
        return 1
    new = replace_block(text, block)
    if new != text:
        args.results.write_text(new, encoding="utf-8")
    print(f"current.py: {'updated' if new != text else 'unchanged'}: {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
