"""``xmtc explain MODEL_DIR "text" [-k 5] [--n-terms 10] [--json]``: the terms behind each suggested label."""

from __future__ import annotations

import argparse
import json
import sys


def add_parser(sub, common) -> None:
    p = sub.add_parser("explain", help="Show the words/n-grams that led to each suggested label.",
                       description="Suggest labels for TEXT (the labels and scores `xmtc predict` gives) and"
                                   " list, for each, the input terms with the largest exact contributions to"
                                   " its score; a label suggested from its label text lists the character"
                                   " n-grams the text shares with it (see xmtc.models.explain).")
    p.add_argument("model_dir")
    p.add_argument("text", help="The text to explain (quote it); - reads it from standard input.")
    p.add_argument("-k", type=int, default=5, help="Labels to explain (default: 5).")
    p.add_argument("--n-terms", type=int, default=10, help="Terms per label (default: 10).")
    p.add_argument("--json", action="store_true", help="Print the explanation as one JSON list.")
    common(p)


def run(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from ..models import load
    from ..registry import method_names, estimator_class

    model = load(args.model_dir)
    if not callable(getattr(model, "explain", None)):
        able = [m for m in method_names() if callable(getattr(estimator_class(m), "explain", None))]
        raise ConfigError(f"{args.model_dir}: a {model.method} model cannot explain its suggestions (explain works"
                          f" with {', '.join(able)})")
    if args.text == "-":  # as predict reads "-": the whole of standard input is the one text
        args.text = sys.stdin.read().strip()
    labels = model.explain([args.text], k=args.k, n_terms=args.n_terms)[0]
    if not labels:  # a blank or unreadable text: say why nothing follows
        from ..models.records import reading_warning

        known = model.known_fraction([args.text]) if hasattr(model, "known_fraction") else None
        why = reading_warning(float(known[0])) if known is not None else None
        print(f"no label to explain: {why or 'the model suggests none for this text'}", file=sys.stderr)
    if args.json:
        print(json.dumps(labels, ensure_ascii=False))
        return 0
    for e in labels:
        name = e["label"] if e["display"] == e["label"] else f"{e['display']} ({e['label']})"
        source = e.get("source")
        if source is None:
            print(f"{e['score']:.4f}  {name}   [not explained: {e.get('reason', 'no evidence')}]")
            continue
        if source == "label-text":
            print(f"{e['score']:.4f}  {name}   [from its label text: cosine {e['cosine']:.3f} = the n-grams it"
                  " shares with the text]")
        elif source == "few-shot":
            print(f"{e['score']:.4f}  {name}   [learned from a few documents, flat ranker: margin {e['margin']:+.3f}"
                  f" = terms + bias {e['bias']:+.3f}]")
        else:
            print(f"{e['score']:.4f}  {name}   [margin {e['margin']:+.3f} = terms + bias {e['bias']:+.3f}]")
        for t in e["terms"]:
            # an n-gram of a label text is quoted: its word-boundary spaces (" rai") are part of it
            text = repr(t["term"]) if t.get("source", source) == "label-text" else t["term"]
            print(f"        {t['weight']:+8.4f}  {text}")
    return 0
