"""The beam-search layout of a tree level as stored arrays (hierarchical-linear format 2), checked in chunks.

Why a second stored form: format 1 stores PECOS's csc weights, and loading turns them into the
:class:`~xmtc.linear.beam.BeamLevel` layout, which needs memory of the size of the weights and
time proportional to them. Storing the layout itself lets a loaded model predict straight from a
memory map of the file (:meth:`xmtc.models.storage.ModelReader.arrays` with ``mmap=True``): pages
are read when a query touches them, so a model larger than RAM still predicts.

Arrays read from a file reach the C kernel, which trusts them; so every invariant the kernel relies
on is checked here (offsets in range and monotone, parents sorted within a feature, child offsets
below the parent's child count, finite weights). The checks walk the arrays in chunks of at most
``_CHUNK`` weights, so checking a memory-mapped model never allocates memory of its size.
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelFormatError
from .beam import ENTRY, BeamLevel

FORMAT_BEAM = 2
_CHUNK = 1 << 22  # weights per checking step (~50 MB of temporaries)


def level_arrays(lv: BeamLevel) -> dict[str, np.ndarray]:
    """The arrays of one level, ``ent`` as int32 (nnz, 2) pairs (child offset, float32 weight bits)."""
    return {"child_ptr": np.asarray(lv.child_ptr, dtype=np.int64), "child_ids": np.asarray(lv.child_ids, np.int32),
            "feat": np.asarray(lv.feat, dtype=np.int64), "seg": np.asarray(lv.seg, dtype=np.int32),
            "ent": np.ascontiguousarray(lv.ent).view(np.int32).reshape(-1, 2),
            "bias_w": np.asarray(lv.bias_w, dtype=np.float32),
            "n_features": np.array([lv.n_features], dtype=np.int64)}


def _get(arrays, key: str, dtype, ndim: int, where: str) -> np.ndarray:
    if key not in arrays:
        raise ModelFormatError(f"{where}: missing array '{key}'")
    a = arrays[key]
    if not isinstance(a, np.ndarray) or a.dtype != np.dtype(dtype) or a.ndim != ndim:
        got = f"{getattr(a, 'dtype', type(a).__name__)} with {getattr(a, 'ndim', '?')} dims"
        raise ModelFormatError(f"{where}: '{key}' must be a {ndim}-d {np.dtype(dtype)} array, got {got}")
    return a


def _monotone(a: np.ndarray, first: int, last: int) -> bool:
    """a[0] == first, a[-1] == last, non-decreasing; checked chunk by chunk."""
    if a.shape[0] == 0 or a[0] != first or a[-1] != last:
        return False
    for s in range(0, a.shape[0] - 1, _CHUNK):
        if np.any(np.diff(a[s:s + _CHUNK + 1]) < 0):
            return False
    return True


def _check_level(child_ptr, child_ids, feat, seg, ent, bias_w, d: int, n_parents: int, where: str) -> None:
    K = child_ids.shape[0]
    if child_ptr.shape != (n_parents + 1,) or not _monotone(child_ptr, 0, K):
        raise ModelFormatError(f"{where}: 'child_ptr' must rise from 0 to {K} over {n_parents} parents")
    if bias_w.shape != (K,) or not np.all(np.isfinite(bias_w)):
        raise ModelFormatError(f"{where}: 'bias_w' must hold {K} finite values")
    # every node exactly once, ascending under its parent
    seen = np.zeros(K, dtype=bool)
    if K and (child_ids.min() < 0 or child_ids.max() >= K):
        raise ModelFormatError(f"{where}: 'child_ids' must lie in [0, {K})")
    seen[child_ids] = True
    if not seen.all():
        raise ModelFormatError(f"{where}: 'child_ids' must list every node once")
    n_children = np.diff(child_ptr)
    starts = np.zeros(K, dtype=bool)
    starts[child_ptr[:-1][n_children > 0]] = True
    if K > 1 and np.any((np.diff(child_ids) <= 0) & ~starts[1:]):
        raise ModelFormatError(f"{where}: 'child_ids' must increase within each parent")
    S, nnz = seg.shape[0], ent.shape[0]
    if feat.shape != (d + 1, 2) or not _monotone(feat[:, 0], 0, S) or not _monotone(feat[:, 1], 0, nnz):
        raise ModelFormatError(f"{where}: 'feat' must be ({d + 1}, 2) offsets rising to {S} segments and {nnz}"
                               " weights")
    if seg.shape != (S, 2) or ent.shape != (nnz, 2):
        raise ModelFormatError(f"{where}: 'seg' and 'ent' must be (n, 2) arrays")
    # features in chunks of about _CHUNK weights: segment parents, counts and child offsets
    cuts = np.unique(np.concatenate([[0], np.searchsorted(feat[:, 1], np.arange(_CHUNK, nnz, _CHUNK)), [d]]))
    for f0, f1 in zip(cuts[:-1], cuts[1:]):
        s0, s1 = int(feat[f0, 0]), int(feat[f1, 0])
        e0, e1 = int(feat[f0, 1]), int(feat[f1, 1])
        par, cnt = seg[s0:s1, 0].astype(np.int64), seg[s0:s1, 1].astype(np.int64)
        if par.size and (par.min() < 0 or par.max() >= n_parents or cnt.min() < 1):
            raise ModelFormatError(f"{where}: segments must name parents in [0, {n_parents}) and hold weights")
        seg_of_feat = np.diff(feat[f0:f1 + 1, 0])
        first = np.zeros(par.size, dtype=bool)
        first[(feat[f0:f1, 0] - s0)[seg_of_feat > 0]] = True
        if par.size > 1 and np.any((np.diff(par) <= 0) & ~first[1:]):
            raise ModelFormatError(f"{where}: segment parents must increase within each feature")
        per_feat = np.zeros(f1 - f0, dtype=np.int64)
        nz = seg_of_feat > 0
        if par.size:
            per_feat[nz] = np.add.reduceat(cnt, (feat[f0:f1, 0] - s0)[nz])
        if not np.array_equal(per_feat, np.diff(feat[f0:f1 + 1, 1])):
            raise ModelFormatError(f"{where}: segment sizes do not add up to each feature's weights")
        col = ent[e0:e1, 0]
        limit = np.repeat(n_children[par], cnt)
        if col.size and (col.min() < 0 or np.any(col >= limit)):
            raise ModelFormatError(f"{where}: child offsets must lie below their parent's number of children")
        if not np.all(np.isfinite(ent[e0:e1, 1].view(np.float32))):
            raise ModelFormatError(f"{where}: weights contain NaN or infinite values")


def levels_from_arrays(arrays, n_levels: int, bias: float, *, check: bool = True) -> list[BeamLevel]:
    """Format-2 levels, checked; the arrays are used as given (memory maps stay memory maps).

    ``check=False`` skips the walk over every weight (:func:`_check_level`), keeping the checks of names,
    dtypes, shapes and contiguity: for arrays whose bytes already passed it (a file a verification stamp
    vouches for, :class:`xmtc.models.storage.Verified`)."""
    levels, n_parents, d = [], 1, None
    for t in range(n_levels):
        where = f"hierarchical linear model, level {t}"
        g = {k: _get(arrays, f"L{t}.{k}", dt, nd, where) for k, dt, nd in (
            ("child_ptr", np.int64, 1), ("child_ids", np.int32, 1), ("feat", np.int64, 2), ("seg", np.int32, 2),
            ("ent", np.int32, 2), ("bias_w", np.float32, 1), ("n_features", np.int64, 1))}
        nf = g.pop("n_features")
        if nf.shape != (1,) or nf[0] < 0 or nf[0] >= np.iinfo(np.int32).max or (d is not None and nf[0] != d):
            raise ModelFormatError(f"{where}: 'n_features' must be one valid count, the same at every level")
        d = int(nf[0])
        if not (g["ent"].flags.c_contiguous and g["seg"].flags.c_contiguous and g["feat"].flags.c_contiguous):
            raise ModelFormatError(f"{where}: arrays must be contiguous")
        if check:
            _check_level(**g, d=d, n_parents=n_parents, where=where)
        elif g["child_ptr"].shape != (n_parents + 1,):
            raise ModelFormatError(f"{where}: 'child_ptr' must have {n_parents + 1} entries")
        ent = g.pop("ent").view(ENTRY).reshape(-1)
        levels.append(BeamLevel(n_features=d, bias=bias, ent=ent, **g))
        n_parents = g["child_ids"].shape[0]
    return levels
