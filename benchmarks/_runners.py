"""Child process of the benchmark: train and predict with ONE library, report times and peak RSS.

Run as ``python _runners.py LIBRARY --work DIR --result FILE.json ...`` by ``linear.py`` and
``transformer.py``, with the interpreter that has that library (xmtc: the project's; peers:
benchmarks/.venv-peers, whose numpy and scipy are older). One library per process makes its peak RSS (VmHWM) the peak of that library alone.
This file imports nothing but numpy/scipy (and the stdlib-only _memory.py) at the top so that both
interpreters can run it.

Exit codes: 0 ok, 3 the library cannot be imported (reported as "not installed"), anything else a
failure whose stderr the parent shows.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import re
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from _memory import peak_rss_mb

EXIT_NOT_INSTALLED = 3


class NotInstalled(Exception):
    """The library's import failed: the table says "not installed" instead of a traceback."""


def topk_from_csr(P: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Best-first top-k (indices -1 padded, scores) per row of a sparse score matrix, vectorised."""
    P = sp.csr_matrix(P)
    n = P.shape[0]
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(P.indptr))
    order = np.lexsort((P.indices, -P.data, rows))  # rows, then score desc, then label id
    rank = np.arange(order.size) - P.indptr[rows[order]]
    keep = rank < k
    idx = np.full((n, k), -1, dtype=np.int32)
    sc = np.zeros((n, k), dtype=np.float32)
    idx[rows[order][keep], rank[keep]] = P.indices[order][keep]
    sc[rows[order][keep], rank[keep]] = P.data[order][keep]
    return idx, sc


def _pairs_to_topk(preds: list, k: int) -> tuple[np.ndarray, np.ndarray]:
    """[(label, score), ...] per row -> padded arrays, re-sorted best first to be safe."""
    idx = np.full((len(preds), k), -1, dtype=np.int32)
    sc = np.zeros((len(preds), k), dtype=np.float32)
    for i, row in enumerate(preds):
        row = sorted(row, key=lambda p: (-p[1], p[0]))[:k]
        for j, (label, score) in enumerate(row):
            idx[i, j] = label
            sc[i, j] = score
    return idx, sc


def _load(work: Path, keys=("X_train", "Y_train", "X_test"), texts: bool = False) -> dict:
    """The shared matrices a library needs (csr float32) and, for text learners, the raw texts."""
    out = {}
    for key in keys:
        m = sp.load_npz(work / f"{key}.npz").tocsr().astype(np.float32)
        m.sort_indices()
        out[key] = m
    if texts:
        for split in ("train", "test"):
            path = work / f"{split}_texts.json"
            if not path.exists():
                raise FileNotFoundError(f"{path}: no texts (a bag-of-words dataset cannot feed a transformer)")
            out[f"{split}_texts"] = json.loads(path.read_text(encoding="utf-8"))
    return out


def _n_test(d: dict) -> int:
    return len(d["test_texts"]) if "test_texts" in d else d["X_test"].shape[0]


# -- one function per library: (data, args) -> (idx, scores, info); sets times via the timer ----------
class Timer:
    def __init__(self):
        self.times: dict[str, float] = {}

    def run(self, name, fn, *a, **kw):
        t0 = time.perf_counter()
        out = fn(*a, **kw)
        self.times[name] = time.perf_counter() - t0
        return out


def run_xmtc(d, args, timer: Timer):
    try:
        import xmtc
        from xmtc import XRLinear
    except ImportError as exc:
        raise NotInstalled(f"xmtc.XRLinear not importable: {exc}") from exc
    params = dict(args.params)
    params.setdefault("n_threads", args.threads)
    tree_file = params.pop("tree_file", None)
    tree = None
    if tree_file:  # linear.py --same-tree: the tree both libraries train on (not built, so not timed)
        from xmtc.index.tree import LabelTree

        z = np.load(tree_file)
        tree = LabelTree.from_parents([z[f"parents{t}"] for t in range(int(z["n_levels"]))])
    model = XRLinear(**params)
    given = {} if tree is None else {"tree": tree}
    timer.run("train_s", model.fit, d["X_train"], d["Y_train"], progress=False, **given)
    idx, sc = timer.run("predict_s", model.predict_topk, d["X_test"], k=args.k)
    info = {"version": getattr(xmtc, "__version__", "?"), "params": model.get_params()}
    return np.asarray(idx), np.asarray(sc), info


def run_pecos(d, args, timer: Timer):
    try:
        import pecos
        from pecos.xmc import Indexer, LabelEmbeddingFactory
        from pecos.xmc.xlinear.model import XLinearModel
    except ImportError as exc:
        raise NotInstalled(f"libpecos not importable: {exc}") from exc
    X, Y = d["X_train"], d["Y_train"]
    unknown = set(args.params) - {"indexer", "train", "predict", "tree_file"}
    if unknown:
        raise ValueError(f"--pecos-params: unknown keys {sorted(unknown)} (indexer, train, predict)")
    given = None
    if args.params.get("tree_file"):  # linear.py --same-tree: xmtc's tree as a PECOS ClusterChain
        from pecos.utils.cluster_util import ClusterChain

        z = np.load(args.params["tree_file"])
        given, n_par = [], 1
        for t in range(int(z["n_levels"])):
            p = z[f"parents{t}"]
            given.append(sp.csc_matrix((np.ones(p.size, dtype=np.float32), (np.arange(p.size), p)),
                                       shape=(p.size, n_par)))
            n_par = p.size
        given = ClusterChain(given)
    # XLinearModel.train leaves every level's beam at MLModel.PredParams.only_topk = 20, while
    # PECOS's own command line (pecos.xmc.xlinear.train --beam-size) defaults to 10, as does xmtc:
    # use 10 so the comparison is at equal beam; override with {"train": {"beam_size": 20}}.
    train_kw = {"beam_size": 10, **args.params.get("train", {})}

    def train():
        if given is not None:
            return XLinearModel.train(X, Y, C=given, threads=args.threads, **train_kw)
        label_feat = LabelEmbeddingFactory.create(Y, X, method="pifa")
        chain = Indexer.gen(label_feat, threads=args.threads, **args.params.get("indexer", {}))
        return XLinearModel.train(X, Y, C=chain, threads=args.threads, **train_kw)

    model = timer.run("train_s", train)
    P = timer.run("predict_s", model.predict, d["X_test"], only_topk=args.k, threads=args.threads,
                  **args.params.get("predict", {}))
    idx, sc = topk_from_csr(P, args.k)
    pred = model.get_pred_params()
    info = {"version": getattr(pecos, "__version__", "?"),
            "defaults": {"indexer": "hierarchicalkmeans (nr_splits 16, max_leaf_size 100, spherical, "
                                    "kmeans_max_iter 20, seed 0)",
                         "train": "L2R_L2LOSS_SVC_DUAL, Cp=Cn=1, eps 0.1, max_iter 100, bias 1, "
                                  "threshold 0.1, negatives tfn",
                         "train_kwargs_passed": train_kw,
                         "levels_only_topk": [m.only_topk for m in pred.hlm_args.model_chain],
                         "post_processor": pred.hlm_args.model_chain[-1].post_processor},
            "params": args.params}
    return idx, sc, info


def _write_xc(path: Path, X: sp.csr_matrix, Y: sp.csr_matrix, chunk: int = 4096) -> None:
    """omikuji reads only files: Extreme Classification Repository format.

    Written in row chunks so that the Python lists it needs stay small: this runs inside omikuji's
    child process, whose peak RSS should be omikuji's, not the writer's.
    """
    Y = sp.csr_matrix(Y)
    with open(path, "w", encoding="ascii") as fh:
        fh.write(f"{X.shape[0]} {X.shape[1]} {Y.shape[1]}\n")
        for start in range(0, X.shape[0], chunk):
            xs, ys = X[start:start + chunk], Y[start:start + chunk]
            xi, xd, xp = xs.indices.tolist(), xs.data.tolist(), xs.indptr.tolist()
            yi, yp = ys.indices.tolist(), ys.indptr.tolist()
            lines = []
            for r in range(xs.shape[0]):
                labels = ",".join(map(str, yi[yp[r]:yp[r + 1]]))
                feats = " ".join(f"{i}:{v:.7g}" for i, v in zip(xi[xp[r]:xp[r + 1]], xd[xp[r]:xp[r + 1]]))
                # no trailing blank: omikuji rejects "labels " (a document without features)
                lines.append(" ".join(x for x in (labels, feats) if x) + "\n")
            fh.write("".join(lines))


@contextlib.contextmanager
def _quiet_progress_bars(spool: Path):
    """Send fd 2 to a file, then echo only its log lines (not the \\r progress bars) to stderr.

    omikuji's Rust side draws a progress bar per training example: tens of MB on a large set.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with open(spool, "wb") as fh:
        os.dup2(fh.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        with open(spool, "rb") as fh:
            text = fh.read().decode("utf-8", "replace")
        spool.unlink()
        keep = [ln for ln in re.split(r"[\r\n]", text)
                if ln.strip() and not re.search(r"\d+ / \d+ \[", ln)]
        if keep:
            print("\n".join(keep), file=sys.stderr, flush=True)


def run_omikuji(d, args, timer: Timer):
    try:
        import omikuji
    except ImportError as exc:
        raise NotInstalled(f"omikuji not importable: {exc}") from exc
    from concurrent.futures import ThreadPoolExecutor

    train_file = Path(args.scratch) / "omikuji_train.txt"
    timer.run("prep_s", _write_xc, train_file, d["X_train"], d["Y_train"])
    hp = omikuji.Model.default_hyper_param()
    for key, value in args.params.items():
        setattr(hp, key, value)
    hp_dict = {k: getattr(hp, k) for k in dir(hp)}
    # train_on_data parses the file itself; its parse time is part of the train time
    with _quiet_progress_bars(Path(args.scratch) / "omikuji_stderr.txt"):
        model = timer.run("train_s", omikuji.Model.train_on_data, str(train_file), hp, n_threads=args.threads)
    train_file.unlink()
    X = d["X_test"]
    k = args.k

    def predict_rows(ids):
        # building each text's (feature, value) list is part of using this API, so it is timed
        ind, val, ptr = X.indices, X.data, X.indptr
        return [model.predict(list(zip(ind[ptr[i]:ptr[i + 1]].tolist(), val[ptr[i]:ptr[i + 1]].tolist())),
                              top_k=k) for i in ids]

    mode = args.omikuji_predict
    # omikuji has no batch predict: its Python API takes one text's (feature, value) pairs.
    if mode == "threads":
        # cffi drops the GIL inside the call, so contiguous chunks on `threads` Python threads
        # overlap in Rust; the model's own pool gets one thread to avoid oversubscription.
        model.init_prediction_thread_pool(1)
        chunks = np.array_split(np.arange(X.shape[0]), args.threads)

        def predict_all():
            with ThreadPoolExecutor(max_workers=args.threads) as pool:
                return [p for part in pool.map(predict_rows, chunks) for p in part]
    else:
        model.init_prediction_thread_pool(args.threads)

        def predict_all():
            return predict_rows(range(X.shape[0]))
    preds = timer.run("predict_s", predict_all)
    idx, sc = _pairs_to_topk(preds, args.k)
    info = {"version": omikuji.__version__, "hyper_param": hp_dict,
            "predict_api": f"per-text Model.predict, {mode}" +
                           (f" ({args.threads} Python threads, chunked)" if mode == "threads" else
                            f" (sequential, model pool {args.threads} threads)"),
            "beam_size": 10}
    return idx, sc, info


def run_napkinxc(d, args, timer: Timer):
    try:
        import napkinxc
        from napkinxc.models import PLT
    except ImportError as exc:
        raise NotInstalled(f"napkinxc not importable: {exc}") from exc
    params = {"seed": args.seed, **args.params}
    model = PLT(str(Path(args.scratch) / "napkinxc_model"), threads=args.threads, **params)
    Y = sp.csr_matrix(d["Y_train"])
    timer.run("train_s", model.fit, d["X_train"], Y)
    preds = timer.run("predict_s", model.predict_proba, d["X_test"], top_k=args.k)
    idx, sc = _pairs_to_topk(preds, args.k)
    info = {"version": getattr(napkinxc, "__version__", "0.7.2?"), "params": model.get_params()}
    info["params"] = {k: v for k, v in info["params"].items() if isinstance(v, (int, float, str, bool, type(None)))}
    return idx, sc, info


RUNNERS = {"xmtc": run_xmtc, "pecos": run_pecos, "omikuji": run_omikuji, "napkinxc": run_napkinxc}


# -- XR-Transformer: xmtc and PECOS with the same shared settings (transformer.py passes --shared) ---------
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


RUNNERS.update({"xmtc-xrt": run_xmtc_xrt, "xmtc-xrt-linear": run_xmtc_xrt_linear, "pecos-xrt": run_pecos_xrt})
NEEDS = {"xmtc-xrt": (("Y_train",), True), "xmtc-xrt-linear": (("Y_train",), True),
         "pecos-xrt": (("X_train", "Y_train", "X_test"), True)}


# -- methods.py: any registered xmtc method by name, and an ensemble of saved ones ----------------------
def run_xmtc_method(d, args, timer: Timer):
    """One xmtc method from the registry (``--params {"method": NAME, "params": {...}, "save": DIR}``).

    Fits on the raw train texts with the harness's label columns (so predicted ids need no mapping),
    predicts the top ``--k`` of the test texts, takes the peak RSS, then (untimed) saves the model
    where ``save`` says, for an ensemble row.
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


RUNNERS.update({"xmtc-method": run_xmtc_method, "xmtc-ensemble": run_xmtc_ensemble})
NEEDS.update({"xmtc-method": (("Y_train",), True), "xmtc-ensemble": ((), True)})


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
            result = run_xmtc_latency(args)
        else:
            timer = Timer()
            t0 = time.perf_counter()
            keys, texts = NEEDS.get(args.library, (("X_train", "Y_train", "X_test"), False))
            data = _load(Path(args.work), keys, texts)
            load_s = time.perf_counter() - t0
            rss_after_load = peak_rss_mb()
            idx, sc, info = RUNNERS[args.library](data, args, timer)
            n_test = _n_test(data)
            if idx.shape != (n_test, args.k):
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
