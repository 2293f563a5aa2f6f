#!/usr/bin/env python
"""Mutation fuzzer for the ``xmtc`` command as a user runs it: one subprocess per broken input.

Each case copies a valid input (a training or test file in TSV, JSONL or XC form, a prediction
input, a --config file, or a whole model folder), breaks it (truncation, inserted/deleted/flipped
bytes, NUL, bad UTF-8, huge lines, duplicated or blank lines, CRLF, gzip of the broken bytes; for
model folders also deleted files, symlinks out of the folder, manifest names with ``..``), and runs
``xmtc train|predict|evaluate|info`` on it. A case passes when the command either

* exits 0 with a correct-looking result (train: the folder loads and predicts; predict: one JSON
  line per input; evaluate --json: one JSON object; info: a method line), or
* exits 2 with exactly one stderr line ``xmtc: error: FILE...`` naming the broken file,

and in both cases prints no traceback, finishes within the time limit, and leaves no temporary
folder, no partial model folder and no partial output file behind. Failing cases are kept in
``--keep`` for replay. Usage::

    python scripts/fuzz_cli.py --cases 300 --seed 1 --data ../shared/data
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from xmtc.data.data_root import data_root  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


# -- mutations ---------------------------------------------------------------------------------------
def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(["truncate", "insert", "delete", "nul", "bad-utf8", "dup-line", "huge-line", "crlf",
                           "blank-line", "flip", "empty", "tab", "comma", "header"])
        pos = rng.randint(0, len(data))
        if kind == "truncate":
            data = data[:pos]
        elif kind == "insert":
            data = data[:pos] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 4))) + data[pos:]
        elif kind == "delete":
            data = data[:pos] + data[pos + rng.randint(1, 50):]
        elif kind == "nul":
            data = data[:pos] + b"\x00" + data[pos:]
        elif kind == "bad-utf8":
            data = data[:pos] + rng.choice([b"\xff", b"\xc3\x28", b"\xe2\x82", b"\xed\xa0\x80"]) + data[pos:]
        elif kind == "dup-line":
            lines = data.split(b"\n")
            i = rng.randrange(len(lines))
            data = b"\n".join(lines[:i + 1] + lines[i:])
        elif kind == "huge-line":
            data = data[:pos] + b"w" * rng.choice([70_000, 1_000_000]) + data[pos:]
        elif kind == "crlf":
            data = data.replace(b"\n", b"\r\n")
        elif kind == "blank-line":
            data = data[:pos] + b"\n\n" + data[pos:]
        elif kind == "flip" and data:
            i = min(pos, len(data) - 1)
            data = data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1:]
        elif kind == "empty":
            data = b""
        elif kind == "tab":
            data = data[:pos] + b"\t" + data[pos:]
        elif kind == "comma":
            data = data[:pos] + rng.choice([b",", b",,", b"-1", b"99999999999999999999", b"nan", b"inf"]) + data[pos:]
        elif kind == "header":
            nl = data.find(b"\n")
            data = rng.choice([b"3 3\n", b"-1 5 5\n", b"1 1 1 1\n", b"99999999999999999999 2 2\n"]) + data[nl + 1:]
    return data


def mutate_model(rng: random.Random, folder: Path) -> str:
    """Break a copy of a model folder in place; returns what was done."""
    manifest = json.loads((folder / "manifest.json").read_text())
    files = sorted(manifest["files"]) + ["manifest.json"]
    kind = rng.choice(["bytes", "bytes", "bytes", "delete", "symlink", "escape", "manifest-value", "manifest-any",
                       "extra-stage-file"])
    name = rng.choice(files)
    if kind == "bytes":
        (folder / name).write_bytes(mutate_bytes(rng, (folder / name).read_bytes()))
    elif kind == "delete":
        (folder / name).unlink()
    elif kind == "symlink":
        outside = folder.parent / ("outside-" + name.replace("/", "_"))
        shutil.move(folder / name, outside)
        os.symlink(outside, folder / name)
    elif kind == "escape":
        victim = rng.choice(sorted(manifest["files"]))
        shutil.copy(folder / victim, folder.parent / "stolen")
        manifest["files"][rng.choice(["../stolen", "/etc/passwd", "a/../../stolen"])] = manifest["files"].pop(victim)
        for st in manifest["stages"]:
            if st.get("file") == victim:
                st["file"] = "../stolen"
        (folder / "manifest.json").write_text(json.dumps(manifest))
    elif kind == "manifest-value":
        st = rng.choice(manifest["stages"])
        key = rng.choice(sorted(st))
        st[key] = rng.choice([None, -1, 2**70, "x", [], {}, 1.5, True, "../labels.json"])
        (folder / "manifest.json").write_text(json.dumps(manifest))
    elif kind == "manifest-any":
        name = edit_json(rng, manifest)
        (folder / "manifest.json").write_text(json.dumps(manifest))
    else:
        (folder / "unlisted.bin").write_bytes(b"junk")  # harmless: not a stage folder
    return f"{kind} {name}"


def edit_json(rng: random.Random, doc) -> str:
    """One edit anywhere in a JSON document, in place: a key renamed or dropped, a value replaced by one of
    another type or an edge value, or a list entry duplicated or dropped. The place is drawn by top-level
    section first, then uniformly among that section's entries at every depth, so a stage's ``params``
    is hit as often as a declared array. Returns the edited path."""
    if not isinstance(doc, dict) or not doc:
        return "(nothing to edit)"
    section = rng.choice(sorted(doc))
    places = [(doc, section, [])]
    stack = [(doc[section], [section])]
    while stack:
        node, path = stack.pop()
        for key in (sorted(node) if isinstance(node, dict) else range(len(node))) \
                if isinstance(node, (dict, list)) else ():
            places.append((node, key, path))
            stack.append((node[key], [*path, key]))
    node, key, path = rng.choice(places)
    op = rng.choice(["value", "value", "value", "rename", "drop", "duplicate"])
    if op == "rename" and isinstance(node, dict):
        node[key + rng.choice(["_", "X", ".json"])] = node.pop(key)
    elif op == "drop":
        del node[key]
    elif op == "duplicate" and isinstance(node, list):
        node.insert(key, json.loads(json.dumps(node[key])))
    else:
        old = node[key]
        pool = [None, -1, 0, 2**70, 1e308, "x", "", [], {}, 1.5, True, "../labels.json", [1, 2]]
        if isinstance(old, (int, float)) and not isinstance(old, bool):
            pool += [old + 1, old - 1, -old, old * 1000]
        if isinstance(old, str):
            pool += [old.upper(), old + "x", old[:-1]]
        node[key] = rng.choice([v for v in pool if type(v) is not type(old) or v != old])
    return "/".join(map(str, [*path, key])) + f" ({op})"


# -- inputs ---------------------------------------------------------------------------------------------
def prepare(work: Path, data: Path) -> dict:
    """Valid inputs and a valid model to break."""
    train = gzip.open(data / "reuters21578-apte90" / "train.txt.gz", "rt", encoding="utf-8").read().splitlines()[:200]
    test = gzip.open(data / "reuters21578-apte90" / "test.txt.gz", "rt", encoding="utf-8").read().splitlines()[:40]
    xc = gzip.open(data / "mulan-bibtex" / "train_xc.txt.gz", "rt", encoding="utf-8").read().splitlines()
    xc_head = xc[0].split()
    xc = [f"150 {xc_head[1]} {xc_head[2]}"] + xc[1:151]
    inputs = {
        "train.tsv": "\n".join(train) + "\n",
        "test.tsv": "\n".join(test) + "\n",
        "train.jsonl": "".join(json.dumps({"text": line.split("\t", 1)[1], "labels": line.split("\t", 1)[0].split(",")})
                               + "\n" for line in train),
        "texts.txt": "".join(line.split("\t", 1)[1] + "\n" for line in test),
        "train_xc.txt": "\n".join(xc) + "\n",
        "config.json": json.dumps({"beam_size": 5, "max_leaf_size": 16}),
    }
    for name, text in inputs.items():
        (work / name).write_text(text, encoding="utf-8")
    model = work / "model"
    out = run(["train", str(work / "train.tsv"), "-o", str(model), "-q"], 600)
    if out.returncode != 0:
        sys.exit(f"could not train the base model: {out.stderr}")
    return {"model": model, "models": [model, *other_models(work, data)], **{n: work / n for n in inputs}}


def other_models(work: Path, data: Path) -> list[Path]:
    """Model folders of other kinds to break: XR-Linear with the label-text route (its label file's labels
    without training documents), and a tiny LightXML (encoder folder, network, history) where torch is
    installed. Both train on Reuters-like English so the base inputs predict with them."""
    yso = gzip.open(data / "yso-finna-en-2k-20k" / "train.txt.gz", "rt", encoding="utf-8").read().splitlines()[:300]
    (work / "yso.tsv").write_text("\n".join(yso) + "\n", encoding="utf-8")
    made = []
    route = work / "model-route"
    out = run(["train", str(work / "yso.tsv"), "--label-file", str(data / "yso-finna-en" / "labels.txt.gz"),
               "-o", str(route), "-q"], 600)
    if out.returncode != 0:
        sys.exit(f"could not train the label-route model: {out.stderr}")
    made.append(route)
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return made
    spec = importlib.util.spec_from_file_location("xmtc_conftest", ROOT / "tests" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    texts = [line.split("\t", 1)[-1] for line in (work / "train.tsv").read_text(encoding="utf-8").splitlines()]
    bert = conftest.make_tiny_bert(work / "tiny-bert", texts, vocab_size=2000)
    neural = work / "model-lightxml"
    out = run(["train", str(work / "train.tsv"), "--method", "lightxml", "--encoder", str(bert), "--epochs", "1",
               "--max-length", "16", "--cluster-size", "8", "--topk", "4", "--head-init", "random",
               "--valid-size", "0", "-o", str(neural), "-q"], 600)
    if out.returncode != 0:
        sys.exit(f"could not train the LightXML model: {out.stderr}")
    return [*made, neural]


def cli_env() -> dict:
    """The environment a case's subprocess runs in: this checkout's xmtc first on the path."""
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def run(args, timeout: float, **kw) -> subprocess.CompletedProcess:
    """``xmtc args`` from this checkout as a subprocess (``kw``: more of subprocess.run's, e.g. ``cwd``)."""
    return subprocess.run([sys.executable, "-m", "xmtc.cli", *args], capture_output=True, timeout=timeout,
                          env=cli_env(), **kw)


# -- one case -----------------------------------------------------------------------------------------------
def make_case(rng: random.Random, base: dict, case_dir: Path) -> tuple[list[str], list[Path], Path | None, str]:
    """(argv, files that may be named in an error, output path that must not be half-written, note)."""
    command = rng.choice(["train", "train", "predict", "predict", "evaluate", "info"])
    model = case_dir / "model"
    shutil.copytree(rng.choice(base["models"]), model)
    if command == "train":
        which = rng.choice(["train.tsv", "train.jsonl", "train_xc.txt", "config.json"])
        out = case_dir / rng.choice(["new", "model"])  # a fresh folder, or over the existing model
        if which == "config.json":
            src = case_dir / "config.json"
            src.write_bytes(mutate_bytes(rng, base["config.json"].read_bytes()))
            argv = ["train", str(base["train.tsv"]), "--config", str(src), "-o", str(out)]
        else:
            src = case_dir / (which + (".gz" if rng.random() < 0.2 else ""))
            raw = mutate_bytes(rng, base[which].read_bytes())
            src.write_bytes(gzip.compress(raw, mtime=0) if src.name.endswith(".gz") else raw)
            argv = ["train", str(src), "-o", str(out)] + (["--format", "xc"] if "xc" in which and rng.random() < .5
                                                           else [])
        return argv + ["-q"], [src], out, f"train {which}"
    if rng.random() < 0.5:  # break the model
        note = mutate_model(rng, model)
        data = base["texts.txt"] if command == "predict" else base["test.tsv"]
        named = [model]
    else:
        which = "texts.txt" if command == "predict" else "test.tsv"
        data = case_dir / which
        data.write_bytes(mutate_bytes(rng, base[which].read_bytes()))
        note, named = f"broken {which}", [data]
    if command == "info":
        return ["info", str(model)], [model], None, f"info {note}"
    if command == "predict":
        out = case_dir / "pred.jsonl"
        return ["predict", str(model), str(data), "-o", str(out), "-q"], named, out, f"predict {note}"
    return ["evaluate", str(model), str(data), "--json", "-q"], named, None, f"evaluate {note}"


def judge(argv, named, out_path: Path | None, proc, case_dir: Path, model_before: bytes) -> str | None:
    """None if the case passed, else why it failed."""
    stderr = proc.stderr.decode("utf-8", "replace")
    stdout = proc.stdout.decode("utf-8", "replace")
    if "Traceback" in stderr or "Traceback" in stdout:
        return "traceback"
    leftovers = [p.name for p in case_dir.iterdir() if p.name.startswith(".") and (".tmp" in p.name or ".old-" in p.name)]
    if leftovers:
        return f"temporary files left: {leftovers}"
    if proc.returncode == 2:
        lines = stderr.strip("\n").split("\n")
        if len(lines) != 1 or not lines[0].startswith("xmtc: error: "):
            return f"exit 2 but stderr is not one 'xmtc: error:' line: {stderr[:300]!r}"
        msg = lines[0][len("xmtc: error: "):]
        if not any(msg.startswith(str(p)) for p in named):
            return f"the error does not start with the broken file's name: {msg[:200]!r}"
        if out_path is not None and out_path.name != "model" and out_path.exists():
            return f"{out_path.name} left behind by a failed command"
        if out_path is not None and out_path.name == "model" and (case_dir / "model" / "manifest.json").read_bytes() != model_before:
            return "the existing model changed although training failed"
        return None
    if proc.returncode != 0:
        return f"exit {proc.returncode}: {stderr[-300:]!r}"
    command = argv[0]
    if command == "train":
        check = run(["info", str(out_path)], 120)
        return None if check.returncode == 0 else f"trained model does not load: {check.stderr[-200:]!r}"
    if command == "predict":
        rows = [json.loads(line) for line in out_path.read_text(encoding="utf-8").splitlines()]
        raw = Path(argv[2]).read_bytes()
        n_in = raw.count(b"\n") + (1 if raw and not raw.endswith(b"\n") else 0)
        if len(rows) != n_in:
            return f"predict wrote {len(rows)} rows for {n_in} input lines"
        for i, r in enumerate(rows, 1):  # see xmtc.models.records.prediction_records
            if r.get("line") != i or len(r.get("labels", ())) != len(r.get("scores", [None])):
                return f"prediction row {i} is malformed: {json.dumps(r)[:200]}"
        return None
    if command == "evaluate":
        obj = json.loads(stdout)
        return None if "P@1" in obj else f"evaluate printed {stdout[:200]!r}"
    return None if stdout.startswith("method: ") else f"info printed {stdout[:200]!r}"


def fuzz(cases: int, seed: int, data: Path, keep: Path | None, timeout: float = 120, log=print) -> Counter:
    rng = random.Random(seed)
    counts: Counter = Counter()
    with tempfile.TemporaryDirectory(prefix="xmtc-fuzz-cli-") as tmp:
        work = Path(tmp)
        base = prepare(work, data)
        for i in range(cases):
            case_dir = work / f"case{i}"
            case_dir.mkdir()
            argv, named, out_path, note = make_case(rng, base, case_dir)
            before = (case_dir / "model" / "manifest.json").read_bytes() if (case_dir / "model" / "manifest.json").exists() else b""
            t0 = time.perf_counter()
            try:
                proc = run(argv, timeout)
                why = judge(argv, named, out_path, proc, case_dir, before)
            except subprocess.TimeoutExpired:
                why = f"hang: no answer in {timeout}s"
            except (ValueError, OSError) as exc:
                why = f"result unreadable: {exc}"
            outcome = "FAIL" if why else ("error" if proc.returncode == 2 else "ok")
            counts[outcome] += 1
            counts[f"{argv[0]} {outcome}"] += 1
            if why:
                log(f"case {i} FAIL ({note}; {time.perf_counter() - t0:.1f}s): {why}\n  xmtc {' '.join(argv)}")
                if keep is not None:
                    shutil.copytree(case_dir, keep / f"case{i}", symlinks=True, dirs_exist_ok=True)
            shutil.rmtree(case_dir, ignore_errors=True)
            if (i + 1) % 25 == 0:
                log(f"{i + 1} cases: {dict(sorted(counts.items()))}")
    return counts


def command_line(doc: str, run_cases, keep: bool) -> int:
    """The fuzzers' shared command line: ``--cases --seed --data --timeout`` (and ``--keep``), a JSON summary
    on stdout, exit 1 when a case failed. ``run_cases(args)`` returns the outcome counts."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", type=Path, default=data_root())
    ap.add_argument("--timeout", type=float, default=120, help="Seconds before a case counts as a hang.")
    if keep:
        ap.add_argument("--keep", type=Path, default=None, help="Copy failing cases here.")
    args = ap.parse_args()
    if getattr(args, "keep", None):
        args.keep.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    counts = run_cases(args)
    print(json.dumps({"cases": args.cases, "seed": args.seed, "seconds": round(time.perf_counter() - t0, 1),
                      **dict(sorted(counts.items()))}))
    return 1 if counts["FAIL"] else 0


def main() -> int:
    return command_line(__doc__, lambda a: fuzz(a.cases, a.seed, a.data, a.keep, a.timeout), keep=True)


if __name__ == "__main__":
    sys.exit(main())
