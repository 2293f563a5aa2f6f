"""How often a label without training documents is right: the prior of the label-text route.

The route's map says how often a *seen* label at a given cosine is right (:mod:`xmtc.models.label_route`). A
label with no document is another population: on yso-finna-en-2k-20k with the whole YSO vocabulary as the
label file, none of 16,460 such top-5 suggestions was right. Its base rate against a seen label's is

    rho = m / (1 - m) * S / U,

``m`` the share of label occurrences that fall on labels without a training document (:func:`unseen_mass`),
``S`` the seen labels the map was fitted on and ``U`` the labels the route scores: the mass ``m`` is shared
evenly among them, so a whole vocabulary of route labels gets a small share each and a few labels added by
text a large one. Data with no unseen occurrence gives ``m = 1 / (N + 2)``: the route stays all but quiet,
the quieter the more labels it holds.

An even share is what the data supports. Sharing ``m`` by how the training texts that carry no label match the
routed labels (the mixture weights of those texts over the labels, estimated by EM) was measured and dropped
(benchmarks/RESULTS.md, "The label-text route's prior"): on the open split of yso-finna-en-2k-20k it lifted
the hidden labels' R@10 among the whole vocabulary from 3.4 to 10.0, but with the set's own label file it cost
3.3 P@1 and 9.5 R@10 (29.46 -> 26.20, 45.71 -> 36.26): the character n-grams of a title match many concepts'
names about as closely as the right one's, and EM concentrated the mass on the wrong ones.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def unseen_mass(valid_Y: sp.csr_matrix, fit_counts: np.ndarray) -> float:
    """``m`` of the module doc: the Laplace estimate ``(u + z + 1) / (N + z + 2)`` of the share of label
    occurrences on labels without a training document, from a validation split's labels ``valid_Y`` (its
    columns past ``fit_counts`` are labels the model lacks) and ``fit_counts``, the label counts of the part
    it was held out from: ``u`` of its ``N`` occurrences are of labels with count 0 there, and ``z`` of its
    texts carry no label at all, each counted as one occurrence of a label the model lacks (a record is
    indexed with some subject; one with none of the known labels carries labels the model lacks)."""
    Yv = sp.csr_matrix(valid_Y)
    counts = np.asarray(fit_counts)
    per_label = np.asarray(Yv.getnnz(axis=0))
    cols = np.arange(Yv.shape[1])
    unseen = cols >= counts.size
    unseen[~unseen] = counts[cols[~unseen]] == 0
    u = float(per_label[unseen].sum())
    z = float(np.sum(Yv.getnnz(axis=1) == 0))
    return (u + z + 1.0) / (float(Yv.nnz) + z + 2.0)


def prior_ratio(m: float, seen_labels: int, routed: int) -> float:
    """``rho`` of the module doc."""
    return m / (1.0 - m) * seen_labels / max(routed, 1)
