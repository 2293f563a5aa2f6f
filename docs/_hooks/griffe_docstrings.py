"""Griffe extension: xmtc's docstrings are written for ``help()`` and Sphinx-style readers; make them Markdown.

* ``>>>`` doctest lines become a fenced ``pycon`` block (Markdown would read ``>>>`` as nested quotes);
* a paragraph ending in ``::`` (an RST literal block follows) ends in ``:``; the indented block after it
  is already a Markdown code block.
"""

from __future__ import annotations

import re

import griffe


def to_markdown(text: str) -> str:
    out: list[str] = []
    lines = text.splitlines()
    i, fence = 0, False
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            fence = not fence
        if not fence and line.lstrip().startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            block = []
            while i < len(lines) and lines[i].strip() and (lines[i].lstrip().startswith((">>>", "...")) or block):
                block.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
                i += 1
            if out and out[-1].strip():
                out.append("")
            out += [indent + "```pycon", *(indent + b for b in block), indent + "```", ""]
            continue
        out.append(re.sub(r"(\S)::$", r"\1:", line))
        i += 1
    return "\n".join(out)


class XmtcDocstrings(griffe.Extension):
    def on_object(self, *, obj, loader, **kwargs) -> None:
        if not obj.is_alias and obj.docstring is not None:
            obj.docstring.value = to_markdown(obj.docstring.value)
