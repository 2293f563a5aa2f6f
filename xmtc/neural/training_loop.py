"""The one training loop of the end-to-end neural methods (LightXML, ELIAS, APLC-XLNet, CascadeXML).

An end-to-end method is an encoder plus a :class:`Network`: the method's own output layers (cluster
heads, projections, label classifiers). The network turns the encoder's hidden states into a text
representation, computes its training loss on a batch, and predicts the top-k labels. Everything
else is shared and lives here, once:

* **optimisers** -- AdamW on the encoder (matrices with weight decay, vectors without) at
  ``learning_rate``; AdamW on the network's dense parameters (cluster heads, projections: sizes that
  do not grow with L) at ``dense_learning_rate`` (0: ``head_learning_rate``); a lazy Adam
  (:class:`~xmtc.neural.heads.LazyAdam`) on each label-sized matrix
  (:class:`~xmtc.neural.heads.RowSparseHead`) at ``head_learning_rate``, touching only the rows a batch
  scored. A step therefore costs the batch's candidates, never L.
  The lazy Adam moves a row only on the steps whose candidates hold it (dense Adam's momentum keeps
  moving every row), so the row-sparse heads need a larger rate than the reference codes' dense
  ones: at 1e-3 CascadeXML's heads barely left their start on yso-finna-en-2k-20k (test P@1 3.88
  after 2 epochs), at 1e-2 it reached 33.30 after 3 (benchmarks/RESULTS.md). The dense layers are
  updated every step and need no such boost: Adam moves every entry by about the rate per step, so at
  1e-2 a 1,920 x 300 bottleneck initialised within +-0.023 is rewritten in a few steps (LightXML,
  6,000 titles, 1 epoch: test P@1 6.27 with the dense layers at 1e-2, 18.73 at 1e-3, 16.60 at 1e-4);
* **head initialisation** (``head_init``): random (the papers), or ``centroid`` where the network
  implements :meth:`Network.init_from_data` -- the training texts'
  :func:`~xmtc.neural.inference.representations` under the pretrained encoder set the heads before the first step (:mod:`xmtc.neural.head_init`);
* linear warm-up then linear decay of every rate; gradient accumulation; one clipping norm over all
  gradients; bf16 autocast where the hardware multiplies bf16 natively (CUDA, AVX512-BF16 CPUs);
* **DDP** under ``torchrun``: the encoder and the dense network parameters are one
  DistributedDataParallel module (gloo on CPU, NCCL on CUDA); the row-sparse heads stay outside and
  their row gradients are all-gathered and summed (:func:`~xmtc.neural.heads.merge_row_grads`);
* **model selection on validation data**: after every epoch the model predicts a validation split
  cut from the training data (never the test set; :mod:`xmtc.neural.inference`) and the epoch with the
  best P@1 is kept (several reference implementations pick their checkpoint on the test set; we do not);
* **weight averaging** (SWA, optional; LightXML's option): from epoch ``swa_start`` on, a running mean
  of every trained tensor is updated every ``swa_every`` optimiser steps, and the averaged weights are
  the ones validated and kept (:mod:`xmtc.neural.weight_snapshots`);
* **hooks** for methods that mine with the current weights (:meth:`Network.begin_epoch` before each
  epoch, which may also order the epoch's batches; :meth:`Network.on_batch` with each batch's rows): the
  dual encoder's hard negatives and cluster-grouped batches; what they keep is checkpointed too;
* **checkpoints**: the full training state (weights, both optimisers, batch position, RNG, best
  epoch so far, SWA means) every ``checkpoint_every`` optimiser steps and after each epoch;
  ``resume`` continues and ends with the same model as an uninterrupted run (tested bit for bit).
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from ..errors import ConfigError
from ..features.encoder import Tokenized, autocast
from .distributed import DistContext, data_parallel
from .heads import LazyAdam, merge_row_grads
from .inference import precision_at, predict_topk
from .optim import adamw, clip_gradients, lr_schedule
from .reproducible import deterministic_cpu_ops
from .weight_snapshots import load_snapshot, snapshot, swa_update

log = logging.getLogger(__name__)


# -- settings --------------------------------------------------------------------------------------
@dataclass
class TrainSettings:
    """What one end-to-end training run needs (filled from the estimator's config)."""

    epochs: int = 3
    batch_size: int = 32
    learning_rate: float = 5e-5
    head_learning_rate: float = 1e-3
    dense_learning_rate: float = 0.0     # 0: head_learning_rate
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    grad_accumulation: int = 1
    max_grad_norm: float = 1.0
    precision: str = "auto"
    encode_batch_size: int = 128
    seed: int = 0
    checkpoint_every: int = 0
    swa: bool = False
    swa_start: int = 1
    swa_every: int = 100
    select_metric: str = "P@1"


def _joint_module(encoder, network):
    """Encoder + network as one module: what DDP wraps; ``forward`` returns the batch's LossOut."""

    class Joint(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder, self.network = encoder, network

        def forward(self, batch, Y):
            out = self.encoder(**batch, output_hidden_states=True)
            rep = self.network.text_representation(out.hidden_states, batch["attention_mask"])
            loss = self.network.training_loss(rep, Y)
            if self.network.alc is not None:
                from .alc import with_alc

                loss = with_alc(self.network, rep, Y, loss)
            return loss

    return Joint()


# -- the trainer ---------------------------------------------------------------------------------------
class EndToEndTrainer:
    """Trains ``encoder`` + ``network`` on ``tokenized`` texts with labels ``Y`` (see the module docstring)."""

    def __init__(self, encoder, network, tokenized: Tokenized, Y: sp.csr_matrix, settings: TrainSettings, device,
                 ctx: DistContext | None = None, valid: tuple[Tokenized, sp.csr_matrix] | None = None,
                 name: str = "train"):

        self.encoder, self.network, self.tokenized = encoder, network, tokenized
        self.Y = sp.csr_matrix(Y, dtype=np.float32)
        self.settings, self.device, self.ctx, self.name = settings, device, ctx or DistContext(), name
        self.valid = valid
        s = settings
        if s.select_metric not in ("P@1", "P@3", "P@5"):
            raise ConfigError(f"select_metric must be P@1, P@3 or P@5, got {s.select_metric!r}")
        enc = [p for p in encoder.parameters() if p.requires_grad]
        dense = [p for p in network.parameters() if p.requires_grad]
        self.params = enc + dense
        self.opt = adamw(enc, s.learning_rate, s.weight_decay,
                         [{"params": dense, "lr": s.dense_learning_rate or s.head_learning_rate,
                           "weight_decay": 0.0}])
        self.base_lrs = [g["lr"] for g in self.opt.param_groups]
        self.head_opts = {name: LazyAdam(head, s.head_learning_rate) for name, head in network.sparse_heads.items()}
        rng = np.random.default_rng(s.seed)
        epochs = [tokenized.shuffled_batches(s.batch_size, rng) for _ in range(s.epochs)]
        if self.ctx.active:  # every process the same number of steps, or DDP waits forever
            keep = len(epochs[0]) // self.ctx.world_size * self.ctx.world_size
            epochs = [e[:keep][self.ctx.rank::self.ctx.world_size] for e in epochs]
        self.per_epoch = len(epochs[0])
        if self.per_epoch == 0:
            raise ConfigError(f"{name}: no training batch (fewer texts than processes?)")
        self.batches = [b for e in epochs for b in e]
        self.steps_per_epoch = math.ceil(self.per_epoch / s.grad_accumulation)
        self.total_steps = self.steps_per_epoch * s.epochs
        self.warmup = int(s.warmup_ratio * self.total_steps)
        self.micro, self.step = 0, 0
        self.losses: list[float] = []
        self.history: list[dict] = []
        self.best: dict | None = None          # {"epoch", "score", "arrays"} of the best validated epoch
        self.swa: dict | None = None           # {"n", "arrays"} running means
        torch.manual_seed(s.seed)

    # -- weights as one flat dict (snapshots, SWA, checkpoints: xmtc.neural.weight_snapshots) ------------------
    def _weights(self) -> dict:
        return snapshot(self.encoder, self.network)

    def _set_weights(self, w: dict) -> None:
        load_snapshot(self.encoder, self.network, w)

    def _swa_update(self) -> None:
        self.swa = swa_update(self.swa, self._weights())

    # -- state for checkpoints -------------------------------------------------------------------------
    def state(self) -> dict:

        return {"micro": self.micro, "step": self.step, "losses": list(self.losses), "history": list(self.history),
                "opt": self.opt.state_dict(), "head_opts": {k: o.state_dict() for k, o in self.head_opts.items()},
                "rng": torch.get_rng_state(), "weights": self._weights(), "best": self.best, "swa": self.swa,
                "network": self.network.training_state(),
                "batches": {"ids": np.concatenate(self.batches), "sizes": np.array([len(b) for b in self.batches])}}

    def restore(self, st: dict) -> None:

        self.micro, self.step = int(st["micro"]), int(st["step"])
        self.losses, self.history = list(st["losses"]), list(st["history"])
        self._set_weights(st["weights"])
        self.opt.load_state_dict(st["opt"])
        for k, o in self.head_opts.items():
            o.load_state_dict(st["head_opts"][k])
        torch.set_rng_state(st["rng"])
        self.best, self.swa = st["best"], st["swa"]
        self.network.load_training_state(st.get("network") or {})
        if st.get("batches") is not None:  # the order a network's begin_epoch chose
            ends = np.cumsum(st["batches"]["sizes"])
            self.batches = np.split(np.asarray(st["batches"]["ids"]), ends[:-1])

    def _begin_epoch(self, epoch: int) -> None:
        """The network's start-of-epoch hook (:meth:`Network.begin_epoch`); its batches replace the epoch's."""
        new = self.network.begin_epoch(epoch, self)
        if new is None:
            return
        if self.ctx.active:  # the same cut as the planned batches: every process as many steps
            keep = len(new) // self.ctx.world_size * self.ctx.world_size
            new = new[:keep][self.ctx.rank::self.ctx.world_size]
        if len(new) != self.per_epoch:
            raise ConfigError(f"{self.name}: the network's epoch has {len(new)} batches, the loop planned"
                              f" {self.per_epoch}")
        start = (epoch - 1) * self.per_epoch
        self.batches[start:start + self.per_epoch] = list(new)

    # -- the loop -----------------------------------------------------------------------------------
    def run(self, progress: bool = True, on_checkpoint: Callable[[dict], None] | None = None) -> dict:
        """Train to the end (from wherever a restored state left off); returns the history and leaves the
        selected weights (best validated epoch, SWA means if on) in the encoder and network. Deterministic
        kernels on the CPU (:mod:`xmtc.neural.reproducible`)."""
        with deterministic_cpu_ops(self.device):
            return self._run(progress, on_checkpoint)

    def _run(self, progress: bool, on_checkpoint: Callable[[dict], None] | None) -> dict:

        from ..progress import progress_bar

        s, ctx = self.settings, self.ctx
        joint = _joint_module(self.encoder, self.network)
        joint.train()
        model = data_parallel(joint, ctx, self.device)
        pending: list = []
        t0, seen = time.perf_counter(), 0
        bar = progress_bar(progress and ctx.is_main, total=len(self.batches), initial=self.micro,
                           desc=self.name, unit="batch")
        try:
            while self.micro < len(self.batches):
                if self.micro % self.per_epoch == 0:
                    self._begin_epoch(self.micro // self.per_epoch + 1)
                ids = self.batches[self.micro]
                self.network.on_batch(ids)
                batch = self.tokenized.batch(ids, self.device)
                with autocast(self.device, s.precision):
                    out = model(batch, self.Y[ids])
                loss = out.loss.float()
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"{self.name}: loss became {loss.item()} at step {self.step};"
                                             " lower the learning rates")
                (loss / s.grad_accumulation).backward()
                pending.append(out.rows)
                self.micro += 1
                self.losses.append(float(loss.item()))
                seen += len(ids)
                end_of_epoch = self.micro % self.per_epoch == 0
                if self.micro % s.grad_accumulation == 0 or end_of_epoch:
                    self._optimizer_step(pending)
                    pending = []
                    epoch = (self.micro - 1) // self.per_epoch + 1
                    if s.swa and epoch >= s.swa_start and s.swa_every and self.step % s.swa_every == 0:
                        self._swa_update()
                    if end_of_epoch:
                        self._end_epoch(epoch, progress)
                        if on_checkpoint is not None:
                            on_checkpoint(self.state())
                    elif on_checkpoint is not None and s.checkpoint_every and self.step % s.checkpoint_every == 0:
                        on_checkpoint(self.state())
                bar.set_postfix(loss=f"{np.mean(self.losses[-50:]):.4f}",
                                docs_s=f"{seen * ctx.world_size / max(time.perf_counter() - t0, 1e-9):.0f}")
                bar.update(1)
        finally:
            bar.close()
        self._select_final()
        return {"history": self.history, "best_epoch": self.best["epoch"] if self.best else s.epochs,
                "loss_curve": self._curve()}

    def _curve(self) -> list[float]:
        tenth = max(1, len(self.losses) // 10)
        return [float(np.mean(self.losses[i:i + tenth])) for i in range(0, len(self.losses), tenth)]

    def _optimizer_step(self, pending: list) -> None:
        grads_rows = {}
        for name, opt in self.head_opts.items():
            parts = [hb.grads() for rows in pending for (n, hb) in rows if n == name]
            if not parts:  # an untouched head still joins the all-gather: under DDP every process must
                w = opt.head.weight
                parts = [(torch.zeros(0, dtype=torch.long, device=w.device), w.new_zeros((0, w.shape[1])),
                          w.new_zeros(0))]
            grads_rows[name] = merge_row_grads(parts, self.ctx.world_size)
        enc_grads = [p.grad for p in self.params if p.grad is not None]
        if self.settings.max_grad_norm > 0:
            clip_gradients(enc_grads + [g for r in grads_rows.values() for g in r[1:]], self.settings.max_grad_norm)
        scale = lr_schedule(self.step, self.total_steps, self.warmup)
        for g, lr in zip(self.opt.param_groups, self.base_lrs):
            g["lr"] = lr * scale
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        for name, (rows, gw, gb) in grads_rows.items():
            self.head_opts[name].step(rows, gw, gb, lr=self.settings.head_learning_rate * scale)
        self.step += 1

    def _end_epoch(self, epoch: int, progress: bool) -> None:
        s = self.settings
        entry = {"epoch": epoch, "loss": float(np.mean(self.losses[-self.per_epoch:]))}
        if self.valid is not None and self.ctx.is_main:
            current = None
            if s.swa and self.swa is not None:
                current = self._weights()
                self._set_weights(self.swa["arrays"])
            tok_v, Y_v = self.valid
            idx, _ = predict_topk(self.encoder, self.network, tok_v, 5, batch_size=s.encode_batch_size,
                                  device=self.device, precision=s.precision)
            for k in (1, 3, 5):
                entry[f"valid P@{k}"] = precision_at(idx, Y_v, k)
            score = entry[f"valid {s.select_metric}"]
            if self.best is None or score > self.best["score"]:
                self.best = {"epoch": epoch, "score": score, "arrays": self._weights()}
            if current is not None:
                self._set_weights(current)
        self.history.append(entry)
        log.info("%s: epoch %d %s", self.name, epoch, ", ".join(f"{k} {v:.4f}" for k, v in entry.items()
                                                                 if k != "epoch"))

    def _select_final(self) -> None:
        if self.best is not None:
            self._set_weights(self.best["arrays"])
            log.info("%s: kept epoch %d (valid %s %.2f)", self.name, self.best["epoch"], self.settings.select_metric,
                     self.best["score"])
        elif self.settings.swa and self.swa is not None:
            self._set_weights(self.swa["arrays"])


# -- checkpoints (the folder format: xmtc.neural.checkpoint) --------------------------------------------
def copy_state(state: dict) -> dict:
    """A deep copy of a trainer state (tests compare states taken at different times)."""
    return copy.deepcopy(state)
