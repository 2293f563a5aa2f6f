"""Top-k label vectors by inner product: the index every embedding-based method predicts with.

A dual encoder, label-text similarity and kNN voting over training texts all end in the same step: embed
the text, return the k label (or training-text) vectors with the largest inner product (vectors
L2-normalised, so cosine). :class:`VectorIndex` is that step, with two backends:

* ``"exact"``: the vectors in one float32 matrix, queries scored in blocks by one BLAS matmul each, top k by
  ``argpartition``. Exact, nothing to build. Measured on 384-d clustered data, 2 cores shared with other
  jobs (``benchmarks/ann.py``, benchmarks/RESULTS.md): a batch of 1,000 queries over 25k vectors cost
  0.7-1.8 ms a query, usearch's HNSW 0.7-1.7 ms at recall@10 0.96 after a 22-26 s build (a tie within the
  noise of the shared machine); at 50k exact search cost 15.8 ms a query against 11.8, over 1M 39 ms a
  query (100 ms for one query alone). Below 25k, then, exact search costs no more than a text's encoding,
  is exact, and needs no build: :data:`EXACT_BELOW`.
* ``"usearch"``: an HNSW graph from usearch (``pip install 'xmtc[ann]'``), picked over faiss-cpu and hnswlib.
  At M=16, ef_construction=128 the three reach recall@10 0.96-0.97 at 25k with the same ef_search (128-192)
  and the same memory (40 MB for 37 MB of vectors); none is clearly faster on a shared machine (batch
  0.5-1.7 ms a query, single-query p50 0.15-0.38 ms, run to run spread as large as the gaps), though usearch
  builds 1.5-2x slower than hnswlib and faiss. What decides
  is what a label index must do: usearch has a real ``remove`` whose slots later adds reuse (faiss's HNSW
  cannot remove at all; hnswlib marks deleted within a fixed capacity), and it loads memory-mapped
  (``Index.restore(path, view=True)``: a 1M-label index costs page cache, not private memory; hnswlib
  reads the whole file into memory). At 1M vectors of the same synthetic mixture usearch's graph (M=16,
  ef_construction=128, a 41-minute build on 2 loaded cores) reached only recall@10 0.64 at ef_search 512
  (6.7 ms a query) where exact search costs 39 ms: on data with many near-tied neighbours, raise ``M`` and
  ``ef_search`` or stay exact (``backend="exact"``) where a query's 40-100 ms is affordable.

``backend="auto"`` (the default) picks exact search below ``exact_below`` vectors (:data:`EXACT_BELOW`) and
usearch above it, or exact search with one log line when usearch is not installed; an exact index that
``add`` grows past ``exact_below`` becomes an HNSW index. Ids are the caller's integers
(label numbers), returned as int32, ``-1`` where fewer than k vectors exist; their scores are ``-inf``.

Storage: :meth:`VectorIndex.to_stage` writes the index into a model folder in the backend's own format
(safetensors for exact search; usearch's ``save`` in a stage sub-folder), so the manifest checksums it like
every other file; :meth:`VectorIndex.from_stage` loads it back, memory-mapped where the reader allows.
"""

from __future__ import annotations

import logging

import numpy as np

from ..errors import ConfigError, DataFormatError, ModelFormatError

log = logging.getLogger(__name__)

EXACT_BELOW = 25_000  # auto: exact search below this many vectors (see the module docstring)
BACKENDS = ("auto", "exact", "usearch")
METRICS = ("ip", "cos")
_BLOCK = 1 << 25  # exact search scores at most this many (query, vector) pairs at once: 128 MB of float32
_MAX_ID = 2**31 - 1
_FILE = "index.usearch"
_warned = False


def _usearch():
    """The usearch module, or None when the ``ann`` extra is not installed."""
    try:
        from usearch import index
    except ImportError:
        return None
    return index


def _need_usearch():
    mod = _usearch()
    if mod is None:
        raise ConfigError("backend 'usearch' needs the usearch package: pip install 'xmtc[ann]'")
    return mod


class VectorIndex:
    """Nearest vectors by inner product (``metric="ip"``) or cosine (``"cos"``: vectors and queries are
    L2-normalised first).

    ``backend``: ``"auto"`` | ``"exact"`` | ``"usearch"``; ``M`` (graph degree), ``ef_construction`` and
    ``ef_search`` are HNSW's, ignored by exact search; ``ef_search`` is raised to k when a search asks for
    more. ``n_threads``: threads for building and batched search, 0 = all cores (exact search uses BLAS's
    own threads). ``exact_below``: auto's crossover.
    """

    def __init__(self, metric: str = "ip", backend: str = "auto", M: int = 16, ef_construction: int = 128,
                 ef_search: int = 64, n_threads: int = 0, exact_below: int = EXACT_BELOW):
        if metric not in METRICS:
            raise ConfigError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
        if backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        for name, value in (("M", M), ("ef_construction", ef_construction), ("ef_search", ef_search)):
            if not isinstance(value, int) or value < 2:
                raise ConfigError(f"{name} must be an integer >= 2, got {value!r}")
        if backend == "usearch":
            _need_usearch()
        self.metric, self.backend = metric, backend
        self.M, self.ef_construction, self.ef_search = M, ef_construction, ef_search
        self.n_threads, self.exact_below = int(n_threads), int(exact_below)
        self.dim: int | None = None
        self.kind: str | None = None  # the backend in use: "exact" or "usearch"
        self._vectors = np.zeros((0, 0), np.float32)  # exact
        self._ids = np.zeros(0, np.int64)  # exact
        self._index = None  # usearch
        self._removed = 0  # usearch: removals since the graph was built (tombstones it still walks)
        self._view = False  # usearch: a read-only memory map of a saved index

    # -- building ---------------------------------------------------------------------------------------
    def build(self, vectors, ids=None) -> "VectorIndex":
        """Index ``vectors`` (n, dim) under ``ids`` (n distinct integers in [0, 2^31 - 1); default 0..n-1),
        replacing whatever the index held."""
        vectors = self._check_vectors(vectors, new_dim=True)
        ids = self._check_ids(ids, len(vectors), np.arange(len(vectors)))
        if len(np.unique(ids)) != len(ids):
            raise DataFormatError(None, None, "ids must be distinct")
        self.kind = self._pick(len(vectors))
        self._index, self._removed, self._view = None, 0, False
        self._vectors, self._ids = np.zeros((0, self.dim), np.float32), np.zeros(0, np.int64)
        if self.kind == "exact":
            self._vectors, self._ids = vectors, ids
        else:
            self._index = self._new_graph()
            self._index.add(ids.astype(np.uint64), vectors, threads=self.n_threads)
        return self

    def add(self, vectors, ids=None) -> None:
        """Add vectors under new ids (default: after the largest id in use). An id already in the index is
        an error: ``remove`` it first to replace its vector."""
        if self.kind is None:
            self.build(vectors, ids)
            return
        vectors = self._check_vectors(vectors)
        start = int(self._all_ids().max()) + 1 if len(self) else 0
        ids = self._check_ids(ids, len(vectors), np.arange(start, start + len(vectors)))
        if len(np.unique(ids)) != len(ids) or np.isin(ids, self._all_ids()).any():
            raise DataFormatError(None, None, "ids must be distinct and not already in the index")
        if self.kind == "exact":
            self._vectors = np.concatenate([self._vectors, vectors])
            self._ids = np.concatenate([self._ids, ids])
            if self.backend == "auto" and self._pick(len(self)) == "usearch":
                self.build(self._vectors, self._ids)  # grown past the crossover
            return
        self._writable()
        self._index.add(ids.astype(np.uint64), vectors, threads=self.n_threads)

    def remove(self, ids) -> int:
        """Remove the vectors of ``ids`` (ids not in the index are ignored); the number removed.

        usearch removes a node by marking it deleted: searches still walk through it but never return it,
        and later adds reuse its slot. Once the removals since the graph was built outnumber the vectors
        left, the graph is rebuilt from those vectors, so that a label set that keeps changing does not
        leave a graph of mostly dead nodes."""
        ids = np.unique(self._check_ids(ids, None, None))
        if self.kind is None or not len(ids):
            return 0
        if self.kind == "exact":
            keep = ~np.isin(self._ids, ids)
            removed = int(len(keep) - keep.sum())
            self._vectors, self._ids = self._vectors[keep], self._ids[keep]
            return removed
        self._writable()
        present = ids[self._index.contains(ids.astype(np.uint64))]
        if len(present):
            self._index.remove(present.astype(np.uint64))
            self._removed += len(present)
            if self._removed > len(self):
                keys = self._all_ids()
                got = self._index.get(keys.astype(np.uint64), dtype=np.float32)
                self.build(np.stack(got) if isinstance(got, tuple) else got, keys)  # a tuple of rows in 2.x
        return len(present)

    def __len__(self) -> int:
        return len(self._ids) if self._index is None else len(self._index)

    # -- searching --------------------------------------------------------------------------------------
    def search(self, queries, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """``(ids int32 (n, k), scores float32 (n, k))`` of each query's k best vectors, best first; rows
        are padded with id -1 and score -inf where the index holds fewer than k vectors. One query may be a
        1-d array (the result still has a row)."""
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise ConfigError(f"k must be a positive integer, got {k!r}")
        k = int(k)
        q = np.asarray(queries, dtype=np.float32)
        q = q[None, :] if q.ndim == 1 else q
        if self.kind is None:
            raise DataFormatError(None, None, "search on an index that was never built")
        q = self._check_vectors(q)
        ids = np.full((len(q), k), -1, np.int32)
        scores = np.full((len(q), k), -np.inf, np.float32)
        if not len(self) or not len(q):
            return ids, scores
        if self.kind == "exact":
            self._exact_search(q, k, ids, scores)
        else:
            self._index.expansion_search = max(self.ef_search, k)
            found = self._index.search(q, k, threads=self.n_threads)
            if hasattr(found, "counts"):
                keys, dist, counts = np.asarray(found.keys), np.asarray(found.distances), found.counts
            else:  # one query: usearch answers with an unbatched Matches of the hits only
                keys, dist, counts = np.asarray(found.keys)[None], np.asarray(found.distances)[None], [len(found.keys)]
            keys, dist = keys.reshape(len(q), -1)[:, :k], dist.reshape(len(q), -1)[:, :k]
            valid = np.arange(keys.shape[1])[None, :] < np.asarray(counts).reshape(-1, 1)
            got_ids, got_scores = ids[:, :keys.shape[1]], scores[:, :keys.shape[1]]  # views into the result
            got_ids[valid] = keys[valid].astype(np.int32)
            got_scores[valid] = 1.0 - dist[valid]  # usearch's "ip" distance is 1 - <q, v>
        return ids, scores

    def _exact_search(self, q, k, ids, scores) -> None:
        n = len(self._vectors)
        kk = min(k, n)
        block = max(1, min(len(q), _BLOCK // n))
        for s in range(0, len(q), block):
            sc = q[s:s + block] @ self._vectors.T
            top = np.argpartition(-sc, kk - 1, axis=1)[:, :kk] if kk < n else np.broadcast_to(np.arange(n), sc.shape)
            top_sc = np.take_along_axis(sc, top, 1)
            order = np.argsort(-top_sc, axis=1, kind="stable")
            ids[s:s + block, :kk] = self._ids[np.take_along_axis(top, order, 1)]
            scores[s:s + block, :kk] = np.take_along_axis(top_sc, order, 1)

    # -- storage ----------------------------------------------------------------------------------------
    def to_stage(self, writer, name: str) -> dict:
        """Write the index into a model being saved (:class:`xmtc.models.storage.ModelWriter`); the stage
        entry for the manifest. Exact search: ``NAME.safetensors`` (vectors, ids); usearch: its own file
        format in the sub-folder ``NAME/`` (checksummed by the manifest like every file)."""
        if self.kind is None:
            raise DataFormatError(None, None, "cannot save an index that was never built")
        stage = {"name": name, "type": "vector-index", "backend": self.kind, "metric": self.metric,
                 "dim": int(self.dim), "count": len(self),
                 "params": {"backend": self.backend, "M": self.M, "ef_construction": self.ef_construction,
                            "ef_search": self.ef_search, "exact_below": self.exact_below}}
        if self.kind == "exact":
            stage["file"] = writer.arrays(name, {"vectors": self._vectors, "ids": self._ids})
        else:
            folder = writer.folder(name)
            self._index.save(str(folder / _FILE))
            stage["folder"] = name
        return stage

    @classmethod
    def from_stage(cls, reader, stage: dict, n_threads: int = 0) -> "VectorIndex":
        """The index a stage written by :meth:`to_stage` holds (a :class:`~xmtc.models.storage.ModelReader`
        checks the files' checksums first). Memory-mapped when the reader's ``mmap`` is on: safetensors
        views for exact search, ``Index.restore(view=True)`` for usearch (copied into memory on the
        first ``add`` or ``remove``)."""
        where = f"{reader.folder}: stage {stage.get('name')!r}"
        params = stage.get("params")
        if stage.get("type") != "vector-index" or stage.get("backend") not in ("exact", "usearch") \
                or not isinstance(params, dict) or not isinstance(stage.get("dim"), int) \
                or not isinstance(stage.get("count"), int):
            raise ModelFormatError(f"{where} is not a vector index stage")
        mod = _need_usearch() if stage["backend"] == "usearch" else None  # ConfigError naming the extra
        try:
            self = cls(metric=stage.get("metric"), n_threads=n_threads, **params)
        except (ConfigError, TypeError) as exc:
            raise ModelFormatError(f"{where}: {exc}") from None
        self.kind, self.dim = stage["backend"], stage["dim"]
        if self.kind == "exact":
            arrays = reader.arrays(stage.get("file"), mmap=True)
            vectors, ids = arrays.get("vectors"), arrays.get("ids")
            if vectors is None or ids is None or vectors.dtype != np.float32 or ids.dtype != np.int64 \
                    or vectors.shape != (stage["count"], self.dim) or ids.shape != (stage["count"],):
                raise ModelFormatError(f"{where}: its arrays do not match the stage's dim and count")
            self._vectors, self._ids = vectors, ids
            return self
        path = reader.subfolder(stage.get("folder")) / _FILE
        if not path.is_file():
            raise ModelFormatError(f"{path}: missing (the usearch index of {where})")
        meta = mod.Index.metadata(str(path))
        if not meta or meta.get("dimensions") != self.dim or meta.get("count_present") != stage["count"] \
                or meta.get("kind_metric") != mod.MetricKind.IP:
            raise ModelFormatError(f"{path}: not a usearch index of {stage['count']} inner-product vectors of"
                                   f" dimension {self.dim}, as {where} declares")
        self._view = bool(getattr(reader, "mmap", False))
        self._index = mod.Index.restore(str(path), view=self._view)
        if self._index is None:
            raise ModelFormatError(f"{path}: usearch cannot read it")
        self._index.expansion_add = self.ef_construction
        return self

    # -- helpers ----------------------------------------------------------------------------------------
    def _pick(self, n: int) -> str:
        global _warned
        if self.backend != "auto":
            return self.backend
        if n < self.exact_below:
            return "exact"
        if _usearch() is None:
            if not _warned:
                log.warning("xmtc: %d vectors, exact search (install an ANN index for faster search: "
                            "pip install 'xmtc[ann]')", n)
                _warned = True
            return "exact"
        return "usearch"

    def _new_graph(self):
        mod = _need_usearch()
        return mod.Index(ndim=self.dim, metric="ip", dtype="f32", connectivity=self.M,
                         expansion_add=self.ef_construction, expansion_search=self.ef_search)

    def _writable(self) -> None:
        """Copy a memory-mapped index into memory before it changes: usearch's view is read-only, and its
        ``remove`` on a view writes to the read-only map (a segmentation fault, not an error)."""
        if self._view:
            self._index = self._index.copy()
            self._index.expansion_add = self.ef_construction
            self._view = False

    def _all_ids(self) -> np.ndarray:
        if self._index is None:
            return self._ids
        return np.asarray(self._index.keys, dtype=np.int64)

    def _check_vectors(self, vectors, new_dim: bool = False) -> np.ndarray:
        v = np.asarray(vectors, dtype=np.float32)
        if v.ndim != 2 or (not new_dim and v.shape[1] != self.dim) or v.shape[1] < 1:
            want = "(n, dim)" if new_dim else f"(n, {self.dim})"
            raise DataFormatError(None, None, f"vectors must have shape {want}, got {v.shape}")
        if not np.isfinite(v).all():
            raise DataFormatError(None, None, "vectors hold NaN or infinite values")
        if self.metric == "cos":
            norms = np.linalg.norm(v, axis=1, keepdims=True)
            v = v / np.where(norms > 0, norms, 1).astype(np.float32)
        if new_dim:
            self.dim = v.shape[1]
        return np.ascontiguousarray(v)

    @staticmethod
    def _check_ids(ids, n: int | None, default) -> np.ndarray:
        if ids is None:
            if default is None:
                raise DataFormatError(None, None, "ids are required")
            ids = default
        arr = np.atleast_1d(np.asarray(ids))
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu") or (n is not None and len(arr) != n):
            raise DataFormatError(None, None, f"ids must be {n if n is not None else 'a list of'} integers")
        arr = arr.astype(np.int64)
        if arr.size and (arr.min() < 0 or arr.max() > _MAX_ID - 1):
            raise DataFormatError(None, None, f"ids must lie in [0, {_MAX_ID - 1}]")
        return arr

