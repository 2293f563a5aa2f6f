"""APLC's output layer alone: prediction cost of scoring every label (the reference) against the exact pruned
prediction and a beam of one tail cluster, at the 2k-20k size and at 200,000 Zipf-distributed labels.

    python benchmarks/aplc_output_layer.py

The network is untrained: weights at their initialisation, biases at the training log-odds of a synthetic
Zipf label matrix (~2 labels per text), so the node probabilities are the clusters' frequencies. How much
pruning skips on a trained model depends on how confident its nodes are; ``benchmarks/methods.py --methods
aplc#modes`` measures that (benchmarks/params/yso-finna-en-2k-20k/aplc/modes.json).
One thread, 512 random text representations (d = 384) in batches of 128.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    import torch

    from xmtc.methods.aplc.label_split import frequency_split
    from xmtc.methods.aplc.network import APLCNetwork

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    for L, n_tail in [(1994, 1), (200_000, 3)]:
        n = 20000
        p = 1.0 / np.arange(1, L + 1)
        p /= p.sum()
        cols = rng.choice(L, size=2 * n, p=p)
        Y = sp.csr_matrix((np.ones(2 * n, np.float32), (np.repeat(np.arange(n), 2), cols)), shape=(n, L))
        Y.data[:] = 1
        order, bounds = frequency_split(np.asarray(Y.getnnz(0)), n_tail=n_tail)
        net = APLCNetwork(order, bounds, 384, bias=True).eval()
        net.set_prior(Y)
        x = torch.tanh(torch.randn(512, 384))
        out = {}
        for mode, beam in [("full", 0), ("pruned", 0), ("pruned", 1)]:
            net.predict_mode, net.predict_beam = mode, beam
            with torch.inference_mode():
                net.predict(x[:128], 5)
                t = time.perf_counter()
                res = [net.predict(x[s:s + 128], 5) for s in range(0, 512, 128)]
                ms = 1000 * (time.perf_counter() - t) / 512
            out[mode + (f", beam {beam}" if beam else "")] = (ms, torch.cat([r[0] for r in res]))
        full = out["full"][1]
        print(f"L={L} bounds={bounds.tolist()}: " + "; ".join(
            f"{k} {v[0]:.4f} ms/doc (top 5 {'=' if torch.equal(v[1], full) else '!='} full)" for k, v in out.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
