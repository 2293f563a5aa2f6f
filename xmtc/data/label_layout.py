"""Label files in a layout :func:`~xmtc.data.labels.read_label_file` would misread, refused in one line.

``read_label_file`` tells its layouts apart by the file itself, so a file in none of them used to be read
"successfully" into junk: a CSV became a one-column file (whole lines as the names of labels ``0, 1, ...``),
a header row without ``#`` became a label called ``id``, and a file with the text first and the id second
gave every label its text as its id. ``xmtc train --label-file`` then added those as labels nobody can
predict, and ``xmtc labels add`` added them to a live model. These checks stop such a file at the line that
shows the problem, and say which layout was expected.

Each rule needs clear evidence, so that no legitimate layout is refused:

* **a comma-separated file**: a line without a tab whose comma-separated cells are column names
  (``id,uri,prefLabel``), or, when the data's label ids are known and not numbers, a file with no tab at
  all (the one-column layout names numeric label ids ``0, 1, ...`` in order; it cannot name ``p12465``);
* **a header row without ``#``**: a first line with at least two cells that are column names
  (``id<TAB>name``); one alone is not enough (``id`` is also Indonesian's language code);
* **a line without a tab** in a file whose other lines have one, holding a comma or a space: a CSV or
  space-separated line (a bare id without a name stays valid);
* **swapped columns** (no header): another column holds more of the data's label ids than the first does,
  or, when no column holds any, most first cells are text with spaces while another column holds only
  single tokens that are not numbers (counts are numbers: Reuters' ``name<TAB>n_train<TAB>n_test``).
"""

from __future__ import annotations

import os
import re
from typing import Sequence

from ..errors import DataFormatError

EXPECTED = ("expected tab-separated columns 'id, uri, prefLabel, label_text[, n_docs]' under a '#' header line,"
            " or 'id, name[, text]'")

# what column names look like, lower-cased, without '#', quotes or a "(...)" note: label_text(pref+alt)
_HEADER_WORDS = {"id", "ids", "label", "labels", "label_id", "labelid", "uri", "url", "name", "names",
                 "preflabel", "pref_label", "altlabel", "alt_label", "label_text", "labeltext", "text", "texts",
                 "n_docs", "count", "notation", "description", "title", "concept", "subject", "code"}
_SPACE = re.compile(r"\s")


def _show(cell: str, width: int = 60) -> str:
    """A cell quoted for a one-line message (repr escapes control characters), cut to ``width``."""
    return repr(cell if len(cell) <= width else cell[:width] + "...")


def _header_cells(cells: Sequence[str]) -> int:
    """How many of ``cells`` read as column names."""
    return sum(re.sub(r"\(.*\)$", "", c.strip().lstrip("\ufeff#").strip("\"' ").lower()).strip() in _HEADER_WORDS
               for c in cells)


def check_header_line(path: str | os.PathLike, lineno: int, line: str) -> None:
    """A ``#`` header line: refused when it is comma-separated column names (``#id,uri,prefLabel``)."""
    if "\t" not in line and "," in line and _header_cells(line[1:].split(",")) >= 2:
        raise DataFormatError(path, lineno, f"comma-separated header {_show(line)}; {EXPECTED}")


def check_rows(path: str | os.PathLike, rows: list[tuple[int, list[str]]], ids: Sequence[str] | None) -> None:
    """The rows of a label file without a ``#`` header (``(line number, tab-separated cells)``, blank lines
    left out): refused by the rules of the module doc. ``ids``: the label ids of the data or model, if known."""
    if not rows:
        return
    lineno, first = rows[0]
    cells = first if len(first) > 1 else first[0].split(",")
    if _header_cells(cells) >= 2:
        kind = "a header row" if len(first) > 1 else "a comma-separated header"
        line = "\t".join(first)
        raise DataFormatError(path, lineno, f"{kind} {_show(line)} without '#'; {EXPECTED}")
    if all(len(parts) == 1 for _, parts in rows):
        wordy = next((i for i in ids or () if not i.isdigit()), None)
        if wordy is not None:
            raise DataFormatError(path, lineno, f"no tab in {_show(first[0])}: a one-column file names label ids"
                                                f" 0, 1, 2, ... in order, but the labels are ids such as"
                                                f" {_show(wordy)}; {EXPECTED}")
        return
    known = set(ids or ())
    for lineno, parts in rows:
        cell = parts[0].strip()
        if len(parts) == 1 and ("," in cell or _SPACE.search(cell)) and cell not in known:
            raise DataFormatError(path, lineno, f"no tab in {_show(parts[0])}; {EXPECTED}")
    _check_id_column(path, rows, known)


def _check_id_column(path, rows: list[tuple[int, list[str]]], known: set[str]) -> None:
    """Refuse a file whose label ids are not in its first column (see the module doc)."""
    width = max(len(parts) for _, parts in rows)
    cols = [[parts[k].strip() if k < len(parts) else "" for _, parts in rows] for k in range(width)]
    if known:
        hits = [sum(c in known and (k == 0 or not is_number(c)) for c in col) for k, col in enumerate(cols)]
        best = max(range(1, width), key=lambda k: hits[k])
        if hits[best] > hits[0]:
            i = next(i for i, c in enumerate(cols[best])
                     if c in known and not is_number(c) and cols[0][i] not in known)
            raise DataFormatError(path, rows[i][0], f"the first column holds {_show(cols[0][i])}, but column"
                                                    f" {best + 1} holds the label id {_show(cols[best][i])}"
                                                    f" (columns swapped?); {EXPECTED}")
        if hits[0]:
            return
    spaced = [i for i, c in enumerate(cols[0]) if _SPACE.search(c)]
    if 2 * len(spaced) <= len(rows):
        return
    for k in range(1, width):
        if all(c and not _SPACE.search(c) and not is_number(c) for c in cols[k]):
            i = spaced[0]
            raise DataFormatError(path, rows[i][0], f"the first column holds text ({_show(cols[0][i])}),"
                                                    f" column {k + 1} ids such as {_show(cols[k][i])}"
                                                    f" (columns swapped?); {EXPECTED}")


def is_number(text: str) -> bool:
    """Whether ``text`` is a number (a count column, never a label's name or id)."""
    try:
        float(text)
    except ValueError:
        return False
    return True
