"""The checks and conversions of :func:`xmtc.linear.solver.train_level`'s arguments, before any solving.

The C kernels (``xmtc/csrc/solver.c``) trust what they are given, so everything is checked here first: ``X``,
``Y`` and ``active`` become canonical float32 CSR (sorted, no duplicates, no stored zeros; canonicalised on a
copy, never the caller's data), ``X`` must be finite, the row counts must agree, ``parent_of`` must hold one
parent in range per output, every count must stay below 2**31 - 1 (the kernels' ids are int32), and the
settings must be numbers in range. A wrong input is then a one-line ``ValueError`` / ``ConfigError`` naming the
argument, not a crash in C. The old weights of a warm start (``init``, ``warm``) become the csc arrays and mode
code the warm kernel reads. Separate from the driver (:mod:`xmtc.linear.solver`) because none of it is about
solving: the driver only ever sees checked arrays.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .. import native
from ..errors import ConfigError

__all__ = ["check_inputs", "warm_arrays"]


def _as_csr(name, A, dtype):
    if sp.issparse(A):
        A = sp.csr_matrix(A)
    elif isinstance(A, np.ndarray) and A.ndim == 2:
        A = sp.csr_matrix(A)
    else:
        raise ValueError(f"{name} must be a 2-D scipy sparse matrix or numpy array, got {type(A).__name__}")
    if not (np.issubdtype(A.dtype, np.number) or A.dtype == np.bool_):
        raise ValueError(f"{name} must be numeric, got dtype {A.dtype}")
    A = A.astype(dtype, copy=False)
    if not A.has_canonical_format or not A.data.all():  # canonicalise a copy: never touch the caller's data
        A = A.copy()
        A.sum_duplicates()
        A.eliminate_zeros()
    return A


def _check_positive(name, value, allow_zero=False):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number, got {value!r}") from None
    if not np.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise ConfigError(f"{name} must be {'>= 0' if allow_zero else '> 0'} and finite, got {value!r}")
    return v


def check_inputs(X, Y, parent_of, active, C_pos, C_neg, bias, tol, max_iter, threshold, n_threads):
    """The arguments of ``train_level`` checked and converted: X, Y, active as canonical float32 CSR,
    parent_of as int64, the settings as floats / ints, ``n_threads`` resolved (None: every usable CPU)."""
    C_pos = _check_positive("C_pos", C_pos)
    C_neg = _check_positive("C_neg", C_neg)
    bias = _check_positive("bias", bias, allow_zero=True)
    tol = _check_positive("tol", tol)
    threshold = _check_positive("threshold", threshold, allow_zero=True)
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise ConfigError(f"max_iter must be an integer >= 1, got {max_iter!r}")
    if n_threads is None:
        n_threads = native.available_threads()
    elif isinstance(n_threads, bool) or not isinstance(n_threads, (int, np.integer)) or n_threads < 1:
        raise ConfigError(f"n_threads must be None or an integer >= 1, got {n_threads!r}")

    X = _as_csr("X", X, np.float32)
    Y = _as_csr("Y", Y, np.float32)
    active = _as_csr("active", active, np.float32)
    n, d = X.shape
    if not np.all(np.isfinite(X.data)):
        raise ValueError("X contains NaN or infinite values")
    if Y.shape[0] != n:
        raise ValueError(f"Y has {Y.shape[0]} rows but X has {n}: they must describe the same instances")
    if active.shape[0] != n:
        raise ValueError(f"active has {active.shape[0]} rows but X has {n}: they must describe the same "
                         "instances")
    K = Y.shape[1]
    P = active.shape[1]
    parent_of = np.asarray(parent_of)
    if parent_of.ndim != 1 or parent_of.shape[0] != K:
        raise ValueError(f"parent_of must have shape ({K},) (one parent per column of Y), "
                         f"got shape {parent_of.shape}")
    if K and not np.issubdtype(parent_of.dtype, np.integer):
        raise ValueError(f"parent_of must hold integers, got dtype {parent_of.dtype}")
    parent_of = parent_of.astype(np.int64)
    if K and (parent_of.min() < 0 or parent_of.max() >= P):
        raise ValueError(f"parent_of values must lie in [0, {P}) (the columns of active), "
                         f"got range [{parent_of.min()}, {parent_of.max()}]")
    if max(n, d + 1, P, K) >= np.iinfo(np.int32).max:
        raise ValueError("more than 2**31 - 2 instances, features, parents or outputs are not supported")
    return (X, Y, parent_of, active, C_pos, C_neg, bias, tol, int(max_iter), threshold, int(n_threads))


_WARM = {None: 0, "proximal": 1, "dual": 2}


def warm_arrays(init, warm, shape):
    """The old weights as csc arrays for the kernel (empty ones for a cold start) and the mode code."""
    if warm not in _WARM:
        raise ConfigError(f"warm must be None, 'proximal' or 'dual', got {warm!r}")
    if warm is not None and init is None:
        raise ConfigError(f"warm={warm!r} needs the old weights (init)")
    W0 = sp.csc_matrix(shape, dtype=np.float32) if warm is None else sp.csc_matrix(init, dtype=np.float32)
    if W0.shape != shape:
        raise ValueError(f"init has shape {W0.shape}, expected {shape}")
    W0.sort_indices()
    return W0.indptr.astype(np.int64), W0.indices.astype(np.int32), W0.data, _WARM[warm]
