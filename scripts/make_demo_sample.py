#!/usr/bin/env python3
"""Rebuild the demo sample bundled in xmtc/data/sample from ../shared/data/yso-finna-en.

    python scripts/make_demo_sample.py [--data-root ../shared/data] [--labels 1000] [--train 40000] [--test 4000]

Keeps the documents whose subjects all lie among the most frequent training subjects, so that a
model trained in seconds has enough examples per label to show real behaviour; draws a seeded
random sample of train and test documents (the source files are sorted by text) and writes the
subjects' names for those labels. Deterministic: the same arguments give byte-identical files.
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from pathlib import Path

from xmtc.data import formats
from xmtc.data.io import atomic_output, iter_lines
from xmtc.data.data_root import data_root  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-root", default=str(data_root()))
    ap.add_argument("--labels", type=int, default=1000, help="keep the N most frequent train labels")
    ap.add_argument("--train", type=int, default=40000)
    ap.add_argument("--test", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "xmtc" / "data" / "sample"))
    args = ap.parse_args()
    src = Path(args.data_root) / "yso-finna-en"
    out = Path(args.out)
    train = formats.read_tsv(src / "train.txt.gz")
    test = formats.read_tsv(src / "test.txt.gz")
    counts = Counter(name for row in train.labels for name in row)
    keep = {name for name, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:args.labels]}
    rng = random.Random(args.seed)
    for raw, n, name in ((train, args.train, "train.txt.gz"), (test, args.test, "test.txt.gz")):
        ok = [i for i, row in enumerate(raw.labels) if row and set(row) <= keep and raw.texts[i].strip()]
        pick = sorted(rng.sample(ok, min(n, len(ok))))
        rng.shuffle(pick)
        formats.write_tsv(out / name, [raw.texts[i] for i in pick], [raw.labels[i] for i in pick])
        print(f"{name}: {len(pick)} of {len(ok)} eligible documents")
    with atomic_output(out / "labels.txt.gz") as fh:
        for lineno, line in iter_lines(src / "labels.txt.gz"):
            if lineno == 1 or line.split("\t", 1)[0] in keep:
                fh.write(line + "\n")


if __name__ == "__main__":
    main()
