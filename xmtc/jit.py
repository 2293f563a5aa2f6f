"""Compilation settings for xmtc's numba kernels.

numba turns LLVM's SLP (straight-line) vectoriser off by default since 0.57, as a precaution after
LLVM miscompiled some code with it.  The linear solver's hot loops are written as 16 independent
lane accumulators precisely so that they map onto SIMD registers, and only the SLP vectoriser does
that mapping: with it on, the solver ran ~1.4x faster on reuters21578 with bit-identical weights (each
lane's arithmetic and its order are unchanged; tests compare both builds).  So the kernels that
benefit are compiled inside :func:`slp_vectorized`, and everything else keeps numba's default.

``XMTC_SLP_VECTORIZE=0`` in the environment switches it off (the kernels then compile as numba
would by default); it only matters when a kernel is compiled, not when it is loaded from numba's
on-disk cache, so clear ``__pycache__`` (or set ``NUMBA_CACHE_DIR``) after changing it.
"""

from __future__ import annotations

import contextlib
import os

import numba


def slp_enabled() -> bool:
    """Whether xmtc compiles its vectorisable kernels with the SLP vectoriser on."""
    return os.environ.get("XMTC_SLP_VECTORIZE", "1").strip() not in ("0", "false", "no", "off")


@contextlib.contextmanager
def slp_vectorized():
    """Compile any kernel first called inside this block with LLVM's SLP vectoriser on.

    numba reads ``config.SLP_VECTORIZE`` when it builds a function's pass pipeline, which happens
    at the first call (or not at all when the on-disk cache has the function), so the setting is
    held only for the duration of the calls in the block.
    """
    if not slp_enabled():
        yield
        return
    previous = numba.config.SLP_VECTORIZE
    numba.config.SLP_VECTORIZE = 1
    try:
        yield
    finally:
        numba.config.SLP_VECTORIZE = previous
