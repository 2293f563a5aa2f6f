"""Readers and writers of the four data formats, one pair per format.

Readers return *raw* documents — texts or feature rows, label-name lists and each document's line
number — and leave turning names into label columns to :mod:`xmtc.data.dataset`, so that unknown
labels can be reported against the line they came from. Every reader stops at the first malformed
line with ``DataFormatError(path, line, problem)``.

Deliberate choices, the same in every format:

* An empty text is a valid document (TSV ``labels<TAB>`` with nothing after the tab, JSONL
  ``"text": ""``). It gets a zero feature vector; prediction falls back to the bias terms.
* A document without labels (TSV line starting with a tab, ``"labels": []``, XC line without a label
  field) is kept: in training it is a negative everywhere, in evaluation it counts with precision 0.
* A label repeated on one line counts once; labels are stripped of surrounding spaces; an empty label
  between commas (``a,,b``) is an error, as it is almost always a broken export.
* In TSV and JSONL a blank line is an error (it would silently shift every later line's output);
  in the plain ``text`` format (one text a line, for prediction) a blank line is an empty text.
"""

from __future__ import annotations

import io
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..errors import DataFormatError
from .io import Source, atomic_output, is_stream, iter_lines

log = logging.getLogger(__name__)


@dataclass
class RawDocuments:
    """What a reader found: texts or features, label-name lists, and the line each document came from."""

    texts: list[str] | None
    X: sp.csr_matrix | None
    labels: list[list[str]] | None     # None: the format carries no labels (plain text)
    lines: list[int] | None            # 1-based source line per document (None for npz)
    Y: sp.csr_matrix | None = None     # npz only: labels as a matrix, columns named "0".."L-1"
    n_labels: int | None = None        # XC only: the header's label count (ids are "0".."n_labels-1")
    ids: list[str | None] | None = None  # JSONL only: each object's "document_id" (None where absent)


def _split_labels(path, lineno: int, field: str) -> list[str]:
    if not field.strip():
        return []
    out: list[str] = []
    for name in field.split(","):
        name = name.strip()
        if not name:
            # a long field with spaces is a text, not labels: say so rather than quote a whole abstract
            hint = " (is the first column a text? expected 'label1,label2<TAB>text')" \
                if len(field) > 60 and " " in field else ""
            shown = field[:60] + "..." if hint else field
            raise DataFormatError(path, lineno, f"empty label name in {shown!r}{hint}")
        out.append(name)
    return list(dict.fromkeys(out))


# -- TSV: label1,label2<TAB>text ------------------------------------------------------------------
# a first line whose columns are both named like these is a header row, not a document labelled "labels"
HEADER_LABELS = frozenset({"label", "labels", "tag", "tags", "subject", "subjects", "category", "categories",
                           "class", "classes", "target", "targets", "y"})
HEADER_TEXTS = frozenset({"text", "texts", "title", "titles", "document", "documents", "doc", "content", "body",
                          "description", "input", "sentence", "x"})


def read_tsv(path) -> RawDocuments:
    texts, labels, lines = [], [], []
    for lineno, line in iter_lines(path):
        head, sep, text = line.partition("\t")
        if not sep:
            problem = "blank line" if not line.strip() else "no tab found"
            raise DataFormatError(path, lineno, f"{problem}; expected 'label1,label2<TAB>text'")
        if not lines and head.strip().lower() in HEADER_LABELS and text.strip().lower() in HEADER_TEXTS:
            raise DataFormatError(path, lineno, f"a header row ({head.strip()!r}, {text.strip()!r}), but the TSV"
                                                " layout has none: every line is 'label1,label2<TAB>text'; remove"
                                                " it (tail -n +2)")
        labels.append(_split_labels(path, lineno, head))
        texts.append(text)
        lines.append(lineno)
    _warn_if_labels_look_like_text(path, labels)
    return RawDocuments(texts, None, labels, lines)


_SWAP_SAMPLE = 5000  # labelled documents looked at: the first ones, enough evidence and cheap on any file


def _warn_if_labels_look_like_text(path, labels: list[list[str]]) -> None:
    """Warn (one line naming the file) when the labels column of a TSV file looks like texts: the columns
    swapped (``text<TAB>labels``), which reads without an error and trains a model on one label per title.

    The evidence, over the first labelled documents: most label names contain a space, and almost none
    occurs twice (real labels recur over documents; titles split at their commas do not). A warning, not
    an error: a small file of long, rare label names can look the same."""
    names = [name for row in labels[:_SWAP_SAMPLE] if row for name in row]
    n_docs = sum(1 for row in labels[:_SWAP_SAMPLE] if row)
    if n_docs < 10:
        return
    spaced = sum(1 for name in names if " " in name)
    if 2 * spaced > len(names) and len(set(names)) >= 0.9 * len(names):
        example = next(name for name in names if " " in name)
        log.warning("%s: the labels column looks like text (%d of %d label names contain spaces and almost"
                    " none repeats, e.g. %r): are the columns swapped? expected 'label1,label2<TAB>text'",
                    path, spaced, len(names), example[:60])


def write_tsv(path, texts, label_lists) -> None:
    with atomic_output(path) as fh:
        for i, (text, labels) in enumerate(zip(texts, label_lists)):
            for name in labels:
                if "," in name or "\t" in name or "\n" in name:
                    raise DataFormatError(path, i + 1, f"label {name!r} cannot be written to TSV"
                                                       " (contains a comma, tab or newline)")
            fh.write(",".join(labels) + "\t" + _one_line(text) + "\n")


def _one_line(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")


# -- plain text: one text a line (prediction input) ------------------------------------------------
def read_text_lines(path) -> RawDocuments:
    texts, lines = [], []
    for lineno, line in iter_lines(path):
        texts.append(line)
        lines.append(lineno)
    return RawDocuments(texts, None, None, lines)


# -- JSONL: {"text": ..., "labels": [...]} ---------------------------------------------------------
def read_jsonl(path, need_labels: bool = True) -> RawDocuments:
    texts, labels, lines, ids = [], [], [], []
    for lineno, line in iter_lines(path):
        if not line.strip():
            raise DataFormatError(path, lineno, "blank line; expected one JSON object a line")
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataFormatError(path, lineno, f"invalid JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise DataFormatError(path, lineno, 'expected a JSON object {"text": ..., "labels": [...]}')
        text = obj.get("text")
        if not isinstance(text, str):
            raise DataFormatError(path, lineno, "'text' must be a string" if "text" in obj else "missing 'text'")
        row = obj.get("labels")
        if row is None and not need_labels:
            row = []
        if not isinstance(row, list) or not all(isinstance(x, str) for x in row):
            raise DataFormatError(path, lineno, "'labels' must be a list of strings" if "labels" in obj
                                  else "missing 'labels'")
        names = [x.strip() for x in row]
        if any(not x for x in names):
            raise DataFormatError(path, lineno, "empty label name in 'labels'")
        doc_id = obj.get("document_id")
        if doc_id is not None and (not isinstance(doc_id, (str, int)) or isinstance(doc_id, bool)):
            raise DataFormatError(path, lineno, "'document_id' must be a string or an integer")
        texts.append(text)
        labels.append(list(dict.fromkeys(names)))
        lines.append(lineno)
        ids.append(None if doc_id is None else str(doc_id))
    return RawDocuments(texts, None, labels, lines, ids=ids if any(i is not None for i in ids) else None)


def write_jsonl(path, texts, label_lists) -> None:
    with atomic_output(path) as fh:
        for text, labels in zip(texts, label_lists):
            fh.write(json.dumps({"text": text, "labels": list(labels)}, ensure_ascii=False) + "\n")


# -- Extreme Classification Repository: header, then "l1,l2 f:v f:v ..." -----------------------------
def read_xc(path) -> RawDocuments:
    lines_it = iter_lines(path)
    try:
        _, header = next(lines_it)
    except StopIteration:
        raise DataFormatError(path, 1, "empty file; expected header 'N_docs N_features N_labels'") from None
    parts = header.split()
    if len(parts) != 3 or not all(_is_id(p) for p in parts):
        raise DataFormatError(path, 1, f"expected header 'N_docs N_features N_labels', got {header[:60]!r}")
    n_docs, n_feat, n_labels = (int(p) for p in parts)
    for what, value, limit in (("N_docs", n_docs, _INT32_MAX), ("N_features", n_feat, _INT32_MAX),
                               ("N_labels", n_labels, MAX_XC_LABELS)):
        if value > limit:
            raise DataFormatError(path, 1, f"header {what} = {value} is beyond what xmtc can hold ({limit:,})")
    labels: list[list[str]] = []
    lines: list[int] = []
    indptr = [0]
    cols: list[int] = []
    vals: list[float] = []
    for lineno, line in lines_it:
        tokens = line.split()
        row_labels: list[str] = []
        if tokens and ":" not in tokens[0]:
            row_labels = _split_labels(path, lineno, tokens[0])
            tokens = tokens[1:]
            for name in row_labels:
                if not _is_id(name) or int(name) >= n_labels:
                    raise DataFormatError(path, lineno, f"label {name!r} is not an id in [0, {n_labels})")
        for tok in tokens:
            f, sep, v = tok.partition(":")
            try:
                fid, val = int(f), float(v)
            except ValueError:
                raise DataFormatError(path, lineno, f"feature {tok!r} is not 'id:value'") from None
            if not sep or fid < 0 or fid >= n_feat:
                raise DataFormatError(path, lineno, f"feature {tok!r}: id must lie in [0, {n_feat})")
            if not math.isfinite(val):
                raise DataFormatError(path, lineno, f"feature {tok!r}: value is not a finite number")
            cols.append(fid)
            vals.append(val)
        indptr.append(len(cols))
        labels.append(row_labels)
        lines.append(lineno)
    if len(labels) != n_docs:
        raise DataFormatError(path, None, f"header says {n_docs} documents, the file has {len(labels)}")
    X = sp.csr_matrix((np.asarray(vals, dtype=np.float32), np.asarray(cols, dtype=np.int32),
                       np.asarray(indptr, dtype=np.int64)), shape=(n_docs, n_feat))
    X.sum_duplicates()
    return RawDocuments(None, X, labels, lines, n_labels=n_labels)


# feature and document indices are int32 in the sparse matrices; XC label ids become the vocabulary's
# names one by one (unused ids included), so a header claiming billions of labels would exhaust memory
# before any line is read: the largest public XMC sets have about 3M labels
_INT32_MAX = 2**31 - 1
MAX_XC_LABELS = 50_000_000


def _is_id(token: str) -> bool:
    """A non-negative integer id in ASCII digits (``str.isdigit`` also accepts '²', which int() rejects)."""
    return token.isascii() and token.isdigit()


def _float32_text(v) -> str:
    """The shortest text that reads back as the same float32 (what the reader stores), '1' for 1.0."""
    text = str(np.float32(v))
    return text[:-2] if text.endswith(".0") else text


def write_xc(path, X: sp.csr_matrix, Y: sp.csr_matrix, label_names=None) -> None:
    """Write XC format; ``label_names`` (column j's label id, e.g. a vocabulary's names) are written as
    the labels, so that reading the file back gives the same label ids; without them, column numbers."""
    X, Y = sp.csr_matrix(X, dtype=np.float32), sp.csr_matrix(Y)
    Y.sort_indices()
    if label_names is None:
        ids, n_labels = [str(j) for j in range(Y.shape[1])], Y.shape[1]
    else:
        ids = [str(n) for n in label_names]
        if len(ids) != Y.shape[1]:
            raise DataFormatError(path, None, f"{len(ids)} label names for {Y.shape[1]} label columns")
        bad = next((n for n in ids if not _is_id(n)), None)
        if bad is not None:
            raise DataFormatError(path, None, f"label {bad!r} cannot be written to XC format"
                                              " (its labels are non-negative integer ids)")
        n_labels = max((int(n) + 1 for n in ids), default=0)
    with atomic_output(path) as fh:
        fh.write(f"{X.shape[0]} {X.shape[1]} {n_labels}\n")
        for i in range(X.shape[0]):
            lab = ",".join(ids[j] for j in Y.indices[Y.indptr[i]:Y.indptr[i + 1]])
            lo, hi = X.indptr[i], X.indptr[i + 1]
            feats = " ".join(f"{j}:{_float32_text(v)}" for j, v in zip(X.indices[lo:hi], X.data[lo:hi]))
            fh.write(f"{lab} {feats}".rstrip() + "\n")


# -- PECOS-style npz: X.npz (csr features) with a sibling Y.npz ------------------------------------
def sibling_labels_path(path) -> Path:
    """PECOS names label matrices like their feature matrices with X -> Y (``X.trn.npz`` -> ``Y.trn.npz``)."""
    path = Path(path)
    name = path.name
    i = name.find("X")
    if i < 0:
        raise DataFormatError(path, None, "cannot find the labels: an npz feature file's name must contain 'X'"
                                          " (its labels are the sibling file with X -> Y, e.g. X.trn.npz / Y.trn.npz)")
    return path.with_name(name[:i] + "Y" + name[i + 1:])


def _load_csr(path) -> sp.csr_matrix:
    """A scipy sparse .npz from a file name or an open :class:`~xmtc.data.io.Source` (read whole: zip
    needs to seek, which a pipe cannot)."""
    if isinstance(path, Source):
        data = path.read_bytes()
        if not data:
            raise DataFormatError(path, None, "empty input; expected a scipy sparse .npz file")
        fileobj = io.BytesIO(data)
    else:
        if not Path(path).is_file():
            raise DataFormatError(path, None, "file not found")
        fileobj = path
    try:
        M = sp.load_npz(fileobj)  # numeric arrays only: scipy loads with allow_pickle=False
        M = sp.csr_matrix(M, dtype=np.float32)
        M.check_format(full_check=True)  # indices in range, indptr monotone: before anything indexes with them
    except Exception as exc:  # zip/format errors of every kind
        raise DataFormatError(path, None, f"not a scipy sparse .npz file ({exc})") from None
    if M.shape[1] > _INT32_MAX:
        raise DataFormatError(path, None, f"has {M.shape[1]} columns, beyond what xmtc can hold ({_INT32_MAX:,})")
    if M.nnz and not np.all(np.isfinite(M.data)):
        raise DataFormatError(path, None, "contains NaN or infinite values")
    M.sum_duplicates()
    M.sort_indices()
    return M


def read_npz(path, need_labels: bool = True) -> RawDocuments:
    if isinstance(path, Source) and not path.stream:
        path = path.path  # a file: let the loader open it by name
    if need_labels and is_stream(path):
        raise DataFormatError(path, None, "npz from a pipe carries no labels (they live in a sibling Y file);"
                                          " give the X file's path")
    X = _load_csr(path)
    Y = None
    if need_labels:
        ypath = sibling_labels_path(path)
        Y = _load_csr(ypath)
        if Y.shape[1] > MAX_XC_LABELS:  # each column becomes a label name
            raise DataFormatError(ypath, None, f"has {Y.shape[1]} label columns, beyond what xmtc can hold"
                                               f" ({MAX_XC_LABELS:,})")
        if Y.shape[0] != X.shape[0]:
            raise DataFormatError(ypath, None, f"has {Y.shape[0]} rows but {Path(path).name} has {X.shape[0]}")
    return RawDocuments(None, X, None, None, Y=Y)


def write_npz(path, X: sp.csr_matrix, Y: sp.csr_matrix) -> None:
    """X to ``path`` and Y beside it; both are written in full before either replaces a file, so a
    failure leaves the old pair (or none), never a new X beside an old Y."""
    with atomic_output(Path(path), binary=True) as fx, atomic_output(sibling_labels_path(path), binary=True) as fy:
        sp.save_npz(fx, sp.csr_matrix(X, dtype=np.float32), compressed=True)
        sp.save_npz(fy, sp.csr_matrix(Y, dtype=np.float32), compressed=True)
