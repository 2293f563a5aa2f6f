"""``xmtc calibrate MODEL_DIR VALID_FILE [--method isotonic|platt] [--bands 3] [--thresholds f1] [-o OUT]``.

Fits the score calibration (and optionally per-label F1 thresholds) of :mod:`xmtc.models.calibration`
on a validation file and rewrites the model folder atomically with it (the manifest lists the new
``calibration.safetensors`` with its SHA-256), or writes the calibrated model to ``-o`` and leaves MODEL_DIR as it
was. The validation file must not be the test set, nor documents the model was trained on (their scores are
over-confident).
"""

from __future__ import annotations

import argparse
import json
import logging

log = logging.getLogger(__name__)


def add_parser(sub, common) -> None:
    from ..models.calibration import METHODS

    p = sub.add_parser("calibrate", help="Calibrate a model's scores (and thresholds) on a validation file.",
                       description="Fit isotonic or Platt score maps per label-frequency band on VALID_FILE, so"
                                   " that a score of 0.8 means about 80% of such suggestions are correct; saved"
                                   " in MODEL_DIR and applied by predict, evaluate and serve.")
    p.add_argument("model_dir")
    p.add_argument("valid_file", help="Labelled validation data held out from training (never the test set).")
    p.add_argument("--method", default="isotonic", choices=METHODS, help="Score map (default: isotonic).")
    p.add_argument("--bands", type=int, default=3, help="Label-frequency bands, one map each (default: 3).")
    p.add_argument("-k", type=int, default=10, help="Top-k suggestions per document to fit on (default: 10).")
    p.add_argument("--thresholds", choices=("f1",), default=None,
                   help="Also learn per-label thresholds maximising F1 (use with --threshold labels).")
    p.add_argument("--min-support", type=int, default=10,
                   help="Labels with fewer validation occurrences use the global F1 threshold (default: 10).")
    p.add_argument("--format", dest="fmt", default=None, help="Input format; default: guess.")
    p.add_argument("-o", "--output", help="Write the calibrated model here (default: MODEL_DIR, replaced atomically).")
    p.add_argument("--json", action="store_true", help="Print the validation metrics before/after as JSON.")
    common(p)


def run(args: argparse.Namespace) -> int:
    from ..data import read_dataset
    from ..errors import ConfigError, DataFormatError
    from ..models import load
    from ..models.calibration import calibrate
    from .parsing import input_name

    if args.k < 1 or args.bands < 1 or args.min_support < 1:
        raise ConfigError("-k, --bands and --min-support must be positive integers")
    model = load(args.model_dir)
    ds = read_dataset(args.valid_file, fmt=args.fmt, labels=model.labels_, unknown_labels="extend")
    if len(ds) == 0 or ds.Y.nnz == 0:
        raise DataFormatError(input_name(args.valid_file), None, "is empty: no documents to calibrate on"
                              if len(ds) == 0 else
                              "no document has a label: the score maps are fitted on labelled documents")
    model.calibration_ = None
    before = model.evaluate(ds.inputs, ds.Y, ks=(1, 5), progress=not args.quiet)
    cal = calibrate(model, ds.inputs, ds.Y, method=args.method, n_bands=args.bands, k=args.k,
                    thresholds=args.thresholds, min_support=args.min_support, progress=not args.quiet)
    after = model.evaluate(ds.inputs, ds.Y, ks=(1, 5), progress=not args.quiet,
                           threshold="labels" if args.thresholds else None)
    output = args.output or args.model_dir
    model.save(output)
    keys = ("P@1", "P@5", "ECE@5", "coverage@P90", "coverage@P95", "F1@T")
    report = {"before": {k: round(before[k], 4) for k in keys if k in before},
              "after": {k: round(after[k], 4) for k in keys if k in after},
              "method": cal.method, "bands": len(cal.maps), "band_edges": cal.edges.tolist(),
              "global_threshold": cal.global_threshold}
    if args.json:
        print(json.dumps(report))
    else:
        print(f"calibrated {output} ({cal.method}, {len(cal.maps)} bands by training count, edges"
              f" {cal.edges.tolist()}) on {len(ds)} validation documents (in-sample figures):")
        for k in keys:  # F1@T has no "before": the thresholds it is measured at are learned here
            if k in after:
                before_k = f"{report['before'][k]:7.2f}" if k in report["before"] else f"{'-':>7s}"
                print(f"{k:>14s}  {before_k} -> {report['after'][k]:7.2f}"
                      + ("  (per-label thresholds)" if k == "F1@T" else ""))
        if cal.global_threshold is not None:
            print(f"global F1 threshold {cal.global_threshold:.4f}; per-label thresholds saved"
                  " (use --threshold labels)")
    return 0
