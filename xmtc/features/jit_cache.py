"""Say so when the TF-IDF kernels are compiled: the first run of a fresh installation waits for it.

The kernels of :mod:`xmtc.features.tfidf_kernels` are numba functions cached on disk (``cache=True``: in
the package's ``__pycache__``, or ``NUMBA_CACHE_DIR``). The first process that tokenises text after an
install compiles them, which took 20-25 s on a loaded 2-core machine (``xmtc demo``'s first TF-IDF pass: 21 s
against 2 s once cached); later processes load the compiled code in under a second. Nothing could tell the
two apart, so a first run looked like a slow library: this module logs one line when the cache is empty.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("xmtc.features.tfidf")


def cached_share(namespace: dict) -> float:
    """The share of the numba dispatchers in ``namespace`` whose on-disk cache index exists (1.0 if none)."""
    indexes = []
    for value in namespace.values():
        cache = getattr(value, "_cache", None)
        index = getattr(getattr(cache, "_cache_file", None), "_index_path", None)
        if index:
            indexes.append(index)
    return sum(os.path.exists(p) for p in indexes) / len(indexes) if indexes else 1.0


def notice_if_uncompiled(namespace: dict) -> bool:
    """Log (INFO) that the kernels of ``namespace`` are compiled now, when most have no cache; returns whether."""
    if cached_share(namespace) >= 0.5:
        return False
    log.info("compiling the TF-IDF kernels (numba) for this installation: some 20 s, once; later runs load them"
             " from the cache")
    return True
