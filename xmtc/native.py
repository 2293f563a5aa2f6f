"""xmtc's compiled kernels (``xmtc/csrc``), loaded with ctypes.

Why C and ctypes instead of a JIT (numba) for the linear solver, beam search, k-means and the text
kernels (TF-IDF tokenising, n-grams and rows; character n-grams; the label-text route's top-k; the isotonic
maps' pool-adjacent-violators): these
run in every fit and prediction, and a JIT's price is paid by each process that uses them: ~54 MB of
LLVM in memory, ~0.3 s to import it and ~0.5 s to load even cached kernels on the first call.  On a
small data set (reuters21578: 7.8k documents) that was a third of the training time and half the
memory.  The C kernels are built by ``pip install`` (setup.py), cost nothing to load, and ctypes
releases the GIL around every call.

Each kernel takes raw pointers, so :func:`ptr` checks dtype and contiguity before handing one out:
a wrong array here would be memory corruption, not an exception.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np

from .errors import XmtcError

_c_int, _c_i64, _c_i32, _c_dbl, _c_flt, _p = (ctypes.c_int, ctypes.c_int64, ctypes.c_int32, ctypes.c_double,
                                              ctypes.c_float, ctypes.c_void_p)

# name -> (argument types); every kernel returns int (0 = done, -1 = out of memory) unless listed in _VOID
# (nothing) or _RESTYPE (its own type: a count)
_SIGNATURES = {
    "xmtc_build_batch": [_p] * 9 + [_c_dbl] + [_p] * 4 + [_c_i64, _p, _p, _c_int],
    "xmtc_train_batch": [_p] * 18 + [_c_dbl] * 4 + [_c_i64, _c_dbl, _c_i32, _c_i64, _c_i64, _p, _p, _c_i64]
                        + [_p] * 4 + [_c_int],
    "xmtc_train_batch_warm": [_p] * 18 + [_c_dbl] * 4 + [_c_i64, _c_dbl, _c_i32, _c_i64, _c_i64, _p, _p, _c_i64]
                             + [_p] * 4 + [_p] * 3 + [_c_int, _c_i64, _c_int],
    "xmtc_kmeans_split_level": [_p, _p, _p, _c_i64] + [_p] * 6 + [_c_i64, _c_i64, _c_int, _c_int],
    "xmtc_layout_edit": [_c_i64] + [_p] * 14,
    "xmtc_columns_fill": [_p, _p, _p, _c_i64, _p, _c_i64] + [_p] * 6,
    "xmtc_layout_columns": [_c_i64] + [_p] * 9,
    "xmtc_beam_step": [_c_i64] + [_p] * 5 + [_c_i64] + [_p] * 6 + [_c_flt, _c_i64, _c_int, _p, _p, _c_i64, _c_int],
    "xmtc_scan_words": [_p, _c_i64, _p, _c_i64, _p, _p, _p, _p],
    "xmtc_ngram_fit": [_p, _p, _c_i64, _p, _c_i64, _c_i64, _c_i64, _p, _p, _p],
    "xmtc_ngram_lookup": [_p, _p, _c_i64, _p, _c_i64, _c_i64, _c_i64, _p, _c_i64, _p],
    "xmtc_doc_term_freq": [_p, _p, _c_i64, _c_i64, _p, _p, _p],
    "xmtc_rows_bound": [_p, _c_i64, _c_i64, _p, _c_i64, _p],
    "xmtc_rows_fill": [_p, _c_i64, _c_i64, _p, _c_i64, _p, _p, _c_int, _c_int, _c_int, _c_i64, _c_int, _p, _p, _p],
    "xmtc_rows_compact": [_p, _p, _c_i64, _c_int, _p, _p, _p, _p],
    "xmtc_char_fill": [_p, _c_i64, _p, _p, _c_int],
    "xmtc_char_ngram_ids": [_p, _p, _p] + [_c_i64] * 5 + [_p, _p, _c_int, _p, _p],
    "xmtc_route_top_rows": [_p, _p, _p, _c_i64, _p, _p, _p, _c_i64, _p, _p, _p, _p],
    "xmtc_pava": [_p, _p, _p, _c_i64],
    "xmtc_char_fit": [_p, _p] + [_c_i64] * 5 + [_p, _p, _c_i64, _p, _p, _p, _c_int, _p, _p, _c_i64],
}
_VOID = {"xmtc_columns_fill", "xmtc_layout_edit", "xmtc_ngram_lookup", "xmtc_doc_term_freq", "xmtc_rows_bound",
         "xmtc_rows_compact", "xmtc_char_fill", "xmtc_route_top_rows"}
_RESTYPE = {"xmtc_char_ngram_ids": ctypes.c_int64, "xmtc_layout_columns": ctypes.c_int64, "xmtc_pava": ctypes.c_int64,
            "xmtc_char_fit": ctypes.c_int64}

_lib = None


class NativeBuildError(XmtcError, ImportError):
    """The compiled kernels are missing: xmtc was not installed with ``pip install`` (which builds them)."""


def lib() -> ctypes.CDLL:
    """The loaded kernel library, its signatures declared (loaded once per process)."""
    global _lib
    if _lib is None:
        try:
            from . import _native
        except ImportError as exc:
            raise NativeBuildError(
                f"xmtc's compiled kernels are not built ({exc}); install xmtc with `pip install .` or "
                "`pip install -e .`, which compiles them (a C compiler is needed)") from None
        handle = ctypes.CDLL(_native.__file__)
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(handle, name)
            fn.argtypes = argtypes
            fn.restype = None if name in _VOID else _RESTYPE.get(name, ctypes.c_int)
        _lib = handle
    return _lib


def ptr(a: np.ndarray, dtype) -> int:
    """Address of a C-contiguous array of exactly ``dtype`` (checked: a mismatch is a bug, not data)."""
    if not isinstance(a, np.ndarray) or a.dtype != np.dtype(dtype) or not a.flags.c_contiguous:
        raise TypeError(f"kernel argument must be a C-contiguous {np.dtype(dtype)} array, got "
                        f"{getattr(a, 'dtype', type(a).__name__)}"
                        f"{'' if getattr(a, 'flags', None) is None or a.flags.c_contiguous else ' (not contiguous)'}")
    if a.flags.writeable and a.nbytes:  # through the buffer protocol: a third of ``a.ctypes.data``'s ~1.4 us
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    return a.ctypes.data  # read-only (memory-mapped) or empty


def check(status: int, what: str) -> None:
    if status != 0:
        raise MemoryError(f"{what}: out of memory in a compiled kernel")


def available_threads() -> int:
    """CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def resolve_threads(n_threads) -> int:
    """None / 0 / negative -> every available CPU; otherwise the number asked for (at least 1)."""
    if n_threads is None or isinstance(n_threads, bool) or int(n_threads) <= 0:
        return available_threads()
    return int(n_threads)
