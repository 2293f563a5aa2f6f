"""Deterministic kernels while a training loop runs on the CPU, so that one seed gives one model.

Why: with more than one thread some of torch's CPU kernels accumulate in an order that depends on
thread scheduling. Measured (XR-Transformer on a tiny BERT, 600 titles, one epoch): two
fits with the same seed in one process gave different encoder weights, heads and rankers with
``n_threads=2`` and identical files with ``n_threads=1``; with ``torch.use_deterministic_algorithms``
on, identical files with 2 threads as well. The cost on the CPU, 2 threads: a whole MiniLM-L6 training
step (batch 32 x 32 tokens, fused AdamW, no head) 542 ms with it, 565 ms without (noise); in isolation,
the word-embedding backward 21.9 ms against 18.3, and a lazy Adam step on 3,000 rows of a 25,000 x 384
head 14.4 ms against 5.7 (the deterministic ``index_add_``) -- a few percent of a ~530 ms step.

Only the CPU is switched: on CUDA, deterministic cuBLAS needs ``CUBLAS_WORKSPACE_CONFIG`` set before
the process starts and several kernels have no deterministic variant, so a library must not force it
there. ``warn_only`` keeps a kernel without a deterministic variant working (with a warning) rather
than failing a training run. The previous setting is restored when the loop ends.
"""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def deterministic_cpu_ops(device):
    """Within the block, torch uses deterministic kernels if ``device`` is the CPU; otherwise a no-op."""
    import torch

    if torch.device(device).type != "cpu":
        yield
        return
    was, was_warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was, warn_only=was_warn)
