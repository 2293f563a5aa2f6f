"""``xmtc split FILE --valid 0.1 [--seed 0] [-o PREFIX | --train-out A --valid-out B]``.

Writes FILE's training and validation parts as two files in FILE's own format (TSV, JSONL, XC or npz),
gzipped when FILE was. The rows come from :func:`xmtc.data.split.split_indices`, the function
``xmtc train --valid-size X --valid-seed S`` cuts its own calibration split with, so ``xmtc split FILE
--valid X --seed S`` writes exactly the documents that training would fit and calibrate on.

Text formats are split line by line: each document's line is copied as it is (extra JSONL fields such
as ``document_id`` included); an XC file's header gets the part's document count. npz parts are the
rows of X and of its sibling Y file, written as ``...X...`` / ``...Y...`` pairs like the input.

Output names: ``-o PREFIX`` gives ``PREFIX.train.EXT`` and ``PREFIX.valid.EXT``, EXT being FILE's last
suffix (plus ``.gz`` when FILE is gzipped); without ``-o`` the prefix is FILE less that suffix
(``data/train.txt.gz`` -> ``data/train.train.txt.gz``, ``data/train.valid.txt.gz``). ``--train-out`` /
``--valid-out`` name a part outright (then gzip follows that name's ``.gz``). Each file is written to a
temporary sibling and renamed, the two text parts only once both are complete.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

import numpy as np

from ..config import non_negative_int

log = logging.getLogger(__name__)


def add_parser(sub, common) -> None:
    p = sub.add_parser("split", help="Write a data file's seeded training and validation parts.",
                       description="Split FILE into training and validation files (same format, gzip if FILE is),"
                                   " with the same seeded rule as `xmtc train --valid-size X --valid-seed S`.")
    p.add_argument("file", metavar="FILE", help="Labelled data: TSV, JSONL, XC format or npz (gzip read"
                                                " transparently).")
    p.add_argument("--valid", type=float, required=True, metavar="X",
                   help="Validation part: a fraction in [0, 1) of the documents, or a count of them.")
    p.add_argument("--seed", type=non_negative_int, default=0, help="Seed of the split (default: 0; as train's --valid-seed).")
    p.add_argument("-o", "--output", metavar="PREFIX", help="Write PREFIX.train.EXT and PREFIX.valid.EXT"
                                                            " (default: FILE without its extension).")
    p.add_argument("--train-out", help="The training part's file name (overrides -o for it).")
    p.add_argument("--valid-out", help="The validation part's file name (overrides -o for it).")
    p.add_argument("--format", dest="fmt", default=None, help="Input format (tsv, jsonl, xc, npz); default: guess.")
    common(p)


def output_names(path: str, gzipped: bool, prefix: str | None = None) -> tuple[str, str]:
    """``(train name, validation name)`` for ``path`` (see the module doc)."""
    name = Path(path).name
    base = name[:-3] if name.endswith(".gz") else name
    ext = Path(base).suffix
    if prefix is None:
        prefix = str(Path(path).with_name(base[:len(base) - len(ext)] if ext else base))
    gz = ".gz" if gzipped else ""
    return f"{prefix}.train{ext}{gz}", f"{prefix}.valid{ext}{gz}"


def run(args: argparse.Namespace) -> int:
    from ..data.dataset import read_raw
    from ..data.io import format_from_name, guess_format, is_stdio, open_source
    from ..data.split import split_indices
    from ..errors import ConfigError, DataFormatError

    if is_stdio(args.file):
        raise ConfigError("split reads a file, not standard input: it reads the file twice (check, then copy)")
    fmt = args.fmt or format_from_name(args.file)
    with open_source(args.file) as src:
        gzipped = src.gzip
        fmt = guess_format(src, fmt) if fmt != "npz" else "npz"
    if fmt == "text":
        raise ConfigError(f"{args.file}: no labels found; split needs labelled data (TSV, JSONL, XC or npz)")
    raw = read_raw(args.file, fmt)  # the whole file is checked before anything is written
    n = raw.X.shape[0] if raw.texts is None else len(raw.texts)
    if n == 0:
        raise DataFormatError(args.file, None, "is empty: no documents to split")
    train_rows, valid_rows = split_indices(n, args.valid, args.seed)
    default_train, default_valid = output_names(args.file, gzipped and fmt != "npz", args.output)
    train_out, valid_out = args.train_out or default_train, args.valid_out or default_valid
    _check_outputs(args.file, train_out, valid_out, fmt)
    if fmt == "npz":
        from ..data.formats import write_npz

        Y = raw.Y
        for out, rows in ((train_out, train_rows), (valid_out, valid_rows)):
            write_npz(out, raw.X[rows], Y[rows])
    else:
        _copy_lines(args.file, raw.lines, train_rows, valid_rows, train_out, valid_out, fmt == "xc")
    if not args.quiet:
        print(f"{len(train_rows)} training documents -> {train_out}\n{len(valid_rows)} validation documents"
              f" -> {valid_out}  (seed {args.seed})")
    return 0


def _check_outputs(src: str, train_out: str, valid_out: str, fmt: str) -> None:
    from ..data.formats import sibling_labels_path
    from ..errors import ConfigError

    def real(p) -> str:
        return os.path.realpath(os.fspath(p))

    taken = {real(src)}
    if fmt == "npz":
        taken.add(real(sibling_labels_path(src)))
    outs = [train_out, valid_out]
    if fmt == "npz":
        outs += [sibling_labels_path(train_out), sibling_labels_path(valid_out)]
    seen: set[str] = set()
    for out in outs:
        r = real(out)
        if r in taken:
            raise ConfigError(f"{out}: would overwrite the input; choose other output names")
        if r in seen:
            raise ConfigError(f"{out}: both parts would be written to it; choose two output names")
        seen.add(r)


def _copy_lines(path: str, doc_lines, train_rows: np.ndarray, valid_rows: np.ndarray, train_out: str,
                valid_out: str, xc: bool) -> None:
    """Copy each document's line into its part (an XC header rewritten with the part's count)."""
    from ..data.io import atomic_output, iter_lines

    doc_lines = np.asarray(doc_lines, dtype=np.int64)
    part = np.zeros(int(doc_lines.max(initial=1)) + 1, dtype=np.int8)  # by line number: 1 train, 2 valid
    part[doc_lines[train_rows]] = 1
    part[doc_lines[valid_rows]] = 2
    with atomic_output(train_out) as ft, atomic_output(valid_out) as fv:
        outs = (None, ft, fv)
        for lineno, line in iter_lines(path):
            if xc and lineno == 1:
                _, n_feat, n_labels = line.split()
                ft.write(f"{len(train_rows)} {n_feat} {n_labels}\n")
                fv.write(f"{len(valid_rows)} {n_feat} {n_labels}\n")
                continue
            if lineno < part.size and part[lineno]:
                outs[part[lineno]].write(line + "\n")
