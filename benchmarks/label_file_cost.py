"""What a label file does to a model, as a user meets it: ``xmtc train`` with and without ``--label-file``, the
same test set, ``xmtc evaluate`` (calibrated scores, the unseen-label metrics where the test set has them).

    python benchmarks/label_file_cost.py --dataset yso-finna-en-2k-20k [--open-share 0.2] [--json OUT]

Rows, ``--method`` (XR-Linear) at its defaults:

* the dataset as it is: no label file (the methods that read label texts: the set's own labels) / the whole
  vocabulary of its parent set (yso-finna-en's 27,754 labels, of which the set's own 1,994 have training
  documents);
* with ``--open-share``: the open split of ``benchmarks/open_split.py`` (that share of the labels stripped from
  the training documents): no label file / the split's label file (the set's own labels) / the whole
  vocabulary; ``--unseen-labels`` names the stripped ones.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from xmtc.data.data_root import data_root  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = data_root()
KEYS = ("P@1", "P@5", "ECE@5", "coverage@P90", "R@10_unseen", "P@1_zs", "R@10_zs")


def xmtc(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "xmtc", *args], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"xmtc {' '.join(args)} failed:\n{proc.stderr[-2000:]}")
    return proc.stdout


def row(name: str, train: Path, test: Path, work: Path, label_file: Path | None, unseen: Path | None,
        method: str) -> dict:
    model = work / name
    t0 = time.perf_counter()
    xmtc("train", str(train), "-o", str(model), "-q", "--method", method,
         *(["--label-file", str(label_file)] if label_file else []))
    seconds = time.perf_counter() - t0
    metrics = {}
    for k in ("5", "10"):  # ECE at 5, the unseen-label recall at 10
        args = ["evaluate", str(model), str(test), "--json", "-k", k, "-q"]
        if unseen is not None:
            args += ["--unseen-labels", str(unseen)]
        metrics.update(json.loads(xmtc(*args).strip().splitlines()[-1]))
    out = {"row": name, "train_s": round(seconds, 1)}
    out.update({k: round(float(metrics[k]), 2) for k in KEYS if k in metrics})
    print(json.dumps(out), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="yso-finna-en-2k-20k")
    ap.add_argument("--vocabulary", default=str(DATA / "yso-finna-en" / "labels.txt.gz"),
                    help="the whole vocabulary's label file")
    ap.add_argument("--open-share", type=float, default=0.2, help="0: no open-split rows")
    ap.add_argument("--method", default="xr-linear")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    vocab = Path(args.vocabulary)
    rows = []
    plain = args.method == "xr-linear"  # the methods that read label texts need a label file in every row
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        split = work / "open"  # its label file is the set's own labels (those its documents use)
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "open_split.py"), args.dataset, "-o", str(split),
                        "--share", str(args.open_share or 0.2), "--seed", str(args.seed)], check=True,
                       capture_output=True)
        own = split / "labels.txt.gz"
        train, test = DATA / args.dataset / "train.txt.gz", DATA / args.dataset / "test.txt.gz"
        rows.append(row("plain" if plain else "the set's label file", train, test, work, None if plain else own,
                        None, args.method))
        rows.append(row("whole vocabulary", train, test, work, vocab, None, args.method))
        if args.open_share > 0:
            o_train, o_test, unseen = split / "train.tsv.gz", split / "test.tsv.gz", split / "unseen.txt"
            if plain:
                rows.append(row("open: no label file", o_train, o_test, work, None, unseen, args.method))
            rows.append(row("open: the set's label file", o_train, o_test, work, own, unseen, args.method))
            rows.append(row("open: whole vocabulary", o_train, o_test, work, vocab, unseen, args.method))
    if args.json:
        Path(args.json).write_text(json.dumps({"dataset": args.dataset, "method": args.method, "date": time.strftime("%Y-%m-%d %H:%M"),
                                               "open_share": args.open_share, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
