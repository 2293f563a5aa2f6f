"""The label tree's, linear models' and beam search's parameters: XR-Linear's, and the transformer
methods' linear matcher and rankers (which add their own fields on top)."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import param
from ..features.params import TfidfParams


@dataclass
class LinearTreeParams(TfidfParams):
    """The label tree, linear models and beam search: XR-Linear's, and the transformer methods' rankers."""

    branching: int = param(16, "Children per node of the label tree (k-means clusters per split).", minimum=2)
    max_leaf_size: int = param(100, "Most labels in one leaf cluster; sets the tree depth.", minimum=1)
    tree_shape: str = param("binary", "Leaf clusters of the label tree: binary = the smallest power of two"
                            " that keeps leaves within max_leaf_size (PECOS's rule), full = branching^depth.",
                            choices=("binary", "full"))
    kmeans_max_iter: int = param(20, "Spherical k-means iterations per split.", minimum=1)
    negatives: str = param("tfn", "Hard negatives for each node's classifier: teacher-forced (tfn),"
                           " matcher-aware (man) or both. PECOS's default, tfn, measured as accurate as"
                           " tfn+man on yso-finna-en at a quarter of the training time.",
                           choices=("tfn", "man", "tfn+man"))
    C_pos: float = param(1.0, "Loss weight (inverse regularisation) for positive examples.", minimum=0.0,
                         exclusive_minimum=True)
    C_neg: float = param(1.0, "Loss weight (inverse regularisation) for negative examples.", minimum=0.0,
                         exclusive_minimum=True)
    bias: float = param(1.0, "Value of the constant bias feature (0 = no bias).", minimum=0.0)
    tol: float = param(0.1, "Stopping tolerance of the dual coordinate descent solver.", minimum=0.0,
                       exclusive_minimum=True)
    max_iter: int = param(100, "Most passes of the solver over one classifier's examples.", minimum=1)
    threshold: float = param(0.05, "Weights with smaller magnitude are pruned to keep the model sparse."
                             " PECOS uses 0.1; 0.05 measured +0.06 to +1.9 P@1 on yso-finna-en, reuters,"
                             " bibtex and delicious for a 1.3-2.2x larger model.", minimum=0.0)
    beam_size: int = param(10, "Clusters kept per tree level during beam search (also used for MAN).",
                           minimum=1)
    post_processor: str = param("l3-hinge", "Transform of each level's scores before they are multiplied"
                                " down the tree.", choices=("l3-hinge", "sigmoid", "noop"))
    seed: int = param(0, "Random seed (k-means initialisation); tree i uses seed + i.", minimum=0)
    n_threads: int = param(0, "Threads for training and prediction (0 = all cores).", minimum=0)

    def tfidf(self) -> TfidfParams:
        return TfidfParams(**{f: getattr(self, f) for f in TfidfParams.__dataclass_fields__})
