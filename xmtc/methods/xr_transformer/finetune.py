"""The training loop of a transformer matcher over the levels of a label tree (XR-Transformer eqs. 5-11).

Levels are trained coarse to fine (multi-resolution). At level t the encoder plus that level's
row-sparse head (:mod:`xmtc.neural.heads`) scores each text's shortlist (eq. 8,
:mod:`xmtc.neural.shortlist`) with the importance-weighted loss (eqs. 5-6, :mod:`xmtc.neural.losses`).
The encoder carries over from level to level; the head of level t starts from level t-1
(:mod:`xmtc.methods.xr_transformer.bootstrap`, eq. 11). After each level one inference pass embeds the training texts
with the updated encoder; it yields the top-k nodes that shape the next level's shortlist and the
embeddings the next head is bootstrapped on. A single level with a random head is X-Transformer's
fine-tuning.

The loop: AdamW on the encoder (two parameter groups: matrices with weight decay, vectors without)
and a lazy Adam on the head rows, each with its own learning rate; linear warm-up then linear decay
applied to both; gradient accumulation; one global clipping norm over encoder and head-row gradients;
bf16 autocast on CUDA and on CPUs with native bf16; under torchrun the encoder is wrapped in
DistributedDataParallel and the head rows are all-reduced explicitly (:func:`merge_row_grads`).
``on_checkpoint`` receives the full training state every ``checkpoint_every`` optimiser steps and
after every level, and ``start_state`` restores it: a run killed mid-level and resumed repeats
exactly the same steps (batch order, dropout draws and optimiser state are part of the state).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import scipy.sparse as sp

from ...errors import ConfigError
from ...features.encoder import Tokenized, autocast, embed, encode
from .bootstrap import BOOTSTRAPS, start_head
from ...neural.distributed import DistContext, data_parallel, gather_rows, shard
from ...neural.heads import LazyAdam, RowSparseHead, merge_row_grads
from ...neural.optim import adamw, clip_gradients, lr_schedule
from ...neural.reproducible import deterministic_cpu_ops
from ...neural.losses import shortlist_loss
from .matcher import head_beam_step
from ...neural.shortlist import SHORTLISTS, build_shortlist, children_csr

log = logging.getLogger(__name__)


@dataclass
class FinetuneSettings:
    """What one fine-tuning run needs to know (filled from the estimators' configs)."""

    epochs: int = 1
    coarse_epochs: float = 0.0
    batch_size: int = 32
    learning_rate: float = 5e-5
    head_learning_rate: float = 1e-3
    weight_decay: float = 0.0
    warmup_ratio: float = 0.1
    grad_accumulation: int = 1
    max_grad_norm: float = 1.0
    loss: str = "squared-hinge"
    neg_weight: float = 1.0
    shortlist_topk: int = 10
    bootstrap: str = "linear"
    shortlist: str = "eq8"
    pooling: str = "mean"
    precision: str = "auto"
    encode_batch_size: int = 128
    seed: int = 0
    checkpoint_every: int = 0
    n_threads: int | None = None


def node_of_label(chain: list[sp.csr_matrix], level: int) -> np.ndarray:
    """For every label, its ancestor at ``level`` (index into ``chain``: the nodes are chain[level]'s rows)."""
    anc = np.arange(chain[-1].shape[0])
    for t in range(len(chain) - 1, level, -1):
        anc = chain[t].indices[anc]
    return anc.astype(np.int64)


def label_mass(Y: sp.csr_matrix, anc: np.ndarray, n_nodes: int) -> sp.csr_matrix:
    """(n, n_nodes): how many of each document's labels lie under each node (R of eq. 6)."""
    M = sp.csr_matrix((np.ones(anc.size, dtype=np.float32), (np.arange(anc.size), anc)), shape=(anc.size, n_nodes))
    out = sp.csr_matrix(Y @ M)
    out.sort_indices()
    return out


def level_positives(Y: sp.csr_matrix, chain: list[sp.csr_matrix]) -> list[sp.csr_matrix]:
    """For every level t of ``chain``, the (n, K_t) 0/1 matrix of each document's positive nodes."""
    return [sp.csr_matrix((label_mass(Y, node_of_label(chain, t), chain[t].shape[0]) != 0), dtype=np.float32)
            for t in range(len(chain))]


def _embedder(encoder, pooling: str, frozen_layers: int = 0):
    """The encoder + pooling as one module (what DDP wraps; the heads stay outside it). Given ``states``
    (the frozen layers' output for the batch), only the layers above the ``frozen_layers`` run."""
    import torch

    from ...neural.frozen import upper_only

    class _Embedder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = encoder

        def forward(self, batch, states=None):
            with upper_only(self.encoder, frozen_layers, states):
                return embed(self.encoder, batch, pooling)

    return _Embedder()


def embed_all(encoder, tokenized: Tokenized, settings: FinetuneSettings, device, ctx: DistContext,
              progress: bool, desc: str, frozen=None) -> np.ndarray:
    """Embeddings of every tokenized text with the current encoder, split over processes and gathered
    (``frozen``: a :class:`xmtc.neural.frozen.FrozenPrefix` over ``tokenized``, whose output is reused)."""
    start, stop = shard(len(tokenized), ctx)
    local = encode(encoder, tokenized, np.arange(start, stop), pooling=settings.pooling,
                   batch_size=settings.encode_batch_size, device=device, precision=settings.precision,
                   progress=progress and ctx.is_main, desc=desc, frozen=frozen)
    return gather_rows(local, len(tokenized), ctx)


class LevelTrainer:
    """Fine-tunes the encoder and one level's head; its state (for checkpoints) is :meth:`state`."""

    def __init__(self, encoder, head: RowSparseHead, tokenized: Tokenized, mass: sp.csr_matrix,
                 prev_topk, prev_positive, children, settings: FinetuneSettings, device, ctx: DistContext,
                 level_name: str, rng_seed: int, epochs: float | None = None, frozen=None):
        import torch

        self.frozen = frozen
        self.encoder, self.head, self.tokenized, self.mass = encoder, head, tokenized, mass
        self.prev_topk, self.prev_positive, self.children = prev_topk, prev_positive, children
        self.settings, self.device, self.ctx, self.name = settings, device, ctx, level_name
        enc_params = [p for p in encoder.parameters() if p.requires_grad]
        self.enc_params = enc_params
        self.opt = adamw(enc_params, settings.learning_rate, settings.weight_decay)
        self.head_opt = LazyAdam(head, settings.head_learning_rate)
        # the peak rates the schedule scales (taken now: a restored optimiser holds the scaled ones)
        self.base_lrs = [g["lr"] for g in self.opt.param_groups]
        rng = np.random.default_rng(rng_seed)
        epochs = float(settings.epochs if epochs is None else epochs)
        batches = [tokenized.shuffled_batches(settings.batch_size, rng) for _ in range(max(1, math.ceil(epochs)))]
        keep = len(batches[0]) // ctx.world_size * ctx.world_size  # every process the same number of steps,
        part = epochs - math.floor(epochs)                           # or DDP waits forever
        last = max(ctx.world_size, round(part * keep) // ctx.world_size * ctx.world_size) if part > 0 else keep
        batches = [b[:keep if i < len(batches) - 1 else last][ctx.rank::ctx.world_size] for i, b in enumerate(batches)]
        self.batches = [b for epoch in batches for b in epoch]
        self.total_steps = max(1, math.ceil(len(self.batches) / settings.grad_accumulation))
        self.warmup = int(settings.warmup_ratio * self.total_steps)
        self.micro = 0
        self.step = 0
        self.losses: list[float] = []
        torch.manual_seed(rng_seed)  # dropout draws; restored from a checkpoint on resume

    # -- checkpoint state -------------------------------------------------------------------------
    def state(self) -> dict:
        import torch

        return {"micro": self.micro, "step": self.step, "losses": list(self.losses),
                "opt": self.opt.state_dict(), "head_opt": self.head_opt.state_dict(),
                "rng": torch.get_rng_state()}

    def restore(self, st: dict) -> None:
        import torch

        self.micro, self.step, self.losses = int(st["micro"]), int(st["step"]), list(st["losses"])
        self.opt.load_state_dict(st["opt"])
        self.head_opt.load_state_dict(st["head_opt"])
        torch.set_rng_state(st["rng"])

    # -- the loop ---------------------------------------------------------------------------------
    def run(self, progress: bool, on_checkpoint: Callable[[dict], None] | None = None) -> list[float]:
        """Train the level to the end; deterministic kernels on the CPU (:mod:`xmtc.neural.reproducible`)."""
        with deterministic_cpu_ops(self.device):
            return self._run(progress, on_checkpoint)

    def _run(self, progress: bool, on_checkpoint: Callable[[dict], None] | None) -> list[float]:
        import torch

        from ...progress import progress_bar

        s, ctx = self.settings, self.ctx
        embedder = _embedder(self.encoder, s.pooling, 0 if self.frozen is None else self.frozen.k)
        embedder.train()
        model = data_parallel(embedder, ctx, self.device)
        base_lrs = self.base_lrs
        full = self.prev_topk is None and self.prev_positive is None
        t0, seen = time.perf_counter(), 0
        pending = []
        bar = progress_bar(progress and ctx.is_main, total=len(self.batches), initial=self.micro,
                           desc=f"fine-tune {self.name}", unit="batch")
        try:
            while self.micro < len(self.batches):
                ids = self.batches[self.micro]
                ids_s, targets, weights = build_shortlist(
                    None if full else self.prev_topk[ids], self.mass[ids], self.children, s.neg_weight,
                    prev_positive=None if self.prev_positive is None else self.prev_positive[ids])
                batch = self.tokenized.batch(ids, self.device)
                hb = self.head.gather(torch.from_numpy(ids_s).to(self.device))
                states = None if self.frozen is None else self.frozen.states(ids)
                with autocast(self.device, s.precision):
                    emb = model(batch, states)
                    scores = hb.score(emb).float()
                loss = shortlist_loss(scores, torch.from_numpy(targets).to(self.device),
                                      torch.from_numpy(weights).to(self.device), s.loss)
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"{self.name}: loss became {loss.item()} at step {self.step};"
                                             " lower the learning rates")
                (loss / s.grad_accumulation).backward()
                pending.append(hb.grads())
                self.micro += 1
                self.losses.append(float(loss.item()))
                seen += len(ids)
                if self.micro % s.grad_accumulation == 0 or self.micro == len(self.batches):
                    self._optimizer_step(pending, base_lrs)
                    pending = []
                    if on_checkpoint is not None and s.checkpoint_every and self.step % s.checkpoint_every == 0 \
                            and self.micro < len(self.batches):
                        on_checkpoint(self.state())
                bar.set_postfix(loss=f"{np.mean(self.losses[-50:]):.4f}",
                                docs_s=f"{seen * ctx.world_size / max(time.perf_counter() - t0, 1e-9):.0f}")
                bar.update(1)
        finally:
            bar.close()
        log.info("%s: %d batches, loss %.4f -> %.4f, %.0f docs/s", self.name, len(self.batches),
                 np.mean(self.losses[:max(1, len(self.losses) // 10)]) if self.losses else float("nan"),
                 np.mean(self.losses[-max(1, len(self.losses) // 10):]) if self.losses else float("nan"),
                 seen * ctx.world_size / max(time.perf_counter() - t0, 1e-9))
        tenth = max(1, len(self.losses) // 10)
        return [float(np.mean(self.losses[i:i + tenth])) for i in range(0, len(self.losses), tenth)]

    def _optimizer_step(self, pending, base_lrs) -> None:
        rows, gw, gb = merge_row_grads(pending, self.ctx.world_size)
        enc_grads = [p.grad for p in self.enc_params if p.grad is not None]
        if self.settings.max_grad_norm > 0:
            clip_gradients(enc_grads + [gw, gb], self.settings.max_grad_norm)
        scale = lr_schedule(self.step, self.total_steps, self.warmup)
        for g, lr in zip(self.opt.param_groups, base_lrs):
            g["lr"] = lr * scale
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.head_opt.step(rows, gw, gb, lr=self.settings.head_learning_rate * scale)
        self.step += 1


def multi_resolution_finetune(encoder, tokenized: Tokenized, Y: sp.csr_matrix, chain: list[sp.csr_matrix],
                              levels: list[int], settings: FinetuneSettings, device, ctx: DistContext, *,
                              progress: bool = True, start_state: dict | None = None,
                              on_checkpoint: Callable[[dict], None] | None = None, frozen=None) -> dict:
    """Fine-tune on ``levels`` (indices into ``chain``, increasing) and return the final state:

    ``{"done": [levels], "heads": {level: (W, b)}, "topk": top-k node ids at the last level (n, k),
    "embeddings": training embeddings after the last level, "loss_curves": {level: [...]},
    "partial": None or {"level", "head": (W, b), "trainer": LevelTrainer.state()}}``.
    ``start_state`` (a checkpoint's state with the encoder already restored) skips finished levels and
    continues a level it was saved in the middle of; ``on_checkpoint`` receives the state after each
    level and every ``settings.checkpoint_every`` optimiser steps. ``frozen``: a
    :class:`xmtc.neural.frozen.FrozenPrefix` over ``tokenized`` (the layers it holds are not trained; steps
    and embedding passes run the layers above it on its output).
    """
    import torch

    if not levels or sorted(set(levels)) != list(levels):
        raise ConfigError(f"fine-tuning levels must be increasing and non-empty, got {levels}")
    if settings.shortlist not in SHORTLISTS:
        raise ConfigError(f"shortlist must be one of {', '.join(SHORTLISTS)}, got {settings.shortlist!r}")
    if settings.bootstrap not in BOOTSTRAPS:
        raise ConfigError(f"bootstrap must be one of {', '.join(BOOTSTRAPS)}, got {settings.bootstrap!r}")
    state = start_state or {"done": [], "heads": {}, "topk": None, "embeddings": None, "loss_curves": {},
                            "partial": None}
    state.setdefault("partial", None)
    hidden = encoder.config.hidden_size
    targets = level_positives(Y, chain)
    prev_level = None
    for level in levels:
        C = chain[level]
        K = C.shape[0]
        parent_of = C.indices.astype(np.int64)
        if level in state["done"]:
            prev_level = level
            continue
        mass = label_mass(Y, node_of_label(chain, level), K)
        children = children_csr(parent_of, C.shape[1])
        adjacent = prev_level is not None and prev_level == level - 1
        prev_topk = state["topk"] if adjacent else None
        # eq. 8 expands the positive parents too; "topk+positives" adds only the positive nodes themselves
        prev_positive = targets[level - 1] if adjacent and settings.shortlist == "eq8" else None
        name = f"level {level + 1}/{len(chain)} ({K} {'labels' if level == len(chain) - 1 else 'clusters'})"
        partial = state["partial"]
        if partial is not None and partial["level"] == level:
            W, b = partial["head"]
        else:
            W, b = start_head(settings.bootstrap, level, prev_level, n_nodes=K, hidden=hidden, seed=settings.seed,
                              parent_of=parent_of, n_parents=C.shape[1],
                              prev_head=state["heads"].get(prev_level), emb=state["embeddings"],
                              positives=targets[level], prev_topk=prev_topk, prev_positive=prev_positive,
                              neg_weight=settings.neg_weight, n_threads=settings.n_threads)
        head = RowSparseHead(W, b, device)
        epochs = settings.coarse_epochs if settings.coarse_epochs and level != levels[-1] else settings.epochs
        trainer = LevelTrainer(encoder, head, tokenized, mass, prev_topk, prev_positive, children, settings,
                               device, ctx, name, rng_seed=settings.seed + 7919 * K, epochs=epochs, frozen=frozen)
        if partial is not None and partial["level"] == level:
            trainer.restore(partial["trainer"])
            log.info("resume: %s from batch %d of %d", name, trainer.micro, len(trainer.batches))

        def save_partial(tst, level=level, head=head):
            state["partial"] = {"level": level, "head": head.numpy(), "trainer": tst}
            on_checkpoint(state)

        curve = trainer.run(progress, save_partial if on_checkpoint is not None else None)
        emb = embed_all(encoder, tokenized, settings, device, ctx, progress, f"embed after {name}", frozen)
        W_np, b_np = head.numpy()
        topk, _ = head_beam_step(emb, W_np, b_np, prev_topk, None, children, settings.shortlist_topk,
                                 post_processor="noop")
        state["heads"][level] = (W_np, b_np)
        state["topk"] = topk
        state["embeddings"] = emb
        state["loss_curves"][level] = curve
        state["done"].append(level)
        state["partial"] = None
        prev_level = level
        del trainer
        if on_checkpoint is not None:
            on_checkpoint(state)
    torch.set_grad_enabled(True)
    return state
