"""Load a dataset folder of ../shared/data and turn it into the shared sparse matrices.

Every library in a benchmark run is trained on the very same X/Y files written here, so any
difference in the table comes from the learners, not from tokenisation or label mapping.

Label columns: the train labels (sorted by name) come first; labels seen only in test are appended
after them in Y_test. No learner can predict those, but keeping them makes nDCG/PSP honest about
the documents that carry them (dropping them would inflate the ideal-DCG denominators' hit rate).
"""

from __future__ import annotations

import gzip
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

try:  # the parent always has xmtc on its path; keep this file usable without it
    from xmtc.errors import DataFormatError
except ImportError:  # pragma: no cover
    class DataFormatError(ValueError):  # type: ignore[no-redef]
        def __init__(self, path, line, problem):
            super().__init__(f"{path}:{line}: {problem}" if line else f"{path}: {problem}")


@dataclass
class Dataset:
    """Texts (None for bag-of-words sets) and binary label matrices with shared label columns."""

    name: str
    train_texts: list[str] | None
    test_texts: list[str] | None
    Y_train: sp.csr_matrix
    Y_test: sp.csr_matrix
    label_names: np.ndarray
    X_train: sp.csr_matrix | None = None  # given by *_xc files; otherwise built by featurize()
    X_test: sp.csr_matrix | None = None
    notes: list[str] = field(default_factory=list)


def read_tsv(path: str | os.PathLike) -> tuple[list[str], list[list[str]]]:
    """``label1,label2<TAB>text`` lines -> (texts, label lists); a bad line names file and line."""
    texts: list[str] = []
    labels: list[list[str]] = []
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.rstrip("\n")
            if not line:
                continue
            head, sep, text = line.partition("\t")
            if not sep:
                raise DataFormatError(path, lineno, "expected 'label1,label2<TAB>text' (no tab found)")
            labels.append([x for x in head.split(",") if x])
            texts.append(text)
    return texts, labels


def read_xc(path: str | os.PathLike) -> tuple[sp.csr_matrix, list[list[str]]]:
    """Extreme Classification Repository format -> (features csr float32, label-id lists)."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        header = fh.readline().split()
        if len(header) != 3:
            raise DataFormatError(path, 1, "expected header 'N_docs N_features N_labels'")
        n_docs, n_feat, _ = (int(x) for x in header)
        labels: list[list[str]] = []
        cols: list[np.ndarray] = []
        vals: list[np.ndarray] = []
        indptr = [0]
        for lineno, line in enumerate(fh, 2):
            parts = line.split()
            if parts and ":" not in parts[0]:
                labels.append(parts[0].split(","))
                parts = parts[1:]
            else:
                labels.append([])
            try:
                pairs = np.array([p.split(":") for p in parts], dtype=np.float64).reshape(-1, 2)
            except ValueError:
                raise DataFormatError(path, lineno, "features must be 'id:value' pairs") from None
            cols.append(pairs[:, 0].astype(np.int64))
            vals.append(pairs[:, 1].astype(np.float32))
            indptr.append(indptr[-1] + len(parts))
    if len(labels) != n_docs:
        raise DataFormatError(path, None, f"header says {n_docs} documents, file has {len(labels)}")
    X = sp.csr_matrix((np.concatenate(vals) if vals else np.zeros(0, np.float32),
                       np.concatenate(cols) if cols else np.zeros(0, np.int64), np.asarray(indptr)),
                      shape=(n_docs, n_feat), dtype=np.float32)
    X.sum_duplicates()
    return X, labels


def _flatten(label_lists: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter((len(x) for x in label_lists), dtype=np.int64, count=len(label_lists))
    flat = np.array([name for row in label_lists for name in row], dtype=str)
    return flat, lengths


def _binary_csr(rows_len: np.ndarray, cols: np.ndarray, n_cols: int) -> sp.csr_matrix:
    indptr = np.concatenate([[0], np.cumsum(rows_len)])
    Y = sp.csr_matrix((np.ones(cols.size, dtype=np.float32), cols.astype(np.int32), indptr),
                      shape=(rows_len.size, n_cols))
    Y.sum_duplicates()  # a label repeated on one line counts once
    Y.data[:] = 1.0
    return Y


def label_matrices(train_labels: list[list[str]], test_labels: list[list[str]]
                   ) -> tuple[sp.csr_matrix, sp.csr_matrix, np.ndarray]:
    """(Y_train n x L, Y_test m x (L + unseen), names) with train labels first, sorted by name."""
    train_flat, train_len = _flatten(train_labels)
    test_flat, test_len = _flatten(test_labels)
    vocab, train_cols = np.unique(train_flat, return_inverse=True)
    pos = np.minimum(np.searchsorted(vocab, test_flat), max(vocab.size - 1, 0))
    seen = vocab[pos] == test_flat if vocab.size else np.zeros(test_flat.size, bool)
    unseen_names, unseen_cols = np.unique(test_flat[~seen], return_inverse=True)
    test_cols = np.where(seen, pos, 0)
    test_cols[~seen] = vocab.size + unseen_cols
    names = np.concatenate([vocab, unseen_names])
    return (_binary_csr(train_len, train_cols, vocab.size),
            _binary_csr(test_len, test_cols, names.size), names)


def load_dataset(root: str | os.PathLike, name: str) -> Dataset:
    """Read ``root/name``: train/test TSV texts, or the ``*_xc`` bag-of-words files."""
    folder = Path(root) / name
    if not folder.is_dir():
        available = sorted(p.name for p in Path(root).iterdir() if p.is_dir()) if Path(root).is_dir() else []
        raise FileNotFoundError(f"{folder}: no such dataset folder (available in {root}: "
                                f"{', '.join(available) or 'none'})")
    if (folder / "train.txt.gz").exists():
        train_texts, train_labels = read_tsv(folder / "train.txt.gz")
        test_texts, test_labels = read_tsv(folder / "test.txt.gz")
        Y_train, Y_test, names = label_matrices(train_labels, test_labels)
        return Dataset(name, train_texts, test_texts, Y_train, Y_test, names)
    if (folder / "train_xc.txt.gz").exists():
        X_train, train_labels = read_xc(folder / "train_xc.txt.gz")
        X_test, test_labels = read_xc(folder / "test_xc.txt.gz")
        Y_train, Y_test, names = label_matrices(train_labels, test_labels)
        n_feat = max(X_train.shape[1], X_test.shape[1])
        X_train.resize(X_train.shape[0], n_feat)
        X_test.resize(X_test.shape[0], n_feat)
        return Dataset(name, None, None, Y_train, Y_test, names,
                       X_train=_l2_rows(X_train), X_test=_l2_rows(X_test),
                       notes=["features: the dataset's own bag of words, rows L2-normalised"])
    raise FileNotFoundError(f"{folder}: neither train.txt.gz nor train_xc.txt.gz found")


def _l2_rows(X: sp.csr_matrix) -> sp.csr_matrix:
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    norms[norms == 0] = 1.0
    return sp.csr_matrix(sp.diags((1.0 / norms).astype(np.float32)) @ X, dtype=np.float32)


def featurize(ds: Dataset, which: str = "auto") -> tuple[str, float]:
    """Fill ds.X_train/X_test with TF-IDF (1-2 grams, min_df 2, sublinear tf); return (name, seconds).

    ``which``: "xmtc" (xmtc.features.tfidf), "sklearn" (scikit-learn, the stand-in until xmtc's
    featurizer exists) or "auto" (xmtc if importable, else scikit-learn).
    """
    if ds.X_train is not None:
        return "dataset bag of words (no TF-IDF)", 0.0
    if which in ("auto", "xmtc"):
        try:
            from xmtc.features.tfidf import TfidfFeaturizer
        except ModuleNotFoundError as exc:
            if which == "xmtc" or (exc.name or "").split(".")[0] != "xmtc":
                raise
            which = "sklearn"
        else:
            which = "xmtc"
    t0 = time.perf_counter()
    if which == "xmtc":
        featurizer = TfidfFeaturizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
        name = "xmtc TfidfFeaturizer(ngram_range=(1,2), min_df=2, sublinear_tf=True)"
    elif which == "sklearn":
        from sklearn.feature_extraction.text import TfidfVectorizer
        featurizer = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True, dtype=np.float32)
        name = ("FALLBACK scikit-learn TfidfVectorizer(ngram_range=(1,2), min_df=2, sublinear_tf=True)"
                " -- not xmtc's featurizer")
    else:
        raise ValueError(f"unknown featurizer {which!r} (auto, xmtc, sklearn)")
    X_train = featurizer.fit_transform(ds.train_texts)
    X_test = featurizer.transform(ds.test_texts)
    ds.X_train = _clean(X_train)
    ds.X_test = _clean(X_test)
    return name, time.perf_counter() - t0


def _clean(X) -> sp.csr_matrix:
    X = sp.csr_matrix(X, dtype=np.float32)
    X.sum_duplicates()
    X.sort_indices()
    return X


def save_work(ds: Dataset, work: str | os.PathLike) -> Path:
    """Write X/Y train/test as csr float32 .npz (readable by the peers' older scipy)."""
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    for key in ("X_train", "X_test", "Y_train", "Y_test"):
        mat = sp.csr_matrix(getattr(ds, key), dtype=np.float32)
        mat.indices = mat.indices.astype(np.int32)
        mat.indptr = mat.indptr.astype(np.int64) if mat.nnz > np.iinfo(np.int32).max else \
            mat.indptr.astype(np.int32)
        sp.save_npz(work / f"{key}.npz", mat, compressed=False)
    return work
