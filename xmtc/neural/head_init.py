"""Data-driven initialisation of a method's output heads: standardised class centroids.

Why: the end-to-end papers initialise their cluster and label heads at random and train for tens of
epochs on a GPU. On a CPU budget of two or three epochs that start is the bottleneck, not the encoder.
Measured on yso-finna-en-2k-20k (6,000 training titles, all-MiniLM-L6-v2, max length 32, 1 epoch,
1,500 test titles): LightXML from random heads reached P@1 0.27 -- the flat label prior (0.33) --
while scoring the *pretrained* encoder's [CLS] representations against class centroids, with no
training at all, gave P@1 25.6. The idea is XR-Transformer's bootstrapping (Zhang et al., NeurIPS'21,
eq. 11: start a level's head from what the previous state already knows) applied to the heads of
LightXML, CascadeXML and the like: before the first step, encode the training texts once with the
pretrained encoder and put each head row on its class's centroid.

For representations ``r_i`` (the network's own text representation, dropout off), their mean ``mu``
and a group ``G`` (a label, or a cluster of labels) with member texts ``i in G``:

* direction ``c_G = normalise(sum_{i in G} (r_i - mu))`` -- the centroid of the centred group;
* scale ``kappa / sigma`` with ``sigma`` the standard deviation of ``(r - mu) . c`` over a sample of
  (text, group) pairs, so that a logit's spread across texts is about ``kappa`` -- large enough that the
  ranking shows in the BCE's first steps, small enough that no sigmoid starts saturated;
* weights ``w_G = (kappa / sigma) c_G`` and, where the head has a bias, ``b_G = logit(p_G) - w_G . mu``
  with ``p_G`` the group's smoothed prior (the share of training texts in it), so that an average text
  gets its group's prior probability.

A group without a training text keeps its random initialisation. Where the representation hardly
varies between texts (a randomly initialised encoder, such as the tests' tiny BERT: its [CLS] spread
across texts is ~5% of its size) ``sigma`` is tiny, the rows are huge, and the first encoder updates
saturate every sigmoid; there, ``head_init = "random"`` is the right choice. ``head_init = "random"`` keeps the
papers' initialisation; the figures of both are in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

KAPPA = 3.0
_SIGMA_SAMPLE = 4096


def centroid_weights(rep: np.ndarray, member: sp.csr_matrix, *, kappa: float = KAPPA, seed: int = 0
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Standardised centroid rows for the groups of ``member`` (n texts x G groups, nonzero = member).

    Returns ``(W (G, d) float32, b (G,) float32, has (G,) bool)``: ``W`` and ``b`` as the module
    docstring defines them (``b`` includes the centring ``-W . mu``), ``has`` False for groups without a
    member text (their rows are zero and must keep the caller's initialisation).
    """
    rep = np.asarray(rep, dtype=np.float32)
    n, d = rep.shape
    member = sp.csr_matrix(member, dtype=np.float32)
    member.data[:] = 1.0
    if member.shape[0] != n:
        raise ValueError(f"{n} representations but {member.shape[0]} rows of group membership")
    mu = rep.mean(axis=0)
    centred = rep - mu
    C = np.asarray(member.T @ centred, dtype=np.float32)                   # (G, d) sums
    norms = np.linalg.norm(C, axis=1)
    has = (np.diff(member.tocsc().indptr) > 0) & (norms > 0)
    C[has] /= norms[has, None]
    C[~has] = 0.0
    sigma = _projection_spread(centred, C[has], seed)
    W = (C * (kappa / sigma)).astype(np.float32)
    counts = np.asarray(member.sum(axis=0)).ravel()
    prior = (counts + 0.5) / (n + 1.0)
    b = (np.log(prior) - np.log1p(-prior) - W @ mu).astype(np.float32)
    return W, b, has


def set_rows(weight, bias, W: np.ndarray, b: np.ndarray | None, has: np.ndarray) -> None:
    """Copy the rows ``has`` of ``W`` (and of ``b``, where the head has a bias) into a head's ``weight`` /
    ``bias`` tensors in place (call under ``torch.no_grad()``); the other rows keep their start."""
    import torch

    keep = torch.from_numpy(has)
    weight[keep] = torch.from_numpy(W[has]).to(weight)
    if bias is not None:
        bias[keep] = torch.from_numpy(b[has]).to(bias)


def _projection_spread(centred: np.ndarray, directions: np.ndarray, seed: int) -> float:
    """Standard deviation of ``centred_i . direction_g`` over random (text, group) pairs."""
    if directions.shape[0] == 0 or centred.shape[0] == 0:
        return 1.0
    rng = np.random.default_rng(seed)
    i = rng.integers(0, centred.shape[0], _SIGMA_SAMPLE)
    g = rng.integers(0, directions.shape[0], _SIGMA_SAMPLE)
    proj = np.einsum("nd,nd->n", centred[i], directions[g])
    sigma = float(proj.std())
    return sigma if sigma > 1e-12 else 1.0


def cluster_membership(Y: sp.csr_matrix, group_of_label: np.ndarray, n_groups: int) -> sp.csr_matrix:
    """(n, n_groups) binary: text i is in group g when one of its labels is assigned to g."""
    Y = sp.csr_matrix(Y)
    rows = np.repeat(np.arange(Y.shape[0]), np.diff(Y.indptr))
    cols = np.asarray(group_of_label, dtype=np.int64)[Y.indices]
    M = sp.csr_matrix((np.ones(rows.size, dtype=np.float32), (rows, cols)), shape=(Y.shape[0], n_groups))
    M.sum_duplicates()
    M.data[:] = 1.0
    return M
