"""A seeded synthetic XMC corpus for scale tests: power-law labels, a hidden label hierarchy, sparse features.

Why synthetic: no public corpus with 10^6 labels fits the project's rules (nothing downloaded at run
time) and this machine. What the generator must give XR-Linear to be a fair stand-in:

* **power-law label frequencies**: label ``j`` has popularity rank ``rank[j]`` (a seeded permutation,
  so frequency is unrelated to the hierarchy) and is drawn with probability proportional to
  ``(rank + 1) ** -alpha`` (``alpha = 1`` by default, Zipf's law). Many tail labels get one or no
  training document, as in real extreme data sets;
* **a hierarchy the features can recover**: labels sit in a hidden tree with branching ``B`` (16):
  the labels, in a seeded order ``hid``, are cut into ``B`` groups, each group into ``B``, and so on
  down to groups of about ``leaf`` labels. Every hidden node owns ``node_feats`` features of its own
  and every label ``label_feats`` features drawn at random from a pool of ``L`` label features (so a
  label feature is shared by about ``label_feats`` unrelated labels: one feature alone is ambiguous,
  the combination with the node features is not). A document shows each feature of its labels and
  their ancestors with probability ``keep``, so PIFA sees the hierarchy through co-occurring features
  and k-means can rebuild a tree close to the hidden one;
* **co-occurring labels**: after the first label (power-law), a document gets ``Poisson(extra)`` more;
  each is a sibling from the first label's finest hidden group with probability ``sibling``, else
  another power-law draw;
* **noise**: ``noise`` background features per document from a Zipf-distributed vocabulary of
  ``noise_vocab`` words. Values are log-normal, rows L2-normalised (like TF-IDF).

Everything is vectorised and generated in chunks of documents from ``numpy.random.default_rng``
streams keyed by (seed, split, chunk), so the corpus is identical for the same arguments on any
machine, and memory stays near the size of the result.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True)
class SynthSpec:
    labels: int
    train_docs: int
    test_docs: int
    seed: int = 0
    alpha: float = 1.0
    branching: int = 16
    leaf: int = 64
    node_feats: int = 3
    label_feats: int = 4
    keep: float = 0.6
    extra: float = 1.0
    sibling: float = 0.5
    noise: int = 8
    noise_vocab: int = 100_000
    chunk: int = 100_000

    def as_dict(self) -> dict:
        return asdict(self)


class HiddenTree:
    """The hidden hierarchy and feature layout of a :class:`SynthSpec` (all derived from the seed)."""

    def __init__(self, spec: SynthSpec):
        L, B = spec.labels, spec.branching
        rng = np.random.default_rng([spec.seed, 0])
        self.spec = spec
        self.rank = rng.permutation(L)                   # popularity rank of each label
        self.hid = rng.permutation(L)                    # position of each label in the hidden tree
        self.label_of_hid = np.argsort(self.hid)
        # group sizes from coarse to fine: L/B, L/B^2, ... while a group is larger than `leaf`
        sizes = []
        g = L
        while g > spec.leaf:
            g = -(-g // B)
            sizes.append(g)
        self.group_sizes = sizes
        self.n_nodes = [-(-L // s) for s in sizes]
        offsets = [spec.noise_vocab]
        for n in self.n_nodes:
            offsets.append(offsets[-1] + n * spec.node_feats)
        self.node_offset = offsets[:-1]
        self.label_offset = offsets[-1]
        self.n_features = self.label_offset + L
        self.label_feat = self.label_offset + rng.integers(0, L, size=(L, spec.label_feats), dtype=np.int64)
        p = (self.rank + 1.0) ** -spec.alpha
        self.cdf = np.cumsum(p / p.sum())
        self.cdf[-1] = 1.0

    def draw_labels(self, rng, n: int) -> np.ndarray:
        return np.minimum(np.searchsorted(self.cdf, rng.random(n), side="right"), self.spec.labels - 1)

    def sibling_of(self, rng, labels: np.ndarray) -> np.ndarray:
        """A random label from the finest hidden group of each label (possibly itself)."""
        g = self.group_sizes[-1] if self.group_sizes else self.spec.labels
        h = self.hid[labels]
        start = (h // g) * g
        size = np.minimum(g, self.spec.labels - start)
        return self.label_of_hid[start + (rng.random(labels.size) * size).astype(np.int64)]

    def features_of(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(owner index into ``labels``, feature id) for every feature of the labels and their ancestors."""
        spec = self.spec
        h = self.hid[labels]
        owners, feats = [], []
        idx = np.arange(labels.size, dtype=np.int64)
        for size, off in zip(self.group_sizes, self.node_offset):
            node = h // size
            for r in range(spec.node_feats):
                owners.append(idx)
                feats.append(off + node * spec.node_feats + r)
        for r in range(spec.label_feats):
            owners.append(idx)
            feats.append(self.label_feat[labels, r])
        return np.concatenate(owners), np.concatenate(feats)


def _chunk(tree: HiddenTree, rng, n: int) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    spec = tree.spec
    first = tree.draw_labels(rng, n)
    n_extra = rng.poisson(spec.extra, size=n)
    doc_extra = np.repeat(np.arange(n, dtype=np.int64), n_extra)
    sib = rng.random(doc_extra.size) < spec.sibling
    extra = np.where(sib, tree.sibling_of(rng, first[doc_extra]), tree.draw_labels(rng, doc_extra.size))
    doc = np.concatenate([np.arange(n, dtype=np.int64), doc_extra])
    lab = np.concatenate([first, extra])
    Y = sp.csr_matrix((np.ones(doc.size, dtype=np.float32), (doc, lab)), shape=(n, spec.labels))
    Y.sum_duplicates()
    Y.data[:] = 1.0
    owner, feat = tree.features_of(lab)
    shown = rng.random(feat.size) < spec.keep
    rows = [doc[owner[shown]], np.repeat(np.arange(n, dtype=np.int64), spec.noise)]
    noise = np.minimum(rng.zipf(1.3, size=n * spec.noise) - 1, spec.noise_vocab - 1)
    cols = [feat[shown], noise.astype(np.int64)]
    r, c = np.concatenate(rows), np.concatenate(cols)
    vals = rng.lognormal(0.0, 0.5, size=r.size).astype(np.float32)
    X = sp.csr_matrix((vals, (r, c)), shape=(n, tree.n_features), dtype=np.float32)
    X.sum_duplicates()
    sq = np.add.reduceat(X.data.astype(np.float64) ** 2, X.indptr[:-1]) if X.nnz else np.zeros(0)
    norms = np.sqrt(sq)
    norms[np.diff(X.indptr) == 0] = 1.0
    X.data /= np.repeat(norms, np.diff(X.indptr)).astype(np.float32)
    X.indices = X.indices.astype(np.int32)
    return X, Y


def generate(spec: SynthSpec, split: str) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """``(X, Y)`` for ``split`` ("train" or "test"): csr float32, identical for identical arguments."""
    tree = HiddenTree(spec)
    n = spec.train_docs if split == "train" else spec.test_docs
    key = {"train": 1, "test": 2}[split]
    Xs, Ys = [], []
    for c, start in enumerate(range(0, n, spec.chunk)):
        rng = np.random.default_rng([spec.seed, key, c])
        X, Y = _chunk(tree, rng, min(spec.chunk, n - start))
        Xs.append(X)
        Ys.append(Y)
    X = sp.vstack(Xs, format="csr", dtype=np.float32)
    Y = sp.vstack(Ys, format="csr", dtype=np.float32)
    return X, Y
