"""A dataset in memory, and the one entry point that reads any supported file into it.

The label matrix ``Y`` is binary csr float32 (n, L) whose columns follow the :class:`LabelVocab`.
Training builds the vocabulary from the data (label ids sorted, so the same file gives the same
columns; XC files keep their numeric ids as columns, like npz); evaluation and prediction map names through the model's vocabulary, where a label the
model never saw is handled as the caller says (``unknown_labels``):

* ``"error"``: stop at the first line that has one (naming the line);
* ``"ignore"``: drop it, so the document is scored on the labels the model knows;
* ``"extend"``: append it as a new column after the model's labels. No model can predict such a
  label, but keeping it keeps R@k, nDCG@k and PSP@k honest about documents that carry it; this is
  what ``xmtc evaluate`` does.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp

from ..errors import DataFormatError
from . import formats
from .io import format_from_name, guess_format, open_source
from .labels import LabelVocab
from .text_limit import bound_texts

log = logging.getLogger(__name__)

UNKNOWN_LABELS = ("error", "ignore", "extend")


@dataclass
class Dataset:
    """Documents as texts (``texts``) or sparse features (``X``), their labels ``Y`` and vocabulary."""

    texts: list[str] | None
    X: sp.csr_matrix | None
    Y: sp.csr_matrix
    labels: LabelVocab
    path: str | None = None

    def __len__(self) -> int:
        return self.Y.shape[0]

    @property
    def inputs(self):
        """What an estimator takes: the texts, or the feature matrix for feature-only formats."""
        return self.texts if self.texts is not None else self.X

    def label_lists(self) -> list[list[str]]:
        names = self.labels.names
        return [[names[j] for j in self.Y.indices[self.Y.indptr[i]:self.Y.indptr[i + 1]]] for i in range(len(self))]


def label_matrix(label_lists: Sequence[Sequence[str]], vocab: LabelVocab | None = None, *,
                 unknown_labels: str = "error", path=None, lines: Sequence[int] | None = None
                 ) -> tuple[sp.csr_matrix, LabelVocab]:
    """Label-name lists -> (binary csr float32 (n, L), vocabulary); see the module doc for ``unknown_labels``."""
    if unknown_labels not in UNKNOWN_LABELS:
        raise DataFormatError(path, None, f"unknown_labels must be one of {', '.join(UNKNOWN_LABELS)}")
    if vocab is None:
        vocab = LabelVocab(sorted({name for row in label_lists for name in row}))
    elif unknown_labels == "extend":
        vocab = vocab.extended(sorted({name for row in label_lists for name in row} - vocab.index.keys()))
    index = vocab.index
    indptr = np.zeros(len(label_lists) + 1, dtype=np.int64)
    cols: list[int] = []
    for i, row in enumerate(label_lists):
        for name in row:
            j = index.get(name)
            if j is None:
                if unknown_labels == "error":
                    where = lines[i] if lines is not None else i + 1
                    raise DataFormatError(path, where, f"unknown label {name!r} (not among the model's"
                                                       f" {len(vocab)} labels)")
                continue
            cols.append(j)
        indptr[i + 1] = len(cols)
    Y = sp.csr_matrix((np.ones(len(cols), dtype=np.float32), np.asarray(cols, dtype=np.int32), indptr),
                      shape=(len(label_lists), len(vocab)))
    Y.sum_duplicates()
    Y.data[:] = 1.0
    Y.sort_indices()
    return Y, vocab


def read_raw(path: str | os.PathLike, fmt: str | None = None, *, need_labels: bool = True) -> formats.RawDocuments:
    """Parse a file in any supported format (guessed when ``fmt`` is None); ``-`` is standard input.

    The input is opened once: the format is guessed from the lines read ahead, which the reader then
    consumes, so a pipe is read in full rather than sniffed and reopened.
    """
    if (fmt or format_from_name(path)) == "npz":  # a zip is read whole by its own loader
        return formats.read_npz(path, need_labels=need_labels)
    raw = _read_source(path, fmt, need_labels)
    bound_texts(raw.texts, raw.lines, getattr(raw, "source", None) or path)
    return raw


def _read_source(path, fmt: str | None, need_labels: bool) -> formats.RawDocuments:
    with open_source(path) as src:
        fmt = guess_format(src, fmt)
        if fmt == "tsv":
            return formats.read_tsv(src)
        if fmt == "jsonl":
            return formats.read_jsonl(src, need_labels=need_labels)
        if fmt == "xc":
            return formats.read_xc(src)
        if fmt == "npz":
            return formats.read_npz(src, need_labels=need_labels)
        if need_labels:
            first = next((line for _, line in src.peek_lines(1)), "")
            if "," in first and "\t" not in first:
                raise DataFormatError(src, 1, "no labels found: this looks like CSV (commas, no tab); xmtc reads TSV"
                                              " 'label1,label2<TAB>text' or JSONL: convert it first (the tagging"
                                              " guide shows how)")
            raise DataFormatError(src, 1, "no labels found: expected TSV 'label1,label2<TAB>text', JSONL,"
                                          " Extreme Classification format or .npz (use --format to say which)")
        return formats.read_text_lines(src)


def read_dataset(path: str | os.PathLike, fmt: str | None = None, *, labels: LabelVocab | None = None,
                 unknown_labels: str = "error", label_file: str | os.PathLike | None = None,
                 all_file_labels: bool = False, warn_unknown: bool = True) -> Dataset:
    """Read a labelled data file: TSV, JSONL, XC sparse format or PECOS npz (gzip read transparently).

    ``labels`` maps label names to columns (a model's vocabulary); without it the vocabulary is built
    from the file. ``label_file`` adds display names and label texts (e.g. yso-finna-en's labels.txt.gz);
    ``all_file_labels`` also adds its labels that no document carries, as empty columns (open label sets).
    ``warn_unknown``: with ``"extend"``, say how many label occurrences the model cannot predict (an evaluation's
    misses); ``False`` where new labels are the point (``xmtc learn``).
    """
    if unknown_labels not in UNKNOWN_LABELS:
        raise DataFormatError(path, None, f"unknown_labels must be one of {', '.join(UNKNOWN_LABELS)}")
    raw = read_raw(path, fmt)
    Y, vocab = _label_columns(raw, path, labels, unknown_labels, warn_unknown)
    if label_file is not None:
        vocab = vocab.with_label_file(label_file, all_labels=all_file_labels)
    return Dataset(raw.texts, raw.X, _widened(Y, len(vocab)), vocab, str(path))


def _widened(Y: sp.csr_matrix, n_labels: int) -> sp.csr_matrix:
    """``Y`` with empty columns appended up to ``n_labels`` (labels a label file added)."""
    if Y.shape[1] >= n_labels:
        return Y
    Y = sp.csr_matrix(Y, copy=True)
    Y.resize(Y.shape[0], n_labels)
    return Y


def read_datasets(paths: Sequence[str | os.PathLike], fmt: str | None = None, *, labels: LabelVocab | None = None,
                  unknown_labels: str = "error", label_file: str | os.PathLike | None = None,
                  all_file_labels: bool = False, warn_unknown: bool = True) -> Dataset:
    """Several labelled files, in any mix of supported formats, as one :class:`Dataset` (rows in file order).

    Texts join texts and feature rows join feature rows of the same width; anything else is refused in one
    line naming the file. Without ``labels`` the vocabulary spans every file (label names sorted, or the
    numeric columns of XC / npz files); with one, each file maps through it and ``unknown_labels`` applies
    (``"extend"`` grows it file by file). One path reads exactly as :func:`read_dataset`.
    """
    paths = list(paths)
    if not paths:
        raise DataFormatError(None, None, "no input files given")
    if len(paths) == 1:
        return read_dataset(paths[0], fmt, labels=labels, unknown_labels=unknown_labels, label_file=label_file,
                            all_file_labels=all_file_labels, warn_unknown=warn_unknown)
    if unknown_labels not in UNKNOWN_LABELS:
        raise DataFormatError(paths[0], None, f"unknown_labels must be one of {', '.join(UNKNOWN_LABELS)}")
    raws = [read_raw(p, fmt) for p in paths]
    first = raws[0]
    for p, raw in zip(paths[1:], raws[1:]):
        if (raw.texts is None) != (first.texts is None):
            kind = "texts" if raw.texts is not None else "feature vectors"
            other = "texts" if first.texts is not None else "feature vectors"
            raise DataFormatError(p, None, f"holds {kind}, but {paths[0]} holds {other}: the files of one run"
                                           " must all be texts or all feature vectors")
        if raw.X is not None and raw.X.shape[1] != first.X.shape[1]:
            raise DataFormatError(p, None, f"has {raw.X.shape[1]} feature columns, but {paths[0]} has"
                                           f" {first.X.shape[1]}")
    if labels is None:
        numeric = [r.Y.shape[1] if r.Y is not None else r.n_labels for r in raws
                   if r.Y is not None or r.n_labels is not None]
        if numeric:  # XC ids / npz columns are column numbers: one numeric vocabulary over every file
            labels = LabelVocab([str(j) for j in range(max(numeric))])
            unknown_labels = "extend"  # a TSV/JSONL file among them may add names after the numbers
        else:
            labels = LabelVocab(sorted({name for r in raws for row in r.labels for name in row}))
    parts = []
    for p, raw in zip(paths, raws):
        Y, labels = _label_columns(raw, p, labels, unknown_labels, warn_unknown)
        parts.append(Y)
    for Y in parts:
        Y.resize(Y.shape[0], len(labels))
    texts = None if first.texts is None else [t for r in raws for t in r.texts]
    X = None if first.X is None else sp.vstack([r.X for r in raws], format="csr")
    if label_file is not None:
        labels = labels.with_label_file(label_file, all_labels=all_file_labels)
    return Dataset(texts, X, _widened(sp.vstack(parts, format="csr"), len(labels)), labels,
                   ", ".join(str(p) for p in paths))


def _label_columns(raw: formats.RawDocuments, path, labels: LabelVocab | None, unknown_labels: str,
                   warn_unknown: bool = True) -> tuple[sp.csr_matrix, LabelVocab]:
    """A parsed file's label matrix and vocabulary (see :func:`read_dataset`)."""
    if raw.Y is not None:  # npz: labels are already columns
        Y = raw.Y
        vocab = labels if labels is not None else LabelVocab([str(j) for j in range(Y.shape[1])])
        if Y.shape[1] > len(vocab):
            if unknown_labels == "error":
                raise DataFormatError(formats.sibling_labels_path(path), None, f"has {Y.shape[1]} label columns,"
                                      f" the model has {len(vocab)}")
            if unknown_labels == "ignore":
                Y = sp.csr_matrix(Y[:, :len(vocab)])
            else:
                vocab = vocab.extended(str(j) for j in range(len(vocab), Y.shape[1]))
        elif Y.shape[1] < len(vocab):
            Y = sp.csr_matrix(Y, copy=True)
            Y.resize(Y.shape[0], len(vocab))
        Y.eliminate_zeros()  # a stored 0 is not a label
        Y.data[:] = 1.0
    else:
        if labels is None and raw.n_labels is not None:
            # XC ids are column numbers: keep them (numeric order, unused ids included), as npz does
            labels = LabelVocab([str(j) for j in range(raw.n_labels)])
        Y, vocab = label_matrix(raw.labels, labels, unknown_labels=unknown_labels, path=path, lines=raw.lines)
    if warn_unknown and labels is not None and unknown_labels == "extend" and len(vocab) > len(labels):
        _warn_unknown(path, Y, len(labels))
    return Y, vocab


def _warn_unknown(path, Y: sp.csr_matrix, n_known: int) -> None:
    """Say how many label occurrences of an evaluation file the model cannot predict (they count as misses);
    when it is every one of them, the file and the model do not share a vocabulary, and every metric is 0."""
    unknown = int(np.count_nonzero(Y.indices >= n_known))
    distinct = len(np.unique(Y.indices[Y.indices >= n_known]))
    if unknown == Y.nnz:
        log.warning("%s: none of its %d label occurrences is a label of the model (%d distinct labels): every"
                    " metric will be 0; are the file and the model from the same vocabulary?", path, Y.nnz, distinct)
    else:
        log.info("%s: %d of %d label occurrences (%d distinct labels) are not labels of the model; they count as"
                 " misses", path, unknown, Y.nnz, distinct)


def read_inputs(path: str | os.PathLike, fmt: str | None = None):
    """Prediction input: a list of texts (plain lines, or TSV/JSONL with labels ignored) or a csr matrix."""
    raw = read_raw(path, fmt, need_labels=False)
    return raw.texts if raw.texts is not None else raw.X


def read_documents(path: str | os.PathLike, fmt: str | None = None) -> formats.RawDocuments:
    """Prediction input with where each document came from: ``.lines`` (1-based, None for npz) and, for
    JSONL, ``.ids`` (each object's ``document_id``); the inputs are ``.texts`` or ``.X``."""
    return read_raw(path, fmt, need_labels=False)


def write_dataset(path: str | os.PathLike, ds: Dataset, fmt: str | None = None) -> None:
    """Write ``ds`` in the format named by ``fmt`` or the file name (.jsonl, .npz, *_xc*; else TSV)."""
    name = Path(path).name.lower()
    if fmt is None:
        fmt = ("npz" if name.endswith(".npz") else "jsonl" if ".jsonl" in name or ".json" in name
               else "xc" if "_xc" in name or ".xc" in name else "tsv")
    if fmt in ("tsv", "jsonl"):
        if ds.texts is None:
            raise DataFormatError(path, None, f"{fmt} holds texts, but this dataset has features only")
        write = formats.write_tsv if fmt == "tsv" else formats.write_jsonl
        write(path, ds.texts, ds.label_lists())
    elif fmt in ("xc", "npz"):
        if ds.X is None:
            raise DataFormatError(path, None, f"{fmt} holds features, but this dataset has texts only")
        if fmt == "xc":
            formats.write_xc(path, ds.X, ds.Y, ds.labels.names)
        else:
            formats.write_npz(path, ds.X, ds.Y)
    else:
        raise DataFormatError(path, None, f"cannot write format {fmt!r}")


def as_label_matrix(Y: Any, labels: LabelVocab | None, n_rows: int, *, unknown_labels: str = "error"
                    ) -> tuple[sp.csr_matrix, LabelVocab]:
    """Turn label lists or a sparse indicator matrix into (binary csr float32, vocabulary).

    A sparse ``Y`` may have more columns than ``labels`` only with ``unknown_labels="extend"`` (the
    extra columns are labels the model never saw; see this module's doc).
    """
    if sp.issparse(Y):
        Y = sp.csr_matrix(Y, dtype=np.float32, copy=True)
        if Y.shape[0] != n_rows:
            raise DataFormatError(None, None, f"Y has {Y.shape[0]} rows but there are {n_rows} documents")
        if Y.nnz and not np.all(np.isfinite(Y.data)):
            raise DataFormatError(None, None, "Y contains NaN or infinite values")
        Y.eliminate_zeros()
        Y.data[:] = 1.0
        Y.sort_indices()
        if labels is None:
            labels = LabelVocab([str(i) for i in range(Y.shape[1])])
        elif Y.shape[1] > len(labels) and unknown_labels == "extend":
            labels = labels.extended(f"<unknown {j}>" for j in range(len(labels), Y.shape[1]))
        elif len(labels) != Y.shape[1]:
            raise DataFormatError(None, None, f"Y has {Y.shape[1]} columns but the label vocabulary has"
                                              f" {len(labels)} labels")
        return Y, labels
    if isinstance(Y, (str, bytes)) or not hasattr(Y, "__iter__"):
        raise DataFormatError(None, None, "labels must be a sparse matrix or a list of label lists")
    Y = list(Y)
    if len(Y) != n_rows:
        raise DataFormatError(None, None, f"got {len(Y)} label lists for {n_rows} documents")
    for i, row in enumerate(Y):
        if isinstance(row, str) or not all(isinstance(x, str) for x in row):
            raise DataFormatError(None, i + 1, "labels of a document must be a list of strings")
    return label_matrix(Y, labels, unknown_labels=unknown_labels)
