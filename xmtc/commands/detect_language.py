"""``xmtc detect-language LANGUAGES [FILE ...] [--lines]``: which candidate language a text is in.

Annif's ``annif detect-language`` on the command line: LANGUAGES is a comma-separated list of candidate
codes (``en,fi,sv``), each FILE is one document (``-`` or no FILE reads standard input), and each
candidate's share of the text's words is printed as ``LANG<TAB>SCORE`` (four decimals, best first, ``?``
for the share no candidate recognises), under ``Detected languages for FILE`` when files are given:
the figures of ``POST /v1/detect-language`` and of Annif (simplemma's detector, see
:mod:`xmtc.models.language`).

``--lines`` reads each line of the input as its own text (xmtc's input convention for ``predict``) and
prints ``LINE<TAB>LANG<TAB>SCORE`` with the best candidate of each, ``?`` where none recognises a word:
a way to find the records of a catalogue that are in another language before they reach a model.

Differs from Annif on purpose: an unsupported candidate is an error before any text is read (Annif
reports it only once a text has a word to look up).
"""

from __future__ import annotations

import argparse
import sys

from ..errors import ConfigError


def add_parser(sub, common) -> None:
    p = sub.add_parser("detect-language", help="Detect the language of texts among candidate languages (as Annif's).",
                       description="Print each candidate language's share of a text's words (simplemma's"
                                   " detector, as `annif detect-language` and POST /v1/detect-language).")
    p.add_argument("languages", metavar="LANGUAGES", help="Candidate languages, comma-separated ISO 639-1 codes"
                                                          " (e.g. en,fi,sv).")
    p.add_argument("paths", nargs="*", metavar="FILE", help="Documents, one a file (default or '-': standard"
                                                            " input).")
    p.add_argument("--lines", action="store_true", help="Each line is its own text: print LINE, the best"
                                                        " language and its score for each.")
    common(p)


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it ({exc})") from None


def run(args: argparse.Namespace) -> int:
    from ..models.language import detect, parse_languages

    try:
        langs = parse_languages(args.languages, "LANGUAGES")
    except ImportError:
        raise ConfigError('detect-language needs simplemma: pip install "xmtc[analyzers]"') from None
    paths = args.paths or ["-"]
    named = bool(args.paths) and args.paths != ["-"]
    out = sys.stdout
    for path in paths:
        text = _read(path)
        if named:
            out.write(f"Detected languages for {path}\n")
        if args.lines:
            for i, line in enumerate(text.splitlines(), 1):
                lang, score = detect(line, langs)[0]
                out.write(f"{i}\t{lang or '?'}\t{score:.4f}\n")
            continue
        for lang, score in detect(text, langs):
            out.write(f"{lang or '?'}\t{score:.4f}\n")
    return 0
