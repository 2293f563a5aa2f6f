"""Pictures of an evaluation and of a label tree (matplotlib, the ``plot`` extra).

* :func:`evaluation_report` (``xmtc evaluate ... --plot report.png``): P@k and PSP@k for k = 1..K;
  precision of the top-K suggestions by label-frequency decile (labels sorted by training count and
  cut into ten groups of equal size; a suggestion counts for its label's decile) with recall of the
  true labels of each decile beside it; how often each label occurs in training vs how often it is
  predicted (both as shares, labels ranked by training count), which shows whether the model
  neglects the tail; and a reliability diagram of the top-K scores (what ``ECE@K`` summarises).
  With a ``threshold`` (``evaluate --threshold``) the figure also shows what it keeps: the precision,
  recall and F1 (``F1@T``) of the top-K suggestions scoring at least T, as horizontal lines in the
  precision-at-k panel, and, for one global T, the threshold as a vertical line in the reliability
  diagram with the share of suggestions it keeps (per-label thresholds have no one line to draw).
* :func:`tree_report` (``xmtc info MODEL_DIR --plot tree.png``): nodes per tree level and the
  distribution of leaf-cluster sizes (labels per last-level parent), the balance of the k-means tree.

Everything is computed from top-k arrays and label counts: no dense documents x labels matrix.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        from .errors import ConfigError
        raise ConfigError("plots need matplotlib: pip install 'xmtc[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def image_format(path) -> str:
    """The image format a plot path names by its extension (``report.png`` -> ``png``), checked before any
    work is done: an unknown one is a one-line error naming the path, not matplotlib's traceback after an
    evaluation."""
    from pathlib import Path

    from .errors import ConfigError

    _pyplot()  # matplotlib installed, or the one-line error that says how to install it
    from matplotlib.backend_bases import FigureCanvasBase

    supported = sorted(FigureCanvasBase.get_supported_filetypes())
    fmt = Path(str(path)).suffix.lower().lstrip(".")
    if fmt not in supported:
        raise ConfigError(f"{path}: a plot file must end in one of .{', .'.join(supported)}")
    return fmt


def _save(fig, path) -> None:
    """Write ``fig`` to ``path`` whole or not at all (a sibling temporary file, renamed on success)."""
    from .data.io import atomic_output

    fmt = image_format(path)
    with atomic_output(path, binary=True) as fh:
        fig.savefig(fh, format=fmt, dpi=100)
    _pyplot().close(fig)


def decile_of_labels(train_counts: np.ndarray, n_labels: int) -> np.ndarray:
    """Decile 0 (rarest) .. 9 (most frequent) of every label by training count; test-only labels: 0."""
    counts = np.zeros(n_labels)
    tc = np.asarray(train_counts, dtype=np.float64)
    counts[:min(n_labels, tc.size)] = tc[:n_labels]
    order = np.lexsort((np.arange(n_labels), counts))
    dec = np.empty(n_labels, dtype=np.int64)
    dec[order] = np.arange(n_labels) * 10 // max(n_labels, 1)
    return dec


def precision_by_decile(Y: sp.csr_matrix, idx: np.ndarray, hits: np.ndarray, deciles: np.ndarray):
    """(precision %, recall %, suggestions, true labels) per decile of the suggested/true label."""
    valid = idx >= 0
    d_pred = deciles[idx[valid]]
    n_pred = np.bincount(d_pred, minlength=10)
    n_hit = np.bincount(d_pred, weights=hits[valid].astype(np.float64), minlength=10)
    d_true = deciles[Y.indices]
    n_true = np.bincount(d_true, minlength=10)
    prec = np.divide(100 * n_hit, n_pred, out=np.zeros(10), where=n_pred > 0)
    rec = np.divide(100 * n_hit, n_true, out=np.zeros(10), where=n_true > 0)
    return prec, rec, n_pred, n_true


def thresholded_prf(Y: sp.csr_matrix, idx: np.ndarray, scores: np.ndarray, hits: np.ndarray, threshold):
    """(precision %, recall %, F1 %, share of suggestions kept %) of the suggestions scoring >= ``threshold``
    (a number or one per label); recall and F1 count every true label, as ``F1@T`` does."""
    from .metrics import first_occurrence

    t = np.asarray(threshold, dtype=np.float64)
    valid = (idx >= 0) & first_occurrence(idx)
    limit = t if t.ndim == 0 else t[np.where(idx >= 0, np.minimum(idx, t.size - 1), 0)]
    kept = valid & (scores >= limit)
    tp, n_kept, n_true = float((kept & hits).sum()), float(kept.sum()), float(Y.nnz)
    p = 100.0 * tp / n_kept if n_kept else 0.0
    r = 100.0 * tp / n_true if n_true else 0.0
    f1 = 200.0 * tp / (n_kept + n_true) if n_kept + n_true else 0.0
    return p, r, f1, 100.0 * n_kept / max(float(valid.sum()), 1.0)


def evaluation_report(path, Y, idx: np.ndarray, scores: np.ndarray, train_counts: np.ndarray, n_train: int,
                      *, title: str = "", threshold=None) -> None:
    """Write the four-panel evaluation figure (see the module doc) to ``path``; ``threshold``: a number,
    per-label thresholds (one per label), or None."""
    from .metrics import binary_csr, evaluate, hits_matrix

    plt = _pyplot()
    Y = binary_csr(Y)
    K = idx.shape[1]
    ks = tuple(range(1, K + 1))
    m = evaluate(Y, (idx, scores), ks=ks, train_label_counts=train_counts, n_train=n_train)
    hits = hits_matrix(Y, idx)
    L = Y.shape[1]
    fig, ax = plt.subplots(2, 2, figsize=(12, 8.5))

    a = ax[0, 0]
    a.plot(ks, [m[f"P@{k}"] for k in ks], "o-", label="P@k")
    a.plot(ks, [m[f"PSP@{k}"] for k in ks], "s-", label="PSP@k (propensity-scored)")
    for k in ks:
        a.annotate(f"{m[f'P@{k}']:.1f}", (k, m[f"P@{k}"]), textcoords="offset points", xytext=(0, 6),
                   ha="center", fontsize=8)
    thr = None
    if threshold is not None:
        thr = thresholded_prf(Y, idx, scores, hits, threshold)
        t_name = f"T = {float(threshold):.3g}" if np.ndim(threshold) == 0 else "per-label T"
        for value, name, color in zip(thr[:3], ("precision", "recall", "F1@T"), ("C2", "C3", "C4")):
            a.axhline(value, color=color, ls="--", lw=1.2, label=f"{name} at T: {value:.1f}")
        a.set_title(f"precision at k; dashed: top-{K} suggestions scoring >= {t_name}"
                    f" ({thr[3]:.0f}% kept)", fontsize=10)
    else:
        a.set_title("precision at k")
    a.margins(y=0.12)  # room for the value printed above the top point
    a.set_xlabel("k")
    a.set_ylabel("%")
    a.set_xticks(ks)
    a.legend(fontsize=8)
    a.grid(alpha=0.3)

    a = ax[0, 1]
    deciles = decile_of_labels(train_counts, L)
    prec, rec, n_pred, n_true = precision_by_decile(Y, idx, hits, deciles)
    x = np.arange(10)
    a.bar(x - 0.2, prec, 0.4, label=f"precision of top-{K} suggestions")
    a.bar(x + 0.2, rec, 0.4, label=f"recall of true labels in top-{K}")
    tc = np.zeros(L)
    tc[:min(L, len(train_counts))] = np.asarray(train_counts)[:L]
    ranges = [f"{int(tc[deciles == d].min())}-{int(tc[deciles == d].max())}" if np.any(deciles == d) else "-"
              for d in range(10)]
    a.set_xticks(x)
    a.set_xticklabels([f"D{d + 1}\n{r}" for d, r in enumerate(ranges)], fontsize=7)
    a.set_xlabel("label-frequency decile (training count range), rarest first")
    a.set_ylabel("%")
    a.set_title("precision and recall by label-frequency decile")
    a.legend(fontsize=8)
    a.grid(alpha=0.3, axis="y")

    a = ax[1, 0]
    order = np.argsort(-tc, kind="stable")
    pred_counts = np.bincount(idx[idx >= 0], minlength=L)[:L].astype(np.float64)
    true_counts = np.asarray(Y.getnnz(axis=0), dtype=np.float64)
    # labels binned by training-frequency rank (log-spaced bins): mean share of one label in each bin
    edges = np.unique(np.geomspace(1, L + 1, num=min(40, L + 1)).astype(np.int64))
    centers = np.sqrt(edges[:-1] * np.maximum(edges[1:] - 1, edges[:-1]))
    for counts, name, style in ((tc, "training", "o-"), (true_counts, "test (true)", "s:"),
                                (pred_counts, f"predicted (top-{K})", "^--")):
        share = counts[order] / max(counts.sum(), 1)
        means = [share[lo - 1:hi - 1].mean() for lo, hi in zip(edges[:-1], edges[1:])]
        a.plot(centers, means, style, label=name, lw=1.2, ms=3)
    a.set_xscale("log")
    a.set_yscale("log")
    a.set_xlabel("label rank by training frequency (log bins)")
    a.set_ylabel("mean share of occurrences per label")
    never = int(np.count_nonzero((pred_counts == 0) & (true_counts > 0)))
    a.set_title(f"label frequency: training vs predictions\n({never} test labels never predicted)", fontsize=10)
    a.legend(fontsize=8)
    a.grid(alpha=0.3)

    a = ax[1, 1]
    valid = idx >= 0
    s = np.clip(scores[valid].astype(np.float64), 0, 1)
    c = hits[valid].astype(np.float64)
    b = np.minimum((s * 10).astype(int), 9)
    cnt = np.bincount(b, minlength=10)
    acc = np.divide(np.bincount(b, weights=c, minlength=10), cnt, out=np.full(10, np.nan), where=cnt > 0)
    conf = np.divide(np.bincount(b, weights=s, minlength=10), cnt, out=np.full(10, np.nan), where=cnt > 0)
    a.plot([0, 1], [0, 1], "k:", lw=1, label="perfect calibration")
    a.plot(conf, acc, "o-", label="suggestions", clip_on=False, zorder=3)  # whole markers on the frame too
    for xx, yy, n in zip(conf, acc, cnt):
        if n:  # the count beside its point, on the side facing into the panel, so none is cut off
            right, low = xx > 0.85, yy < 0.12
            a.annotate(f"{n:,}", (xx, yy), textcoords="offset points", xytext=(-6 if right else 6, 6 if low else -11),
                       ha="right" if right else "left", fontsize=7)
    if thr is not None and np.ndim(threshold) == 0:
        t = float(threshold)
        a.axvspan(min(max(t, 0.0), 1.0), 1.0, color="C2", alpha=0.08)
        a.axvline(t, color="C2", ls="--", lw=1.2, label=f"threshold {t:.3g}: keeps {thr[3]:.0f}% (P {thr[0]:.1f}%)")
    ece = next((v for k, v in evaluate(Y, (idx, scores), ks=(K,), scores=True).items() if k.startswith("ECE")), 0)
    a.set_xlim(0, 1)
    a.set_ylim(0, 1)
    a.set_xlabel("mean score in bin")
    a.set_ylabel("share correct")
    a.set_title(f"reliability of top-{K} scores (ECE@{K} = {ece:.2f}%; counts per bin)", fontsize=10)
    a.legend(fontsize=8, loc="upper left")
    a.grid(alpha=0.3)

    fig.suptitle(title or f"evaluation on {Y.shape[0]} documents")
    fig.tight_layout()
    _save(fig, path)


def tree_report(path, level_sizes_per_tree: list[list[int]], leaf_sizes_per_tree: list[np.ndarray], *,
                title: str = "") -> None:
    """Nodes per level (log scale) and leaf-cluster sizes of each tree of a model."""
    plt = _pyplot()
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.5))
    n = len(level_sizes_per_tree)
    width = 0.8 / n
    for t, sizes in enumerate(level_sizes_per_tree):
        x = np.arange(1, len(sizes) + 1) + (t - (n - 1) / 2) * width
        ax[0].bar(x, sizes, width, label=f"tree {t}")
        for xx, v in zip(x, sizes):
            ax[0].annotate(f"{v:,}", (xx, v), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8)
    depth = max(len(s) for s in level_sizes_per_tree)
    ax[0].set_xticks(range(1, depth + 1))
    ax[0].set_xticklabels([f"level {i}" + (" (labels)" if i == depth else "") for i in range(1, depth + 1)])
    ax[0].set_yscale("log")
    ax[0].set_ylabel("nodes")
    ax[0].set_title("tree level sizes")
    if n > 1:
        ax[0].legend()
    for t, leaves in enumerate(leaf_sizes_per_tree):
        leaves = np.asarray(leaves)
        sizes, counts = np.unique(leaves, return_counts=True)
        ax[1].bar(sizes + (t - (n - 1) / 2) * width, counts, width, label=f"tree {t}")
        if t == 0:
            ax[1].set_title(f"leaf balance: labels per leaf cluster\n({leaves.size} leaves; "
                            f"min {leaves.min()}, median {int(np.median(leaves))}, max {leaves.max()})")
            if sizes.size <= 30:
                ax[1].set_xticks(sizes)
    if n > 1:
        ax[1].legend()
    ax[1].set_xlabel("labels in the leaf cluster")
    ax[1].set_ylabel("leaf clusters")
    ax[1].grid(alpha=0.3, axis="y")
    fig.suptitle(title)
    fig.tight_layout()
    _save(fig, path)


def model_tree_report(path, model, title: str = "") -> None:
    """:func:`tree_report` of an XR-Linear-family model (every tree)."""
    from .errors import ConfigError

    trees = getattr(model, "models_", None)
    if not trees:
        raise ConfigError(f"this {model.method} model has no label tree to plot")
    sizes = [t.level_sizes for t in trees]
    leaves = [np.bincount(t.levels_[-1].parent_of, minlength=t.levels_[-1].n_parents) for t in trees]
    tree_report(path, sizes, leaves, title=title or f"{model.method}: {len(model.labels_)} labels")
