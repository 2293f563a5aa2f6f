#!/usr/bin/env python
"""Mutation fuzzer for the ``xmtc`` command's options: valid files, broken flags and values.

``scripts/fuzz_cli.py`` breaks the files a command reads; this script keeps them valid and breaks the
command line instead. Each case starts from a working command of one sub-command (train, predict,
evaluate, explain, select, calibrate, split, info, learn, labels, ensemble, encode) on one of the
models ``fuzz_cli.prepare`` trains, then replaces the value of one or two of that sub-command's
options (read from the parser itself, so new options are fuzzed without listing them here) with a value from a pool of edge cases (0, -1, nan, inf, 1e308, 10**12,
empty, words, paths that do not exist), adds an unknown option, or drops a positional argument. A case
passes when the command, run as a subprocess under an address-space limit, either

* exits 0 (and, for predict, writes one JSON line per input text), or
* exits 2 (1 where ``labels find`` documents it) and the last stderr line is one ``xmtc: error: ...``
  line, with nothing else on stderr but argparse's usage lines,

and in both cases prints no traceback and answers within the time limit. Usage::

    python scripts/fuzz_flags.py --cases 200 --seed 1 --data ../shared/data
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import fuzz_cli  # noqa: E402  (the sibling script: its inputs and its way of running the CLI)

VALUES = ["0", "-1", "1", "2", "nan", "inf", "-inf", "1e308", "-1e308", "1000000000000", "0.5", "1.5", "",
          "x", "auto", "true", "none", "null", "[]", "{}", "1,2", "/nonexistent/dir/f", "-", "é", "\x01", " 3 "]
MEMORY_LIMIT = 12 << 30  # bytes of address space per case: a request for 10**12 rows must fail, not swap


def commands(base: dict, case: Path) -> dict[str, list[str]]:
    """One working command line per sub-command, on the prepared inputs and the case's model (a copy of one
    of the prepared models: XR-Linear, XR-Linear with the label-text route, a tiny LightXML)."""
    model = str(case / "model")
    return {
        "train": ["train", str(base["train.tsv"]), "-o", str(case / "new"), "-q"],
        "predict": ["predict", model, str(base["texts.txt"]), "-o", str(case / "pred.jsonl"), "-q"],
        "evaluate": ["evaluate", model, str(base["test.tsv"]), "--json", "-q"],
        "explain": ["explain", model, "oil prices rise in the gulf", "--json", "-q"],
        "select": ["select", model, str(base["texts.txt"]), "-n", "5", "-q"],
        "calibrate": ["calibrate", model, str(base["test.tsv"]), "--json", "-q"],
        "split": ["split", str(base["train.tsv"]), "--train-out", str(case / "a.tsv"), "--valid-out",
                  str(case / "b.tsv"), "-q"],
        "info": ["info", model, "--json"],
        "learn": ["learn", model, str(base["test.tsv"]), "-o", str(case / "learned"), "-q"],
        "labels": ["labels", "find", model, "oil", "--json"],
        "ensemble": ["ensemble", model, model, "--input", str(base["texts.txt"]), "-q"],
        "encode": ["encode", model, str(base["texts.txt"]), "-o", str(case / "emb.npy"), "-q"],
    }


def options(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """The long (or only) option strings of ``argv``'s sub-command, help and version left out."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    p = sub.choices[argv[0]]
    if argv[0] == "labels":
        p = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices[argv[1]]
    return sorted(a.option_strings[-1] for a in p._actions
                  if a.option_strings and not isinstance(a, (argparse._HelpAction, argparse._VersionAction)))


def mutate(rng: random.Random, argv: list[str], opts: list[str]) -> list[str]:
    argv = list(argv)
    for _ in range(rng.randint(1, 2)):
        kind = rng.choice(["value", "value", "value", "value", "unknown", "drop-positional", "repeat"])
        if kind == "value":
            opt = rng.choice(opts)
            value = rng.choice(VALUES)
            argv += [opt] if rng.random() < 0.15 else [f"{opt}={value}"]
        elif kind == "unknown":
            argv.append(rng.choice(["--bogus", "--beam_size=3", "-z", "--k", "--"]))
        elif kind == "drop-positional":
            positions = [i for i, a in enumerate(argv) if i > 0 and not a.startswith("-")
                         and not argv[i - 1].startswith("-")]
            if positions:
                del argv[rng.choice(positions)]
        else:
            opt = rng.choice(opts)
            argv += [f"{opt}={rng.choice(VALUES)}", f"{opt}={rng.choice(VALUES)}"]
    return argv


def limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run(argv: list[str], timeout: float, cwd: Path) -> subprocess.CompletedProcess:
    """One case, in its own folder: a relative path a fuzzed value names (``--plot=1.png``) lands there."""
    return fuzz_cli.run(argv, timeout, preexec_fn=limit_memory, cwd=cwd)


def judge(argv: list[str], proc: subprocess.CompletedProcess, n_texts: int) -> str | None:
    """None if the case passed, else why it failed."""
    stderr = proc.stderr.decode("utf-8", "replace")
    if "Traceback" in stderr or "Traceback" in proc.stdout.decode("utf-8", "replace"):
        return "traceback"
    if proc.returncode in (1, 2) and not (proc.returncode == 1 and argv[:2] != ["labels", "find"]):
        lines = [ln for ln in stderr.strip("\n").split("\n") if ln]
        errors = [ln for ln in lines if ln.startswith("xmtc") and ": error: " in ln]
        usage = [ln for ln in lines if ln.startswith(("usage:", " "))]
        if proc.returncode == 1 and not lines:
            return None  # labels find: nothing matched
        if len(errors) != 1 or errors[0] != lines[-1] or len(errors) + len(usage) != len(lines):
            return f"exit {proc.returncode} but stderr is not one error line after usage: {stderr[-400:]!r}"
        return None
    if proc.returncode != 0:
        return f"exit {proc.returncode}: {stderr[-300:]!r}"
    if argv[0] == "predict" and "-o" in argv:
        out = Path(argv[argv.index("-o") + 1])
        if out.exists():
            rows = out.read_text(encoding="utf-8").splitlines()
            if len(rows) != n_texts or not all(isinstance(json.loads(r), dict) for r in rows):
                return f"predict wrote {len(rows)} rows for {n_texts} texts"
    return None


def fuzz(cases: int, seed: int, data: Path, timeout: float = 120, log=print) -> Counter:
    from xmtc.cli_parser import build_parser

    parser = build_parser([])
    rng = random.Random(seed)
    counts: Counter = Counter()
    with tempfile.TemporaryDirectory(prefix="xmtc-fuzz-flags-") as tmp:
        work = Path(tmp)
        base = fuzz_cli.prepare(work, data)
        n_texts = len(base["texts.txt"].read_text(encoding="utf-8").splitlines())
        for i in range(cases):
            case = work / f"case{i}"
            case.mkdir()
            shutil.copytree(rng.choice(base["models"]), case / "model")
            valid_lines = commands(base, case)
            name = rng.choice(sorted(valid_lines))
            valid = valid_lines[name]
            argv = mutate(rng, valid, options(parser, valid))
            t0 = time.perf_counter()
            try:
                why = judge(argv, run(argv, timeout, case), n_texts)
            except subprocess.TimeoutExpired:
                why = f"hang: no answer in {timeout}s"
            counts["FAIL" if why else "pass"] += 1
            counts[f"{name} {'FAIL' if why else 'pass'}"] += 1
            if why:
                log(f"case {i} FAIL ({time.perf_counter() - t0:.1f}s): {why}\n  xmtc {' '.join(map(repr, argv))}")
            shutil.rmtree(case, ignore_errors=True)
            if (i + 1) % 25 == 0:
                log(f"{i + 1} cases: {dict(sorted(counts.items()))}")
    return counts


def main() -> int:
    return fuzz_cli.command_line(__doc__, lambda a: fuzz(a.cases, a.seed, a.data, a.timeout), keep=False)


if __name__ == "__main__":
    sys.exit(main())
