"""XR-Linear's model: one-vs-all linear classifiers at every level of a label tree (PECOS's
``HierarchicalMLModel``), trained top-down, predicted with beam search.

Level t scores the K_{t+1} nodes of the tree's level t+1 (the last level's nodes are the labels, so
its classifiers are the rankers; the others form the matcher). Training goes level by level because
matcher-aware negatives at level t need the beam of the levels already trained.

Weights live only in the beam-search layout (:class:`~xmtc.linear.beam.BeamLevel`); the csc form
PECOS uses is rebuilt on demand (:attr:`weights`, :meth:`to_arrays`), which halves resident memory
for large models.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError, ModelFormatError, NotFittedError
from .beam import BeamLevel, beam_search, beam_step, post_processor_code, prepare_features, root_beam
from .beam_arrays import FORMAT_BEAM, level_arrays, levels_from_arrays
from .negatives import active_mask, check_negatives, level_targets

log = logging.getLogger(__name__)

FORMAT = 1


def chain_of(tree) -> list[sp.csr_matrix]:
    """The cluster chain of a ``LabelTree`` (its ``chain``) or of a plain list of matrices, checked."""
    chain = getattr(tree, "chain", tree)
    try:
        chain = [sp.csr_matrix(C) for C in chain]
    except TypeError:
        raise ConfigError(f"expected a LabelTree or a list of sparse matrices, got {type(tree).__name__}") from None
    if not chain:
        raise ConfigError("the label tree has no levels")
    n_parents = 1
    for t, C in enumerate(chain):
        if C.shape[1] != n_parents:
            raise ConfigError(f"tree level {t} has shape {C.shape}; expected {n_parents} columns (the nodes of"
                              " the level above)")
        C.eliminate_zeros()
        if np.any(np.diff(C.indptr) != 1):
            raise ConfigError(f"tree level {t}: every node needs exactly one parent")
        n_parents = C.shape[0]
    return chain


def fit_inputs(X, Y, tree, negatives: str, beam_size: int) -> tuple[sp.csr_matrix, sp.csr_matrix, list]:
    """A tree fit's inputs checked (one-line ConfigErrors) and prepared: ``(X, Y csr, chain)``."""
    check_negatives(negatives)
    if isinstance(beam_size, bool) or int(beam_size) < 1:
        raise ConfigError(f"beam_size must be a positive integer, got {beam_size!r}")
    chain = chain_of(tree)
    if not sp.issparse(X):
        raise ConfigError(f"X must be a scipy sparse matrix, got {type(X).__name__}")
    X = prepare_features(X, X.shape[1])
    Y = sp.csr_matrix(Y)
    if Y.shape[0] != X.shape[0]:
        raise ConfigError(f"X has {X.shape[0]} rows but Y has {Y.shape[0]}")
    if chain[-1].shape[0] != Y.shape[1]:
        raise ConfigError(f"the tree has {chain[-1].shape[0]} labels but Y has {Y.shape[1]} columns")
    return X, Y, chain


def _train_level_here(X, targets, parent_of, active, t, **solver_kw) -> sp.csc_matrix:
    from .solver import train_level

    return train_level(X, targets, parent_of, active, **solver_kw)


def _parents(C: sp.csr_matrix) -> np.ndarray:
    return C.indices.astype(np.int32)  # one entry a row: the row's parent


class HierarchicalLinearModel:
    """Linear matcher + rankers over a label tree.

    >>> model = HierarchicalLinearModel().fit(X, Y, tree)               # doctest: +SKIP
    >>> idx, scores = model.predict_topk(X_test, k=5, beam_size=10)       # doctest: +SKIP
    """

    def __init__(self) -> None:
        self.levels_: list[BeamLevel] | None = None

    # -- properties ---------------------------------------------------------------------------
    def _check_fitted(self) -> list[BeamLevel]:
        if not self.levels_:
            raise NotFittedError("this HierarchicalLinearModel is not fitted; call fit() or from_arrays()")
        return self.levels_

    @property
    def n_features(self) -> int:
        return self._check_fitted()[0].n_features

    @property
    def n_labels(self) -> int:
        return self._check_fitted()[-1].n_nodes

    @property
    def level_sizes(self) -> list[int]:
        return [lv.n_nodes for lv in self._check_fitted()]

    @property
    def bias(self) -> float:
        return self._check_fitted()[0].bias

    @property
    def chain(self) -> list[sp.csr_matrix]:
        """The tree, PECOS layout: ``chain[t]`` (K_{t+1}, K_t) with a 1.0 at each node's parent."""
        out = []
        for lv in self._check_fitted():
            K, P = lv.n_nodes, lv.n_parents
            out.append(sp.csr_matrix((np.ones(K, dtype=np.float32), lv.parent_of, np.arange(K + 1)), shape=(K, P)))
        return out

    @property
    def weights(self) -> list[sp.csc_matrix]:
        """Per level csc ``(d + 1, K_{t+1})`` float32; the last row holds the bias weights."""
        return [lv.to_weights() for lv in self._check_fitted()]

    # -- training -----------------------------------------------------------------------------
    def fit(self, X, Y, tree, *, negatives: str = "tfn+man", C_pos: float = 1.0, C_neg: float = 1.0,
            bias: float = 1.0, tol: float = 0.1, max_iter: int = 100, threshold: float = 0.05, beam_size: int = 10,
            n_threads: int | None = None, progress: bool = False, train_level=None) -> "HierarchicalLinearModel":
        """Train every level top-down. ``X`` csr (n, d), ``Y`` sparse 0/1 (n, L), ``tree`` a ``LabelTree``
        or its chain; ``beam_size`` only shapes the matcher-aware negatives. ``train_level(X, targets_t,
        parent_of, active, t, **solver settings)`` trains one level's weights (default: the solver's
        :func:`~xmtc.linear.solver.train_level` in this process; :mod:`xmtc.linear.levelwise` splits a level
        into parallel tasks); the masks and beam steps between levels stay here."""
        from ..progress import progress_bar

        train_level = train_level or _train_level_here
        X, Y, chain = fit_inputs(X, Y, tree, negatives, beam_size)
        n, d = X.shape
        targets = level_targets(Y, chain)
        use_man = negatives != "tfn"
        beam_ids, beam_sc = root_beam(n)
        levels: list[BeamLevel] = []
        t_start = time.perf_counter()
        bar = progress_bar(progress, total=len(chain), desc="linear levels", unit="level")
        try:
            for t, C in enumerate(chain):
                t0 = time.perf_counter()
                parent_of = _parents(C)
                active = active_mask(negatives, t, targets, beam_ids if use_man else None)
                bar.set_postfix(nodes=C.shape[0], pairs=active.nnz)
                W = train_level(X, targets[t], parent_of, active, t, C_pos=C_pos, C_neg=C_neg, bias=bias, tol=tol,
                                max_iter=max_iter, threshold=threshold, n_threads=n_threads)
                if W.shape != (d + 1, C.shape[0]):
                    raise RuntimeError(f"train_level returned {W.shape}, expected {(d + 1, C.shape[0])}")
                level = BeamLevel.from_weights(W, parent_of, C.shape[1], bias=bias)
                del W
                levels.append(level)
                if use_man and t < len(chain) - 1:
                    beam_ids, beam_sc = beam_step(X, level, beam_ids, beam_sc, beam_size, n_threads=n_threads)
                log.info("level %d/%d: %d nodes, %d training (instance, parent) pairs, %d weights, %.1fs",
                         t + 1, len(chain), C.shape[0], active.nnz, level.n_weights, time.perf_counter() - t0)
                bar.update(1)
        finally:
            bar.close()
        log.info("hierarchical linear model: levels %s trained in %.1fs", [C.shape[0] for C in chain],
                 time.perf_counter() - t_start)
        self.levels_ = levels
        return self

    # -- prediction ---------------------------------------------------------------------------
    def predict_topk(self, X, k: int = 5, *, beam_size: int = 10, post_processor: str = "l3-hinge",
                     label_score: str = "product", n_threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k labels per row: ``(indices int32 (n, k), scores float32 (n, k))``, best first,
        ties to the smaller label, -1 / 0 padding when the beam reaches fewer than k labels;
        ``label_score`` as in :func:`~xmtc.linear.beam.beam_search`."""
        levels = self._check_fitted()
        post_processor_code(post_processor)
        if not sp.issparse(X):
            raise ConfigError(f"features must be a scipy sparse matrix, got {type(X).__name__}")
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ConfigError(f"features have {X.shape[1]} columns but the model expects {self.n_features}")
        return beam_search(X, levels, k, beam_size=beam_size, post_processor=post_processor, label_score=label_score,
                           n_threads=n_threads)

    # -- persistence --------------------------------------------------------------------------
    def to_arrays(self, layout: str = "csc") -> dict[str, np.ndarray]:
        """Plain numeric arrays, no pickles, no strings; ``layout`` picks one of two forms.

        * ``"csc"`` (format 1, PECOS's layout): per level ``W{t}.{data,indices,indptr,shape}`` and
          ``C{t}.parent``. Loading rebuilds the beam layout, which costs time and memory of the size
          of the weights.
        * ``"beam"`` (format 2): the :class:`~xmtc.linear.beam.BeamLevel` arrays themselves, per level
          ``L{t}.{child_ptr,child_ids,feat,seg,ent,bias_w}`` plus ``L{t}.n_features``; ``ent`` holds the
          (child offset, weight) pairs as int32 pairs whose second member is the float32 weight's bit
          pattern. Loaded memory-mapped, prediction reads them in place: loading is a checksum and a
          bounds check, and a model larger than RAM still predicts. Same weights, same predictions.
        """
        levels = self._check_fitted()
        if layout not in ("csc", "beam"):
            raise ConfigError(f"unknown layout {layout!r}; choose csc or beam")
        out = {"format": np.array([FORMAT if layout == "csc" else FORMAT_BEAM], dtype=np.int64),
               "bias": np.array([self.bias], dtype=np.float32),
               "n_levels": np.array([len(levels)], dtype=np.int64)}
        for t, lv in enumerate(levels):
            if layout == "beam":
                out.update({f"L{t}.{k}": v for k, v in level_arrays(lv).items()})
                continue
            W = lv.to_weights()
            out[f"W{t}.data"] = W.data
            out[f"W{t}.indices"] = W.indices.astype(np.int32, copy=False)
            out[f"W{t}.indptr"] = W.indptr.astype(np.int64, copy=False)
            out[f"W{t}.shape"] = np.array(W.shape, dtype=np.int64)
            out[f"C{t}.parent"] = lv.parent_of
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "HierarchicalLinearModel":
        """Rebuild from :meth:`to_arrays`; any inconsistency raises :class:`ModelFormatError`."""
        def get(key, dtype, ndim):
            if key not in arrays:
                raise ModelFormatError(f"hierarchical linear model: missing array '{key}'")
            a = np.asarray(arrays[key])
            if a.ndim != ndim or a.dtype.kind not in "biuf":
                raise ModelFormatError(f"hierarchical linear model: '{key}' must be a {ndim}-d numeric array,"
                                       f" got {a.dtype} with shape {a.shape}")
            if dtype.kind in "iu" and a.dtype.kind == "f":
                raise ModelFormatError(f"hierarchical linear model: '{key}' must hold integers, got {a.dtype}")
            return a.astype(dtype, copy=False)

        fmt = get("format", np.dtype(np.int64), 1)
        if fmt.shape != (1,) or fmt[0] not in (FORMAT, FORMAT_BEAM):
            raise ModelFormatError(f"hierarchical linear model: unsupported format {fmt.tolist()} (expected"
                                   f" {FORMAT} or {FORMAT_BEAM})")
        n_levels = get("n_levels", np.dtype(np.int64), 1)
        bias = get("bias", np.dtype(np.float32), 1)
        if n_levels.shape != (1,) or n_levels[0] < 1 or bias.shape != (1,) or not np.isfinite(bias[0]):
            raise ModelFormatError("hierarchical linear model: 'n_levels' and 'bias' must be one valid number each")
        if fmt[0] == FORMAT_BEAM:
            model = cls()
            # arrays a verification stamp vouches for passed this walk over every weight before
            model.levels_ = levels_from_arrays(arrays, int(n_levels[0]), float(bias[0]),
                                               check=not getattr(arrays, "verified", False))
            return model
        levels = []
        n_parents = 1
        n_rows = None
        for t in range(int(n_levels[0])):
            data = get(f"W{t}.data", np.dtype(np.float32), 1)
            indices = get(f"W{t}.indices", np.dtype(np.int64), 1)
            indptr = get(f"W{t}.indptr", np.dtype(np.int64), 1)
            shape = get(f"W{t}.shape", np.dtype(np.int64), 1)
            parent = get(f"C{t}.parent", np.dtype(np.int64), 1)
            where = f"hierarchical linear model, level {t}"
            if shape.shape != (2,) or shape[0] < 1:
                raise ModelFormatError(f"{where}: 'W{t}.shape' must be two positive numbers, got {shape.tolist()}")
            rows, cols = int(shape[0]), int(shape[1])
            if n_rows is not None and rows != n_rows:
                raise ModelFormatError(f"{where}: weights have {rows} rows, level 0 has {n_rows}")
            n_rows = rows
            if parent.shape != (cols,):
                raise ModelFormatError(f"{where}: 'C{t}.parent' has {parent.shape[0]} nodes, weights have {cols}")
            if cols and (parent.min() < 0 or parent.max() >= n_parents):
                raise ModelFormatError(f"{where}: parents must lie in [0, {n_parents})")
            if indptr.shape != (cols + 1,) or indptr[0] != 0 or np.any(np.diff(indptr) < 0) \
                    or indptr[-1] != data.shape[0] or data.shape != indices.shape:
                raise ModelFormatError(f"{where}: csc arrays are inconsistent (indptr {indptr.shape[0]} for {cols}"
                                       f" columns, {indices.shape[0]} indices, {data.shape[0]} values)")
            if indices.size and (indices.min() < 0 or indices.max() >= rows):
                raise ModelFormatError(f"{where}: row indices must lie in [0, {rows})")
            if not np.all(np.isfinite(data)):
                raise ModelFormatError(f"{where}: weights contain NaN or infinite values")
            starts = np.zeros(indices.shape[0], dtype=bool)
            starts[indptr[:-1][np.diff(indptr) > 0]] = True
            if np.any((np.diff(indices) <= 0) & ~starts[1:]):
                raise ModelFormatError(f"{where}: row indices must increase strictly within each column")
            W = sp.csc_matrix((data, indices.astype(np.int32), indptr), shape=(rows, cols))
            levels.append(BeamLevel.from_weights(W, parent, n_parents, bias=float(bias[0])))
            n_parents = cols
        model = cls()
        model.levels_ = levels
        return model
