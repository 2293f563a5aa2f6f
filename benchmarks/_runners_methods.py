"""The methods harness's children (methods.py): any registered xmtc method by name, an ensemble of saved
models, and the single-text latency of a saved XR-Linear model (linear.py --latency).
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import numpy as np

from _memory import peak_rss_mb
from _runner_base import NotInstalled, Timer, padded_topk


def run_xmtc_method(d, args, timer: Timer):
    """One xmtc method from the registry (``--params {"method": NAME, "params": {...}, "save": DIR,
    "predict_variants": [{...}, ...]}``).

    Fits on the raw train texts with the harness's label columns (so predicted ids need no mapping),
    predicts the top ``--k`` of the test texts, takes the peak RSS, then predicts again once per
    prediction variant (the same trained model with those parameters set: a beam width, a prediction
    mode, a score rule), each timed and written beside the result as ``<result>.v<i>.npz``; then
    (untimed) saves the model where ``save`` says, for an ensemble row.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        import inspect

        import xmtc
        from xmtc.models import estimator_class, method_names
    except ImportError as exc:
        raise NotInstalled(f"xmtc not importable: {exc}") from exc
    spec = args.params
    method = spec["method"]
    if method not in method_names():
        raise NotInstalled(f"unknown method {method!r} (this xmtc registers {', '.join(method_names())})")
    model = estimator_class(method)(**spec.get("params", {}))
    fit_kw = {"progress": False} if "progress" in inspect.signature(model.fit).parameters else {}
    timer.run("train_s", model.fit, d["train_texts"], d["Y_train"], **fit_kw)
    idx, sc = timer.run("predict_s", model.predict_topk, d["test_texts"], k=args.k)
    peak = peak_rss_mb()  # before saving, which is not part of training or predicting
    info = {"version": getattr(xmtc, "__version__", "?"), "method": method, "params": model.get_params(),
            "peak_rss_mb": peak}
    if "torch" in sys.modules:
        info["torch_threads"] = sys.modules["torch"].get_num_threads()
    info["variants"] = []
    trained_with = model.get_params()
    for i, variant in enumerate(spec.get("predict_variants", [])):
        model.set_params(**variant)
        t0 = time.perf_counter()
        v_idx, v_sc = padded_topk(*model.predict_topk(d["test_texts"], k=args.k), args.k)
        seconds = time.perf_counter() - t0
        path = Path(args.result).with_suffix(f".v{i}.npz")
        np.savez(path, indices=np.asarray(v_idx, dtype=np.int32), scores=np.asarray(v_sc, dtype=np.float32))
        info["variants"].append({"params": variant, "predict_s": seconds, "file": str(path)})
    model.set_params(**trained_with)
    if spec.get("save"):
        info["saved_to"] = model.save(spec["save"])
    return np.asarray(idx), np.asarray(sc), info


def run_xmtc_ensemble(d, args, timer: Timer):
    """xmtc.models.ensemble.Ensemble of saved models (``--params {"members": [DIR...], "combine": ...}``).

    Loading the members is timed on its own (``load_models_s``); predict_s is the ensemble's top-k of the
    test texts, every member predicting in this one process (so the peak RSS holds all of them).
    """
    try:
        import xmtc
        from xmtc.models import load
        from xmtc.models.ensemble import Ensemble
    except ImportError as exc:
        raise NotInstalled(f"xmtc not importable: {exc}") from exc
    spec = args.params
    models = timer.run("load_models_s", lambda: [load(p) for p in spec["members"]])
    ens = Ensemble(models, combine=spec.get("combine", "average"), weights=spec.get("weights"),
                   k_each=int(spec.get("k_each", 20)))
    idx, sc = timer.run("predict_s", ens.predict_topk, d["test_texts"], k=args.k)
    info = {"version": getattr(xmtc, "__version__", "?"), "members": spec["members"],
            "member_methods": [m.method for m in models], "combine": ens.combine, "k_each": ens.k_each,
            "weights": ens.weights}
    return np.asarray(idx), np.asarray(sc), info


def run_xmtc_latency(args) -> dict:
    """Single-text latency of a saved + loaded xmtc model, texts in, label names out.

    Trains on the raw train texts (xmtc featurizes them itself), saves, loads with xmtc.load, warms
    up, then times ``model.predict([text], k)`` one text at a time on a seeded sample of test texts
    (the files are sorted by text, so the first N would be a biased sample).
    """
    try:
        import xmtc
        from xmtc import XRLinear, load
        from xmtc.data import read_inputs
        from xmtc.data.formats import read_tsv
    except ImportError as exc:
        raise NotInstalled(f"xmtc not importable: {exc}") from exc

    folder = Path(args.data_root) / args.dataset
    train = read_tsv(folder / "train.txt.gz")
    train_texts, train_labels = train.texts, train.labels
    test_texts = read_inputs(folder / "test.txt.gz")
    params = dict(args.params)
    params.setdefault("n_threads", args.threads)
    t0 = time.perf_counter()
    model = XRLinear(**params).fit(train_texts, train_labels, progress=False)
    fit_s = time.perf_counter() - t0
    del train, train_texts, train_labels
    path = model.save(Path(args.scratch) / "xmtc_latency_model")
    t0 = time.perf_counter()
    model = load(path)
    load_s = time.perf_counter() - t0
    rng = np.random.default_rng(args.seed)
    pick = rng.choice(len(test_texts), size=min(args.latency_n, len(test_texts)), replace=False)
    sample = [test_texts[i] for i in pick]
    for text in sample[: min(50, len(sample))]:
        model.predict([text], k=args.k)
    lat = np.empty(len(sample))
    example = None
    for j, text in enumerate(sample):
        t0 = time.perf_counter()
        out = model.predict([text], k=args.k)
        lat[j] = time.perf_counter() - t0
        if example is None:
            example = {"text": text[:200], "labels": [[str(n), float(s)] for n, s in out[0]]}
    ms = lat * 1e3
    return {"library": "xmtc-latency", "version": getattr(xmtc, "__version__", "?"), "fit_s": fit_s,
            "load_s": load_s, "n": int(ms.size), "p50_ms": float(np.percentile(ms, 50)),
            "p90_ms": float(np.percentile(ms, 90)), "p99_ms": float(np.percentile(ms, 99)),
            "max_ms": float(ms.max()), "mean_ms": float(ms.mean()), "example": example,
            "api": "xmtc.load(folder).predict([text], k) -> [(label name, score)]",
            "peak_rss_mb": peak_rss_mb()}


RUNNERS = {"xmtc-method": run_xmtc_method, "xmtc-ensemble": run_xmtc_ensemble}
NEEDS = {"xmtc-method": (("Y_train",), True), "xmtc-ensemble": ((), True)}



