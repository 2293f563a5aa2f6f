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
from typing import NoReturn

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
        global _JOINED
        _JOINED = True
    return DistContext(rank=rank, world_size=world, local_rank=local)


_JOINED = False  # whether init_distributed joined a process group in this process


def joined() -> bool:
    """Whether this process joined a process group through :func:`init_distributed`."""
    return _JOINED


def _leave_process_group() -> None:
    """Tear the group down before the interpreter exits (while Python objects can still be freed)."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def exit_process(code: int) -> NoReturn:
    """End a torchrun worker whose work is done and written: leave the group, flush, skip teardown.

    Why not a normal exit: once DistributedDataParallel has run, gloo's process group outlives
    ``destroy_process_group`` -- its worker threads (``pt_gloo_runloop``, ``gloo_tcp_loop``) are still
    running after the DDP module, the reducer's parameters and the group are gone and the garbage is
    collected (torch 2.13, checked with a 2-process DDP run of two linear layers; without DDP the
    threads end). The interpreter's and the C++ runtime's teardown then runs beside them, and in CI a
    rank aborted there after a run that had succeeded ("terminate called without an active
    exception", SIGABRT; about 1 in 20 pytest sessions here). Everything a run produces is written
    before this is called, so the process ends with ``os._exit`` after flushing logs and output.
    """
    import logging
    import sys

    _leave_process_group()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def device_for(ctx: DistContext, device: str):
    """The device of this process: its own GPU under torchrun, else what ``device`` says (auto: CUDA if any)."""
    import torch

    from ..features.encoder import pick_device

    if device == "auto" and ctx.active and torch.cuda.is_available():
        return torch.device("cuda", ctx.local_rank)
    return pick_device(device)


def start_training(seed: int, device: str, n_threads: int):
    """What every neural fit does first: seed torch, join torchrun's group, pick this process's device and,
    on a CPU outside torchrun, use ``n_threads`` threads (0 = all cores). Returns ``(ctx, device,
    threads)``."""
    import torch

    from ..native import resolve_threads

    torch.manual_seed(seed)
    ctx = init_distributed()
    dev = device_for(ctx, device)
    threads = resolve_threads(n_threads)
    if dev.type == "cpu" and not ctx.active:
        torch.set_num_threads(threads)
    return ctx, dev, threads


def data_parallel(module, ctx: DistContext, device):
    """``module`` wrapped in DistributedDataParallel under torchrun, else ``module`` itself.
    ``find_unused_parameters``: encoders carry parts the pooled representation never uses (BERT's pooler)."""
    if not ctx.active:
        return module
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(module, device_ids=[device.index] if device.type == "cuda" else None, find_unused_parameters=True)


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
