"""A frozen bottom of a transformer encoder whose output is computed once per text and cached.

With ``k`` frozen layers the token embeddings and the first ``k`` transformer layers keep their pretrained
weights during fine-tuning. Their output for a text is then the same at every step, so it is computed once
(one pass of ``k`` layers over the training texts, without dropout) and kept as one flat array of token
states (``n_tokens x hidden``, bf16 where the matrix products run in bf16, else fp32). A training step and
an embedding pass over the training texts then run only the upper layers on the cached states: no forward
and no backward through the frozen part, and no optimiser update of its weights (the word-embedding matrix
alone is half of all-MiniLM-L6-v2's 22.7M weights). Where the cache would exceed ``cache_bytes`` the frozen
output is recomputed for each batch without gradients (the backward and optimiser savings remain).

Under bf16 the cache holds the frozen output rounded to bf16 (the upper layers' matrix products read it in
bf16 anyway), so the training texts' embeddings differ from what the whole encoder gives them at prediction
by that rounding; in fp32 they are equal. Pad positions of the cached states are zeros: under the attention mask no real token attends to them, and
masked mean / first-token pooling never reads them, so the embeddings equal those of the whole encoder run
on the same weights (:func:`upper_only` is tested against it). Encoders laid out as BERT's
(``model.embeddings`` + ``model.encoder.layer``: BERT, RoBERTa, MiniLM, ELECTRA, XLM-R) are supported.
"""

from __future__ import annotations

import contextlib
import logging

import numpy as np

from ..errors import ConfigError
from ..features.encoder import Tokenized, autocast

log = logging.getLogger(__name__)


def layer_list(encoder):
    """The encoder's transformer layers (a ``ModuleList``); ConfigError for layouts other than BERT's."""
    layers = getattr(getattr(encoder, "encoder", None), "layer", None)
    if getattr(encoder, "embeddings", None) is None or layers is None:
        raise ConfigError(f"frozen_layers needs an encoder laid out as BERT's (embeddings + encoder.layer);"
                          f" {type(encoder).__name__} is not: use frozen_layers 0")
    return layers


def effective_frozen_layers(encoder, k: int) -> int:
    """The layers a ``frozen_layers=k`` setting freezes in ``encoder``: ``min(k, n_layers - 1)`` (at least the
    top layer trains, so the default suits shallow encoders too), and 0 for an encoder not laid out as
    BERT's (fine-tuned whole; logged)."""
    if k <= 0:
        return 0
    try:
        n = len(layer_list(encoder))
    except ConfigError:
        log.warning("frozen_layers %d: %s is not laid out as BERT's (embeddings + encoder.layer); every weight is"
                    " fine-tuned", k, type(encoder).__name__)
        return 0
    if k > n - 1:
        log.info("frozen_layers %d: the encoder has %d layers; %d frozen, the top one trains", k, n, n - 1)
    return min(k, n - 1)


def _check_k(encoder, k: int) -> None:
    n = len(layer_list(encoder))
    if not 1 <= k < n:
        raise ConfigError(f"frozen_layers must lie in 1..{n - 1} for this encoder ({n} layers; 0 = none), got {k}")


_GIVEN = []


def _given(states):
    """A module standing in for the embedding module: returns ``states``, whatever ids it is called with."""
    if not _GIVEN:
        import torch

        class Given(torch.nn.Module):
            def __init__(self, s):
                super().__init__()
                self.s = s

            def forward(self, *args, **kwargs):
                return self.s

        _GIVEN.append(Given)
    return _GIVEN[0](states)


@contextlib.contextmanager
def upper_only(encoder, k: int, states):
    """Inside: ``encoder(**batch)`` runs layers ``k..`` on ``states`` (the output of layer ``k-1`` for the
    batch, ``(b, width, hidden)``) instead of embedding the batch's ids; the attention mask still comes from
    the batch. The encoder's modules are put back on exit. ``states=None``: the whole encoder runs."""
    import torch

    if states is None:
        yield
        return
    layers = layer_list(encoder)
    embeddings = encoder.embeddings
    encoder.embeddings = _given(states)
    encoder.encoder.layer = torch.nn.ModuleList(list(layers)[k:])
    try:
        yield
    finally:
        encoder.embeddings = embeddings
        encoder.encoder.layer = layers


@contextlib.contextmanager
def lower_only(encoder, k: int):
    """Inside: ``encoder(**batch).last_hidden_state`` is the output of layer ``k-1`` (the frozen part)."""
    import torch

    layers = layer_list(encoder)
    encoder.encoder.layer = torch.nn.ModuleList(list(layers)[:k])
    try:
        yield
    finally:
        encoder.encoder.layer = layers


class FrozenPrefix:
    """The token embeddings and first ``k`` layers of ``encoder`` frozen (``requires_grad`` off until
    :meth:`release`), their output for ``tokenized``'s texts cached where it fits ``cache_bytes``."""

    def __init__(self, encoder, k: int, tokenized: Tokenized, device, precision: str = "auto",
                 cache_bytes: int = 4 << 30, batch_size: int = 128):
        import torch

        _check_k(encoder, k)
        self.encoder, self.k, self.tokenized, self.device, self.precision = encoder, k, tokenized, device, precision
        self.frozen = [p for m in (encoder.embeddings, *list(layer_list(encoder))[:k]) for p in m.parameters()]
        self.was_trainable = [p.requires_grad for p in self.frozen]
        for p in self.frozen:
            p.requires_grad_(False)
        hidden = encoder.config.hidden_size
        with autocast(device, precision):
            dtype = torch.bfloat16 if torch.is_autocast_enabled(torch.device(device).type) else torch.float32
        self.dtype = dtype
        need = int(tokenized.lengths.sum()) * hidden * (2 if dtype == torch.bfloat16 else 4)
        self.cache = None
        if need <= cache_bytes:
            self.cache = torch.zeros((int(tokenized.lengths.sum()), hidden), dtype=dtype, device=device)
            order = np.argsort(tokenized.lengths, kind="stable")
            for s in range(0, order.size, batch_size):
                ids = order[s:s + batch_size]
                row, col, flat = self._positions(ids)
                self.cache[flat] = self._compute(ids)[row, col].to(dtype)
            log.info("frozen_layers %d: token embeddings + %d layers frozen, their output cached (%.0f MB)", k, k,
                     need / 2**20)
        else:
            log.info("frozen_layers %d: the cache would take %.0f MB (> %.0f MB): the frozen layers run for each"
                     " batch, without gradients", k, need / 2**20, cache_bytes / 2**20)

    def _positions(self, ids: np.ndarray):
        lens = self.tokenized.lengths[ids]
        row = np.repeat(np.arange(len(ids)), lens)
        col = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
        flat = np.repeat(self.tokenized.offsets[ids], lens) + col
        return row, col, flat

    def _compute(self, ids: np.ndarray):
        import torch

        was_training = self.encoder.training
        self.encoder.eval()  # the frozen part runs without dropout, as when its output is cached
        try:
            with torch.no_grad(), autocast(self.device, self.precision), lower_only(self.encoder, self.k):
                out = self.encoder(**self.tokenized.batch(ids, self.device))
            hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        finally:
            self.encoder.train(was_training)
        return hidden

    def states(self, ids: np.ndarray):
        """(len(ids), longest, hidden): the frozen part's output for texts ``ids``, zeros at pad positions."""
        import torch

        ids = np.asarray(ids, dtype=np.int64)
        if self.cache is None:
            hidden = self._compute(ids)
            mask = torch.from_numpy(np.arange(hidden.shape[1])[None, :] < self.tokenized.lengths[ids][:, None])
            return hidden.masked_fill(~mask.to(hidden.device)[..., None], 0).to(self.dtype)
        row, col, flat = self._positions(ids)
        width = int(self.tokenized.lengths[ids].max())
        out = torch.zeros((len(ids), width, self.cache.shape[1]), dtype=self.dtype, device=self.cache.device)
        out[torch.from_numpy(row), torch.from_numpy(col)] = self.cache[torch.from_numpy(flat)]
        return out

    def upper(self, ids: np.ndarray):
        """Context in which the encoder runs above the frozen layers on their output for texts ``ids``."""
        return upper_only(self.encoder, self.k, self.states(ids))

    def release(self) -> None:
        """Make the frozen weights trainable again (as they were) and drop the cache."""
        for p, was in zip(self.frozen, self.was_trainable):
            p.requires_grad_(was)
        self.cache = None
