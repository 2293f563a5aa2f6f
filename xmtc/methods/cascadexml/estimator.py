"""CascadeXML (Kharbanda et al., NeurIPS'22): ``xmtc train --method cascadexml`` / ``xmtc.CascadeXML(...)``.

The network (one classifier per tree level, each fed by its own encoder layer, each level scoring only
the children of the previous level's top-k) is :mod:`xmtc.methods.cascadexml.network`, where the equations and
every deviation from the paper and its reference code are written down. The training loop,
validation-based epoch selection, checkpoints and the model folder are the shared end-to-end shell
(:mod:`xmtc.models.end_to_end`). The label tree is the project's balanced k-means tree on PIFA over
TF-IDF (:func:`xmtc.index.kmeans.build_label_tree`), ``branching`` children per node, leaves of at most
``max_leaf_size`` labels: for the 1,994 labels of yso-finna-en-2k-20k the defaults give levels
[16, 256, 1994].
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...config import param
from ...errors import ConfigError
from ...models.base import register
from ...models.end_to_end import EndToEndModel, EndToEndParams


_NUMBERS = r"auto|\d*\.?\d+(e-?\d+)?(,\d*\.?\d+(e-?\d+)?)*"


@dataclass
class CascadeXMLConfig(EndToEndParams):
    """CascadeXML: a cascade of per-level classifiers on intermediate encoder layers, trained end to end."""

    epochs: int = param(3, "Passes over the training texts (yso-finna-en-2k-20k's 19,000 titles, 2 CPU threads,"
                        " fp32, all-MiniLM-L6-v2 at length 32: ~200 s an epoch; validation P@1 30.1, 32.3, 33.0"
                        " after each from the centroid start).", minimum=1)
    learning_rate: float = param(1e-4, "AdamW learning rate of the encoder (peak, after warm-up; the reference's"
                                 " 1e-4).", minimum=0.0, exclusive_minimum=True)
    head_learning_rate: float = param(1e-2, "Learning rate of the level classifiers. The reference's 10x the"
                                      " encoder's (1e-3) is for dense Adam, whose momentum keeps moving a row between"
                                      " the steps that touch it; the row-sparse heads' lazy Adam moves a row only when"
                                      " it is a candidate and needs the larger rate (yso-finna-en-2k-20k: test P@1"
                                      " 3.88 after 2 epochs at 1e-3, 33.30 after 3 at 1e-2).",
                                      minimum=0.0, exclusive_minimum=True)
    dense_learning_rate: float = param(1e-3, "Learning rate of the first level's projection and classifier (dense,"
                                       " updated every step; 0 = head_learning_rate).", minimum=0.0)
    head_init: str = param("centroid", "How every level's classifier starts: centroid (rows on the standardised"
                           " centroids of their nodes' training texts under the pretrained encoder, each level under"
                           " its own representation; xmtc/neural/head_init.py) or random (the paper's). 6,000"
                           " titles, 1 epoch: test P@1 18.87 against 1.87.", choices=("random", "centroid"))
    ranker: bool = param(True, "Re-rank the top ranker_topk with one linear ranker per label on TF-IDF + the"
                         " levels' representations (xmtc/models/reranker.py, ELIAS++'s second stage; the CascadeXML"
                         " paper has no such stage; false = the network alone). yso-finna-en-2k-20k: test P@1"
                         " 37.52 in 830 s with it (3 epochs); the network alone 34.52 (4 epochs, 857 s).")
    branching: int = param(16, "Children per node of the label tree (balanced k-means on PIFA).", minimum=2)
    max_leaf_size: int = param(8, "Most labels under a leaf cluster; with branching it sets the number of levels.",
                               minimum=1)
    topk: str = param("auto", "Nodes kept per cluster level, coarse to fine (one number for every level): their"
                      " children are the next level's candidates; auto = 8 at the first cluster level and 32 at"
                      " every finer one ('8,32' on a tree with two cluster levels).")
    layers: str = param("auto", "Encoder layer(s) whose state (see pooling) feeds each level, coarse to fine, '+'"
                        " joining a pair ('3+4,5,6'); auto = the reference's rule scaled to the encoder's depth.")
    level_dropout: str = param("auto", "Dropout on each level's representation, coarse to fine (auto = the"
                               " reference's 0.3,0.3,0.4 for three levels; 0.2,0.25,0.4,0.5 for four).")
    projection_dropout: float = param(0.2, "Dropout before the first level's projection of its concatenated"
                                      " layers.", minimum=0.0, maximum=0.95)
    loss_weights: str = param("auto", "Weight of each level's BCE in the loss, coarse to fine (auto = all 1).")
    pooling: str = param("mean", "What each level reads of its layer(s): mean = the attention-masked mean of the"
                         " tokens' states (the default encoder was trained as a mean-pooled sentence encoder), cls ="
                         " the first token's state (the paper). yso-finna-en-2k-20k, all-MiniLM-L6-v2, 3 epochs, no"
                         " re-ranker: test P@1 34.46 mean, 15.50 cls.", choices=("cls", "mean"))
    score: str = param("parent", "Final label score: parent = label x its parent's score (the reference's"
                       " 'weighted'), path = product along the whole path, label = the label's own score. A"
                       " prediction setting (set_params on a trained model applies it). yso-finna-en-2k-20k, 3"
                       " epochs, the network alone, one model: P@1 / P@5 / coverage@P90 34.46 / 12.13 / 0.04"
                       " parent, 33.20 / 11.72 / 0.10 path, 34.74 / 12.03 / 2.00 label; the parent's factor"
                       " orders documents by how sure the cluster level was, which is what keeps the parent"
                       " rule's top-1 scores from telling right from wrong.", choices=("parent", "path", "label"))

    def validate(self, source: str) -> None:
        """The list-valued settings' syntax, checked before any data is read (their lengths need the tree)."""
        super().validate(source)
        checks = (("topk", r"auto|\d+(,\d+)*", "auto or comma-separated whole numbers ('8,32')"),
                  ("layers", r"auto|\d+(\+\d+)*(,\d+(\+\d+)*)*", "auto or layer numbers ('3+4,5,6')"),
                  ("level_dropout", _NUMBERS, "auto or comma-separated numbers ('0.3,0.3,0.4')"),
                  ("loss_weights", _NUMBERS, "auto or comma-separated numbers ('1,1,1')"))
        for name, pattern, what in checks:
            value = str(getattr(self, name)).replace(" ", "")
            if not re.fullmatch(pattern, value):
                raise ConfigError(f"{source}: '{name}' must be {what}, got {getattr(self, name)!r}")


@register
class CascadeXML(EndToEndModel):
    """CascadeXML: one encoder pass, a different layer's pooled state (the paper: [CLS]) for each tree level."""

    method = "cascadexml"
    config_class = CascadeXMLConfig

    def _build_network(self, cfg, encoder, texts, Y, n_threads):
        from ...index.kmeans import build_label_tree
        from ...index.pifa import pifa
        from .network import CascadeNetwork
        from .settings import parse_floats, parse_layers, parse_topk, reference_dropouts

        X = cfg.tfidf().make_featurizer(cfg.n_threads).fit_transform(texts)
        tree = build_label_tree(pifa(X, Y), branching=cfg.branching, max_leaf_size=cfg.max_leaf_size,
                                seed=cfg.seed, n_threads=n_threads)
        if tree.depth < 1:
            raise ConfigError(f"CascadeXML: {Y.shape[1]} labels with max_leaf_size {cfg.max_leaf_size} give a flat"
                              " tree; lower max_leaf_size so that there is at least one cluster level")
        n_levels = tree.depth + 1
        return CascadeNetwork(
            tree, encoder.config.hidden_size,
            layers=parse_layers(cfg.layers, encoder.config.num_hidden_layers, n_levels),
            topk=parse_topk(cfg.topk, n_levels - 1),
            dropouts=parse_floats(cfg.level_dropout, n_levels, "level_dropout", reference_dropouts(n_levels)),
            loss_weights=parse_floats(cfg.loss_weights, n_levels, "loss_weights", [1.0] * n_levels),
            score=cfg.score, proj_dropout=cfg.projection_dropout, seed=cfg.seed, pooling=cfg.pooling)

    def _network_class(self):
        from .network import CascadeNetwork

        return CascadeNetwork
