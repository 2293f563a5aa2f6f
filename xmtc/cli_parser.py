"""The ``xmtc`` command's argument parser: every command and every flag.

Training options are generated from the chosen method's config dataclass, so ``xmtc train --help``
always lists exactly the parameters the estimator accepts, with their defaults; the method is read from
``--method`` (or the ``--config`` file's ``"method"``) before the full parser is built. Separate from
:mod:`xmtc.cli`, which runs the parsed command, because the parser is read on its own: the command-line
reference of the documentation is generated from :func:`build_parser` (docs/_hooks/xmtc_docs.py), and the
flag fuzzer (scripts/fuzz_flags.py) and the tests walk it without running a command. Like :mod:`xmtc.cli`
it imports the methods (and with them the numeric stack) only inside :func:`build_parser`.
"""

from __future__ import annotations

import argparse
from typing import Sequence

from . import __version__
from .config import add_config_arguments, load_json_config, non_negative_int
from .errors import XmtcError

__all__ = ["build_parser", "read_method", "tool_commands"]

_THRESHOLD_HELP = ("Keep only suggestions scoring at least T (a number), or 'labels': the per-label thresholds"
                   " of `xmtc calibrate --thresholds f1`.")


def _methods():
    from .models import estimator_class, method_names
    return method_names(), estimator_class


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-q", "--quiet", action="store_true", help="No progress bars or info logging.")
    parser.add_argument("--log-level", default=None, type=str.upper, choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                        help="Logging level, any case (default: INFO, or WARNING with --quiet).")


def read_method(argv: Sequence[str]) -> str:
    """Find --method (or the config file's "method") before the full parser is built."""
    pre = argparse.ArgumentParser(prog="xmtc", add_help=False, allow_abbrev=False, exit_on_error=False)
    pre.add_argument("--method", default=None)
    pre.add_argument("--config", default=None)
    try:
        known, _ = pre.parse_known_args(argv)
    except argparse.ArgumentError:  # "--method" without a value: the full parser says so, with its usage
        return "xr-linear"
    if known.method:
        return known.method
    if known.config:
        try:
            method = load_json_config(known.config).get("method")
        except XmtcError:
            method = None
        if isinstance(method, str):
            return method
    return "xr-linear"


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    names, estimator_class = _methods()
    parser = argparse.ArgumentParser(
        prog="xmtc", description="Extreme multi-label text classification (XR-Linear and friends).")
    parser.add_argument("--version", action="version", version=f"xmtc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    method = read_method(argv)
    p = sub.add_parser("train", help="Train a model and save it to a folder.",
                       description="Train a model. Parameters shown are those of --method "
                                   f"(now: {method}); see `xmtc train --method NAME --help` for others.")
    p.add_argument("train_files", nargs="+", metavar="TRAIN_FILE",
                   help="Training data: TSV (labels<TAB>text), JSONL, XC sparse format or .npz; gzip is read"
                        " transparently; - reads stdin. Several files (any mix of formats) are read as one set.")
    p.add_argument("-o", "--output", required=True, help="Model folder to write (replaced atomically).")
    p.add_argument("--method", default="xr-linear", choices=names, help="Method to train (default: xr-linear).")
    p.add_argument("--config", help="JSON file with parameters (flat object; explicit flags override it).")
    p.add_argument("--format", dest="fmt", default=None, help="Input format (tsv, jsonl, xc, npz); default: guess.")
    p.add_argument("--label-file", help="Label names/texts file (e.g. yso-finna-en's labels.txt.gz).")
    p.add_argument("--checkpoint-dir", help="Transformer methods: keep the fine-tuning state here after each"
                                            " level (default: OUTPUT.checkpoint).")
    p.add_argument("--resume", action="store_true", help="Transformer methods: continue an interrupted run"
                                                         " from the last finished level in the checkpoint.")
    own_split = _method_has_valid_size(estimator_class, method)
    if not own_split:  # the end-to-end methods' own --valid-size (a parameter) is the split calibrated on
        p.add_argument("--valid-size", type=float, default=None, metavar="X",
                       help="Documents held out to calibrate the scores on: a fraction in [0, 1) or a count; 0"
                            " trains on everything and keeps raw scores (default: a tenth, at most 5,000, none"
                            " below 200 documents).")
        p.add_argument("--valid-seed", type=non_negative_int, default=0, help="Seed of the validation split (default: 0).")
    p.add_argument("--calibration", default="isotonic", choices=("isotonic", "platt"),
                   help="Score map fitted on the validation split (default: isotonic).")
    p.add_argument("--refit", default="auto", choices=("auto", "fold", "full", "true", "false"),
                   help="After calibrating, bring the validation split into the model, keeping the score maps:"
                        " fold = learn it into the fitted model (a fraction of a fit), full (or true) = fit again"
                        " on every document, false = keep the model fitted without it (auto: full for xr-linear"
                        " when the split is at least 2%% of the documents; fold takes 40-60%% of its time and"
                        " lands 0.1-0.4 P@5 below it on some sets, see the calibration guide).")
    p.add_argument("--ray", metavar="auto|local:N", help="xr-linear, and the linear matcher and rankers of"
                   " xr-transformer / x-transformer: train the label tree as Ray tasks (subtrees with tfn negatives,"
                   " each level's parent groups with matcher-aware ones) on the cluster at RAY_ADDRESS (auto) or a"
                   " local Ray with N workers; same model as without.")
    _common(p)
    try:
        add_config_arguments(p, estimator_class(method).config_class, title=f"{method} parameters")
    except XmtcError:
        pass  # reported by the method check after parsing

    p = sub.add_parser("predict", help="Predict the top-k labels of each input text.")
    p.add_argument("model_dir")
    p.add_argument("input_file", help="One text per line, or TSV/JSONL (labels ignored), or XC/npz features;"
                                      " - reads stdin.")
    p.add_argument("-k", type=int, default=5, help="Labels per input (default: 5).")
    p.add_argument("-o", "--output", help="Write JSONL here instead of stdout ('-': stdout).")
    p.add_argument("--format", dest="fmt", default=None, help="Input format; default: guess.")
    p.add_argument("--threshold", default=None, help=_THRESHOLD_HELP)
    p.add_argument("--raw-scores", action="store_true", help="The model's uncalibrated scores instead of the"
                   " calibrated ones that `xmtc train` fits by default.")
    p.add_argument("--ray", metavar="auto|local:N", help="Predict chunks of the input as Ray tasks (the model"
                   " folder must be readable by every node).")
    _common(p)

    p = sub.add_parser("evaluate", help="Evaluate a model on labelled data.")
    p.add_argument("model_dir")
    p.add_argument("test_file")
    p.add_argument("-k", type=int, default=5, help="Largest k for the @k metrics (default: 5).")
    p.add_argument("--json", action="store_true", help="Print one JSON object with the metrics.")
    p.add_argument("--format", dest="fmt", default=None, help="Input format; default: guess.")
    p.add_argument("--threshold", default=None, help=_THRESHOLD_HELP + " Adds F1@T and macro-F1@T to the metrics"
                   " (without it, a model with per-label thresholds is measured at those).")
    p.add_argument("--raw-scores", action="store_true", help="Evaluate the uncalibrated scores (ECE@k, thresholds).")
    p.add_argument("--plot", default=None, metavar="PNG", help="Also draw P@k/PSP@k, precision by label-frequency"
                                                              " decile, label frequencies and score reliability"
                                                              " (with --threshold: its F1, precision and recall too).")
    p.add_argument("--per-label", default=None, metavar="TSV",
                   help="Also write per-label support, P, R and F1 of the top-k suggestions (of those kept by"
                        " --threshold, if given) and training counts, worst F1 first.")
    p.add_argument("--unseen-labels", default=None, metavar="FILE",
                   help="Label ids (one a line) to treat as unseen in training; without it, the labels the model"
                        " has no training document for. When the test data has any: also R@10_unseen, P@1_zs,"
                        " R@10_zs (xmtc/open_metrics.py).")
    _common(p)

    p = sub.add_parser("encode", help="Write the fine-tuned text embeddings of a transformer model (.npy).")
    p.add_argument("model_dir")
    p.add_argument("input_file", help="One text per line, or TSV/JSONL (labels ignored).")
    p.add_argument("-o", "--output", required=True, help="The .npy file to write (float32, one row per text).")
    p.add_argument("--format", dest="fmt", default=None, help="Input format; default: guess.")
    _common(p)

    p = sub.add_parser("ensemble", help="Predict or evaluate with several models combined.")
    p.add_argument("model_dirs", nargs="+", metavar="MODEL_DIR")
    p.add_argument("--input", required=True, help="Texts to predict, or labelled data with --evaluate.")
    p.add_argument("--combine", default="average", choices=("average", "rank-average", "sigmoid-average"),
                   help="How members' scores are combined (default: average).")
    p.add_argument("-k", type=int, default=5, help="Labels per input (default: 5).")
    p.add_argument("--evaluate", action="store_true", help="Treat --input as labelled data; print metrics.")
    p.add_argument("--json", action="store_true", help="With --evaluate: one JSON object.")
    p.add_argument("-o", "--output", help="Write predictions (JSONL) here instead of stdout.")
    p.add_argument("--format", dest="fmt", default=None, help="Input format; default: guess.")
    _common(p)

    from .serve import cli as serve_cli
    _common(serve_cli.add_parser(sub))

    p = sub.add_parser("demo", help="Train and evaluate on the bundled yso-finna-en sample.")
    p.add_argument("--examples", type=non_negative_int, default=5, help="Example titles to show (default: 5).")
    p.add_argument("-o", "--output", help="Also save the demo model to this folder.")
    _common(p)
    for module in tool_commands().values():
        module.add_parser(sub, _common)
    return parser


def _method_has_valid_size(estimator_class, method: str) -> bool:
    """Whether ``method`` holds out a validation split of its own (its config has ``valid_size``)."""
    import dataclasses
    try:
        return any(f.name == "valid_size" for f in dataclasses.fields(estimator_class(method).config_class))
    except XmtcError:
        return False


def tool_commands() -> dict:
    """Commands whose logic lives in their own modules (``add_parser(sub, common)``, ``run(args)``)."""
    from .commands import calibrate, detect_language, explain, info, labels, learn, split, tune, verify
    from .select import cli as select
    return {"explain": explain, "select": select, "calibrate": calibrate, "split": split, "labels": labels,
            "info": info, "verify": verify, "learn": learn, "tune": tune, "detect-language": detect_language}
