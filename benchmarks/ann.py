#!/usr/bin/env python3
"""Nearest label vectors by inner product: exact search against usearch, faiss-cpu and hnswlib HNSW.

    python benchmarks/ann.py                                  # 25k: every library; 1M: exact, usearch, hnswlib
    python benchmarks/ann.py --sizes 25000 --libraries exact,usearch
    python benchmarks/ann.py --crossover 2000,5000,10000,25000,50000,100000   # exact vs usearch by size
    python benchmarks/ann.py --table benchmarks/ann.json                     # the table of saved rows

Data: L2-normalised float32 vectors of dimension 384 from a Gaussian mixture that looks like sentence
embeddings rather than noise: ``n / 500`` clusters with Zipf-distributed sizes, each cluster a centre plus a
24-dimensional principal subspace of its own plus small isotropic noise; the 1,000 queries are data points
moved by the same kind of noise (every seed fixed, so each child regenerates the same bytes). Recall@10 is
measured against exact top-10 (float64 matmul, computed once per size and cached in benchmarks/out/).

Each (size, library) runs in its own child process, so that its RSS delta is its own: the child builds the
data, notes its RSS, builds the index (``--M``, ``--ef-construction``, ``--threads`` threads), notes the RSS
again, then picks the smallest ef_search in a grid whose recall@10 is >= ``--target-recall`` and at that ef
measures a batch of 1,000 queries (``--threads`` threads) and 1,000 single queries one by one (one thread,
p50/p99). "exact" is :class:`xmtc.index.ann.VectorIndex` with ``backend="exact"`` (BLAS matmul over blocks
of queries + argpartition). Output: a markdown table on stdout and ``benchmarks/ann.json``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from _memory import rss_mb  # noqa: E402

DIM = 384
K = 10
N_QUERIES = 1000
EF_GRID = (10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)


def _normalise(x: np.ndarray) -> np.ndarray:
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def make_data(n: int, dim: int = DIM, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(vectors (n, dim), queries (1000, dim))``, float32, L2-normalised; see the module docstring."""
    rng = np.random.default_rng(seed)
    n_clusters = max(8, n // 500)
    rank, n_bases = 24, 64
    sizes = 1.0 / np.arange(1, n_clusters + 1) ** 0.8
    sizes = rng.multinomial(n - n_clusters, sizes / sizes.sum()) + 1  # every cluster has a member
    centres = _normalise(rng.standard_normal((n_clusters, dim)).astype(np.float32))
    bases = [np.linalg.qr(rng.standard_normal((dim, rank)))[0].T.astype(np.float32) for _ in range(n_bases)]
    scales = np.linspace(0.35, 0.08, rank, dtype=np.float32)[:, None]  # a decaying spectrum
    out = np.empty((n, dim), np.float32)
    pos = 0
    for c, size in enumerate(sizes):
        z = rng.standard_normal((size, rank), dtype=np.float32)
        block = out[pos:pos + size]
        np.matmul(z, bases[c % n_bases] * scales, out=block)
        block += centres[c]
        block += rng.standard_normal((size, dim), dtype=np.float32) * np.float32(0.02)
        pos += size
    perm = rng.permutation(n)
    out = _normalise(out[perm])
    qrng = np.random.default_rng(seed + 1)
    src = out[qrng.choice(n, N_QUERIES, replace=False)]
    queries = src + qrng.standard_normal(src.shape, dtype=np.float32) * np.float32(0.02)
    queries += (qrng.standard_normal((N_QUERIES, rank), dtype=np.float32) * 0.15) @ bases[0]
    return out, _normalise(queries.astype(np.float32))


def ground_truth(n: int, seed: int) -> np.ndarray:
    path = HERE / "out" / f"ann-gt-{n}-{seed}.npy"
    if path.exists():
        return np.load(path)
    data, queries = make_data(n, seed=seed)
    top = np.empty((len(queries), K), np.int64)
    for s in range(0, len(queries), 100):  # float32 matmul for 50 candidates, rescored in float64
        part = np.argpartition(-(queries[s:s + 100] @ data.T), 50, axis=1)[:, :50]
        scores = np.einsum("qd,qkd->qk", queries[s:s + 100].astype(np.float64), data[part].astype(np.float64))
        order = np.argsort(-scores, axis=1, kind="stable")[:, :K]
        top[s:s + 100] = np.take_along_axis(part, order, 1)
    path.parent.mkdir(exist_ok=True)
    np.save(path, top)
    return top


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    hits = sum(len(set(f[f >= 0].tolist()) & set(t.tolist())) for f, t in zip(found, truth))
    return hits / truth.size


# --------------------------------------------------------------------------- the libraries, one adapter each

class Exact:
    def __init__(self, args):
        from xmtc.index.ann import VectorIndex

        self.index = VectorIndex(backend="exact", n_threads=args.threads)

    def build(self, data):
        self.index.build(data)

    def set_ef(self, ef):
        pass

    def search(self, q, k, threads):
        return self.index.search(q, k)[0]

    def nbytes(self, tmp):
        return self.index._vectors.nbytes


class Usearch:
    def __init__(self, args):
        from usearch.index import Index

        self.index = Index(ndim=DIM, metric="ip", dtype="f32", connectivity=args.M,
                           expansion_add=args.ef_construction, expansion_search=64)
        self.threads = args.threads

    def build(self, data):
        self.index.add(np.arange(len(data), dtype=np.uint64), data, threads=self.threads)

    def set_ef(self, ef):
        self.index.expansion_search = ef

    def search(self, q, k, threads):
        keys = self.index.search(q, k, threads=threads).keys
        return np.asarray(keys).astype(np.int64).reshape(-1, k)

    def nbytes(self, tmp):
        path = os.path.join(tmp, "i.usearch")
        self.index.save(path)
        return os.path.getsize(path)


class Faiss:
    def __init__(self, args):
        import faiss

        self.faiss = faiss
        faiss.omp_set_num_threads(args.threads)
        self.threads = args.threads
        self.index = faiss.IndexHNSWFlat(DIM, args.M, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = args.ef_construction

    def build(self, data):
        self.index.add(data)

    def set_ef(self, ef):
        self.index.hnsw.efSearch = ef

    def search(self, q, k, threads):
        self.faiss.omp_set_num_threads(threads)
        return self.index.search(np.atleast_2d(q), k)[1]

    def nbytes(self, tmp):
        path = os.path.join(tmp, "i.faiss")
        self.faiss.write_index(self.index, path)
        return os.path.getsize(path)


class Hnswlib:
    def __init__(self, args):
        import hnswlib

        self.index = hnswlib.Index(space="ip", dim=DIM)
        self.args = args

    def build(self, data):
        self.index.init_index(max_elements=len(data), ef_construction=self.args.ef_construction, M=self.args.M,
                              random_seed=self.args.seed)
        self.index.add_items(data, np.arange(len(data)), num_threads=self.args.threads)

    def set_ef(self, ef):
        self.index.set_ef(ef)

    def search(self, q, k, threads):
        return self.index.knn_query(q, k, num_threads=threads)[0].astype(np.int64)

    def nbytes(self, tmp):
        path = os.path.join(tmp, "i.hnsw")
        self.index.save_index(path)
        return os.path.getsize(path)


LIBRARIES = {"exact": Exact, "usearch": Usearch, "faiss": Faiss, "hnswlib": Hnswlib}


def version(lib: str) -> str:
    if lib == "exact":
        return "numpy " + np.__version__
    from importlib.metadata import version as v

    return {"usearch": "usearch ", "faiss": "faiss-cpu ", "hnswlib": "hnswlib "}[lib] + v(
        {"usearch": "usearch", "faiss": "faiss-cpu", "hnswlib": "hnswlib"}[lib])


def child(args) -> dict:
    """One (size, library) measurement, in this process."""
    n, lib = args.n, args.child
    truth = ground_truth(n, args.seed)
    data, queries = make_data(n, seed=args.seed)
    adapter = LIBRARIES[lib](args)
    before = rss_mb()
    t0 = time.perf_counter()
    adapter.build(data)
    build_s = time.perf_counter() - t0
    rss_delta = rss_mb() - before
    with tempfile.TemporaryDirectory() as tmp:
        index_mb = adapter.nbytes(tmp) / 2**20
    grid = [None] if lib == "exact" else [ef for ef in EF_GRID if ef >= K]
    tried, pick = [], None
    for ef in grid:
        if ef is not None:
            adapter.set_ef(ef)
        r = recall(adapter.search(queries, K, args.threads), truth)
        tried.append({"ef": ef, "recall@10": round(r, 4)})
        pick = ef
        if r >= args.target_recall:
            break
    adapter.set_ef(pick)
    adapter.search(queries[:50], K, args.threads)  # warm
    t0 = time.perf_counter()
    found = adapter.search(queries, K, args.threads)
    batch_s = time.perf_counter() - t0
    lat = []
    n_single = 100 if lib == "exact" and n >= 200_000 else len(queries)  # a 1M matvec reads 1.5 GB each time
    for q in queries[:n_single]:
        t = time.perf_counter()
        adapter.search(q[None, :], K, 1)
        lat.append(time.perf_counter() - t)
    lat_ms = np.array(lat) * 1e3
    return {"n": n, "library": lib, "version": version(lib), "M": None if lib == "exact" else args.M,
            "ef_construction": None if lib == "exact" else args.ef_construction, "ef_search": pick,
            "recall@10": round(recall(found, truth), 4), "ef_tried": tried, "build_s": round(build_s, 2),
            "batch_ms_per_query": round(batch_s * 1e3 / len(queries), 4), "batch_qps": round(len(queries) / batch_s),
            "single_p50_ms": round(float(np.percentile(lat_ms, 50)), 3),
            "single_p99_ms": round(float(np.percentile(lat_ms, 99)), 3), "single_queries": n_single,
            "rss_delta_mb": round(rss_delta), "index_mb": round(index_mb, 1), "threads": args.threads,
            "loadavg": [round(x, 1) for x in os.getloadavg()]}


def run_child(args, n: int, lib: str) -> dict | None:
    cmd = [sys.executable, __file__, "--child", lib, "--n", str(n), "--seed", str(args.seed), "--M", str(args.M),
           "--ef-construction", str(args.ef_construction), "--threads", str(args.threads),
           "--target-recall", str(args.target_recall)]
    print(f"# {lib} at n={n:,} ...", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        print(f"# {lib} at n={n:,} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"# {json.dumps(row)}", file=sys.stderr, flush=True)
    return row


def table(rows: list[dict]) -> str:
    head = ("| n | library | M / ef_c / ef_s | recall@10 | build s | batch ms/query (QPS) | single p50 ms | single p99 ms"
            " | RSS delta MB | index MB |\n|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        params = "—" if r["library"] == "exact" else f"{r['M']} / {r['ef_construction']} / {r['ef_search']}"
        lines.append(f"| {r['n']:,} | {r['version']} | {params} | {r['recall@10']:.3f} | {r['build_s']:.1f} |"
                     f" {r['batch_ms_per_query']:.3f} ({r['batch_qps']:,}) | {r['single_p50_ms']:.3f} |"
                     f" {r['single_p99_ms']:.3f} | {r['rss_delta_mb']:,} | {r['index_mb']:,.1f} |")
    return "\n".join(lines)


def _rows(path: Path) -> list[dict]:
    text = path.read_text()
    if text.lstrip().startswith("{\n") or '"runs"' in text[:20]:
        return [r for run in json.loads(text)["runs"] for r in run["rows"] + run["crossover"]]
    return [json.loads(line.removeprefix("# ")) for line in text.splitlines() if line.lstrip("# ").startswith("{")]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="25000,1000000")
    ap.add_argument("--libraries", default="exact,usearch,faiss,hnswlib")
    ap.add_argument("--libraries-1m", default="exact,usearch,hnswlib",
                    help="libraries measured at sizes >= 1M (HNSW builds there take long on few cores)")
    ap.add_argument("--crossover", default="", help="sizes at which to compare exact with --crossover-library")
    ap.add_argument("--crossover-library", default="usearch")
    ap.add_argument("--M", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--target-recall", type=float, default=0.95)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=7200)
    ap.add_argument("--out", default=str(HERE / "ann.json"))
    ap.add_argument("--table", nargs="+", metavar="FILE",
                    help="only print the table of the rows in these files (ann.json, or one row JSON a line)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return
    if args.table:
        print(table([row for f in args.table for row in _rows(Path(f))]))
        return
    rows = []
    for n in [int(s) for s in args.sizes.split(",") if s]:
        libs = args.libraries_1m if n >= 1_000_000 else args.libraries
        ground_truth(n, args.seed)
        for lib in libs.split(","):
            row = run_child(args, n, lib)
            if row:
                rows.append(row)
    crossover = []
    for n in [int(s) for s in args.crossover.split(",") if s]:
        ground_truth(n, args.seed)
        for lib in ("exact", args.crossover_library):
            row = run_child(args, n, lib)
            if row:
                crossover.append(row)
    info = {"date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"), "platform": platform.platform(),
            "python": sys.version.split()[0], "cpu_count": os.cpu_count(), "threads": args.threads,
            "dim": DIM, "k": K, "queries": N_QUERIES, "seed": args.seed, "target_recall": args.target_recall}
    out = Path(args.out)
    old = json.loads(out.read_text()) if out.exists() else {}
    old.setdefault("runs", []).append({"machine": info, "rows": rows, "crossover": crossover})
    out.write_text(json.dumps(old, indent=1) + "\n")
    if rows:
        print(table(rows))
    if crossover:
        print("\ncrossover\n" + table(crossover))


if __name__ == "__main__":
    main()
