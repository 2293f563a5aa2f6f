"""One entry point for single- and multi-process training: ``torchrun`` sets the environment, we follow.

Under ``torchrun --nproc_per_node N xmtc train ...`` every process runs the same command; the
fine-tuning wraps the model in DistributedDataParallel, each process takes every N-th batch, and
full-data passes (embedding the training set) are split across processes and gathered. Only rank 0
trains the linear rankers and writes files. Without torchrun (no ``WORLD_SIZE``) nothing here does
anything. The backend is NCCL on CUDA, gloo on the CPU (what the tests use).
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass

import numpy as np


@dataclass
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed() -> DistContext:
    """Join the process group torchrun describes (idempotent); a single process gets the trivial context."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext()
    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(local)
        dist.init_process_group(backend=backend)
        atexit.register(_leave_process_group)
    return DistContext(rank=rank, world_size=world, local_rank=local)


def _leave_process_group() -> None:
    """Tear the group down before the interpreter exits.

    Left to process teardown, gloo's worker threads can be destroyed while still joinable, which aborts
    the process ("terminate called without an active exception", SIGABRT) after a run that succeeded;
    seen once in CI on the two-process test. Destroying the group first joins them.
    """
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def device_for(ctx: DistContext, device: str):
    """The device of this process: its own GPU under torchrun, else what ``device`` says (auto: CUDA if any)."""
    import torch

    from ..features.encoder import pick_device

    if device == "auto" and ctx.active and torch.cuda.is_available():
        return torch.device("cuda", ctx.local_rank)
    return pick_device(device)


def shard(n: int, ctx: DistContext) -> tuple[int, int]:
    """This process's contiguous share [start, stop) of n items (equal shares, the last may be short)."""
    per = -(-n // ctx.world_size)
    start = min(n, ctx.rank * per)
    return start, min(n, start + per)


def gather_rows(local: np.ndarray, n: int, ctx: DistContext) -> np.ndarray:
    """Concatenate every process's :func:`shard` of an (n, ...) array, in rank order, on every process."""
    if not ctx.active:
        return local
    import torch
    import torch.distributed as dist

    per = -(-n // ctx.world_size)
    buf = np.zeros((per,) + local.shape[1:], dtype=local.dtype)
    buf[:local.shape[0]] = local
    t = torch.from_numpy(buf)
    backend_cuda = dist.get_backend() == "nccl"
    if backend_cuda:
        t = t.cuda()
    parts = [torch.empty_like(t) for _ in range(ctx.world_size)]
    dist.all_gather(parts, t)
    return np.concatenate([p.cpu().numpy() for p in parts])[:n]
