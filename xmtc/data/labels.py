"""The label vocabulary: label ids in column order, plus optional display names, label texts and URIs.

Datasets identify labels by short ids (``p12465`` in YSO, ``acq`` in Reuters, ``17`` in XC files);
people want to read names ("light reading"), and label-text indexing (X-Transformer) needs each
label's text. The vocabulary keeps all three side by side so that a model saved with it can show
names in ``xmtc predict``/``demo`` without the original label file. Where the label file gives each
label a URI (yso-finna-en's ``uri`` column), it is kept too: Annif's REST API, which ``xmtc serve``
speaks, identifies subjects by URI.
"""

from __future__ import annotations

import os
from itertools import repeat
from typing import Iterable, Sequence

from ..errors import DataFormatError, ModelFormatError
from .io import iter_lines
from .label_layout import check_header_line, check_rows, is_number


class LabelVocab:
    """Label ids (column order of the label matrix), with optional display names and texts.

    >>> vocab = LabelVocab(["p3", "p4"], display=["light reading", "fiction and poetry"])
    >>> vocab.index["p4"], vocab.display_name(1)
    (1, 'fiction and poetry')
    """

    def __init__(self, names: Sequence[str], *, display: Sequence[str] | None = None,
                 texts: Sequence[str] | None = None, uris: Sequence[str] | None = None, _checked: bool = False):
        # _checked (from_json): names is a list of strings known to be unique; the index is built on first use
        self.names = list(names) if _checked or _is_str_list(names) else [str(n) for n in names]
        self._index: dict[str, int] | None = None
        if not _checked:
            self._build_index()
        for what, values in (("display names", display), ("texts", texts), ("URIs", uris)):
            if values is not None and len(values) != len(self.names):
                raise DataFormatError(None, None, f"{len(values)} label {what} for {len(self.names)} labels")
        self.display = None if display is None else _str_list(display)
        self.texts = None if texts is None else _str_list(texts)
        self.uris = None if uris is None else _str_list(uris)

    @property
    def index(self) -> dict[str, int]:
        """``{label id: column}``. A vocabulary read from a model folder builds it on first use, not at load:
        at 3M labels the dict alone takes seconds, and prediction never needs it (it maps columns to ids)."""
        if self._index is None:
            try:
                self._build_index()
            except DataFormatError as exc:  # only a vocabulary read from a model folder builds it late
                raise ModelFormatError(f"label vocabulary: {exc.problem}") from None
        return self._index

    def _build_index(self) -> None:
        index = {n: j for j, n in enumerate(self.names)}
        if len(index) != len(self.names):
            seen: set[str] = set()
            dup = next(n for n in self.names if n in seen or seen.add(n))
            raise DataFormatError(None, None, f"label {dup!r} appears twice in the label vocabulary")
        self._index = index

    def __len__(self) -> int:
        return len(self.names)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LabelVocab) and self.to_json() == other.to_json()

    def __repr__(self) -> str:
        return f"LabelVocab({len(self)} labels{', with texts' if self.texts else ''})"

    def display_name(self, j: int) -> str:
        """What to show a person for label ``j``: its name from the label file, else its id."""
        if self.display is not None and self.display[j]:
            return self.display[j]
        return self.names[j]

    def uri(self, j: int) -> str:
        """The URI of label ``j`` from the label file, else its id (what Annif's API calls ``uri``)."""
        if self.uris is not None and self.uris[j]:
            return self.uris[j]
        return self.names[j]

    def extended(self, new_names: Iterable[str]) -> "LabelVocab":
        """This vocabulary with ``new_names`` appended (labels seen only at evaluation time)."""
        new = [n for n in new_names if n not in self.index]
        if not new:
            return self
        pad = [""] * len(new)
        return LabelVocab(self.names + new, display=None if self.display is None else self.display + pad,
                          texts=None if self.texts is None else self.texts + pad,
                          uris=None if self.uris is None else self.uris + pad)

    def with_label_file(self, path: str | os.PathLike, *, all_labels: bool = False) -> "LabelVocab":
        """Attach display names, texts and (where the file has a ``uri`` column) URIs from a label file
        (see :func:`read_label_file` and :func:`read_label_uris`). ``all_labels``: also append, in file
        order, the file's labels this vocabulary lacks (labels known only by their text: an open label set)."""
        info = read_label_file(path, self.names)
        vocab = self.extended(info) if all_labels else self
        names = vocab.names
        display = [info.get(n, ("", ""))[0] for n in names]
        texts = [info.get(n, ("", ""))[1] for n in names]
        found = read_label_uris(path)
        uris = [found.get(n, "") for n in names] if found else None
        return LabelVocab(names, display=display, texts=texts, uris=uris)

    # -- storage: plain JSON, never pickle ------------------------------------------------------
    def to_json(self) -> dict:
        out: dict = {"names": self.names}
        if self.display is not None:
            out["display"] = self.display
        if self.texts is not None:
            out["texts"] = self.texts
        if self.uris is not None:
            out["uris"] = self.uris
        return out

    @classmethod
    def from_json(cls, obj) -> "LabelVocab":
        if not isinstance(obj, dict) or not _is_str_list(obj.get("names")):
            raise ModelFormatError("label vocabulary: expected an object with a 'names' list of strings")
        for key in ("display", "texts", "uris"):
            if obj.get(key) is not None and not _is_str_list(obj[key]):
                raise ModelFormatError(f"label vocabulary: '{key}' must be a list of strings")
        names = obj["names"]
        # names are unique; the id -> column dict is built when first used (see ``index``). The check is
        # skipped for a file whose bytes passed it before (a verification stamp: xmtc.models.verified)
        unique = getattr(obj, "verified", False) or len(set(names)) == len(names)
        try:  # with a duplicate, the index is built now and names it
            return cls(names, display=obj.get("display"), texts=obj.get("texts"), uris=obj.get("uris"),
                       _checked=unique)
        except DataFormatError as exc:
            raise ModelFormatError(f"label vocabulary: {exc.problem}") from None


def read_label_file(path: str | os.PathLike, ids: Sequence[str] | None = None) -> dict[str, tuple[str, str]]:
    """Read ``id -> (display name, label text)`` from a tab-separated label file (gzip read transparently).

    Layouts, told apart by the file itself:

    * a header line starting with ``#`` names the columns; ``id`` (or the first column) is the label id,
      ``prefLabel`` or ``name`` the display name, a column starting with ``label_text`` or ``text`` the
      label text (yso-finna-en's ``#id uri prefLabel label_text(pref+alt) n_docs``);
    * no header, one column: names in label-id order, the Extreme Classification Repository / Mulan
      layout (line i names label ``i``);
    * no header, several columns: ``id<TAB>name[<TAB>text]``; a column of plain numbers is not a name
      (Reuters' ``name<TAB>n_train<TAB>n_test``).

    A label without a text uses its display name as its text. ``ids``, the label ids of the data or model
    the file is for, when given: a one-column file must have a line for every numeric label id, and a
    file without a header must hold them in its first column. A file in none of these layouts (a CSV, a
    header row without ``#``, the text before the id) is refused in one line naming the line and the
    expected columns (:mod:`xmtc.data.label_layout`).
    """
    rows: list[tuple[int, list[str]]] = []
    header: list[str] | None = None
    for lineno, line in iter_lines(path):  # bad UTF-8 or gzip: DataFormatError naming the line
        if not line.strip():
            continue
        if line.startswith("#"):
            if header is None and not rows:
                check_header_line(path, lineno, line)
                header = [h.strip().lower() for h in line[1:].split("\t")]
            continue
        rows.append((lineno, line.split("\t")))
    if not rows:
        raise DataFormatError(path, None, "holds no label: expected a line per label, 'id, name[, text]' or"
                                          " columns named by a '#' header line")
    if header is None:
        check_rows(path, rows, ids)  # a CSV, a header without '#', swapped columns: refused at their line
    out: dict[str, tuple[str, str]] = {}
    if header is not None:
        def col(*prefixes: str) -> int | None:
            return next((i for i, h in enumerate(header) if h.startswith(prefixes)), None)
        i_id = col("id") or 0
        i_name, i_text = col("preflabel", "name"), col("label_text", "text")
        for lineno, parts in rows:
            if len(parts) < len(header):
                raise DataFormatError(path, lineno, f"expected {len(header)} tab-separated columns"
                                                    f" ({', '.join(header)}), got {len(parts)}")
            name = parts[i_name].strip() if i_name is not None else ""
            text = parts[i_text].strip() if i_text is not None else ""
            out[parts[i_id].strip()] = (name, text or name)
        return out
    if rows and all(len(parts) == 1 for _, parts in rows):
        for i, (_, parts) in enumerate(rows):
            out[str(i)] = (parts[0].strip(), parts[0].strip())
        if ids is not None:
            numeric = [int(x) for x in ids if x.isdigit()]
            if numeric and max(numeric) >= len(rows):
                raise DataFormatError(path, None, f"lists {len(rows)} label names in id order, but the data"
                                                  f" uses label id {max(numeric)}")
        return out
    for lineno, parts in rows:
        label = parts[0].strip()
        if not label:
            raise DataFormatError(path, lineno, "empty label id in the first column")
        words = [p.strip() for p in parts[1:] if p.strip() and not is_number(p)]
        name = words[0] if words else ""
        text = words[1] if len(words) > 1 else name
        out[label] = (name, text)
    return out


def read_label_uris(path: str | os.PathLike) -> dict[str, str]:
    """``id -> uri`` from a label file whose ``#`` header names a ``uri`` column; ``{}`` for any other layout.

    Kept apart from :func:`read_label_file` (whose ``(name, text)`` pairs other code relies on); that
    function has already checked the file's layout when this one is called from ``with_label_file``.
    """
    header: list[str] | None = None
    out: dict[str, str] = {}
    i_id = i_uri = 0
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        if line.startswith("#"):
            if header is None and not out:
                header = [h.strip().lower() for h in line[1:].split("\t")]
                if "uri" not in header:
                    return {}
                i_id = next((i for i, h in enumerate(header) if h.startswith("id")), 0)
                i_uri = header.index("uri")
            continue
        if header is None:
            return {}
        parts = line.split("\t")
        if len(parts) <= max(i_id, i_uri):
            raise DataFormatError(path, lineno, f"expected {len(header)} tab-separated columns"
                                                f" ({', '.join(header)}), got {len(parts)}")
        out[parts[i_id].strip()] = parts[i_uri].strip()
    return out


def _is_str_list(value) -> bool:
    return isinstance(value, list) and all(map(isinstance, value, repeat(str)))  # map: no Python loop per label


def _str_list(values) -> list[str]:
    return list(values) if _is_str_list(values) else [str(x) for x in values]
