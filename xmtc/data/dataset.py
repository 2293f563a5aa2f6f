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

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from ..errors import DataFormatError
from . import formats
from .io import format_from_name, guess_format, open_source
from .labels import LabelVocab

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
            raise DataFormatError(src, 1, "no labels found: expected TSV 'label1,label2<TAB>text', JSONL,"
                                          " Extreme Classification format or .npz (use --format to say which)")
        return formats.read_text_lines(src)


def read_dataset(path: str | os.PathLike, fmt: str | None = None, *, labels: LabelVocab | None = None,
                 unknown_labels: str = "error", label_file: str | os.PathLike | None = None) -> Dataset:
    """Read a labelled data file: TSV, JSONL, XC sparse format or PECOS npz (gzip read transparently).

    ``labels`` maps label names to columns (a model's vocabulary); without it the vocabulary is built
    from the file. ``label_file`` adds display names and label texts (e.g. yso-finna-en's labels.txt.gz).
    """
    if unknown_labels not in UNKNOWN_LABELS:
        raise DataFormatError(path, None, f"unknown_labels must be one of {', '.join(UNKNOWN_LABELS)}")
    raw = read_raw(path, fmt)
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
    if label_file is not None:
        vocab = vocab.with_label_file(label_file)
    return Dataset(raw.texts, raw.X, Y, vocab, str(path))


def read_inputs(path: str | os.PathLike, fmt: str | None = None):
    """Prediction input: a list of texts (plain lines, or TSV/JSONL with labels ignored) or a csr matrix."""
    raw = read_raw(path, fmt, need_labels=False)
    return raw.texts if raw.texts is not None else raw.X


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
