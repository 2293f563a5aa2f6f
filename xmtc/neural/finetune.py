"""Multi-resolution fine-tuning of a transformer matcher over the levels of a label tree (XR-Transformer).

Levels are trained coarse to fine. At level t the encoder plus that level's linear head scores the
shortlist of :mod:`xmtc.neural.shortlist` (children of the top-k nodes predicted at level t-1, plus the
document's positive nodes) with a weighted squared-hinge (or BCE) loss. The encoder's weights carry
over from level to level; the head of level t is bootstrapped from level t-1 (:mod:`xmtc.neural.heads`).
After each level one inference pass embeds the training texts with the updated encoder; it yields the
top-k nodes that shape the next level's shortlist and the embeddings the next head is bootstrapped on.
A single level with a random head is X-Transformer's fine-tuning.

Optimisation per level: AdamW (separate learning rates for the encoder and the head), linear warm-up
then linear decay, gradient accumulation and clipping, bf16 autocast on CUDA and on CPUs with native bf16. Under torchrun the
matcher is wrapped in DistributedDataParallel (:mod:`xmtc.neural.distributed`).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError
from ..features.encoder import Tokenized, autocast, embed, encode
from .distributed import DistContext, gather_rows, shard
from .heads import BOOTSTRAPS, LevelHead, bootstrap_inherit, bootstrap_linear, make_head, shortlist_loss
from .shortlist import build_shortlist, children_csr

log = logging.getLogger(__name__)


@dataclass
class FinetuneSettings:
    """What one fine-tuning run needs to know (filled from the estimators' configs)."""

    epochs: int = 1
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
    pooling: str = "mean"
    precision: str = "auto"
    encode_batch_size: int = 128
    seed: int = 0


def node_of_label(chain: list[sp.csr_matrix], level: int) -> np.ndarray:
    """For every label, its ancestor at ``level`` (index into ``chain``: the nodes are chain[level]'s rows)."""
    anc = np.arange(chain[-1].shape[0])
    for t in range(len(chain) - 1, level, -1):
        anc = chain[t].indices[anc]
    return anc.astype(np.int64)


def label_mass(Y: sp.csr_matrix, anc: np.ndarray, n_nodes: int) -> sp.csr_matrix:
    """(n, n_nodes): how many of each document's labels lie under each node."""
    M = sp.csr_matrix((np.ones(anc.size, dtype=np.float32), (np.arange(anc.size), anc)), shape=(anc.size, n_nodes))
    out = sp.csr_matrix(Y @ M)
    out.sort_indices()
    return out


class Matcher:
    """Encoder + the current level's head as one torch module (so DDP sees every parameter)."""

    def __init__(self, encoder, head: LevelHead, pooling: str):
        import torch

        class _Module(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.encoder = encoder
                self.weight = head.weight
                self.bias = head.bias

            def forward(self, batch, ids):
                emb = embed(self.encoder, batch, pooling)
                if ids is None:
                    return emb @ self.weight.t().to(emb.dtype) + self.bias.to(emb.dtype)
                return LevelHead(self.weight, self.bias).score(emb, ids)

        self.module = _Module()


def _schedule(step: int, total: int, warmup: int) -> float:
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


def topk_on_shortlist(emb: np.ndarray, head_w: np.ndarray, head_b: np.ndarray, prev_topk: np.ndarray | None,
                      children: sp.csr_matrix, k: int, gather_bytes: int = 1 << 26) -> tuple[np.ndarray, np.ndarray]:
    """Top-k nodes per row among the children of ``prev_topk`` (all nodes when None): ids (n, k), scores.

    Rows go in chunks whose gathered head rows (rows x shortlist x hidden floats) stay under
    ``gather_bytes``, so memory does not grow with the data or the shortlist length.
    """
    n = emb.shape[0]
    K = head_w.shape[0]
    k_eff = min(k, K)
    if prev_topk is None:  # dense scores (rows x K)
        chunk = max(1, gather_bytes // (4 * K))
    else:  # gathered head rows (rows x shortlist x hidden)
        width = int(np.diff(children.indptr).max(initial=1)) * prev_topk.shape[1] + 1
        chunk = max(1, gather_bytes // (4 * width * head_w.shape[1]))
    ids_out = np.full((n, k_eff), -1, dtype=np.int64)
    sc_out = np.zeros((n, k_eff), dtype=np.float32)
    for s in range(0, n, chunk):
        e = emb[s:s + chunk]
        if prev_topk is None:
            scores = e @ head_w.T + head_b
            idx = np.argsort(-scores, axis=1, kind="stable")[:, :k_eff]
            ids_out[s:s + chunk] = idx
            sc_out[s:s + chunk] = np.take_along_axis(scores, idx, 1)
            continue
        empty = sp.csr_matrix((e.shape[0], K), dtype=np.float32)
        ids, _, _ = build_shortlist(prev_topk[s:s + chunk], empty, children)
        safe = np.maximum(ids, 0)
        scores = np.matmul(head_w[safe], e[:, :, None])[..., 0] + head_b[safe]
        scores[ids < 0] = -np.inf
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k_eff]
        got = np.take_along_axis(ids, order, 1)
        got_sc = np.take_along_axis(scores, order, 1)
        got[~np.isfinite(got_sc)] = -1
        got_sc[~np.isfinite(got_sc)] = 0.0
        ids_out[s:s + chunk, :got.shape[1]] = got
        sc_out[s:s + chunk, :got.shape[1]] = got_sc
    return ids_out, sc_out


def embed_all(encoder, tokenized: Tokenized, settings: FinetuneSettings, device, ctx: DistContext,
              progress: bool, desc: str) -> np.ndarray:
    """Embeddings of every tokenized text with the current encoder, split over processes and gathered."""
    start, stop = shard(len(tokenized), ctx)
    local = encode(encoder, tokenized, np.arange(start, stop), pooling=settings.pooling,
                   batch_size=settings.encode_batch_size, device=device, precision=settings.precision,
                   progress=progress and ctx.is_main,
                   desc=desc)
    return gather_rows(local, len(tokenized), ctx)


def train_level(encoder, head: LevelHead, tokenized: Tokenized, mass: sp.csr_matrix, prev_topk: np.ndarray | None,
                children: sp.csr_matrix, settings: FinetuneSettings, device, ctx: DistContext, level_name: str,
                progress: bool) -> list[float]:
    """Fine-tune encoder + head on one level; returns the mean loss of each tenth of the run (for logs/tests)."""
    import torch

    from ..progress import progress_bar

    torch.manual_seed(settings.seed + mass.shape[1])  # dropout draws: a resumed run repeats this level exactly
    matcher = Matcher(encoder, head, settings.pooling).module
    matcher.train()
    model = matcher
    if ctx.active:
        from torch.nn.parallel import DistributedDataParallel as DDP
        # find_unused_parameters: encoders carry parts the pooled embedding never uses (BERT's pooler)
        model = DDP(matcher, device_ids=[device.index] if device.type == "cuda" else None,
                    find_unused_parameters=True)
    enc_params = [p for p in encoder.parameters() if p.requires_grad]
    no_decay = [p for p in enc_params if p.ndim < 2]
    decay = [p for p in enc_params if p.ndim >= 2]
    opt = torch.optim.AdamW([
        {"params": decay, "lr": settings.learning_rate, "weight_decay": settings.weight_decay},
        {"params": no_decay, "lr": settings.learning_rate, "weight_decay": 0.0},
        {"params": head.parameters(), "lr": settings.head_learning_rate, "weight_decay": 0.0}])
    base_lrs = [g["lr"] for g in opt.param_groups]
    rng = np.random.default_rng(settings.seed + 7919 * mass.shape[1])
    batches_per_epoch = [tokenized.shuffled_batches(settings.batch_size, rng) for _ in range(settings.epochs)]
    if ctx.active:  # every process the same number of steps, or DDP waits forever
        keep = len(batches_per_epoch[0]) // ctx.world_size * ctx.world_size
        batches_per_epoch = [b[:keep][ctx.rank::ctx.world_size] for b in batches_per_epoch]
    n_batches = sum(len(b) for b in batches_per_epoch)
    total_steps = max(1, math.ceil(n_batches / settings.grad_accumulation))
    warmup = int(settings.warmup_ratio * total_steps)
    full = prev_topk is None
    losses: list[float] = []
    step = 0
    t0 = time.perf_counter()
    seen = 0
    bar = progress_bar(progress and ctx.is_main, total=n_batches, desc=f"fine-tune {level_name}", unit="batch")
    try:
        micro = 0
        for epoch_batches in batches_per_epoch:
            for ids in epoch_batches:
                ids_s, targets, weights = build_shortlist(None if full else prev_topk[ids], mass[ids], children,
                                                          settings.neg_weight)
                batch = tokenized.batch(ids, device)
                sl = None if full else torch.from_numpy(ids_s).to(device)
                with autocast(device, settings.precision):
                    scores = model(batch, sl).float()
                loss = shortlist_loss(scores, torch.from_numpy(targets).to(device),
                                      torch.from_numpy(weights).to(device), settings.loss)
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"{level_name}: loss became {loss.item()} at step {step};"
                                             " lower the learning rates")
                (loss / settings.grad_accumulation).backward()
                micro += 1
                losses.append(float(loss.item()))
                seen += len(ids)
                if micro % settings.grad_accumulation == 0:
                    if settings.max_grad_norm > 0:
                        torch.nn.utils.clip_grad_norm_(matcher.parameters(), settings.max_grad_norm)
                    scale = _schedule(step, total_steps, warmup)
                    for g, lr in zip(opt.param_groups, base_lrs):
                        g["lr"] = lr * scale
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    step += 1
                bar.set_postfix(loss=f"{np.mean(losses[-50:]):.4f}",
                                docs_s=f"{seen * ctx.world_size / max(time.perf_counter() - t0, 1e-9):.0f}")
                bar.update(1)
        if micro % settings.grad_accumulation:
            if settings.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(matcher.parameters(), settings.max_grad_norm)
            opt.step()
            opt.zero_grad(set_to_none=True)
    finally:
        bar.close()
    log.info("%s: %d batches, loss %.4f -> %.4f, %.0f docs/s", level_name, n_batches,
             np.mean(losses[:max(1, len(losses) // 10)]) if losses else float("nan"),
             np.mean(losses[-max(1, len(losses) // 10):]) if losses else float("nan"),
             seen * ctx.world_size / max(time.perf_counter() - t0, 1e-9))
    tenth = max(1, len(losses) // 10)
    return [float(np.mean(losses[i:i + tenth])) for i in range(0, len(losses), tenth)]


def multi_resolution_finetune(encoder, tokenized: Tokenized, Y: sp.csr_matrix, chain: list[sp.csr_matrix],
                              levels: list[int], settings: FinetuneSettings, device, ctx: DistContext, *,
                              progress: bool = True, start_state: dict | None = None,
                              on_level_done: Callable[[dict], None] | None = None) -> dict:
    """Fine-tune on ``levels`` (indices into ``chain``, increasing) and return the final state:

    ``{"done": [levels], "heads": {level: (W, b)}, "topk": top-k node ids at the last level (n, k),
    "embeddings": training embeddings after the last level, "loss_curves": {level: [...]}}``.
    ``start_state`` (a checkpoint's state with the encoder already restored) skips finished levels;
    ``on_level_done`` receives the state after each level (checkpointing).
    """
    import torch

    if not levels or sorted(set(levels)) != list(levels):
        raise ConfigError(f"fine-tuning levels must be increasing and non-empty, got {levels}")
    if settings.bootstrap not in BOOTSTRAPS:
        raise ConfigError(f"bootstrap must be one of {', '.join(BOOTSTRAPS)}, got {settings.bootstrap!r}")
    state = start_state or {"done": [], "heads": {}, "topk": None, "embeddings": None, "loss_curves": {}}
    hidden = encoder.config.hidden_size
    prev_level = None
    for level in levels:
        C = chain[level]
        K = C.shape[0]
        parent_of = C.indices.astype(np.int64)
        if level in state["done"]:
            prev_level = level
            continue
        anc = node_of_label(chain, level)
        mass = label_mass(Y, anc, K)
        # the shortlist: children of the top-k nodes of the level directly above, when it was trained
        prev_topk = state["topk"]
        children = children_csr(parent_of, C.shape[1])
        if prev_level is not None and prev_level != level - 1:
            prev_topk = None  # levels skipped in between: score every node of this level
        # bootstrap the head from what the previous level learned
        if prev_level is None or settings.bootstrap == "random":
            W, b = (t.detach().numpy() for t in make_head(K, hidden, settings.seed + level))
        elif settings.bootstrap == "inherit" and prev_level == level - 1:
            W, b = bootstrap_inherit(*state["heads"][prev_level], parent_of)
        else:
            W, b = bootstrap_linear(state["embeddings"], (mass != 0).astype(np.float32))
        head = LevelHead(torch.nn.Parameter(torch.from_numpy(np.array(W, dtype=np.float32)).to(device)),
                         torch.nn.Parameter(torch.from_numpy(np.array(b, dtype=np.float32)).to(device)))
        full = prev_topk is None
        name = f"level {level + 1}/{len(chain)} ({K} {'labels' if level == len(chain) - 1 else 'clusters'})"
        curve = train_level(encoder, head, tokenized, mass, None if full else prev_topk, children, settings,
                            device, ctx, name, progress)
        emb = embed_all(encoder, tokenized, settings, device, ctx, progress, f"embed after {name}")
        W_np = head.weight.detach().float().cpu().numpy()
        b_np = head.bias.detach().float().cpu().numpy()
        topk, _ = topk_on_shortlist(emb, W_np, b_np, None if full else prev_topk, children,
                                    settings.shortlist_topk)
        state["heads"][level] = (W_np, b_np)
        state["topk"] = topk
        state["embeddings"] = emb
        state["loss_curves"][level] = curve
        state["done"].append(level)
        prev_level = level
        if on_level_done is not None:
            on_level_done(state)
    return state
