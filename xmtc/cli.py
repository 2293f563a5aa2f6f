"""The ``xmtc`` command: run the command a command line names, and report how it ended.

:func:`main` parses the command line (the parser, every command and flag, is :mod:`xmtc.cli_parser`), sets up
logging and runs the command: train, predict, evaluate, encode, ensemble, demo and serve here, the others from
their own modules (:mod:`xmtc.commands`). :func:`entry` is the console script. Precedence of a training
parameter: dataclass defaults < ``--config`` JSON < explicit flags. Every deliberate failure is reported as one
line ``xmtc: error: ...`` naming the file (and line) at fault, with exit status 2. The numeric stack is imported
inside the commands only, so that ``import xmtc.cli`` stays cheap.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
from typing import NoReturn, Sequence

from .cli_parser import build_parser, read_method, tool_commands
from .commands.parsing import check_label_texts, input_name as _input_name
from .commands.parsing import method_config_file as _method_config_file
from .commands.parsing import parse_strictly
from .config import config_from_args, config_to_dict
from .errors import ConfigError, DataFormatError, SetupError, XmtcError

log = logging.getLogger("xmtc")

METRIC_KEYS = ("P@1", "P@3", "P@5", "R@5", "nDCG@5", "PSP@5")
COUNT_KEYS = ("docs_unseen", "labels_unseen")  # xmtc.open_metrics: documents and labels, not percentages


def _setup_logging(args: argparse.Namespace) -> None:
    from .progress import BarAwareHandler

    level = args.log_level or ("WARNING" if args.quiet else "INFO")
    logging.basicConfig(level=getattr(logging, level), format="%(asctime)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S", handlers=[BarAwareHandler(sys.stderr)], force=True)


def cmd_train(args: argparse.Namespace) -> int:
    from .data import read_datasets
    from .models import estimator_class
    from .models.base import check_requirements
    from .models.calibrated_fit import fit_calibrated
    from .models.storage import check_target

    cls = estimator_class(args.method)
    check_requirements(cls)  # a missing extra, before any data is read
    check_target(args.output)  # refuse a bad output before, not after, a long fit
    cfg = config_from_args(cls.config_class, args, _method_config_file(args.config, args.method), args.config)
    t0 = time.perf_counter()
    ds = read_datasets(args.train_files, fmt=args.fmt, label_file=args.label_file, all_file_labels=cls.open_labels)
    train_name = ", ".join(_input_name(f) for f in args.train_files)
    log.info("read %d training documents with %d labels in %.1fs", len(ds), ds.Y.shape[1],
             time.perf_counter() - t0)
    if len(ds) == 0:
        raise DataFormatError(train_name, None, "is empty: no documents to train on")
    if ds.Y.nnz == 0:  # e.g. an `xmtc select` file nobody has annotated yet
        raise DataFormatError(train_name, None, "no document has a label; nothing to train on")
    if args.label_file:
        check_label_texts(args.label_file, ds)
    model = cls(**config_to_dict(cfg))
    fit_kw = {}
    if cls.supports_checkpoints:
        fit_kw = {"checkpoint_dir": args.checkpoint_dir or f"{args.output.rstrip('/')}.checkpoint",
                  "resume": args.resume}
    elif args.resume:
        raise ConfigError("--resume applies to transformer methods only")
    if getattr(args, "ray", None):
        from .distributed.cli import train_hook
        fit_kw.update(train_hook(args, cfg))
    try:
        fit_calibrated(model, ds, valid_size=getattr(args, "valid_size", None), seed=getattr(args, "valid_seed", 0),
                       calibration=args.calibration,
                       refit={"auto": None, "true": "full", "false": "none"}.get(args.refit, args.refit),
                       progress=not args.quiet, **fit_kw)
    except (ConfigError, DataFormatError) as exc:
        if str(exc).startswith(train_name) or isinstance(exc, SetupError):
            raise
        # what the data cannot give (an empty vocabulary, no labels): say which file it is about
        raise DataFormatError(train_name, None, f"cannot train on it: {exc}") from None
    if not getattr(model, "is_main_process_", True):
        return 0  # torchrun: rank 0 saves
    path = model.save(args.output)
    if "checkpoint_dir" in fit_kw and not args.checkpoint_dir:  # the implicit checkpoint has served its purpose
        shutil.rmtree(fit_kw["checkpoint_dir"], ignore_errors=True)
    log.info("saved %s model to %s (%.1fs in all)", args.method, path, time.perf_counter() - t0)
    from .commands.train_notice import raw_scores_notice

    notice = raw_scores_notice(model, len(ds), getattr(args, "valid_size", None))
    if notice:
        log.warning(notice)
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from .data.dataset import read_documents
    from .models import load

    model = load(args.model_dir)
    if args.raw_scores:
        model.calibration_ = None
    if getattr(args, "ray", None):
        from .distributed.cli import predict_hook
        model = predict_hook(model, args)
    _write_predictions(model, read_documents(args.input_file, args.fmt), args)
    return 0


def _write_predictions(model, docs, args: argparse.Namespace) -> None:
    """One JSON object a line, in input order (see :func:`xmtc.models.records.prediction_records`)."""
    from .data.io import atomic_output
    from .models.predictor import resolve_threshold
    from .models.topk import apply_threshold
    from .models.language import warn_foreign_texts
    from .models.records import prediction_records

    inputs = docs.texts if docs.texts is not None else docs.X
    threshold = resolve_threshold(model, getattr(args, "threshold", None))
    idx, scores = apply_threshold(*model.predict_topk(inputs, args.k, progress=not args.quiet), threshold)
    known = model.known_fraction(inputs) if hasattr(model, "known_fraction") else None
    warn_foreign_texts(model, inputs, docs.lines)  # a text not in the model's --language: logged
    with atomic_output(args.output or "-") as out:  # a file appears whole or not at all; "-" is stdout
        for record in prediction_records(model.labels_, idx, scores, known, docs.lines, docs.ids):
            out.write(json.dumps(record, ensure_ascii=False))
            out.write("\n")


def cmd_evaluate(args: argparse.Namespace) -> int:
    from .data import read_dataset
    from .models import load

    from .models.predictor import evaluate_predictor, predict_depths, resolve_threshold
    from .models.topk import apply_threshold
    from .open_metrics import evaluate_open_set, open_set_depths, read_unseen_ids

    if args.plot:
        from .plots import image_format
        image_format(args.plot)  # a path matplotlib cannot write is an error before the evaluation
    ks = _metric_ks(args.k)
    model = load(args.model_dir)
    if args.raw_scores:
        model.calibration_ = None
    ds = read_dataset(args.test_file, fmt=args.fmt, labels=model.labels_, unknown_labels="extend")
    if len(ds) == 0:  # every metric would read 0 and look like a result
        raise DataFormatError(_input_name(args.test_file), None, "is empty: no documents to evaluate on")
    unseen = read_unseen_ids(args.unseen_labels) if args.unseen_labels else None
    # every depth the metrics read (k; 10 and the zero-shot depth for the open-set ones) in one pass over the
    # texts, each the top-k its own predict_topk call gives: a deeper calibrated top-k cut down is not one
    depths = [max(ks), *open_set_depths(model, ds.Y, ds.labels.names, max(ks), unseen)]
    preds = predict_depths(model, ds.inputs, depths, progress=not args.quiet)
    topk = preds[max(ks)]
    metrics = evaluate_predictor(model, ds.inputs, ds.Y, ks, False, args.threshold, topk=topk)
    metrics.update(evaluate_open_set(model, ds.inputs, ds.Y, ds.labels.names, topk, unseen, progress=not args.quiet,
                                     predictions=preds))
    _print_metrics(metrics, args.json)
    threshold = resolve_threshold(model, args.threshold)
    if args.per_label:
        from .commands.per_label import write_per_label

        idx = apply_threshold(topk[0][:, :args.k], topk[1][:, :args.k], threshold)[0]
        write_per_label(args.per_label, ds.Y, idx, ds.labels, model.label_counts_)
        log.info("wrote %s", args.per_label)
    if args.plot:
        from .plots import evaluation_report

        evaluation_report(args.plot, ds.Y, *topk, model.label_counts_, model.n_train_,
                          title=f"{model.method} {args.model_dir} on {args.test_file}", threshold=threshold)
        log.info("wrote %s", args.plot)
    return 0



def _metric_ks(k: int) -> list[int]:
    """The k of the @k metrics for a largest ``-k``: 1, 3, 5 and k, or 1..k below 5."""
    if k < 1:
        raise ConfigError(f"k must be a positive integer, got {k}")
    return sorted({1, 3, 5, k} if k >= 5 else set(range(1, k + 1)))


def _print_metrics(metrics: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps({k: round(float(v), 4) for k, v in metrics.items()}))
    else:
        for key, val in metrics.items():  # the open-set counts as counts, every other metric a percentage
            print(f"{key:>12s}  {int(val):7d}" if key in COUNT_KEYS else f"{key:>12s}  {val:7.2f}")


def cmd_encode(args: argparse.Namespace) -> int:
    import numpy as np

    from .data import read_inputs
    from .data.io import atomic_output
    from .models import load

    model = load(args.model_dir)
    if not hasattr(model, "encode"):
        raise ConfigError(f"{args.model_dir}: this {model.method} model has no text encoder; encode needs a"
                          " transformer model")
    texts = read_inputs(args.input_file, args.fmt)
    if not isinstance(texts, list):
        raise ConfigError(f"{args.input_file}: encode needs texts, not feature vectors")
    emb = model.encode(texts, progress=not args.quiet)
    with atomic_output(args.output, binary=True) as fh:
        np.save(fh, emb, allow_pickle=False)
    log.info("wrote %s embeddings of %d texts to %s", emb.shape, emb.shape[0], args.output)
    return 0


def cmd_ensemble(args: argparse.Namespace) -> int:
    from .data import read_dataset
    from .data.dataset import read_documents
    from .models import load
    from .models.ensemble import Ensemble

    ks = _metric_ks(args.k) if args.evaluate else None
    ens = Ensemble([load(d) for d in args.model_dirs], combine=args.combine)
    if not args.evaluate:
        _write_predictions(ens, read_documents(args.input, args.fmt), args)
        return 0
    ds = read_dataset(args.input, fmt=args.fmt, labels=ens.labels_, unknown_labels="extend")
    _print_metrics(ens.evaluate(ds.inputs, ds.Y, ks=ks, progress=not args.quiet), args.json)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo
    return run_demo(examples=args.examples, output=args.output, progress=not args.quiet)


def cmd_serve(args: argparse.Namespace) -> int:
    from .serve.cli import run
    return run(args)


COMMANDS = {"train": cmd_train, "predict": cmd_predict, "evaluate": cmd_evaluate, "encode": cmd_encode,
            "ensemble": cmd_ensemble, "demo": cmd_demo}
COMMANDS["serve"] = cmd_serve


def main(argv: Sequence[str] | None = None) -> int:
    rc = _main(argv)
    from .neural.distributed import exit_process, joined

    if joined():  # a torchrun worker: end it past the teardown that DDP's gloo threads can abort
        exit_process(rc)
    return rc


def entry() -> NoReturn:
    """The ``xmtc`` console script and ``python -m xmtc``: :func:`main`, then the process ends without the
    interpreter's teardown. Everything a command produces is written (atomically) and closed before
    :func:`main` returns, and the teardown costs a short command dearly: interpreter exit
    was 0.6-1.0 s of ``xmtc train`` on reuters and yso-finna-en-2k-20k (benchmarks/train_command.py's phase
    table, 2-core machine at load 7-9), and a script that featurizes 60 titles spent 2.0 s in its exit against
    0.1 s with ``os._exit`` (load 11). Where a library's exit handlers still have work (Ray stops the local cluster it
    started; a torch process group leaves), the normal exit runs. Before :func:`main`, numpy's submodules that no
    command uses are deferred (:mod:`xmtc.startup`: 0.17 s of every command's start)."""
    from .progress import bars_on_terminals_only
    from .startup import defer_unused_imports

    defer_unused_imports()
    bars_on_terminals_only()  # a log file or a pipe gets the log lines, not a bar's redraws
    rc = main()
    if "ray" in sys.modules or "torch.distributed" in sys.modules:
        sys.exit(rc)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said
            pass
    os._exit(rc)


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    if not argv:  # a first try of `xmtc` alone: the commands, not "the following arguments are required"
        parser.print_help(sys.stderr)
        return 2
    args = parse_strictly(parser, argv, read_method(argv))
    _setup_logging(args)
    try:
        command = COMMANDS.get(args.command) or tool_commands()[args.command].run
        return command(args)
    except XmtcError as exc:
        print(f"xmtc: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("xmtc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `xmtc predict ... | head`: the reader left; stop quietly, as Unix tools do
        _silence_stdout()
        return 141
    except Exception as exc:  # a bug: one line for the user, the traceback with --log-level DEBUG
        log.debug("internal error", exc_info=True)
        print(f"xmtc: internal error: {type(exc).__name__}: {exc} (a bug; please report it with the output"
              " of --log-level DEBUG)", file=sys.stderr)
        return 1


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not fail again."""
    import os
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
