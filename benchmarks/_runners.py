"""Child process of the benchmarks: train and predict with ONE library, report times and peak RSS.

Run as ``python _runners.py LIBRARY --work DIR --result FILE.json ...`` by ``linear.py``,
``transformer.py`` and ``methods.py``, with the interpreter that has that library (xmtc: the project's;
peers: benchmarks/.venv-peers, whose numpy and scipy are older). One library per process makes its peak
RSS (VmHWM) the peak of that library alone. The runners live by harness: ``_runners_linear.py``,
``_runners_transformer.py``, ``_runners_methods.py``; what they share is ``_runner_base.py``. All of them
import nothing but numpy/scipy (and the stdlib-only _memory.py) at the top so that both interpreters can
run them.

Exit codes: 0 ok, 3 the library cannot be imported (reported as "not installed"), anything else a
failure whose stderr the parent shows.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

import _runners_linear
import _runners_methods
import _runners_transformer
from _memory import peak_rss_mb
from _runner_base import EXIT_NOT_INSTALLED, NotInstalled, Timer, _load, _n_test, padded_topk

RUNNERS = {**_runners_linear.RUNNERS, **_runners_transformer.RUNNERS, **_runners_methods.RUNNERS}
NEEDS = {**_runners_transformer.NEEDS, **_runners_methods.NEEDS}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("library", choices=sorted(RUNNERS) + ["xmtc-latency"])
    ap.add_argument("--work", required=True, help="folder with X_train/Y_train/X_test .npz")
    ap.add_argument("--result", required=True, help="JSON to write; predictions go beside it (.npz)")
    ap.add_argument("--scratch", required=True, help="folder for model files the library insists on")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--params", type=json.loads, default={})
    ap.add_argument("--omikuji-predict", choices=("threads", "sequential"), default="threads")
    ap.add_argument("--data-root", help="xmtc-latency only")
    ap.add_argument("--dataset", help="xmtc-latency only")
    ap.add_argument("--latency-n", type=int, default=1000)
    ap.add_argument("--shared", type=json.loads, default={},
                    help="transformer.py: the settings both XR-Transformers get (encoder, max_length, ...)")
    args = ap.parse_args(argv)
    Path(args.scratch).mkdir(parents=True, exist_ok=True)
    result_path = Path(args.result)
    try:
        if args.library == "xmtc-latency":
            result = _runners_methods.run_xmtc_latency(args)
        else:
            timer = Timer()
            t0 = time.perf_counter()
            keys, texts = NEEDS.get(args.library, (("X_train", "Y_train", "X_test"), False))
            data = _load(Path(args.work), keys, texts)
            load_s = time.perf_counter() - t0
            rss_after_load = peak_rss_mb()
            idx, sc, info = RUNNERS[args.library](data, args, timer)
            n_test = _n_test(data)
            idx, sc = padded_topk(idx, sc, args.k)
            if idx.shape[0] != n_test:
                raise RuntimeError(f"{args.library} returned predictions of shape {idx.shape}, "
                                   f"expected ({n_test}, {args.k})")
            np.savez(result_path.with_suffix(".npz"), indices=idx.astype(np.int32),
                     scores=sc.astype(np.float32))
            peak = info.pop("peak_rss_mb", None) or peak_rss_mb()  # a runner may measure it before extra checks
            result = {"library": args.library, **info, **timer.times, "load_s": load_s,
                      "n_test": int(n_test),
                      "predict_ms_per_doc": 1e3 * timer.times["predict_s"] / max(n_test, 1),
                      "peak_rss_mb": peak, "rss_after_data_load_mb": rss_after_load,
                      "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
                      "threads": args.threads, "python": sys.version.split()[0],
                      "numpy": np.__version__, "scipy": __import__("scipy").__version__}
    except NotInstalled as exc:
        print(f"NOT INSTALLED: {exc}", file=sys.stderr)
        return EXIT_NOT_INSTALLED
    result_path.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
