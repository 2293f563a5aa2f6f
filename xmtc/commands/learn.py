"""``xmtc learn MODEL_DIR FILE... [-o OTHER]``: update a trained model with new labelled documents.

New labels in the files are added to the model; the folder is rewritten atomically (or ``-o`` writes
elsewhere), so a learn that fails at any point leaves the old model as it was. Which methods learn, and
how, is :mod:`xmtc.models.learning`'s docstring; the others are refused in one line before any file is read.
"""

from __future__ import annotations

import argparse
import logging
import time

log = logging.getLogger(__name__)


def add_parser(sub, common) -> None:
    p = sub.add_parser(
        "learn", help="Update a trained model with new labelled documents (new labels included).",
        description="Learn from FILEs of labelled documents (any mix of TSV, JSONL such as the /label page of"
                    " `xmtc serve` writes, XC or npz) without a full retrain. xr-linear: keeps its label tree, adds"
                    " the new documents' words to its vocabulary (as a fit on all documents would; --keep-vocabulary"
                    " does not), hangs each new label under the leaf cluster its documents are routed to, and"
                    " refits only the nodes whose training data changed: a new label against the training"
                    " rows the model remembers (--memory-rows at training), the other nodes on the remembered rows"
                    " and the new ones where the model remembers all of them, else pulled toward their old"
                    " weights (the bias hardest) with a sample of the remembered rows replayed"
                    " (--no-sampled-replay: the pull alone). The neural methods (xr-transformer, x-transformer,"
                    " lightxml, cascadexml, elias, aplc) refuse: their encoders would need further fine-tuning;"
                    " retrain them with `xmtc train OLD NEW ...`. A score calibration is kept, its label-frequency"
                    " bands re-read from the grown label counts.")
    p.add_argument("model_dir")
    p.add_argument("files", nargs="+", metavar="FILE", help="Labelled documents; gzip is read transparently.")
    p.add_argument("-o", "--output", help="Write the updated model here (default: replace MODEL_DIR atomically).")
    p.add_argument("--format", dest="fmt", default=None, help="Input format of every FILE; default: guess each.")
    p.add_argument("--label-file", help="Label names/texts file, e.g. for the new labels' display names.")
    p.add_argument("--keep-vocabulary", action="store_true",
                   help="Keep the TF-IDF vocabulary as trained (default: words of the new documents it lacks,"
                        " in at least min_df of them, join it with the idf of a fit on all documents seen).")
    p.add_argument("--no-sampled-replay", dest="sampled_replay", action="store_false",
                   help="Refit on the new documents and the pull toward the old weights alone (default: up to"
                        " 25,000 remembered training rows join each refit, their gradient at the old weights"
                        " cancelled, so that they add the old documents' curvature only).")
    p.add_argument("--few-shot", choices=("chars", "words", "off"), default="chars",
                   help="How a new label with 2-5 documents is also scored flat (default: chars, the cosine of a"
                        " text's character n-grams to its documents'; words: a ranker on the model's words; off:"
                        " the trees alone). A model keeps the scorer its first such label got.")
    p.add_argument("--anchor", type=float, default=4.0,
                   help="Pull toward the old weights, relative to the fit's regulariser (default: 4; larger"
                        " changes the model less).")
    common(p)


def run(args: argparse.Namespace) -> int:
    from ..data import read_datasets
    from ..errors import DataFormatError
    from ..models import load
    from ..models.learning import check_can_learn
    from ..models.storage import check_target

    t0 = time.perf_counter()
    model = load(args.model_dir)
    check_can_learn(model)
    output = args.output or args.model_dir
    check_target(output)
    n_before = model.n_labels
    ds = read_datasets(args.files, fmt=args.fmt, labels=model.labels_, unknown_labels="extend",
                       label_file=args.label_file, warn_unknown=False)  # new labels are what a learn is for
    if len(ds) == 0 or ds.Y.nnz == 0:
        raise DataFormatError(ds.path, None, "no labelled document; nothing to learn")
    new = ds.labels.names[n_before:]
    if new:
        log.info("%d new label%s: %s%s", len(new), "s" * (len(new) > 1), ", ".join(new[:10]),
                 f" and {len(new) - 10} more" if len(new) > 10 else "")
    model.learn(ds.inputs, ds.Y, labels=ds.labels, anchor=args.anchor, new_words=not args.keep_vocabulary,
                sampled_replay=args.sampled_replay, few_shot=False if args.few_shot == "off" else args.few_shot,
                progress=not args.quiet)
    path = model.save(output)
    log.info("learned %d documents (%d new labels) into %s in %.1fs", len(ds), model.n_labels - n_before, path,
             time.perf_counter() - t0)
    return 0
