"""Load a dataset folder of ../shared/data and turn it into the shared sparse matrices.

Every library in a benchmark run is trained on the very same X/Y files written here, so any
difference in the table comes from the learners, not from tokenisation or label mapping.

Label columns: the train labels (sorted by name) come first; labels seen only in test are appended
after them in Y_test. No learner can predict those, but keeping them makes nDCG/PSP honest about
the documents that carry them (dropping them would inflate the ideal-DCG denominators' hit rate).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from xmtc.data import formats, label_matrix
from xmtc.index.pifa import normalize_rows


def read_tsv(path: str | os.PathLike, limit: int | None = None) -> tuple[list[str], list[list[str]]]:
    """(texts, label lists) of a TSV data file (``label1,label2<TAB>text``), read by xmtc's own reader;
    the first ``limit`` documents where given. The one TSV reader of the benchmark scripts."""
    docs = formats.read_tsv(Path(path))
    texts, labels = list(docs.texts), [list(x) for x in docs.labels]
    if limit is not None:
        texts, labels = texts[:limit], labels[:limit]
    return texts, labels


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


def label_matrices(train_labels: list[list[str]], test_labels: list[list[str]]
                   ) -> tuple[sp.csr_matrix, sp.csr_matrix, np.ndarray]:
    """(Y_train n x L, Y_test m x (L + unseen), names) with train labels first, sorted by name."""
    Y_train, vocab = label_matrix(train_labels)
    Y_test, full = label_matrix(test_labels, vocab, unknown_labels="extend")
    Y_train.resize(Y_train.shape[0], len(vocab))
    return Y_train, Y_test, np.asarray(full.names)


def _pick(n: int, limit: int | None, rng: np.random.Generator) -> np.ndarray | None:
    """Sorted seeded-random row ids to keep (the files are sorted by text: a head would be biased)."""
    if limit is None or limit >= n:
        return None
    return np.sort(rng.choice(n, size=limit, replace=False))


def load_dataset(root: str | os.PathLike, name: str, *, max_train: int | None = None,
                 max_test: int | None = None, seed: int = 0) -> Dataset:
    """Read ``root/name``: train/test TSV texts, or the ``*_xc`` bag-of-words files.

    ``max_train``/``max_test`` keep a seeded random sample of that many documents (for smoke tests);
    the label columns are then those of the kept train documents.
    """
    folder = Path(root) / name
    if not folder.is_dir():
        available = sorted(p.name for p in Path(root).iterdir() if p.is_dir()) if Path(root).is_dir() else []
        raise FileNotFoundError(f"{folder}: no such dataset folder (available in {root}: "
                                f"{', '.join(available) or 'none'})")
    rng = np.random.default_rng(seed)
    notes = []
    if max_train is not None or max_test is not None:
        notes.append(f"seeded random cut (seed {seed}): at most {max_train} train / {max_test} test documents")
    if (folder / "train.txt.gz").exists():
        train = formats.read_tsv(folder / "train.txt.gz")
        test = formats.read_tsv(folder / "test.txt.gz")
        tr_texts, tr_labels, te_texts, te_labels = train.texts, train.labels, test.texts, test.labels
        keep = _pick(len(tr_texts), max_train, rng)
        if keep is not None:
            tr_texts, tr_labels = [tr_texts[i] for i in keep], [tr_labels[i] for i in keep]
        keep = _pick(len(te_texts), max_test, rng)
        if keep is not None:
            te_texts, te_labels = [te_texts[i] for i in keep], [te_labels[i] for i in keep]
        Y_train, Y_test, names = label_matrices(tr_labels, te_labels)
        return Dataset(name, list(tr_texts), list(te_texts), Y_train, Y_test, names, notes=notes)
    if (folder / "train_xc.txt.gz").exists():
        train = formats.read_xc(folder / "train_xc.txt.gz")
        test = formats.read_xc(folder / "test_xc.txt.gz")
        X_train, X_test, tr_labels, te_labels = train.X, test.X, train.labels, test.labels
        keep = _pick(X_train.shape[0], max_train, rng)
        if keep is not None:
            X_train, tr_labels = X_train[keep], [tr_labels[i] for i in keep]
        keep = _pick(X_test.shape[0], max_test, rng)
        if keep is not None:
            X_test, te_labels = X_test[keep], [te_labels[i] for i in keep]
        Y_train, Y_test, names = label_matrices(tr_labels, te_labels)
        n_feat = max(X_train.shape[1], X_test.shape[1])
        X_train.resize(X_train.shape[0], n_feat)
        X_test.resize(X_test.shape[0], n_feat)
        return Dataset(name, None, None, Y_train, Y_test, names,
                       X_train=normalize_rows(X_train), X_test=normalize_rows(X_test),
                       notes=["features: the dataset's own bag of words, rows L2-normalised", *notes])
    raise FileNotFoundError(f"{folder}: neither train.txt.gz nor train_xc.txt.gz found")


def featurize(ds: Dataset, which: str = "xmtc", threads: int | None = None) -> tuple[str, float]:
    """Fill ds.X_train/X_test with TF-IDF (1-2 grams, min_df 2, sublinear tf); return (name, seconds).

    ``which``: "xmtc" (xmtc.features.tfidf) or "sklearn" (scikit-learn's TfidfVectorizer, same settings,
    to check that no library owes its result to xmtc's tokenizer). xmtc builds rows on at most ``threads``
    threads (None: every available CPU).
    """
    if ds.X_train is not None:
        return "dataset bag of words (no TF-IDF)", 0.0
    t0 = time.perf_counter()
    if which == "xmtc":
        from xmtc.features.tfidf import TfidfFeaturizer
        featurizer = TfidfFeaturizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
        featurizer.n_threads = threads
        name = "xmtc TfidfFeaturizer(ngram_range=(1,2), min_df=2, sublinear_tf=True)"
    elif which == "sklearn":
        from sklearn.feature_extraction.text import TfidfVectorizer
        featurizer = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True, dtype=np.float32)
        name = "scikit-learn TfidfVectorizer(ngram_range=(1,2), min_df=2, sublinear_tf=True)"
    else:
        raise ValueError(f"unknown featurizer {which!r} (xmtc, sklearn)")
    X_train = featurizer.fit_transform(ds.train_texts)
    X_test = featurizer.transform(ds.test_texts)
    ds.X_train = _clean(X_train)
    ds.X_test = _clean(X_test)
    return name, time.perf_counter() - t0


def featurizer_race(ds: Dataset, threads: int | None = None) -> dict:
    """Seconds to fit + transform the train texts with xmtc's TF-IDF and with scikit-learn's, same settings.

    Run one after the other on this interpreter (scikit-learn is single-threaded; xmtc builds rows
    on at most ``threads`` threads, None: every available CPU), each on the raw train texts, output discarded.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from xmtc.features.tfidf import TfidfFeaturizer

    def xmtc_featurizer():
        featurizer = TfidfFeaturizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
        featurizer.n_threads = threads
        return featurizer

    out = {}
    for name, make in (("xmtc", xmtc_featurizer),
                       ("sklearn", lambda: TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True,
                                                           dtype=np.float32))):
        t0 = time.perf_counter()
        X = make().fit_transform(ds.train_texts)
        out[f"{name}_s"] = time.perf_counter() - t0
        out[f"{name}_n_features"] = int(X.shape[1])
        del X
    return out


def _clean(X) -> sp.csr_matrix:
    X = sp.csr_matrix(X, dtype=np.float32)
    X.sum_duplicates()
    X.sort_indices()
    return X


def save_work(ds: Dataset, work: str | os.PathLike) -> Path:
    """Write X/Y train/test as csr float32 .npz (readable by the peers' older scipy), and the texts.

    Texts (text datasets only) go to ``train_texts.json`` / ``test_texts.json`` (one JSON list each),
    for the libraries that start from raw text (transformer.py).
    """
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    for key in ("X_train", "X_test", "Y_train", "Y_test"):
        mat = sp.csr_matrix(getattr(ds, key), dtype=np.float32)
        mat.indices = mat.indices.astype(np.int32)
        mat.indptr = mat.indptr.astype(np.int64) if mat.nnz > np.iinfo(np.int32).max else \
            mat.indptr.astype(np.int32)
        sp.save_npz(work / f"{key}.npz", mat, compressed=False)
    for split, texts in (("train", ds.train_texts), ("test", ds.test_texts)):
        path = work / f"{split}_texts.json"
        if texts is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(json.dumps(list(texts), ensure_ascii=False), encoding="utf-8")
    return work
