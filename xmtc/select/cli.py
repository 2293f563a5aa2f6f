"""``xmtc select MODEL_DIR POOL_FILE -n 500 --strategy S -o to_label.jsonl``.

The output is JSONL that ``xmtc train`` reads, one object a selected document, most valuable first::

    {"text": "...", "labels": [], "suggested": ["p123", "p45"], "suggested_names": ["railways", "trams"],
     "scores": [0.61, 0.2], "pool_line": 17}

``labels`` starts empty: the annotator fills it (accepting, removing or extending ``suggested``, the
model's top-k) and the file then joins the training data. ``xmtc train`` ignores the other keys; a line
whose ``labels`` stays empty trains as a document with no labels (a negative everywhere), so drop
lines nobody reviewed. ``pool_line`` is the document's 1-based line in POOL_FILE (``document_id`` is
kept where a JSONL pool has one); ``suggested_names`` appears when the model knows display names.
"""

from __future__ import annotations

import argparse
import json
import logging

from ..config import non_negative_int

log = logging.getLogger(__name__)


def add_parser(sub, common) -> None:
    from . import DEFAULT_STRATEGY, STRATEGIES, UNCERTAINTY

    p = sub.add_parser("select", help="Pick the unlabelled documents an expert should label next.",
                       description="Active learning: rank POOL_FILE's texts by a strategy and write the best n"
                                   " as JSONL with the model's suggestions (see xmtc.select).")
    p.add_argument("model_dir")
    p.add_argument("pool_file", help="Unlabelled texts: one a line, or TSV/JSONL (labels ignored).")
    p.add_argument("-n", type=int, default=500, help="Documents to select (default: 500).")
    p.add_argument("--strategy", default=DEFAULT_STRATEGY, choices=STRATEGIES,
                   help=f"Selection strategy (default: {DEFAULT_STRATEGY}).")
    p.add_argument("--uncertainty", default="margin", choices=UNCERTAINTY,
                   help="Uncertainty measure on the top-k (default: margin).")
    p.add_argument("-k", type=int, default=10, help="Top-k labels the strategies look at and suggest (default: 10).")
    p.add_argument("--labelled", help="Already labelled data (any format); diversity keeps away from it.")
    p.add_argument("--seed", type=non_negative_int, default=0, help="Random seed (random strategy, k-center start).")
    p.add_argument("-o", "--output", required=True, help="JSONL file to write (atomically).")
    p.add_argument("--format", dest="fmt", default=None, help="Pool file format; default: guess.")
    common(p)


def run(args: argparse.Namespace) -> int:
    from ..data import read_inputs
    from ..data.dataset import read_documents
    from ..data.io import atomic_output
    from ..errors import ConfigError
    from ..models import load
    from . import select_documents

    if args.n < 1:
        raise ConfigError(f"-n must be a positive integer, got {args.n}")
    if args.k < 1:
        raise ConfigError(f"-k must be a positive integer, got {args.k}")
    model = load(args.model_dir)
    pool = read_documents(args.pool_file, args.fmt)
    texts = pool.texts
    if texts is None:
        raise ConfigError(f"{args.pool_file}: select needs texts (to write for the annotator), not feature vectors")
    labelled = read_inputs(args.labelled) if args.labelled else None
    topk = model.predict_topk(texts, args.k, progress=not args.quiet)
    chosen = select_documents(model, texts, args.n, args.strategy, seed=args.seed, k=args.k,
                              uncertainty=args.uncertainty, labelled=labelled, topk=topk)
    vocab = model.labels_
    idx, scores = topk
    with atomic_output(args.output) as fh:
        for i in chosen:
            kept = idx[i][idx[i] >= 0].tolist()
            rec = {"text": texts[i], "labels": [], "suggested": [vocab.names[j] for j in kept]}
            if vocab.display is not None:
                rec["suggested_names"] = [vocab.display_name(j) for j in kept]
            rec["scores"] = [round(float(s), 6) for s in scores[i][idx[i] >= 0]]
            rec["pool_line"] = pool.lines[i]
            if pool.ids is not None and pool.ids[i] is not None:
                rec["document_id"] = pool.ids[i]
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    log.info("selected %d of %d documents (%s) -> %s", len(chosen), len(texts), args.strategy, args.output)
    return 0
