#!/usr/bin/env python3
"""One training step of a level head, before (dense Parameter + AdamW) and after (row-sparse head + lazy Adam).

    python benchmarks/heads.py                         # K = 2k, 25k, 250k, 1M; h 384, batch 32, shortlist 200
    python benchmarks/heads.py --sizes 2000,25000      # a subset

A step is what the fine-tuning loop does with a head for one batch: gather the shortlisted rows, score
them against the batch's embeddings (a leaf tensor standing in for the encoder's output), the weighted
squared hinge, backward, clipping of the joint gradient norm, the optimiser step. Each (K, variant)
runs in its own child process so that its peak RSS is its own: the table gives the step's median time
over ``--steps`` steps after two warm-up steps, the weights' size and the child's peak RSS above the
weights (what a step adds: gradient, optimiser state, temporaries). Threads: ``--threads`` (default 2).

* before: ``W`` an ``nn.Parameter`` indexed by the shortlist (dense K x h gradient), ``torch.optim.AdamW``
  (updates and stores moments for all K rows), ``clip_grad_norm_`` over the dense gradient -- the head
  of xmtc before issue 9;
* after: :class:`xmtc.neural.heads.RowSparseHead` + :class:`~xmtc.neural.heads.LazyAdam` (|U| x h gradient,
  moments and weights touched on the |U| shortlisted rows only; the moments are allocated once, K x h each).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from _memory import peak_rss_mb, rss_mb  # noqa: E402


def child(variant: str, K: int, h: int, batch: int, shortlist: int, steps: int, threads: int) -> dict:
    import numpy as np
    import torch

    from xmtc.neural.heads import LazyAdam, RowSparseHead, merge_row_grads
    from xmtc.neural.losses import shortlist_loss

    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    W0 = (rng.standard_normal((K, h), dtype=np.float32) * 0.01)
    b0 = np.zeros(K, dtype=np.float32)
    if variant == "before":
        W = torch.nn.Parameter(torch.from_numpy(W0))
        b = torch.nn.Parameter(torch.from_numpy(b0))
        opt = torch.optim.AdamW([W, b], lr=1e-3, weight_decay=0.0)
    else:
        head = RowSparseHead(W0, b0)
        del W0
        opt = LazyAdam(head, lr=1e-3)
    base = rss_mb()
    times = []
    for s in range(steps + 2):
        ids = torch.from_numpy(np.stack([rng.choice(K, size=shortlist, replace=False) for _ in range(batch)]))
        targets = torch.from_numpy(np.where(rng.random((batch, shortlist)) < 0.02, 1.0, -1.0).astype(np.float32))
        weights = torch.ones(batch, shortlist)
        emb = torch.randn(batch, h, requires_grad=True)
        t0 = time.perf_counter()
        if variant == "before":
            scores = torch.einsum("bsh,bh->bs", W[ids], emb) + b[ids]
            loss = shortlist_loss(scores, targets, weights)
            loss.backward()
            torch.nn.utils.clip_grad_norm_([W, b, emb], 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
        else:
            hb = head.gather(ids)
            loss = shortlist_loss(hb.score(emb), targets, weights)
            loss.backward()
            rows, gw, gb = merge_row_grads([hb.grads()])
            norm = torch.linalg.vector_norm(torch.stack([gw.norm(), gb.norm(), emb.grad.norm()]))
            coef = min(1.0, 1.0 / (float(norm) + 1e-6))
            gw.mul_(coef), gb.mul_(coef)
            opt.step(rows, gw, gb)
        if s >= 2:
            times.append(time.perf_counter() - t0)
    peak = peak_rss_mb()
    return {"variant": variant, "K": K, "step_ms": 1000 * float(np.median(times)),
            "weights_mb": K * (h + 1) * 4 / 2**20, "rss_after_init_mb": base, "peak_rss_mb": peak,
            "peak_above_init_mb": peak - base}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="2000,25000,250000,1000000")
    ap.add_argument("--variants", default="before,after")
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--shortlist", type=int, default=200)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(HERE / "out"))
    args = ap.parse_args(argv)
    if args.child:
        variant, K = args.child.split(":")
        print(json.dumps(child(variant, int(K), args.hidden, args.batch, args.shortlist, args.steps, args.threads)))
        return 0
    rows = []
    for K in (int(x) for x in args.sizes.split(",")):
        for variant in args.variants.split(","):
            cmd = [sys.executable, __file__, "--child", f"{variant}:{K}", "--hidden", str(args.hidden), "--batch",
                   str(args.batch), "--shortlist", str(args.shortlist), "--steps", str(args.steps), "--threads",
                   str(args.threads)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"K={K} {variant}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
                continue
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            r = rows[-1]
            print(f"K={K:>8} {variant:>6}: step {r['step_ms']:9.2f} ms, weights {r['weights_mb']:7.0f} MB, "
                  f"peak RSS above weights+init {r['peak_above_init_mb']:7.0f} MB", flush=True)
    load = os.getloadavg()
    print(f"\nh={args.hidden}, batch {args.batch}, shortlist {args.shortlist}, {args.threads} threads, median of "
          f"{args.steps} steps; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end")
    print("\n| K | before: step ms | after: step ms | before / after | weights MB | before: RSS above init MB |"
          " after: RSS above init MB |\n|---|---|---|---|---|---|---|")
    by = {(r["K"], r["variant"]): r for r in rows}
    for K in sorted({r["K"] for r in rows}):
        b, a = by.get((K, "before")), by.get((K, "after"))
        f = lambda r, k: f"{r[k]:,.1f}" if r else "–"  # noqa: E731
        ratio = f"{b['step_ms'] / a['step_ms']:.1f}x" if a and b else "–"
        print(f"| {K:,} | {f(b, 'step_ms')} | {f(a, 'step_ms')} | {ratio} | {(a or b)['weights_mb']:,.0f} | "
              f"{f(b, 'peak_above_init_mb')} | {f(a, 'peak_above_init_mb')} |")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "heads.json").write_text(json.dumps({"rows": rows, "args": vars(args), "load": load}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
