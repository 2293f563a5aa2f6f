"""``xmtc labels SUBCOMMAND ...``: a model's label vocabulary.

``xmtc labels list MODEL_DIR [--json] [--tsv]`` prints every label, in the same order and columns as ``find``;
``--tsv`` writes the label-file layout (``#id uri prefLabel label_text``, tab-separated) that ``train
--label-file`` and ``labels add`` read back, without the labels ``labels remove`` masked (``labels add`` would bring
them back). A label with a training count of 0 is known only by its name or text; ``find`` and ``list`` mark the
removed ones.

``xmtc labels find MODEL_DIR QUERY [--json] [--limit N]`` looks labels up both ways, id -> name and
name -> id: a label matches when QUERY is a case-insensitive substring of its id, display name, URI or
label text. Each match is printed with its id, display name, URI and training count (how many training
documents carried it), exact matches of the id, name or URI first, then by training count, most
frequent first, then by id. The exit status is 0 when something matched and 1 when nothing did (as
``grep``), so scripts can test for a label; with no match a line on stderr says so.

The vocabulary, counts and removed-label mask are read from the model folder's ``labels``, ``label-stats`` and
``removed-labels`` stages alone (checksums verified); the model's weights are not loaded.

``labels`` is a command group: a subcommand is one entry of :data:`SUBCOMMANDS`, ``name: (add_parser,
run)``, with ``add_parser(labels_sub, common)`` adding its parser to the group's sub-parsers and
``run(args)`` doing the work.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def model_labels(folder) -> tuple:
    """``(LabelVocab, training counts)`` of a saved model, without loading its weights."""
    return label_table(folder)[:2]


def label_table(folder) -> tuple:
    """``(LabelVocab, training counts, removed-label mask)`` of a saved model, read through one reader without
    loading its weights; the mask (``xmtc labels remove``) is all False when the model has none."""
    from ..data.labels import LabelVocab
    from ..errors import ModelFormatError
    from ..models.open_labels import removed_mask
    from ..models.storage import ModelReader

    reader = ModelReader(folder)
    vocab = LabelVocab.from_json(reader.json(reader.stage_value("labels", "file")))
    stats = reader.arrays(reader.stage_value("label-stats", "file"))
    counts = stats.get("counts")
    if counts is None or counts.shape != (len(vocab),) or counts.dtype.kind not in "iuf":
        raise ModelFormatError(f"{reader.folder}: label counts do not match the {len(vocab)} labels")
    removed = removed_mask(reader, len(vocab))
    return vocab, np.asarray(counts), np.zeros(len(vocab), dtype=bool) if removed is None else removed


def find_labels(vocab, counts, query: str, limit: int | None = None, removed=None) -> list[dict]:
    """Labels whose id, display name, URI or text contains ``query`` (case-insensitive), ordered as the
    module doc says; each ``{"id", "name", "uri", "train_count", "column", "removed"}`` (name/uri None when
    unset; ``removed``: the label is masked by ``labels remove``, from the mask ``removed``)."""
    q = query.casefold()
    found = []
    for j, label_id in enumerate(vocab.names):
        name = vocab.display[j] if vocab.display is not None and vocab.display[j] else None
        uri = vocab.uris[j] if vocab.uris is not None and vocab.uris[j] else None
        text = vocab.texts[j] if vocab.texts is not None and vocab.texts[j] else None
        fields = [f.casefold() for f in (label_id, name, uri, text) if f]
        if not any(q in f for f in fields):
            continue
        exact = any(q == f.casefold() for f in (label_id, name, uri) if f)
        count = counts[j].item()
        found.append((not exact, -count, label_id,
                      {"id": label_id, "name": name, "uri": uri,
                       "train_count": int(count) if float(count).is_integer() else float(count), "column": j,
                       "removed": bool(removed is not None and removed[j])}))
    found.sort(key=lambda t: t[:3])
    rows = [t[3] for t in found]
    return rows if limit is None else rows[:limit]


def _add_find(sub, common) -> None:
    p = sub.add_parser("find", help="Look labels up by id, name, URI or label text.",
                       description="Print the labels of MODEL_DIR whose id, display name, URI or label text"
                                   " contains QUERY (case-insensitive): id, name, URI and training count. Exit"
                                   " status 1 when none matches.")
    p.add_argument("model_dir")
    p.add_argument("query", help="Text to look for (a substring; case is ignored).")
    p.add_argument("--limit", type=int, default=20, help="Show at most N matches; 0 shows all (default: 20).")
    p.add_argument("--json", action="store_true", help="Print the matches as one JSON list of objects.")
    common(p)


def _run_find(args: argparse.Namespace) -> int:
    from ..errors import ConfigError

    if args.limit < 0:
        raise ConfigError(f"--limit must be 0 (all) or a positive number, got {args.limit}")
    vocab, counts, removed = label_table(args.model_dir)
    rows = find_labels(vocab, counts, args.query, removed=removed)
    shown = rows if args.limit == 0 else rows[:args.limit]
    _print_rows(shown, as_json=args.json)
    if not rows and not args.json:  # as grep, exit status 1; unlike grep, say so
        print(f"no label matches {args.query!r} (id, name, URI or label text)", file=sys.stderr)
    if len(shown) < len(rows) and not args.quiet:
        more = len(rows) - len(shown)
        print(f"({more} more {'match' if more == 1 else 'matches'}; --limit 0 shows all)", file=sys.stderr)
    return 0 if rows else 1


def _print_rows(rows: list[dict], *, as_json: bool) -> None:
    """``find``'s and ``list``'s output: one JSON list, or a table of id, name, URI and training count."""
    if as_json:
        print(json.dumps(rows, ensure_ascii=False))
    elif rows:
        marks = any(r["removed"] for r in rows)  # a fifth column only where a shown label is removed
        table = [("id", "name", "uri", "train_count", "removed" if marks else "")] + [
            (r["id"], r["name"] or "-", r["uri"] or "-", str(r["train_count"]), "yes" if r["removed"] else "")
            for r in rows]
        widths = [max(len(row[c]) for row in table) for c in range(3)]
        for row in table:
            line = "  ".join(v.ljust(w) for v, w in zip(row[:3], widths)) + "  " + row[3].rjust(11)
            print(line + "  " + row[4] if marks else line)


def _add_list(sub, common) -> None:
    p = sub.add_parser("list", help="Print every label of a model.",
                       description="Print every label of MODEL_DIR with its id, name, URI and training count (0:"
                                   " known only by its name or text), most frequent first.")
    p.add_argument("model_dir")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="Print the labels as one JSON list of objects.")
    out.add_argument("--tsv", action="store_true", help="Print a label file (#id, uri, prefLabel, label_text)"
                     " that train --label-file and labels add read.")
    common(p)


def _run_list(args: argparse.Namespace) -> int:
    vocab, counts, removed = label_table(args.model_dir)
    rows = find_labels(vocab, counts, "", removed=removed)  # every id is a non-empty string: "" matches them all
    if not args.tsv:
        _print_rows(rows, as_json=args.json)
        return 0
    if removed.any():  # labels add would bring a removed label back: a label file of the model leaves them out
        rows = [r for r in rows if not r["removed"]]
        if not args.quiet:
            print(f"{args.model_dir}: {int(removed.sum())} removed label(s) left out", file=sys.stderr)
    if not args.quiet and not any(vocab.display or ()) and not any(vocab.texts or ()):
        print(f"{args.model_dir}: no label has a name or text; this file lists ids only, which train --label-file"
              " and labels add refuse", file=sys.stderr)
    print("#id\turi\tprefLabel\tlabel_text")
    for r in rows:
        text = vocab.texts[r["column"]] if vocab.texts is not None else None
        fields = (r["id"], r["uri"] or "", r["name"] or "", text or "")
        print("\t".join(" ".join(f.split()) for f in fields))  # a tab or newline inside a name would split it
    return 0


def _subcommands() -> dict:
    from . import labels_edit
    return {"find": (_add_find, _run_find), "list": (_add_list, _run_list), **labels_edit.SUBCOMMANDS}


SUBCOMMANDS = _subcommands()


def add_parser(sub, common) -> None:
    p = sub.add_parser("labels", help="List, look up, add or remove a model's labels (labels list | find | add | remove).",
                       description="Work with a model's label vocabulary.")
    group = p.add_subparsers(dest="labels_command", required=True, metavar="SUBCOMMAND")
    for add, _ in SUBCOMMANDS.values():
        add(group, common)


def run(args: argparse.Namespace) -> int:
    return SUBCOMMANDS[args.labels_command][1](args)
