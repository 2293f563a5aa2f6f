"""LightXML (Jiang et al., AAAI'21): ``xmtc train --method lightxml`` / ``xmtc.LightXML(...)``.

The network (generator over label clusters, dynamic negative sampling, low-rank discriminator) is
:mod:`xmtc.methods.lightxml.network`; the training loop, validation-based epoch selection, SWA, checkpoints
and the model folder are the shared end-to-end shell (:mod:`xmtc.models.end_to_end`). The label
clusters are the leaves of a balanced 2-means tree on PIFA over TF-IDF (the paper's clustering).
Several clusterings or encoders combine through ``xmtc ensemble``, as the paper's ensemble of three.

Two things the reference code (kongds/LightXML, ``run.sh`` and ``src/main.py``) does beyond the paper: it
trains with SWA in every configuration (``--swa``, from epoch 2-10 every 200-10,000 steps), and it uses
label clusters only for wiki500k and amazon670k -- on EURLex-4K, Wiki10-31K and AmazonCat-13K it has no
generator and trains one flat BCE over all labels. xmtc follows the first (``swa=True`` by default: from
epoch ``swa_start`` 2, every ``swa_every`` 100 steps; measured +0.10 P@1 on the network alone, see ``swa``)
and not the second: it always trains the generator over clusters (``cluster_size``), so a step costs the
candidates, not L; flat training was not measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...config import param
from ...models.base import register
from ...models.end_to_end import EndToEndModel, EndToEndParams, label_clusters


@dataclass
class LightXMLConfig(EndToEndParams):
    """LightXML: generator + discriminator trained jointly with dynamic negative sampling."""

    learning_rate: float = param(1e-4, "AdamW learning rate of the encoder (peak, after warm-up; the paper's"
                                 " 1e-4).", minimum=0.0, exclusive_minimum=True)
    head_learning_rate: float = param(1e-2, "Learning rate of the label embeddings (the lazy Adam moves a label's"
                                      " row only on the steps it is a candidate, so it needs more than the"
                                      " reference's dense 1e-4).", minimum=0.0, exclusive_minimum=True)
    dense_learning_rate: float = param(1e-3, "Learning rate of the generator and the bottleneck (dense, updated"
                                       " every step; 0 = head_learning_rate). yso-finna-en-2k-20k, 3 epochs: test"
                                       " P@1 32.84 at 1e-3 against 30.48 at 1e-2 (benchmarks/RESULTS.md).",
                                       minimum=0.0)
    n_layers: int = param(5, "[CLS] states of the last this many encoder layers are concatenated into the"
                          " text representation (the paper's 5).", minimum=1)
    pooling: str = param("cls", "Per layer, the first token's state (cls, the paper) or the masked mean of the"
                         " token states (mean, what sentence encoders such as all-MiniLM-L6-v2 were trained"
                         " with). yso-finna-en-2k-20k, 6,000 titles, 1 epoch: test P@1 18.73 cls, 15.87 mean.",
                         choices=("cls", "mean"))
    dropout: float = param(0.1, "Dropout on the text representation (the paper's 0.5; at 0.1 three CPU epochs"
                           " reach test P@1 30.48 against 29.00 on yso-finna-en-2k-20k).", minimum=0.0, maximum=0.95)
    hidden_dim: int = param(300, "Rank of the label discriminator (size of the label embeddings).", minimum=1)
    cluster_size: int = param(16, "Most labels per cluster of the generator (leaves of the balanced 2-means"
                              " tree on PIFA).", minimum=1)
    head_init: str = param("centroid", "How the heads start: centroid (generator rows and label embeddings on the"
                           " standardised centroids of their training texts under the pretrained encoder; see"
                           " xmtc/neural/head_init.py) or random (the paper).", choices=("random", "centroid"))
    topk: int = param(10, "Clusters whose labels the discriminator scores (training and prediction).",
                      minimum=1)
    swa: bool = param(True, "Stochastic weight averaging (from epoch swa_start, every swa_every steps; the mean is"
                      " validated and kept), as the reference code runs in every configuration."
                      " yso-finna-en-2k-20k, 3 epochs, the network alone: test P@1 / P@5 32.78 / 11.53 with it,"
                      " 32.68 / 11.50 without (coverage@P90 0.90 both).")
    ranker: bool = param(True, "Re-rank the top ranker_topk with one linear ranker per label on TF-IDF + the text"
                         " representation (xmtc/models/reranker.py, ELIAS++'s second stage; the LightXML paper has"
                         " no such stage; false = the network alone). yso-finna-en-2k-20k, 3 epochs: test P@1 35.76 in"
                         " 960 s with it, 32.84 in 599 s without.")


@register
class LightXML(EndToEndModel):
    """LightXML: one encoder, a cluster generator and a label discriminator trained end to end."""

    method = "lightxml"
    config_class = LightXMLConfig

    def _build_network(self, cfg, encoder, texts, Y, n_threads):
        from .network import LightXMLNetwork

        X = cfg.tfidf().make_featurizer(cfg.n_threads).fit_transform(texts)
        clusters = label_clusters(X, Y, cfg.cluster_size, seed=cfg.seed, n_threads=n_threads)
        return LightXMLNetwork(clusters, encoder.config.hidden_size, n_layers=min(cfg.n_layers,
                               encoder.config.num_hidden_layers), hidden_dim=cfg.hidden_dim, dropout=cfg.dropout,
                               topk=cfg.topk, pooling=cfg.pooling, seed=cfg.seed)

    def _network_class(self):
        from .network import LightXMLNetwork

        return LightXMLNetwork
