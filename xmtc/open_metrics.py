"""Open-label-set evaluation: how well a model suggests labels that no training document carries.

A label is *unseen* when the model has no training document for it: its training count is 0, or it is
not among the model's labels at all (a label found only in the test data), or it is listed in a file of
unseen label ids (``xmtc evaluate --unseen-labels FILE``, one id a line, e.g. what
``benchmarks/open_split.py`` writes). Two settings of the zero-shot literature (SemSup-XC's ``isGZSL``
switch), in percent:

- ``R@10_unseen`` (generalized zero-shot): the model ranks ALL labels as usual; for each test document
  with at least one unseen true label, the share of its unseen true labels found in its top 10
  (``|top10 ∩ U ∩ T_d| / |U ∩ T_d|``, U the unseen labels, T_d the document's true labels). A model that
  can only rank the labels it was trained on scores 0.
- ``P@1_zs`` and ``R@10_zs`` (zero-shot): the model ranks the unseen labels only (its ranking with every
  seen label removed); P@1 and R@10 of that ranking against ``U ∩ T_d``.

Unlike :mod:`xmtc.metrics`, these are averaged over the test documents that have at least one unseen
true label (``docs_unseen``, reported with the number of unseen labels the test data holds,
``labels_unseen``): on the others there is nothing to find. The zero-shot ranking is read from the
model's top :data:`ZS_DEPTH` (the unseen labels in it, in order), which is exact for a model whose top
list reaches that deep and an approximation for beam or ANN search.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import scipy.sparse as sp

from .data.io import iter_lines

log = logging.getLogger(__name__)

ZS_DEPTH = 1000  # how deep into a model's ranking the zero-shot metrics look for unseen labels

__all__ = ["unseen_columns", "restrict_topk", "open_set_metrics", "evaluate_open_set", "open_set_depths",
           "read_unseen_ids"]


def read_unseen_ids(path: str | os.PathLike) -> set[str]:
    """Label ids, one a line (blank lines and ``#`` comments skipped)."""
    return {line.strip() for _, line in iter_lines(path) if line.strip() and not line.startswith("#")}


def unseen_columns(n_columns: int, label_counts, names=None, unseen_ids=None) -> np.ndarray:
    """Bool mask over the ``n_columns`` label columns of a test set: unseen = training count 0 or a column
    beyond the model's labels; with ``unseen_ids`` (and the columns' ``names``) exactly those labels."""
    if unseen_ids is not None:
        wanted = set(unseen_ids)
        return np.fromiter((n in wanted for n in names), dtype=bool, count=n_columns)
    counts = np.asarray(label_counts)
    mask = np.ones(n_columns, dtype=bool)
    mask[:len(counts)] = counts[:n_columns] == 0
    return mask


def restrict_topk(indices: np.ndarray, keep: np.ndarray, k: int) -> np.ndarray:
    """Each row's first ``k`` labels among those with ``keep[label]``, in order, ``-1`` padded."""
    valid = indices >= 0
    ok = valid & keep[np.where(valid, indices, 0)]
    order = np.argsort(~ok, axis=1, kind="stable")  # kept entries first, in their order
    packed = np.where(np.take_along_axis(ok, order, 1), np.take_along_axis(indices, order, 1), -1)
    out = np.full((indices.shape[0], k), -1, dtype=np.int64)
    width = min(k, packed.shape[1])
    out[:, :width] = packed[:, :width]
    return out


def _hits(Y: sp.csr_matrix, indices: np.ndarray) -> np.ndarray:
    """(n, k) bool: entry (i, r) is a true label of document i."""
    out = np.zeros(indices.shape, dtype=bool)
    for i in range(indices.shape[0]):
        true = Y.indices[Y.indptr[i]:Y.indptr[i + 1]]
        out[i] = np.isin(indices[i], true) & (indices[i] >= 0)
    return out


def open_set_metrics(Y_true, indices: np.ndarray, unseen: np.ndarray, zs_indices: np.ndarray | None = None) -> dict:
    """``R@10_unseen`` from ``indices`` (each document's ranking over all labels, best first, ``-1``
    padded), and ``P@1_zs`` / ``R@10_zs`` from ``zs_indices`` (a deeper ranking, restricted here to the
    ``unseen`` labels; default ``indices``). ``Y_true``: (n, L) 0/1; ``unseen``: (L,) bool."""
    Y = sp.csr_matrix(Y_true, dtype=np.float32)
    Y.eliminate_zeros()
    unseen = np.asarray(unseen, dtype=bool)
    Yu = sp.csr_matrix(Y.multiply(unseen[None, :]))
    Yu.eliminate_zeros()
    n_true = np.diff(Yu.indptr)
    docs = np.flatnonzero(n_true)
    out = {"docs_unseen": float(docs.size), "labels_unseen": float(np.count_nonzero(Yu.getnnz(axis=0)))}
    if docs.size == 0:
        return {**out, "R@10_unseen": 0.0, "P@1_zs": 0.0, "R@10_zs": 0.0}
    Yu_d, denom = Yu[docs], n_true[docs]
    top10 = np.asarray(indices)[docs, :10]
    out["R@10_unseen"] = 100.0 * float(np.mean(_hits(Yu_d, top10).sum(1) / denom))
    zs = restrict_topk(np.asarray(indices if zs_indices is None else zs_indices)[docs], unseen, 10)
    hits = _hits(Yu_d, zs)
    out["P@1_zs"] = 100.0 * float(hits[:, 0].mean())
    out["R@10_zs"] = 100.0 * float(np.mean(hits.sum(1) / denom))
    return out


def open_set_depths(predictor, Y, names, k: int, unseen_ids=None) -> list[int]:
    """The depths :func:`evaluate_open_set` predicts at when the caller's top-k is ``k`` deep, so that a caller can
    ask for all of them at once (:meth:`~xmtc.models.base.XMCModel.predict_topk_depths`) and pass them as its
    ``predictions``: none when there is nothing to measure, else 10 where ``k`` is below it, and the zero-shot
    depth ``min(labels, ZS_DEPTH)`` where the model knows an unseen label and the open top-k does not reach it.
    (Planned from the widths ``predict_topk`` gives; a depth missed here is predicted there, the same numbers.)"""
    unseen = unseen_columns(Y.shape[1], predictor.label_counts_, names, unseen_ids)
    if unseen_ids is None and not sp.csr_matrix(sp.csr_matrix(Y).multiply(unseen[None, :])).nnz:
        return []
    n_labels = max(len(predictor.labels_), 1)
    width, out = min(int(k), n_labels), []
    if width < 10:
        width = min(10, n_labels)
        out.append(10)
    if unseen[:len(predictor.labels_)].any() and width < min(n_labels, ZS_DEPTH):
        out.append(min(n_labels, ZS_DEPTH))
    return out


def evaluate_open_set(predictor, inputs, Y, names, topk: tuple[np.ndarray, np.ndarray] | None = None,
                      unseen_ids=None, progress: bool = False, predictions: dict | None = None) -> dict:
    """:func:`open_set_metrics` of a model (anything with ``predict_topk``, ``labels_`` and
    ``label_counts_``) on test ``inputs`` with labels ``Y`` whose columns are ``names`` (the model's labels
    first, then labels it never saw). ``{}`` when no test document has an unseen label and no
    ``unseen_ids`` were given. ``topk``: the model's predictions of ``inputs`` if the caller has them;
    ``predictions``: ``{k: predict_topk(inputs, k)}`` the caller has for the depths of :func:`open_set_depths`
    (a depth missing there is predicted here)."""
    def predicted(k: int):
        have = (predictions or {}).get(k)
        return have if have is not None else predictor.predict_topk(inputs, k, progress=progress)

    unseen = unseen_columns(Y.shape[1], predictor.label_counts_, names, unseen_ids)
    Y = sp.csr_matrix(Y)
    if unseen_ids is None and not sp.csr_matrix(Y.multiply(unseen[None, :])).nnz:
        return {}
    n_labels = len(predictor.labels_)
    if topk is None or topk[0].shape[1] < 10:
        topk = predicted(10)
    zs = None
    if unseen[:n_labels].any():  # the model knows some unseen labels: rank them among themselves
        depth = min(n_labels, ZS_DEPTH)
        zs = topk[0] if topk[0].shape[1] >= depth else predicted(depth)[0]
    else:  # no unseen label is the model's: nothing to rank
        zs = np.full((Y.shape[0], 1), -1)
    out = open_set_metrics(Y, topk[0], unseen, zs)
    log.info("open label set: %d unseen labels in %d test documents", out["labels_unseen"], out["docs_unseen"])
    return out
