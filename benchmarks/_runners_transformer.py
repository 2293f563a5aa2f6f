"""The transformer harness's children (transformer.py, methods.py's PECOS row): xmtc XR-Transformer and
PECOS XR-Transformer with the same shared settings (``--shared``).
"""

from __future__ import annotations

import gc
import logging
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from _memory import peak_rss_mb
from _runner_base import NotInstalled, Timer, topk_from_csr


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = _deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) \
            else value
    return out


def run_xmtc_xrt(d, args, timer: Timer):
    """xmtc.XRTransformer on the raw texts (it computes its own TF-IDF with the shared settings)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        import torch
        import xmtc
        from xmtc import XRTransformer
    except ImportError as exc:
        raise NotInstalled(f"xmtc.XRTransformer not importable: {exc}") from exc
    sh = args.shared
    params = {"encoder": sh["encoder"], "max_length": sh["max_length"], "epochs": sh["epochs"],
              "branching": sh["nr_splits"], "max_leaf_size": sh["max_leaf_size"], "beam_size": sh["beam_size"],
              "shortlist_topk": sh["beam_size"], "batch_size": sh["batch_size"],
              "encode_batch_size": sh["encode_batch_size"], "max_match_clusters": sh["max_match_clusters"],
              "negatives": sh["negatives"], "seed": args.seed, "n_threads": args.threads, "device": "cpu",
              **args.params}
    torch.set_num_threads(args.threads)
    model = XRTransformer(**params)
    # Y's columns are the harness's label columns, so the predicted ids need no mapping
    timer.run("train_s", model.fit, d["train_texts"], d["Y_train"], progress=False)
    idx, sc = timer.run("predict_s", model.predict_topk, d["test_texts"], k=args.k)
    peak = peak_rss_mb()  # before the check below, which is not part of using the model
    # the PIFA tree is built on xmtc's own TF-IDF of the texts: check it equals the shared matrix PECOS gets
    X_shared = sp.load_npz(Path(args.work) / "X_test.npz").tocsr()
    F = model.featurizer_.transform(d["test_texts"]).tocsr()
    same_shape = F.shape == X_shared.shape
    diff = float(abs(F - X_shared).max()) if same_shape else None
    info = {"version": getattr(xmtc, "__version__", "?"), "torch": torch.__version__,
            "transformers": __import__("transformers").__version__,
            "params": model.get_params(), "params_passed": params,
            "tree": model.tree_sizes_, "finetuned_levels": sorted(int(k) for k in model.heads_),
            "n_features_tfidf_plus_emb": int(model.n_features_),
            "tfidf_check": {"same_shape_as_shared": same_shape, "max_abs_diff_test": diff,
                            "xmtc_shape": list(F.shape), "shared_shape": list(X_shared.shape)},
            "peak_rss_mb": peak, "torch_threads": torch.get_num_threads()}
    return np.asarray(idx), np.asarray(sc), info


def pecos_xrt_settings(sh: dict, threads: int, seed: int, k: int) -> dict:
    """PECOS XR-Transformer parameters for the shared settings: the overrides of its defaults, by place."""
    neg = sh["negatives"]
    indexer = {"nr_splits": sh["nr_splits"], "max_leaf_size": sh["max_leaf_size"], "seed": seed,
               "threads": threads}
    return {
        "train_params": {
            "preliminary_indexer_params": dict(indexer),  # PIFA on X_feat (the shared TF-IDF), inside train()
            "refined_indexer_params": dict(indexer),      # only used when fix_clustering is false
            "matcher_params_chain": {
                "model_shortcut": sh["encoder"],          # a local folder: AutoConfig/from_pretrained load it
                "num_train_epochs": sh["epochs"],
                "batch_size": sh["batch_size"],
                "negative_sampling": neg,                 # tfn+man = xmtc's shortlist (positives + top-k children)
                "use_gpu": False,
                "batch_gen_workers": threads,             # DataLoader worker processes (0 would crash: see README)
            },
            "ranker_params": {"nr_splits": sh["nr_splits"],
                              "hlm_args": {"neg_mining_chain": neg, "model_chain": {"threads": threads}}},
            "fix_clustering": True,                       # rankers on the same PIFA(TF-IDF) tree, as xmtc
            "max_match_clusters": sh["max_match_clusters"],
        },
        "pred_params": {"matcher_params_chain": {"truncate_length": sh["max_length"]}},
        "train_kwargs": {"threads": threads, "beam_size": sh["beam_size"]},
        "predict_kwargs": {"only_topk": k, "beam_size": sh["beam_size"], "threads": threads,
                           "batch_size": sh["encode_batch_size"], "batch_gen_workers": threads, "use_gpu": False},
    }


def run_pecos_xrt(d, args, timer: Timer):
    """PECOS XR-Transformer (libpecos 1.2.8): XTransformer.train on MLProblemWithText(texts, Y, X_feat)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        import pecos
        import torch
        import transformers
        from pecos.utils import torch_util
        from pecos.xmc.xtransformer.model import XTransformer
        from pecos.xmc.xtransformer.module import MLProblemWithText
    except ImportError as exc:
        raise NotInstalled(f"PECOS XR-Transformer not importable: {exc}") from exc
    unknown = set(args.params) - {"train_params", "pred_params", "train_kwargs", "predict_kwargs"}
    if unknown:
        raise ValueError(f"--pecos-params: unknown keys {sorted(unknown)} "
                         "(train_params, pred_params, train_kwargs, predict_kwargs)")
    passed = _deep_merge(pecos_xrt_settings(args.shared, args.threads, args.seed, args.k), args.params)
    defaults_train = XTransformer.TrainParams.from_dict({}, recursive=True).to_dict()
    defaults_pred = XTransformer.PredParams.from_dict({}, recursive=True).to_dict()
    train_params = XTransformer.TrainParams.from_dict(_deep_merge(defaults_train, passed["train_params"]))
    pred_params = XTransformer.PredParams.from_dict(_deep_merge(defaults_pred, passed["pred_params"]))
    torch.set_num_threads(args.threads)
    torch_util.set_seed(args.seed)

    def train():
        prob = MLProblemWithText(d["train_texts"], d["Y_train"], X_feat=d["X_train"])
        return XTransformer.train(prob, clustering=None, train_params=train_params, pred_params=pred_params,
                                  **passed["train_kwargs"])

    def fit_predict():
        model = timer.run("train_s", train)
        P = timer.run("predict_s", model.predict, d["test_texts"], X_feat=d["X_test"], **passed["predict_kwargs"])
        info = {"version": getattr(pecos, "__version__", "?"), "torch": torch.__version__,
                "transformers": transformers.__version__, "torch_threads": torch.get_num_threads(),
                "params_passed": passed,
                "train_params_effective": train_params.to_dict(with_meta=False),
                "pred_params_effective": pred_params.to_dict(with_meta=False),
                "model_pred_params": model.get_pred_params().to_dict(with_meta=False)}
        try:  # informative only: never lose a finished run over it
            chain = model.concat_model.model.model_chain
            info["ranker_tree"] = [int(m.nr_labels) for m in chain]
            info["n_features_tfidf_plus_emb"] = int(model.concat_model.model.nr_features)
        except Exception as exc:  # noqa: BLE001
            info["ranker_tree"] = f"unavailable: {exc}"
        return P, info

    # PECOS keeps its tokenized texts and encoder checkpoints in temporary folders (a killed run leaves
    # them behind): give them one folder of their own, removed at the end. It must be a short path: the
    # DataLoader workers' AF_UNIX sockets live under it too (under a deep folder they fail and PECOS hangs).
    tmp = tempfile.mkdtemp(prefix="xmtc-bench-pecos-xrt-")
    print(f"PECOS temporary files: {tmp}", file=sys.stderr, flush=True)
    tempfile.tempdir = tmp
    try:
        P, info = fit_predict()
    finally:
        tempfile.tempdir = None
        gc.collect()  # the model is gone: its TemporaryDirectory objects remove their own folders first
        shutil.rmtree(tmp, ignore_errors=True)
    idx, sc = topk_from_csr(P, args.k)
    return idx, sc, info


def run_xmtc_xrt_linear(d, args, timer: Timer):
    """xmtc.XRTransformer with ``matcher="linear"`` (XR-Linear on TF-IDF + embedding over the whole tree)."""
    args.params = {**args.params, "matcher": "linear"}
    return run_xmtc_xrt(d, args, timer)


RUNNERS = {"xmtc-xrt": run_xmtc_xrt, "xmtc-xrt-linear": run_xmtc_xrt_linear, "pecos-xrt": run_pecos_xrt}
NEEDS = {"xmtc-xrt": (("Y_train",), True), "xmtc-xrt-linear": (("Y_train",), True),
         "pecos-xrt": (("X_train", "Y_train", "X_test"), True)}
