"""Command-line parsing rules every ``xmtc`` command shares.

* No abbreviations: argparse accepts ``--n-tree 3`` for ``--n-trees 3`` by default, so a typo or a
  future option could change what a flag means without a word; here every flag must be spelt whole.
* An unknown flag is reported with the usage of the command it was given to, not the top-level one,
  and when it is a parameter of another training method, with the ``--method`` that has it.
"""

from __future__ import annotations

import argparse
from typing import Sequence


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """``{name: parser}`` of the sub-commands directly under ``parser``."""
    out: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:  # argparse keeps sub-parsers only here
        if isinstance(action, argparse._SubParsersAction):
            out.update(action.choices)
    return out


def no_abbreviations(parser: argparse.ArgumentParser) -> None:
    """Turn prefix matching off in ``parser`` and every sub-command under it (read at parse time)."""
    parser.allow_abbrev = False
    for sub in subcommands(parser).values():
        no_abbreviations(sub)


def _command_parser(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser:
    """The innermost sub-command parser that ``argv`` names (``xmtc labels find`` -> find's)."""
    current = parser
    for token in argv:
        sub = subcommands(current)
        if token in sub:
            current = sub[token]
        elif not token.startswith("-") and sub:
            break
    return current


def methods_with_option(flag: str) -> list[str]:
    """Training methods whose parameters include ``--flag`` (for the hint of an unknown train flag)."""
    from ..config import option_name
    from ..models import estimator_class, method_names
    import dataclasses

    name = flag.split("=", 1)[0]
    return [m for m in method_names()
            if any(option_name(f.name) == name for f in dataclasses.fields(estimator_class(m).config_class))]


def parse_strictly(parser: argparse.ArgumentParser, argv: Sequence[str], method: str) -> argparse.Namespace:
    """``parser.parse_args(argv)`` under the rules of the module doc (exits 2 on an error, as argparse)."""
    no_abbreviations(parser)
    args, extra = parser.parse_known_args(argv)
    if not extra:
        return args
    target = _command_parser(parser, argv)
    message = f"unrecognized arguments: {' '.join(extra)}"
    if getattr(args, "command", None) == "train":
        flags = [e for e in extra if e.startswith("--")]
        owners = {f: methods_with_option(f) for f in flags}
        hints = [f"{f.split('=', 1)[0]} is a parameter of {', '.join(ms)}, not of {method}: add --method {ms[0]}"
                 for f, ms in owners.items() if ms]
        if hints:
            message += " (" + "; ".join(hints) + ")"
    target.error(message)
    raise AssertionError("unreachable")  # pragma: no cover  (error() exits)


def input_name(path: str) -> str:
    """How errors name an input: its path, or <stdin> for -."""
    from ..data.io import STDIN_NAME, is_stdio
    return STDIN_NAME if is_stdio(path) else path


def check_label_texts(label_file: str, ds) -> None:
    """What train and tune check of a ``--label-file``: it must name or describe the labels the training data
    carries, as the label-text route fits its cosine -> probability map on those (:mod:`xmtc.models.label_route`);
    without one the route has nothing to learn from, and the failure would be blamed on the training file. The
    layouts of :func:`~xmtc.data.labels.read_label_file` read ids with numbers only (Reuters' ``name, n_train,
    n_test``) as ids without a text."""
    import numpy as np

    from ..errors import DataFormatError

    texts = ds.labels.texts
    counts = np.asarray(ds.Y.getnnz(axis=0))
    if texts is None or any(texts[j] and texts[j].strip() for j in np.flatnonzero(counts).tolist()):
        return
    raise DataFormatError(input_name(label_file), None,
                          f"gives none of the {np.count_nonzero(counts)} labels of the training data a name or text"
                          " (only ids, or ids and numbers): a label file is 'id, name[, text]' or columns named by a"
                          " '#' header line; leave --label-file out to train without label texts")


def method_config_file(path: str | None, method: str) -> dict:
    """A --config file's parameters, as train and tune read it: it may name its method, which must match."""
    from ..config import load_json_config
    from ..errors import ConfigError

    if not path:
        return {}
    data = load_json_config(path)
    named = data.pop("method", method)
    if named != method:
        raise ConfigError(f"{path}: config is for method {named!r} but --method is {method!r}")
    return data
