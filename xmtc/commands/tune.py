"""``xmtc tune TRAIN... --method M [--param NAME=SPEC ...] (--trials N | --time-budget S) -o BEST.json``.

Searches the method's parameters with Optuna on the validation split that ``xmtc train`` holds out with
the same ``--valid-size`` / ``--valid-seed`` (:mod:`xmtc.tuning`), prints a table of the trials and writes
the chosen configuration as the flat JSON object ``xmtc train --config BEST.json`` reads: the method,
the ``--config`` values the search started from, and every searched parameter's value. The defaults run
as the first trial, and the best trial replaces them only when it beats them by more than ``--noise-z``
standard deviations of the gain (paired bootstrap over the validation documents).

``--storage sqlite:///tune.db`` keeps the trials in a database; running the command again with the same
storage and ``--study-name`` adds ``--trials`` more to the study and chooses among all of them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time

from ..config import non_negative_int
from .parsing import check_label_texts, input_name, method_config_file

log = logging.getLogger(__name__)


def _positive_int(text: str) -> int:
    value = non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def _finite_float(zero_ok: bool, expected: str):
    """An argparse type: a finite number above 0 (or at least 0, ``zero_ok``); else the one-line error
    ``expected EXPECTED, got 'TEXT'``."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not ((value >= 0 if zero_ok else value > 0) and value < float("inf")):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value
    return parse


_positive_float = _finite_float(False, "a number of seconds > 0")
_non_negative_float = _finite_float(True, "a number >= 0")


def add_parser(sub, common) -> None:
    from ..models import method_names

    p = sub.add_parser("tune", help="Search a method's parameters on the validation split; write the best"
                                    " as a --config JSON.",
                       description="Search a method's parameters with Optuna on the seeded validation split"
                                   " `xmtc train` holds out, and write the chosen configuration as the JSON that"
                                   " `xmtc train --config` reads. The method's defaults are the first trial.")
    p.add_argument("train_files", nargs="+", metavar="TRAIN_FILE", help="Training data, read as `xmtc train`"
                                                                        " reads it.")
    p.add_argument("--method", default="xr-linear", choices=method_names(), help="Method to tune (default:"
                                                                                   " xr-linear).")
    p.add_argument("--param", action="append", default=[], metavar="NAME=SPEC",
                   help="A parameter to search: NAME=LOW..HIGH (a range; :log after it for a log scale) or"
                        " NAME=a,b,c (a choice; one value fixes it). Adds to, or replaces an entry of, the"
                        " method's default space. Repeatable.")
    p.add_argument("--no-default-space", action="store_true", help="Search only the --param parameters.")
    p.add_argument("--trials", type=_positive_int, default=None, metavar="N", help="Trials to run (more, on a"
                                                                                   " resumed study).")
    p.add_argument("--time-budget", type=_positive_float, default=None, metavar="S",
                   help="Start no trial after S seconds (the one under way finishes). With --trials: whichever"
                        " comes first.")
    p.add_argument("-o", "--output", required=True, help="The JSON file to write the chosen configuration to.")
    p.add_argument("--metric", default="P@1", help="What trials are scored by on the validation part: P@k,"
                                                   " R@k, nDCG@k or F1@T (micro F1 of the top 5 at calibrated"
                                                   " score >= T) (default: P@1).")
    p.add_argument("--config", help="JSON file of parameters (as for train) the search starts from:"
                                          " the defaults' trial runs them, unsearched ones stay as they are.")
    p.add_argument("--storage", default=None, metavar="URL", help="Optuna storage for the trials, e.g."
                                                                  " sqlite:///tune.db (default: in memory).")
    p.add_argument("--study-name", default=None, help="Study to create or resume in --storage (default: the"
                                                      " method's name).")
    p.add_argument("--seed", type=non_negative_int, default=0, help="Seed of the sampler (default: 0).")
    p.add_argument("--valid-size", type=float, default=None, metavar="X",
                   help="Validation part, as for train (default: train's, a tenth, at most 5,000).")
    p.add_argument("--valid-seed", type=non_negative_int, default=0, help="Seed of the split, as for train"
                                                                          " (default: 0).")
    p.add_argument("--noise-z", type=_non_negative_float, default=2.0, metavar="Z",
                   help="Keep the defaults unless the best trial beats them by more than Z standard deviations"
                        " of the gain (paired bootstrap over the validation documents; default: 2; 0: take the"
                        " best trial).")
    p.add_argument("--format", dest="fmt", default=None, help="Input format; default: guess.")
    p.add_argument("--label-file", help="Label names/texts file, as for train.")
    common(p)


def run(args: argparse.Namespace) -> int:
    from ..config import build_config, config_to_dict
    from ..data import read_datasets
    from ..data.io import atomic_output
    from ..errors import ConfigError, DataFormatError
    from ..models import estimator_class
    from ..models.base import check_requirements
    from ..tuning.objective import TrialRunner, parse_metric
    from ..tuning.space import build_space, space_record
    from ..tuning.study import choose, open_study, run_study, trial_table

    if args.trials is None and args.time_budget is None:
        raise ConfigError("say how long to search: --trials N, --time-budget SECONDS, or both")
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        raise ConfigError(f"{args.output}: the folder {out_dir} does not exist")
    cls = estimator_class(args.method)
    check_requirements(cls)
    metric = parse_metric(args.metric)
    fixed = method_config_file(args.config, args.method)
    build_config(cls.config_class, fixed, source=args.config or "config")
    space = build_space(cls.config_class, args.param, use_default=not args.no_default_space)
    # a one-value --param fixes the parameter for every trial, the defaults' trial included
    fixed.update({n: d.choices[0] for n, d in space.items() if d.choices is not None and len(d.choices) == 1})
    space = {n: d for n, d in space.items() if d.choices is None or len(d.choices) > 1}
    if not space:
        raise ConfigError("every --param fixes a single value: nothing is left to search")
    defaults = config_to_dict(build_config(cls.config_class, fixed, source="--param"))
    t0 = time.perf_counter()
    ds = read_datasets(args.train_files, fmt=args.fmt, label_file=args.label_file, all_file_labels=cls.open_labels)
    train_name = ", ".join(input_name(f) for f in args.train_files)
    if len(ds) == 0 or ds.Y.nnz == 0:
        raise DataFormatError(train_name, None, "has no labelled documents to tune on")
    if args.label_file:
        check_label_texts(args.label_file, ds)
    runner = TrialRunner(cls, ds, metric, valid_size=args.valid_size, seed=args.valid_seed, fixed=fixed)
    log.info("read %d documents in %.1fs; tuning %s on %d validation documents (seed %d), fitting on %d;"
             " space: %s", len(ds), time.perf_counter() - t0, args.method, len(runner.valid), args.valid_seed,
             len(runner.train), " ".join(space_record(space)))
    record = {"method": args.method, "metric": metric.name, "train": [input_name(f) for f in args.train_files],
              "valid_docs": len(runner.valid), "valid_seed": args.valid_seed, "space": space_record(space)}
    study = open_study(args.storage, args.study_name or args.method, record, args.seed)
    before = len(study.trials)
    try:
        run_study(study, runner, space, defaults, n_trials=args.trials, timeout=args.time_budget,
                  progress=not args.quiet)
    except (ConfigError, DataFormatError) as exc:
        if str(exc).startswith(train_name):
            raise
        raise DataFormatError(train_name, None, f"cannot fit the defaults on it: {exc}") from None
    outcome = choose(study, metric, defaults, space, args.noise_z, seed=args.seed)
    print(trial_table(study, defaults, metric))
    if outcome.default_value is None and outcome.best_value is None:
        raise ConfigError("no trial finished; nothing to write")
    config = {"method": args.method, **fixed, **outcome.values}
    build_config(cls.config_class, {k: v for k, v in config.items() if k != "method"}, source="the chosen config")
    with atomic_output(args.output) as fh:
        fh.write(json.dumps(config, indent=2) + "\n")
    print(_summary(outcome, metric.name, args.noise_z, len(study.trials) - before,
                   runner.featurizations if runner.cached_input else None))
    log.info("wrote %s (%.1fs in all)", args.output, time.perf_counter() - t0)
    return 0




def _summary(outcome, metric: str, noise_z: float, ran: int, featurizations: int | None) -> str:
    """The last lines: what was chosen and why."""
    cached = "" if featurizations is None else f"; TF-IDF computed {featurizations} times"
    lines = [f"{ran} trials run ({outcome.n_trials} in the study){cached}"]
    if outcome.default_value is not None:
        lines.append(f"defaults: validation {metric} {outcome.default_value:.2f}")
    if outcome.best_number is not None and outcome.best_value != outcome.default_value:
        lines.append(f"best trial {outcome.best_number}: validation {metric} {outcome.best_value:.2f}"
                     f" (gain {outcome.gain:+.2f}, noise sd {outcome.noise:.2f})")
    if outcome.chosen == "best":
        lines.append(f"chosen: trial {outcome.best_number} (its gain is above {noise_z:g} sd)")
    elif outcome.best_number is not None and outcome.gain > 0:
        lines.append(f"chosen: the defaults (the best gain is within {noise_z:g} sd of the noise)")
    else:
        lines.append("chosen: the defaults (no trial beat them)")
    return "\n".join(lines)
