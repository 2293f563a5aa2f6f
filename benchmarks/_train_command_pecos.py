"""PECOS 1.2.8's own user path from a text file, the child of train_command.py (runs on the peers'
interpreter, benchmarks/.venv-peers): ``train`` reads the texts, featurizes them with PECOS's TF-IDF
vectorizer, builds PIFA label embeddings and the hierarchical k-means indexer, trains XLinearModel at
beam 10 and saves model and vectorizer; ``predict`` loads both and writes the test set's top-k.

The parent times the ``train`` child's whole wall time (interpreter start and imports included: what a
user of PECOS waits for); the child reports its in-process seconds per step in the result JSON.

Labels: PECOS reads no label strings; the parent builds Y (csr, the same label order as xmtc's reader)
from the same training file and hands it over as an .npz (not timed). The texts are read here, from the
gzipped ``labels<TAB>text`` file, and that is timed.

Tokenization: PECOS's word tokenizer splits on single spaces and keeps case, so ``--text words`` (the
default) first lower-cases each text and keeps its ``\\b\\w\\w+\\b`` tokens joined by spaces (xmtc's and
scikit-learn's default tokenization), timed as part of featurizing; ``--text raw`` hands PECOS the text
as it is.
"""

from __future__ import annotations

import time

T_START = time.perf_counter()  # after the interpreter's own start-up, before any import of this script

import argparse  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TOKEN = re.compile(r"(?u)\b\w\w+\b")

# as close to xmtc's TF-IDF defaults (ngram_max 2, min_df 2, max_df 1.0, sublinear tf, l2 rows) as PECOS
# allows: PECOS's idf is ln(n / (df + 1)) + 1 with smooth_idf and add_one_idf, xmtc's (scikit-learn's)
# ln((n + 1) / (df + 1)) + 1; PECOS keeps an n-gram when df >= min_df_cnt, as scikit-learn's min_df does
TFIDF_CONFIG = {"type": "tfidf", "kwargs": {
    "ngram_range": [1, 2], "min_df_cnt": 2, "max_df_ratio": 1.0, "max_feature": 0, "sublinear_tf": True,
    "smooth_idf": True, "add_one_idf": True, "use_idf": True, "norm": "l2", "analyzer": "word", "threads": -1}}


def read_texts(path: str) -> list[str]:
    """The text column of a ``labels<TAB>text`` file (gzip or plain)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [line.rstrip("\n").split("\t", 1)[-1] if "\t" in line else "" for line in fh if line.strip()]


def prepare(texts: list[str], mode: str) -> list[str]:
    if mode == "raw":
        return [t.replace("\n", " ") for t in texts]
    return [" ".join(TOKEN.findall(t.lower())) for t in texts]


def train(args) -> dict:
    times: dict[str, float] = {}
    t = time.perf_counter()
    import numpy as np
    import pecos
    import scipy.sparse as sp
    from pecos.utils.featurization.text.vectorizers import Vectorizer
    from pecos.xmc import Indexer, LabelEmbeddingFactory
    from pecos.xmc.xlinear.model import XLinearModel
    times["import_s"] = time.perf_counter() - t

    t = time.perf_counter()
    texts = read_texts(args.train)
    Y = sp.load_npz(args.y).tocsr().astype(np.float32)
    if Y.shape[0] != len(texts):
        raise SystemExit(f"{args.train}: {len(texts)} texts but Y has {Y.shape[0]} rows")
    times["read_s"] = time.perf_counter() - t

    t = time.perf_counter()
    corpus = prepare(texts, args.text)
    del texts
    times["tokenize_s"] = time.perf_counter() - t
    t1 = time.perf_counter()
    vectorizer = Vectorizer.train(corpus, config=json.loads(json.dumps(TFIDF_CONFIG)))
    X = vectorizer.predict(corpus, threads=args.threads)
    del corpus
    times["tfidf_s"] = time.perf_counter() - t1
    times["featurize_s"] = time.perf_counter() - t

    t = time.perf_counter()
    label_feat = LabelEmbeddingFactory.create(Y, X, method="pifa")
    times["pifa_s"] = time.perf_counter() - t
    t1 = time.perf_counter()
    chain = Indexer.gen(label_feat, threads=args.threads)
    times["indexer_s"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    # beam 10 as PECOS's own command line (pecos.xmc.xlinear.train --beam-size) and _runners_linear.py
    model = XLinearModel.train(X, Y, C=chain, threads=args.threads, beam_size=args.beam_size)
    times["xlinear_s"] = time.perf_counter() - t1
    times["train_s"] = time.perf_counter() - t

    t = time.perf_counter()
    out = Path(args.model_dir)
    model.save(str(out / "xlinear"))
    vectorizer.save(str(out / "vectorizer"))
    times["save_s"] = time.perf_counter() - t
    times["in_process_s"] = time.perf_counter() - T_START
    return {"times": times, "n_docs": int(X.shape[0]), "n_features": int(X.shape[1]), "n_labels": int(Y.shape[1]),
            "version": getattr(pecos, "__version__", "?"), "tfidf_config": TFIDF_CONFIG, "text": args.text,
            "indexer": "Indexer.gen defaults (hierarchicalkmeans, nr_splits 16, max_leaf_size 100)",
            "train": {"beam_size": args.beam_size, "threads": args.threads},
            "tree": [int(c.shape[1]) for c in chain]}


def predict(args) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import numpy as np
    from _runner_base import topk_from_csr
    from pecos.utils.featurization.text.vectorizers import Vectorizer
    from pecos.xmc.xlinear.model import XLinearModel

    t = time.perf_counter()
    vectorizer = Vectorizer.load(str(Path(args.model_dir) / "vectorizer"))
    model = XLinearModel.load(str(Path(args.model_dir) / "xlinear"))
    X = vectorizer.predict(prepare(read_texts(args.test), args.text), threads=args.threads)
    P = model.predict(X, only_topk=args.k, threads=args.threads)
    idx, sc = topk_from_csr(P, args.k)
    np.savez(args.pred, indices=idx, scores=sc)
    return {"predict_s": time.perf_counter() - t, "n_docs": int(X.shape[0])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("train", "predict"))
    ap.add_argument("--train", help="training file (labels<TAB>text, gzip or plain)")
    ap.add_argument("--y", help="the training label matrix (.npz), rows in the file's order")
    ap.add_argument("--test", help="test file (labels<TAB>text)")
    ap.add_argument("--pred", help="where predict writes indices/scores (.npz)")
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--result", required=True, help="JSON with the in-process seconds")
    ap.add_argument("--text", choices=("words", "raw"), default="words")
    ap.add_argument("--threads", type=int, default=-1, help="PECOS threads (-1: every core)")
    ap.add_argument("--beam-size", type=int, default=10)
    ap.add_argument("-k", type=int, default=5)
    args = ap.parse_args(argv)
    res = train(args) if args.mode == "train" else predict(args)
    res["pid"] = os.getpid()
    Path(args.result).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
