"""Micro-batching: concurrent single-text requests are scored together by one ``predict_topk`` call.

Why: featurizing and beam search cost a fixed overhead per call (Python dispatch, sparse-matrix
setup, thread hand-off) that dwarfs the per-text work of a short text; scoring the texts of eight
concurrent requests in one call costs little more than scoring one. A lone request must stay fast, so
the batcher never waits long: it takes the first queued text, gathers whatever else is queued, waits
at most ``max_wait_s`` for more (or until ``max_batch``), and scores the lot in a worker thread, off
the event loop, so HTTP keeps being served meanwhile. Texts that arrive while a call runs queue up and
form the next batch, so batches grow with load by themselves.

One worker thread per model: calls of one model never overlap (the C kernels use their own threads
within a call), and a model's calls keep the order in which batches formed.

Measured (``predict_topk`` on 640 real test texts, top 10, machine at load ~26 from other
work, so absolute figures are ~5x a quiet machine's): Reuters XR-Linear 5.51 ms a text one by one,
1.94 in batches of 8, 1.08 in batches of 32; yso-finna-en-2k-20k 5.13 / 1.54 / 0.81 ms. Through HTTP
the saving is smaller, as parsing and answering each request stays per request (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

log = logging.getLogger(__name__)

PredictFn = Callable[[list, int], "tuple[np.ndarray, np.ndarray]"]


@dataclass
class BatchStats:
    """What the batcher has done: predict calls and texts scored (the test counts calls)."""

    calls: int = 0
    texts: int = 0
    largest: int = 0
    seconds: float = 0.0
    sizes: dict = field(default_factory=dict)

    def record(self, n: int, seconds: float) -> None:
        self.calls += 1
        self.texts += n
        self.largest = max(self.largest, n)
        self.seconds += seconds
        self.sizes[n] = self.sizes.get(n, 0) + 1


class BatcherClosed(RuntimeError):
    """The server is shutting down; no new texts are accepted."""


class MicroBatcher:
    """Collects ``(text, k)`` submissions and scores them in batches with ``predict(texts, k)``.

    ``predict`` returns top-k label indices and scores (one row per text, -1 padded), as
    ``XMCModel.predict_topk`` does; each submitter gets its own row, cut to its own ``k``.
    """

    def __init__(self, predict: PredictFn, *, max_batch: int = 64, max_wait_s: float = 0.001,
                 name: str = "model"):
        self.predict = predict
        self.max_batch = max(1, int(max_batch))
        self.max_wait_s = max(0.0, float(max_wait_s))
        self.name = name
        self.stats = BatchStats()
        self._queue: asyncio.Queue | None = None
        self._task: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False

    async def start(self) -> None:
        self._queue = asyncio.Queue()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"xmtc-predict-{self.name}")
        self._task = asyncio.create_task(self._run(), name=f"xmtc-batcher-{self.name}")

    async def close(self) -> None:
        """Score what is queued, then stop (the server calls this after in-flight requests finished)."""
        self._closed = True
        if self._queue is not None and self._task is not None:
            await self._queue.put(None)  # sentinel: everything before it is still scored
            await self._task
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    async def submit(self, text: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (indices, scores) of one text, scored together with whatever else is queued."""
        if self._closed or self._queue is None:
            raise BatcherClosed("the server is shutting down")
        fut = asyncio.get_running_loop().create_future()
        await self._queue.put((text, int(k), fut))
        return await fut

    async def submit_many(self, texts: list[str], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        return list(await asyncio.gather(*(self.submit(t, k) for t in texts)))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        queue = self._queue
        assert queue is not None
        stop = False
        while not stop:
            item = await queue.get()
            if item is None:
                break
            batch = [item]
            deadline = loop.time() + self.max_wait_s
            while len(batch) < self.max_batch:
                try:
                    nxt = queue.get_nowait()
                except asyncio.QueueEmpty:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        break
                    try:
                        nxt = await asyncio.wait_for(queue.get(), remaining)
                    except asyncio.TimeoutError:
                        break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
            await self._score(loop, batch)

    async def _score(self, loop: asyncio.AbstractEventLoop, batch: list) -> None:
        live = [(t, k, f) for t, k, f in batch if not f.done()]  # a cancelled request needs no answer
        if not live:
            return
        texts = [t for t, _, _ in live]
        k = max(k for _, k, _ in live)
        t0 = time.perf_counter()
        try:
            idx, scores = await loop.run_in_executor(self._executor, self.predict, texts, k)
        except Exception as exc:  # handed to every waiting request; the API layer maps it to a problem
            for _, _, fut in live:
                if not fut.done():
                    fut.set_exception(exc)
            return
        self.stats.record(len(texts), time.perf_counter() - t0)
        for row, (_, k_i, fut) in enumerate(live):
            if not fut.done():
                fut.set_result((idx[row, :k_i], scores[row, :k_i]))
