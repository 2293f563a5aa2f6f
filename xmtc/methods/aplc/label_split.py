"""APLC-XLNet's label split (Ye et al., ICML'20): the labels by training frequency, cut into a head and tail clusters.

Labels are ordered by training frequency (most frequent first) and cut at ``c_0 < c_1 < ... < c_{C-1}``
into a **head** (ranks ``[0, c_0)``) and C **tail clusters** ``V_i`` (ranks ``[c_{i-1}, c_i)``, the last
ending at L). The reference's run scripts cut the frequency-sorted labels into clusters of equal label
counts, one tail cluster up to ~31k labels (EURLex, AmazonCat, Wiki10), two at 501k (Wiki500k), three at
670k (Amazon670k). Our default, ``n_tail = max(1, round(L / 250,000))`` equal-count tail clusters beside an
equal-count head, reproduces all five of those settings; ``cutoffs`` sets them explicitly and
``split="occurrences"`` cuts at equal shares of the label occurrences instead (a smaller head when labels
are Zipf-distributed). The estimator's default ``head_share=0.75`` gives the head three quarters of the
labels and splits the rest equally among the tail clusters (``head_share=0``: the reference's equal counts;
the measurements behind both choices are in :mod:`xmtc.methods.aplc.network`).

Separate from the network because it is computed once from the training label counts, before any
network exists: the network is built from its result (``order``, ``bounds``) and stores only that.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ...errors import ConfigError

SPLITS = ("labels", "occurrences")


def default_tail_clusters(n_labels: int) -> int:
    """Tail clusters by default: ``max(1, round(L / 250,000))`` (the reference's five settings)."""
    return max(1, int(round(n_labels / 250_000)))


def frequency_split(label_counts: np.ndarray, *, n_tail: int = 0, cutoffs: Sequence[int] | None = None,
                    split: str = "labels", head_share: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """``(order, bounds)``: label ids by decreasing training frequency (ties: smaller id first), and the
    cluster boundaries in that order, ``[0, c_0, ..., c_{C-1}, L]`` (cluster 0 = the head).

    ``cutoffs`` (increasing ranks in [1, L-1]) win; otherwise ``n_tail`` tail clusters (0 = the default
    rule) cut at equal label counts (``split="labels"``, the reference's choice) or at equal shares of
    the label occurrences (``"occurrences"``), each cluster keeping at least one label. With
    ``split="labels"`` and ``head_share`` > 0 the head takes that share of the labels and the tail
    clusters split the rest into equal counts (``head_share=0``: every cluster the same size).
    """
    counts = np.asarray(label_counts, dtype=np.int64)
    L = int(counts.size)
    order = np.lexsort((np.arange(L), -counts)).astype(np.int64)
    if cutoffs:
        cut = [int(c) for c in cutoffs]
        if any(b <= a for a, b in zip(cut, cut[1:])) or cut[0] < 1 or cut[-1] > L - 1:
            raise ConfigError(f"cutoffs must be increasing label ranks between 1 and {L - 1} (L = {L}), got {cut}")
    else:
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        n_tail = int(n_tail) or default_tail_clusters(L)
        n_parts = n_tail + 1
        if L < n_parts:
            raise ConfigError(f"{L} labels cannot be cut into a head and {n_tail} tail clusters")
        if split == "labels" and head_share > 0:
            c0 = min(max(int(round(L * head_share)), 1), L - n_tail)
            cut = [c0 + ((L - c0) * j) // n_tail for j in range(n_tail)]
        elif split == "labels":
            cut = [(L * j) // n_parts for j in range(1, n_parts)]
        else:
            mass = np.cumsum(counts[order].astype(np.float64))
            total = float(mass[-1]) if L else 0.0
            cut = []
            for j in range(1, n_parts):
                c = int(np.searchsorted(mass, total * j / n_parts, side="left")) + 1 if total > 0 else (L * j) // n_parts
                lo = (cut[-1] + 1) if cut else 1
                hi = L - (n_parts - j)          # leave one label for every later cluster
                cut.append(min(max(c, lo), hi))
    return order, np.array([0, *cut, L], dtype=np.int64)


def parse_cutoffs(text: str) -> list[int]:
    """``"997,1500"`` -> ``[997, 1500]`` (empty text: none)."""
    text = (text or "").strip()
    if not text:
        return []
    try:
        return [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise ConfigError(f"cutoffs must be comma-separated whole numbers, got {text!r}") from None
