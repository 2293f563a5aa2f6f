"""Write an open-label split of a dataset with label texts: a seeded share of its labels is hidden from training.

    python benchmarks/open_split.py yso-finna-en-2k-20k -o benchmarks/out/open-2k-20k --share 0.2 --seed 0

From the labels the dataset uses (train and test together), ``--share`` of them, drawn with ``--seed``, are
stripped from every training document's label list; the documents stay (a document left with no label
stays as an unlabelled text), and the test set is kept whole. Written to the output folder:

* ``train.tsv.gz``, ``test.tsv.gz``: ``labels<TAB>text``, what ``xmtc train`` / ``evaluate`` read;
* ``unseen.txt``: every label of the test set that has no training document in the new training set, one id a
  line: the drawn share plus the labels the original split already had only in its test part;
* ``labels.txt.gz``: the label file restricted to the labels the dataset uses (ids, URI, name, text), so that
  a label-text model ranks the same label set as a model trained on the documents; a set without a label file
  of its own (yso-finna-en-2k-20k) takes yso-finna-en's, which covers its ids;
* ``split.json``: the counts.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np
from xmtc.data.data_root import data_root  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = data_root()
sys.path.insert(0, str(ROOT))

from _data import read_tsv  # noqa: E402


def label_file_for(name: str, root: Path = DATA) -> Path:
    """The set's own labels.txt.gz, else its parent's: the longest prefix of its name (cut at a '-') that names
    a set of the shared data with one (yso-finna-en-2k-20k and yso-finna-en-long-564 take yso-finna-en's)."""
    own = root / name / "labels.txt.gz"
    if own.exists():
        return own
    parts = name.split("-")
    for n in range(len(parts) - 1, 0, -1):
        base = DATA / "-".join(parts[:n]) / "labels.txt.gz"
        if base.exists():
            return base
    raise SystemExit(f"{name}: no labels.txt.gz, and none in a parent set")


def open_split(train, test, share: float, seed: int) -> tuple[list, set[str], set[str]]:
    """(new training rows, hidden labels, unseen labels of the test set)."""
    used = sorted({x for labels, _ in train + test for x in labels})
    rng = np.random.default_rng(seed)
    hidden = {used[i] for i in rng.choice(len(used), size=int(round(share * len(used))), replace=False)}
    new_train = [([x for x in labels if x not in hidden], text) for labels, text in train]
    seen = {x for labels, _ in new_train for x in labels}
    unseen = {x for labels, _ in test for x in labels} - seen
    return new_train, hidden, unseen


def write_tsv(path: Path, rows) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for labels, text in rows:
            fh.write(",".join(labels) + "\t" + text + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", help="A folder of ../shared/data with train.txt.gz and test.txt.gz")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--share", type=float, default=0.2, help="Share of the labels hidden from training (0.2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-root", default=str(DATA), help="folder of the data sets (a cut made by long_cut.py:"
                    " benchmarks/out/data)")
    args = ap.parse_args(argv)
    src, out = Path(args.data_root) / args.dataset, Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    train, test = (list(zip(*reversed(read_tsv(src / f"{part}.txt.gz")))) for part in ("train", "test"))
    new_train, hidden, unseen = open_split(train, test, args.share, args.seed)
    write_tsv(out / "train.tsv.gz", new_train)
    write_tsv(out / "test.tsv.gz", test)
    for part in ("train", "test"):  # the names train_command.py and the harness read, beside xmtc's own
        link = out / f"{part}.txt.gz"
        if not link.exists():
            link.symlink_to(f"{part}.tsv.gz")
    (out / "unseen.txt").write_text("".join(x + "\n" for x in sorted(unseen)), encoding="utf-8")
    used = {x for labels, _ in train + test for x in labels}
    with gzip.open(label_file_for(args.dataset, Path(args.data_root)), "rt", encoding="utf-8") as fh, \
            gzip.open(out / "labels.txt.gz", "wt", encoding="utf-8") as dst:
        for line in fh:
            if line.startswith("#") or line.split("\t", 1)[0] in used:
                dst.write(line)
    info = {"dataset": args.dataset, "share": args.share, "seed": args.seed, "labels": len(used),
            "hidden": len(hidden), "unseen_in_test": len(unseen),
            "test_docs_with_unseen": sum(1 for labels, _ in test if unseen & set(labels)),
            "train_docs": len(new_train), "train_docs_without_labels": sum(1 for labels, _ in new_train if not labels),
            "test_docs": len(test)}
    (out / "split.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
