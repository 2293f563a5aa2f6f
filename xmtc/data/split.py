"""Seeded train/validation splits of a dataset.

``xmtc train`` cuts a validation split of its own to fit score calibration on (``--valid-size``), and
``xmtc split`` writes the two parts as files. Both go through :func:`split_indices`, so one seed gives
one split whichever way it is asked for: a permutation of the rows from ``numpy.random.default_rng(seed)``,
the first ``n_valid`` of it the validation part, both parts then kept in file order.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError, SetupError
from .dataset import Dataset


def n_valid_rows(n: int, valid: float) -> int:
    """Rows the validation part gets: ``valid`` as a fraction in (0, 1), or a count when >= 1."""
    if isinstance(valid, bool) or not isinstance(valid, (int, float, np.integer, np.floating)) \
            or not np.isfinite(valid) or valid < 0:
        raise SetupError(f"the validation size must be a fraction in [0, 1) or a count of documents,"
                         f" got {valid!r}")
    if valid == 0:
        return 0
    if valid < 1:
        return int(round(n * float(valid)))
    if float(valid) != int(valid):
        raise SetupError(f"a validation size of 1 or more is a count of documents; got {valid!r}")
    return int(valid)


def split_indices(n: int, valid: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(train rows, validation rows)``, each sorted; see the module doc for the rule."""
    n_valid = n_valid_rows(n, valid)
    if n_valid >= n and n_valid > 0:
        raise ConfigError(f"a validation split of {n_valid} documents leaves none of the {n} to train on")
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[n_valid:]), np.sort(perm[:n_valid])


def subset(ds: Dataset, rows: np.ndarray) -> Dataset:
    """The documents ``rows`` of ``ds`` (same label vocabulary and columns)."""
    rows = np.asarray(rows, dtype=np.int64)
    texts = None if ds.texts is None else [ds.texts[i] for i in rows.tolist()]
    X = None if ds.X is None else sp.csr_matrix(ds.X[rows])
    return Dataset(texts, X, sp.csr_matrix(ds.Y[rows]), ds.labels, ds.path)


def split_dataset(ds: Dataset, valid: float, seed: int = 0) -> tuple[Dataset, Dataset]:
    """``(train part, validation part)`` of ``ds`` by :func:`split_indices`."""
    train_rows, valid_rows = split_indices(len(ds), valid, seed)
    return subset(ds, train_rows), subset(ds, valid_rows)
