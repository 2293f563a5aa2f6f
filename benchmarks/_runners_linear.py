"""The linear harness's children (linear.py): xmtc XR-Linear, PECOS XR-Linear, omikuji and napkinXC on
the shared TF-IDF matrices, each a function (data, args, timer) -> (top-k ids, scores, info).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from _runner_base import NotInstalled, Timer, _pairs_to_topk, topk_from_csr


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
