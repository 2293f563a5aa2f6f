"""MkDocs hook: the parts of the xmtc site that are generated from the code at build time.

* ``reference/cli.md``: every ``xmtc`` command and flag, read from ``xmtc.cli_parser.build_parser`` (``train``'s
  parameters for every ``--method``), so commands added to the parser appear without editing the docs;
* ``<!-- xmtc:params METHOD -->`` in a page: the table of METHOD's parameters, read from its config
  dataclass (name, ``xmtc train`` flag, type, default, allowed values, help);
* ``<!-- xmtc:serve-params -->``: the same for ``xmtc serve``'s settings (``ServeConfig``);
* ``<!-- xmtc:results HEADING -->``: the section of benchmarks/RESULTS.md whose heading starts with HEADING,
  copied at build time (a heading that no longer exists fails the build);
* ``assets/benchmarks/*.png``: the plots in benchmarks/, served from where the scripts write them;
* ``assets/mathjax/``: MathJax 3 from the ``django-static-mathjax`` package (pip), so that equations render
  without any CDN, at build time or at view time.

Sphinx-style roles in docstrings (``:mod:`x```, ``:func:`~a.b```) are shown as plain code in the API pages.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import re
import typing
from pathlib import Path

from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.hooks.xmtc")
ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"

# --------------------------------------------------------------------------------------------------- helpers


def _cell(text) -> str:
    """A string made safe for one Markdown table cell (no pipes, no raw HTML, no line breaks)."""
    text = " ".join(str(text).split())
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"(?<![`\\])\*", r"\\*", text)


def _code(text) -> str:
    text = str(text).replace("|", "\\|")
    return f"``{text}``" if "`" in text else f"`{text}`"


def _default_text(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, str) else str(value)


# --------------------------------------------------------------------------------------------- parameters


def params_table(config_class: type, flags: bool = True) -> str:
    """One row per field of a config dataclass (the single declaration estimators and CLI share)."""
    hints = typing.get_type_hints(config_class)
    rows = [f"| {'parameter' if flags else 'setting'} / flag | type | default | description |", "|---|---|---|---|"]
    for field in dataclasses.fields(config_class):
        tp = hints[field.name]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        optional = type(None) in typing.get_args(tp)
        name = (args[0] if args else tp).__name__ + (" or none" if optional else "")
        meta = field.metadata
        help_text = meta.get("help", "")
        if meta.get("choices"):
            help_text += " One of: " + ", ".join(_default_text(c) for c in meta["choices"]) + "."
        lo, hi = meta.get("minimum"), meta.get("maximum")
        if lo is not None or hi is not None:
            rng = []
            if lo is not None:
                rng.append(f"{'>' if meta.get('exclusive_minimum') else '≥'} {lo}")
            if hi is not None:
                rng.append(f"≤ {hi}")
            help_text += " Range: " + ", ".join(rng) + "."
        flag = "--" + field.name.replace("_", "-")
        rows.append(f"| {_code(field.name)}<br>{_code(flag)} | {name} | {_code(_default_text(field.default))} |"
                    f" {_cell(help_text)} |")
    return "\n".join(rows) + "\n"


def method_params(method: str) -> str:
    from xmtc.models import estimator_class
    cls = estimator_class(method)
    return (f"*Generated from `{cls.config_class.__module__}.{cls.config_class.__name__}` when the site is built;"
            f" in Python `xmtc.{cls.__name__}(name=value, ...)`, on the command line"
            f" `xmtc train --method {method} --flag value`, in a `--config` JSON file `{{\"name\": value}}`.*\n\n"
            + params_table(cls.config_class))


def serve_params() -> str:
    from xmtc.serve.config import ServeConfig
    return ("*Generated from `xmtc.serve.config.ServeConfig` when the site is built.*\n\n"
            + params_table(ServeConfig, flags=False))


# ---------------------------------------------------------------------------------------------------- CLI


def _subparsers(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _arg_row(action: argparse.Action) -> str | None:
    if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
        return None
    if action.option_strings:
        spec = ", ".join(action.option_strings)
        if action.nargs != 0:
            metavar = action.metavar or (action.dest.upper() if not action.choices else
                                         "{" + ",".join(map(str, action.choices)) + "}")
            spec += f" {metavar}"
    else:
        spec = action.metavar or action.dest
        if action.nargs in ("+", "*"):
            spec += " ..."
    help_text = (action.help or "").replace("%%", "%")
    if action.choices and action.option_strings and "choices" not in help_text.lower():
        help_text += " Choices: " + ", ".join(map(str, action.choices)) + "."
    if action.required and action.option_strings:
        help_text = "**Required.** " + _cell(help_text)
    else:
        help_text = _cell(help_text)
    return f"| {_code(spec)} | {help_text} |"


def _args_table(actions) -> str:
    rows = [r for r in (_arg_row(a) for a in actions) if r]
    if not rows:
        return ""
    return "| argument | description |\n|---|---|\n" + "\n".join(rows) + "\n"


def cli_reference() -> str:
    from xmtc.cli_parser import build_parser
    from xmtc.models import method_names
    from xmtc.registry import METHODS

    parser = build_parser([])
    sub = _subparsers(parser)
    helps = {a.dest: a.help for a in sub._choices_actions}
    out = ["# Command-line reference", "",
           "*Generated from `xmtc.cli_parser.build_parser` each time the site is built: every command and flag of the"
           " installed `xmtc`, so it cannot fall behind the code. `xmtc COMMAND --help` prints the same.*", "",
           "```text", parser.format_usage().strip(), "```", "",
           "| command | what it does |", "|---|---|"]
    out += [f"| [`xmtc {name}`](#xmtc-{name}) | {_cell(helps.get(name, ''))} |" for name in sub.choices]
    out.append("")
    for name, p in sub.choices.items():
        out += [f"## xmtc {name}", ""]
        desc = p.description or helps.get(name) or ""
        if name == "train":
            desc = ("Train a model and save it to a folder. The parameters depend on `--method`; each"
                    " method's are listed below.")
        out += [_cell(desc), "", "```text", p.format_usage().strip(), "```", ""]
        groups = [g for g in p._action_groups if g._group_actions]
        for g in groups:
            if name == "train" and g.title and g.title.endswith(" parameters"):
                continue  # the per-method tables follow
            table = _args_table(g._group_actions)
            if table:
                out += [f"**{g.title}**", "", table]
        if name == "train":
            for method in method_names():
                try:
                    mp = _subparsers(build_parser(["train", "--method", method])).choices["train"]
                except Exception as exc:  # the real `xmtc train --method M --help` would fail too
                    log.warning("cli reference: `xmtc train --method %s` cannot build its parser: %s: %s",
                                method, type(exc).__name__, exc)
                    continue
                group = [g for g in mp._action_groups if g.title == f"{method} parameters"]
                if group:
                    if (ROOT / "docs" / "methods" / f"{method}.md").exists():
                        see = f" (see also [the method's page](../methods/{method}.md#parameters))"
                    else:  # a method without a page yet: its estimator's module docstring is the documentation
                        module = METHODS[method][0]
                        see = f" (the method is described in the docstring of `{module}`)"
                    out += [f"### --method {method}", "", f"Parameters of `xmtc train --method {method}`{see}.", "",
                            _args_table(group[0]._group_actions)]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------------ results


def results_section(prefix: str, assets: str) -> str:
    """The body of the RESULTS.md section whose heading text starts with ``prefix``, headings demoted.

    An empty ``prefix`` gives the file's preamble (the text between its title and its first section)."""
    lines = RESULTS.read_text(encoding="utf-8").splitlines()
    start = level = None
    for i, line in enumerate(lines):
        m = re.match(r"^(#+)\s+(.*)$", line)
        if not m or _in_fence(lines, i):
            continue
        if start is None and (m.group(2).startswith(prefix) if prefix else True):
            start, level, title = i, (len(m.group(1)) if prefix else 99), m.group(2)
        elif start is not None and len(m.group(1)) <= level:
            return _source(title, prefix) + _demote("\n".join(lines[start + 1:i]), min(level, 2), assets)
    if start is None:
        log.warning("benchmarks/RESULTS.md has no section headed %r (renamed? update the docs page)", prefix)
        return f"*(benchmarks/RESULTS.md has no section headed “{prefix}”.)*"
    return _source(title, prefix) + _demote("\n".join(lines[start + 1:]), min(level, 2), assets)


def _source(title: str, prefix: str) -> str:
    return f"*From `benchmarks/RESULTS.md`, section “{_cell(title)}”:*\n\n" if prefix else ""


def _in_fence(lines, i) -> bool:
    return sum(1 for ln in lines[:i] if ln.startswith("```")) % 2 == 1


def _demote(text: str, level: int, assets: str) -> str:
    out, fence = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        if not fence:
            m = re.match(r"^(#+)(\s.*)$", line)
            if m:
                line = "#" * max(3, len(m.group(1)) - level + 2) + m.group(2)
            # images beside RESULTS.md are served from assets/benchmarks/ (on_files)
            line = re.sub(r"!\[([^\]]*)\]\((?!https?:)([^)/]+\.png)\)", lambda m: f"![{m.group(1)}]({assets}{m.group(2)})",
                          line)
            # links relative to benchmarks/ (the repository) do not exist in the site: keep their text
            line = re.sub(r"(?<!!)\[([^\]]+)\]\((?!https?:)[^)]*\)", r"\1", line)
        out.append(line)
    return "\n".join(out).strip() + "\n"


# ----------------------------------------------------------------------------------------------- mkdocs


def _mathjax_root() -> Path | None:
    try:
        import mathjax  # django-static-mathjax: MathJax 3's distribution as package data
    except ImportError:
        return None
    root = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    return root if (root / "tex-svg.js").exists() else None


def on_files(files, config):
    files.append(File.generated(config, "reference/cli.md", content=cli_reference()))
    for png in sorted((ROOT / "benchmarks").glob("*.png")):
        files.append(File.generated(config, f"assets/benchmarks/{png.name}", abs_src_path=str(png)))
    root = _mathjax_root()
    if root is None:
        log.warning("MathJax not found: pip install 'xmtc[docs]' (django-static-mathjax); equations stay TeX")
        return files
    # SVG output: the glyphs travel inside the script, so no web font has to load (also from file://)
    wanted = [root / "tex-svg.js"]
    wanted += sorted((root / "input" / "tex" / "extensions").rglob("*.js"))
    for path in wanted:
        files.append(File.generated(config, "assets/mathjax/" + path.relative_to(root).as_posix(),
                                    abs_src_path=str(path)))
    return files


_MARKER = re.compile(r"^<!--\s*xmtc:(params|serve-params|results)\b[ \t]*(.*?)[ \t]*-->[ \t]*$", re.M)  # alone on a line


def on_page_markdown(markdown, page, config, files):
    def replace(m):
        kind, arg = m.group(1), m.group(2).strip().strip('"')
        if kind == "params":
            return method_params(arg)
        if kind == "serve-params":
            return serve_params()
        assets = "../" * page.file.src_uri.count("/") + "assets/benchmarks/"
        return results_section(arg, assets)
    return _MARKER.sub(replace, markdown)


_ROLE = re.compile(r":(?:py:)?(?:mod|func|class|meth|attr|data|exc|obj):(?=<code>)")
_TILDE = re.compile(r"<code>~((?:[\w]+\.)*)(\w+)</code>")


def on_page_content(html, page, config, files):
    html = _ROLE.sub("", html)
    return _TILDE.sub(r"<code>\2</code>", html)
