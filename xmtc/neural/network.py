"""What an end-to-end method supplies to the shared training loop (:mod:`xmtc.neural.training_loop`): a
:class:`Network` (the method's output layers over the encoder: cluster heads, projections, label
classifiers) and the :class:`LossOut` of its training step; with the two text representations the
papers use, [CLS] states of the last layers concatenated (:func:`cls_concat`) and the masked mean of
the token states (:func:`mean_pooled`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from ..errors import ConfigError, ModelFormatError
from .heads import RowSparseHead


# -- text representations ------------------------------------------------------------------------
def cls_concat(hidden_states, n_layers: int):
    """The first token's state of each of the last ``n_layers`` layers, concatenated, last layer first
    (LightXML's text representation; ``n_layers = 1`` is the usual [CLS] embedding)."""

    if not 1 <= n_layers <= len(hidden_states) - 1:
        raise ConfigError(f"the encoder has {len(hidden_states) - 1} layers; cannot concatenate {n_layers}")
    return torch.cat([hidden_states[-i][:, 0] for i in range(1, n_layers + 1)], dim=-1)


def mean_pooled(hidden, attention_mask):
    """The attention-masked mean of one layer's token states."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp_min(1.0)


# -- what a method supplies ------------------------------------------------------------------------
@dataclass
class LossOut:
    """A network's training loss on one batch: ``loss`` (scalar tensor), ``rows`` the ``(head name,
    HeadBatch)`` pairs it gathered from its row-sparse heads (their gradients are collected), and
    ``parts`` the loss terms as floats (logged). ``candidates`` (optional): the (B, S) label ids the
    method scored for the batch (-1 = padding); ALC (:mod:`xmtc.neural.alc`) takes its in-batch
    candidate labels from them. ``tensors`` (optional): named intermediate tensors of the step (LightXML's
    ``z`` and ``g``) that ALC's :meth:`Network.alc_scores` reads instead of computing them again."""

    loss: Any
    rows: list = field(default_factory=list)
    parts: dict = field(default_factory=dict)
    candidates: Any = None
    tensors: dict = field(default_factory=dict)


class Network(torch.nn.Module):
    """Base of a method's output layers; see the module docstring for the contract.

    Subclasses define ``text_representation``, ``training_loss``, ``predict``, ``meta``,
    ``structure_arrays`` and the classmethod ``from_arrays``; label-sized matrices go in ``self.sparse_heads`` (name ->
    :class:`RowSparseHead`), everything else is an ordinary parameter.
    """

    #: config fields the network reads only when it predicts (an attribute of the same name each):
    #: ``set_params`` on a fitted estimator hands them on, so a prediction setting changed after training
    #: takes effect instead of being silently ignored until the next fit
    PREDICT_PARAMS: tuple[str, ...] = ()

    def __init__(self):
        super().__init__()
        self.sparse_heads: dict[str, RowSparseHead] = {}
        self.alc = None  # the ALC objective's settings while training with ``alc``; see attach_alc

    def text_representation(self, hidden_states, attention_mask):  # pragma: no cover - abstract
        raise NotImplementedError

    def training_loss(self, rep, Y: sp.csr_matrix) -> LossOut:  # pragma: no cover - abstract
        raise NotImplementedError

    def predict(self, rep, k: int):  # pragma: no cover - abstract
        raise NotImplementedError

    def meta(self) -> dict:  # pragma: no cover - abstract
        """JSON-able sizes and settings that ``from_arrays`` needs besides the arrays."""
        raise NotImplementedError

    def structure_arrays(self) -> dict[str, np.ndarray]:
        """Non-trained arrays that define the network (cluster assignments, ...)."""
        return {}

    def arrays(self) -> dict[str, np.ndarray]:
        """Everything saved: dense parameters, row-sparse heads and structure arrays."""
        return {**self.dense_arrays(), **self.sparse_arrays(), **self.structure_arrays()}

    @classmethod
    def from_arrays(cls, arrays: dict, meta: dict, *, source: str = "model", hidden_size: int | None = None):
        """Rebuild a saved network (``arrays()`` + ``meta()``); errors name ``source``."""  # pragma: no cover
        raise NotImplementedError

    def init_from_data(self, rep: np.ndarray, Y: sp.csr_matrix, seed: int = 0) -> None:
        """``head_init = "centroid"``: set the heads from the training texts' representations ``rep`` (n, d;
        eval mode) and labels ``Y`` before the first step (:mod:`xmtc.neural.head_init`)."""
        raise ConfigError(f"{type(self).__name__} has no data-driven head initialisation; use head_init=random")

    # -- hooks of the training loop (no-ops unless a method needs them) --------------------------------
    def begin_epoch(self, epoch: int, trainer):
        """Called by the loop before the first batch of ``epoch`` (1-based) with the trainer (its encoder,
        ``tokenized`` texts, ``Y``, device and settings): a method that mines with the current weights
        (the dual encoder's hard negatives) does it here. May return the epoch's batches (arrays of row
        ids, as many as the loop planned) in an order of its own (cluster-grouped batches); None keeps
        the loop's shuffled ones."""
        return None

    def on_batch(self, ids) -> None:
        """The training rows (indices into the trainer's texts) of the batch whose loss comes next."""

    def training_state(self) -> dict:
        """What the method keeps between steps beside its weights (mined negatives, counters), for
        checkpoints: restored by :meth:`load_training_state` so that a resumed run ends identical."""
        return {}

    def load_training_state(self, state: dict) -> None:
        """Restore what :meth:`training_state` returned."""

    def alc_scores(self, rep, out: LossOut, label_ids, tap):
        """ALC's hook: ``(log_p (B, C), rows)``, the log of the method's final score (the one users
        threshold, bias included) of every text of the batch with each label of ``label_ids`` (C,), computed
        from the tensors the base step used (``rep``, ``out.tensors``) and the label heads' rows, each read
        through ``tap(tensor, group)`` (group ``"text"`` for the text side, the head's name for its rows);
        ``rows`` the ``(head name, HeadBatch)`` gathered (their row gradients are collected like
        ``LossOut.rows``). Methods without it cannot use ``alc``."""
        raise ConfigError(f"{type(self).__name__} does not support the ALC objective")

    def attach_alc(self, module) -> None:
        """Train with the ALC objective (:class:`xmtc.neural.alc.ALC`), or ``None`` to drop it: its batch
        counter is part of the network's state while attached (checkpointed); ``predict`` never uses it."""
        self.alc = module

    def dense_arrays(self) -> dict[str, np.ndarray]:
        """The dense parameters and buffers as numpy arrays (keys ``dense.<name>``)."""
        return {f"dense.{k}": v.detach().float().cpu().numpy().copy() if v.is_floating_point()
                else v.detach().cpu().numpy().copy() for k, v in self.state_dict().items()}

    def sparse_arrays(self) -> dict[str, np.ndarray]:
        out = {}
        for name, head in self.sparse_heads.items():
            out[f"sparse.{name}.weight"], out[f"sparse.{name}.bias"] = head.numpy()
        return out

    def load_dense_sparse(self, arrays: dict[str, np.ndarray], source: str = "model") -> None:
        """Restore what :meth:`dense_arrays` and :meth:`sparse_arrays` wrote (shapes checked)."""

        state = {}
        for k, v in self.state_dict().items():
            key = f"dense.{k}"
            if key not in arrays:
                raise ModelFormatError(f"{source}: network lacks {key!r}")
            a = np.asarray(arrays[key])
            if tuple(a.shape) != tuple(v.shape):
                raise ModelFormatError(f"{source}: {key} has shape {a.shape}, expected {tuple(v.shape)}")
            state[k] = torch.from_numpy(np.array(a)).to(v.dtype)
        self.load_state_dict(state)
        for name, head in self.sparse_heads.items():
            for part, t in (("weight", head.weight), ("bias", head.bias)):
                key = f"sparse.{name}.{part}"
                if key not in arrays:
                    raise ModelFormatError(f"{source}: network lacks {key!r}")
                a = np.asarray(arrays[key], dtype=np.float32)
                if tuple(a.shape) != tuple(t.shape):
                    raise ModelFormatError(f"{source}: {key} has shape {a.shape}, expected {tuple(t.shape)}")
                t.copy_(torch.from_numpy(np.array(a)))

    def to_device(self, device):
        self.to(device)
        for name, head in list(self.sparse_heads.items()):
            head.weight = head.weight.to(device)
            head.bias = head.bias.to(device)
        return self
