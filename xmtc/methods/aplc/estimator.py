"""APLC-XLNet (Ye et al., ICML'20): ``xmtc train --method aplc`` / ``xmtc.APLC(...)``.

The output layer (adaptive probabilistic label clusters: frequency-sorted labels cut into a head and
tail clusters, node x conditional label probabilities, the reference's normalised BCE) is
:mod:`xmtc.methods.aplc.network`; the training loop, validation-based epoch selection, checkpoints and the
model folder are the shared end-to-end shell (:mod:`xmtc.models.end_to_end`). Any encoder the core
loads works; XLNet (the paper's) loads like the others from a local folder, with ``pooling=auto``
taking its last token (``<cls>``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...config import param
from ...errors import ConfigError
from ...models.base import register
from ...models.end_to_end import EndToEndModel, EndToEndParams


@dataclass
class APLCConfig(EndToEndParams):
    """APLC-XLNet: an encoder with adaptive probabilistic label clusters as its output layer."""

    epochs: int = param(3, "Passes over the training texts (3: 729 s on yso-finna-en-2k-20k's 19,000 titles, 2 CPU"
                        " threads, fp32, all-MiniLM-L6-v2 at length 32).", minimum=1)
    learning_rate: float = param(1e-4, "AdamW learning rate of the encoder (peak, after warm-up).", minimum=0.0,
                                 exclusive_minimum=True)
    head_learning_rate: float = param(1e-2, "Learning rate of the summary layer and the label clusters (AdamW"
                                      " on the dense ones, lazy Adam on the tail label matrices). The reference's"
                                      " 1e-3 to 2e-3 is for dense Adam; the lazy Adam moves a tail label's row only on"
                                      " the steps that touch it (yso-finna-en-2k-20k, 3 epochs at 1e-2: test P@1"
                                      " 36.06; 2e-3 not run at that scale).", minimum=0.0, exclusive_minimum=True)
    cutoffs: str = param("", "Comma-separated label ranks (by training frequency, most frequent first) where the"
                         " head ends and each tail cluster begins, e.g. '997'; empty = the rule of"
                         " n_tail_clusters and split.")
    n_tail_clusters: int = param(0, "Tail clusters when cutoffs is empty (0 = max(1, round(L / 250000)), the"
                                 " reference's settings).", minimum=0)
    head_share: float = param(0.75, "With split=labels: share of the labels (the most frequent) in the head; the tail"
                              " clusters split the rest into equal counts. 0 = every cluster the same size (the"
                              " reference's settings); see xmtc.methods.aplc.network for the measurements behind 0.75.",
                              minimum=0.0, maximum=1.0)
    split: str = param("labels", "Where the automatic cutoffs fall: equal label counts per cluster (labels, the"
                       " reference's) or equal shares of the label occurrences (occurrences).",
                       choices=("labels", "occurrences"))
    div_value: float = param(2.0, "Tail cluster i projects the text to summary_size / div_value^i values.",
                             minimum=1.0)
    summary_size: int = param(0, "Size of the text representation after the summary layer (0 = the encoder's"
                              " hidden size, as the reference's last_hidden_size).", minimum=0)
    pooling: str = param("auto", "Token state fed to the summary layer: first ([CLS]), last (XLNet's <cls>), mean"
                         " (masked mean); auto = last for XLNet, mean otherwise.",
                         choices=("auto", "first", "last", "mean"))
    dropout: float = param(0.1, "Dropout after the summary layer (XLNet's summary_last_dropout).", minimum=0.0,
                           maximum=0.95)
    bias: bool = param(True, "Biases on the head's labels and nodes and on the tail labels, started at the log-odds"
                       " of their training frequencies (false = the reference: no biases, all probabilities start"
                       " at 0.5 and learn slowly; see xmtc.methods.aplc.network).")
    predict_mode: str = param("pruned", "pruned: score tail clusters only where they can still enter the top k"
                              " (exact, same top k as full); full: score every label (the reference).",
                              choices=("pruned", "full"))
    predict_beam: int = param(0, "Most tail clusters scored per text, by node probability (0 = all; fewer is"
                              " approximate). Used by predict_mode=pruned.", minimum=0)

    def validate(self, source: str) -> None:
        super().validate(source)
        from .label_split import parse_cutoffs

        try:
            parse_cutoffs(self.cutoffs)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None


def resolve_pooling(pooling: str, encoder) -> str:
    if pooling != "auto":
        return pooling
    return "last" if getattr(encoder.config, "model_type", "") == "xlnet" else "mean"


@register
class APLC(EndToEndModel):
    """APLC-XLNet: frequency-sorted label clusters whose probabilities multiply node and conditional."""

    method = "aplc"
    config_class = APLCConfig

    def _build_network(self, cfg, encoder, texts, Y, n_threads):
        from .label_split import frequency_split, parse_cutoffs
        from .network import APLCNetwork

        counts = np.asarray(Y.getnnz(axis=0), dtype=np.int64)
        order, bounds = frequency_split(counts, n_tail=cfg.n_tail_clusters, cutoffs=parse_cutoffs(cfg.cutoffs),
                                        split=cfg.split, head_share=cfg.head_share)
        net = APLCNetwork(order, bounds, encoder.config.hidden_size, summary_size=cfg.summary_size,
                           div_value=cfg.div_value, pooling=resolve_pooling(cfg.pooling, encoder),
                           dropout=cfg.dropout, bias=cfg.bias, predict_mode=cfg.predict_mode,
                           predict_beam=cfg.predict_beam, seed=cfg.seed)
        net.set_prior(Y)
        return net

    def _network_class(self):
        from .network import APLCNetwork

        return APLCNetwork
