"""The parameters of XR-Linear (:class:`XRLinearConfig`, over the shared
:class:`~xmtc.linear.params.LinearTreeParams`) and the rule behind ``n_trees=0`` (:func:`resolve_n_trees`): API
keywords, ``xmtc train`` flags, ``xmtc tune``'s search space and manifest ``params`` are generated from the
dataclass. Separate from the estimator (:mod:`xmtc.methods.xr_linear.estimator`, what the method does with them)
as the transformer methods' parameters are (:mod:`xmtc.methods.xr_transformer.config`); the measured figures
behind the defaults stay beside the defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...config import param
from ...linear.params import LinearTreeParams

__all__ = ["AUTO_TREES", "AUTO_TREES_MAX_LABELS", "XRLinearConfig", "resolve_n_trees"]


AUTO_TREES = 2  # trees of n_trees=0 (auto) on a small label set
AUTO_TREES_MAX_LABELS = 4096  # ... at most this many labels; above, one tree (the command's time rules there)


def resolve_n_trees(n_trees: int, n_labels: int, flat: bool) -> int:
    """The number of trees to train: ``n_trees`` as given, or for 0 (auto) :data:`AUTO_TREES` when the
    label set needs a tree (``flat`` is False: a flat model would be the same for every seed) and has at
    most :data:`AUTO_TREES_MAX_LABELS` labels with training documents (``n_labels``), else 1.

    Why: below a few thousand labels a tree's k-means partition is the largest source of run-to-run
    difference (one seed's sd is 0.2-0.5 P@1 on bibtex, delicious and yso-finna-en-2k-20k), so averaging
    trees buys a steady fraction of a point. Two trees at ``ensemble_tol`` cost less than PECOS's one
    tree; three (+0.09 to +0.41 P@1 over two, means of five seeds) cost about 1.05x PECOS's time even at
    that tolerance, 1.5x at 0.1. On yso-finna-en (24,810 labels) no single-tree lever lifted one tree
    (beam 20 at prediction +0.01 P@1, threshold 0.03 +0.02) while two trees gave +0.59 P@1 / +0.41 P@5
    (36.86 / 16.03) for 1.44x one tree's CPU time, which put ``xmtc train`` at 0.70x PECOS's featurize + train,
    against the bar of 0.5x with P@1 and P@5 at least PECOS's. One tree meets both there (36.27 / 15.62 against
    PECOS's 36.14 / 15.55, 0.35x), so above 4,096 labels one tree is the default and ``n_trees=2`` the choice
    for the last half point at 1.44x the time. Below, the second tree costs seconds.
    """
    if n_trees > 0:
        return n_trees
    return AUTO_TREES if not flat and n_labels <= AUTO_TREES_MAX_LABELS else 1


@dataclass
class XRLinearConfig(LinearTreeParams):
    """Hyperparameters of XR-Linear; defaults follow PECOS's XR-Linear where it has one."""

    n_trees: int = param(0, "Number of trees (differently seeded indexings) whose scores are averaged;"
                         f" 0 = auto: {AUTO_TREES} when the labels need a tree and at most"
                         f" {AUTO_TREES_MAX_LABELS:,} have training documents, else 1. Two trees measured +0.20 to +0.80 P@1 and +0.05"
                         " to +0.32 P@5 over one on bibtex, delicious and yso-finna-en-2k-20k (means of 5 tree"
                         " seeds), +0.59 / +0.41 on yso-finna-en (at 1.44x one tree's train time); each tree adds"
                         " one tree's train and predict time.", minimum=0)
    ensemble_tol: float = param(0.5, "Solver tolerance (see tol) of each tree when n_trees > 1; tol applies to"
                                " a single tree. Averaging absorbs the looser fit: with three trees 0.5 measured"
                                " P@1 -0.06 to +0.16 and P@5 -0.11 to +0.08 against 0.1 (means of 5 seeds on"
                                " bibtex, delicious, yso-finna-en-2k-20k) in 0.67-0.73x the CPU time.",
                                minimum=0.0, exclusive_minimum=True)

    normalize_features: bool = param(True, "Given sparse features instead of texts (an Extreme Classification"
                                     " bag-of-words file, .npz): scale each row to unit L2 norm in training and"
                                     " prediction alike, as PECOS's benchmarks do: P@1 56.1 -> 64.1 on bibtex,"
                                     " 61.9 -> 66.4 on delicious (benchmarks/RESULTS.md, 2026-11-27). false"
                                     " keeps the rows as given (what models saved before this setting do)."
                                     " Texts are unaffected: their TF-IDF rows are unit length already.")

    memory_rows: int = param(50000, "Training rows kept (a seeded sample; all of a smaller training set) as the"
                             " negatives of labels that `learn` meets without a ranker: fitted on their new"
                             " documents alone they say yes to every text near them (three titles of a new"
                             " label made it the top-1 of 3,437 of 5,000 test titles). Kept with their texts"
                             " (each cut to 1,000 characters: the model folder holds them verbatim; ~3 MB for"
                             " 50,000 titles); 0 keeps none.", minimum=0)

    #: ``xmtc tune``'s default search space (``--param`` syntax, :mod:`xmtc.tuning.space`): the loss weights,
    #: the n-grams and their document frequency, the tree's leaves, beam, number of trees, weight pruning and
    #: solver tolerances, each around its default
    TUNE_SPACE: ClassVar[tuple[str, ...]] = (
        "C_pos=0.25..4:log", "C_neg=0.25..4:log", "ngram_max=1,2,3", "min_df=1,2,3,5", "sublinear_tf=true,false",
        "max_leaf_size=25,50,100,200", "beam_size=5,10,20,40", "n_trees=1,2,3", "threshold=0.01..0.1:log",
        "tol=0.05..0.5:log", "ensemble_tol=0.1..1:log")
    #: ``fit`` takes the TF-IDF matrix of :meth:`tfidf` in place of the texts: ``xmtc tune`` caches it
    TUNE_TFIDF_INPUT: ClassVar[bool] = True

    def tree_tol(self, n_trees: int) -> float:
        """The solver tolerance of each tree of an ``n_trees``-tree model."""
        return self.tol if n_trees == 1 else self.ensemble_tol
