"""xmtc.index: PIFA embeddings, balanced hierarchical k-means and the LabelTree container."""

import gzip

import numpy as np
import pytest
import scipy.sparse as sp

from xmtc.data.data_root import data_root, missing_reason
from xmtc.errors import ConfigError, ModelFormatError
from xmtc.index.kmeans import build_label_tree, tree_depth
from xmtc.index.pifa import concat_embeddings, normalize_rows, pifa
from xmtc.index.tree import LabelTree, level_splits

DATA = data_root()


def read_xc(path, n_docs):
    """First n_docs of an Extreme Classification Repository file -> (X csr, Y csr)."""
    rows, cols, vals, yr, yc = [], [], [], [], []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        _, d, L = map(int, fh.readline().split())
        n = 0
        for i, line in enumerate(fh):
            if i >= n_docs:
                break
            n = i + 1
            head, *feats = line.rstrip("\n").split(" ")
            for lab in filter(None, head.split(",")):
                yr.append(i)
                yc.append(int(lab))
            for fv in filter(None, feats):
                f, v = fv.split(":")
                rows.append(i)
                cols.append(int(f))
                vals.append(float(v))
    X = sp.csr_matrix((np.array(vals, np.float32), (rows, cols)), shape=(n, d))
    Y = sp.csr_matrix((np.ones(len(yr), np.float32), (yr, yc)), shape=(n, L))
    return X, Y


@pytest.fixture(scope="module")
def delicious():
    """PIFA of mulan-delicious (real tags, 983 labels, 500 features) from its first 3,000 documents."""
    path = DATA / "mulan-delicious" / "train_xc.txt.gz"
    if not path.exists():
        pytest.skip(missing_reason())
    X, Y = read_xc(path, 3000)
    return X, Y, pifa(X, Y)


# ------------------------------------------------------------------------------------------------
# helpers: what a balanced tree must look like
# ------------------------------------------------------------------------------------------------

def node_of_label(tree):
    """node_of_label(tree)[t][j]: the level-t node (t = 0 .. depth) holding label j; level 0 is K_1."""
    node = tree.leaf_assignment().astype(np.int64)
    out = [node]
    for p in reversed(tree.parents[1:-1]):
        node = p[node]
        out.insert(0, node)
    return out if tree.depth > 0 else []


def check_balanced_tree(tree, L, branching, max_leaf_size):
    """Everything the kmeans module doc promises about the shape of the tree."""
    D = tree_depth(L, branching, max_leaf_size)
    assert tree.n_labels == L and tree.depth == D
    leaf = tree.leaf_assignment()
    assert leaf.shape == (L,)
    if D == 0:
        assert np.all(leaf == 0)
        return
    # every label in exactly one leaf (the chain's last level has one 1 per row), no leaf too big
    last = tree.chain[-1]
    assert last.shape == (L, tree.level_sizes[-2]) and np.all(np.diff(last.indptr) == 1)
    leaf_sizes = np.bincount(leaf, minlength=tree.level_sizes[-2])
    assert leaf_sizes.min() >= 1 and leaf_sizes.max() <= max_leaf_size
    assert leaf_sizes.max() <= -(-L // branching ** D)  # ceil(L / B^D)
    levels = node_of_label(tree)
    assert len(levels) == D
    parent_sizes = np.array([L])
    parent_of_label = np.zeros(L, dtype=np.int64)
    for t in range(D):
        sizes = np.bincount(levels[t], minlength=tree.level_sizes[t])
        assert sizes.sum() == L and sizes.min() >= 1
        par = tree.parents[t]
        for p in range(parent_sizes.size):
            kids = np.flatnonzero(par == p)
            n, k = parent_sizes[p], min(branching, parent_sizes[p])
            # min(B, size) children, and the balanced part sizes n // k or n // k + 1
            assert kids.size == k, (t, p)
            assert sorted(sizes[kids].tolist()) == sorted([n // k + 1] * (n % k) + [n // k] * (k - n % k))
            # the children's labels are exactly the parent's labels
            assert np.array_equal(np.sort(np.flatnonzero(np.isin(levels[t], kids))),
                                  np.flatnonzero(parent_of_label == p))
        if L >= branching ** D:
            assert tree.level_sizes[t] == branching ** (t + 1)
        parent_sizes, parent_of_label = sizes, levels[t]


def same_tree(a, b):
    return a.level_sizes == b.level_sizes and all(np.array_equal(x, y) for x, y in zip(a.parents, b.parents))


# ------------------------------------------------------------------------------------------------
# build_label_tree
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("branching, max_leaf_size", [(16, 100), (4, 16), (2, 50), (3, 7), (32, 4)])
def test_real_tree_is_balanced(delicious, branching, max_leaf_size):
    _, _, E = delicious
    tree = build_label_tree(E, branching=branching, max_leaf_size=max_leaf_size, seed=0)
    check_balanced_tree(tree, E.shape[0], branching, max_leaf_size)


def test_tree_shapes_from_the_docstring():
    rng = np.random.default_rng(0)
    E = rng.random((300, 8))
    assert build_label_tree(E, branching=4, max_leaf_size=10).level_sizes == [4, 16, 64, 300]
    # B^D > L only with max_leaf_size < branching: small clusters split into singletons
    tree = build_label_tree(E[:20], branching=8, max_leaf_size=2)
    assert tree.level_sizes == [8, 20, 20]
    check_balanced_tree(tree, 20, 8, 2)
    assert tree_depth(25147, 16, 100) == 2 and tree_depth(100, 16, 100) == 0 and tree_depth(101, 16, 100) == 1


def test_binary_shape_splits_by_hand():
    # leaves = smallest power of two >= L / m (at least 2), binary levels grouped 16 at a time from the bottom
    assert level_splits(159, 16, 100, "binary") == [2]            # 1.59 -> 2 leaves of ~80
    assert level_splits(983, 16, 100, "binary") == [16]           # 9.83 -> 16
    assert level_splits(1994, 16, 100, "binary") == [2, 16]       # 19.94 -> 32 = 2 x 16
    assert level_splits(24810, 16, 100, "binary") == [16, 16]     # 248.1 -> 256
    assert level_splits(6401, 16, 100, "binary") == [8, 16]       # 64.01 -> 128
    assert level_splits(101, 16, 100, "binary") == [2]
    assert level_splits(100, 16, 100, "binary") == [] == level_splits(100, 16, 100, "full")
    assert level_splits(300, 4, 10, "binary") == [2, 4, 4]        # 30 -> 32 = 2 x 4 x 4
    assert level_splits(5000, 10, 10, "binary") == [6, 10, 10]    # 500 -> 512 leaves: top ceil(512 / 100)
    assert level_splits(1994, 16, 100, "full") == [16, 16]
    with pytest.raises(ConfigError, match="tree shape"):
        level_splits(10, 2, 3, "ternary")


@pytest.mark.parametrize("max_leaf_size, leaves", [(100, 16), (40, 32), (7, 256)])
def test_binary_tree_leaves_hold_half_to_all_of_max_leaf_size(delicious, max_leaf_size, leaves):
    _, _, E = delicious
    L = E.shape[0]
    tree = build_label_tree(E, branching=16, max_leaf_size=max_leaf_size, seed=0, shape="binary")
    assert tree.level_sizes[-2] == leaves and leaves == 2 ** int(np.ceil(np.log2(L / max_leaf_size)))
    sizes = np.bincount(tree.leaf_assignment(), minlength=leaves)
    # balanced: every leaf holds floor or ceil of L / leaves, and m / 2 < L / leaves <= m
    assert sizes.min() == L // leaves and sizes.max() == -(-L // leaves)
    assert max_leaf_size / 2 < L / leaves <= max_leaf_size
    # the same binary splits as the full tree's first levels: same seed, same top-level clusters when B^1 == leaves
    if leaves == 16:
        full = build_label_tree(E, branching=16, max_leaf_size=max_leaf_size, seed=0, shape="full")
        assert same_tree(tree, full)


@pytest.mark.parametrize("L", [1, 2, 37, 100])
def test_few_labels_give_the_flat_tree(L):
    E = np.random.default_rng(L).random((L, 5))
    tree = build_label_tree(E, branching=4, max_leaf_size=100)
    assert tree.depth == 0 and tree.level_sizes == [L]
    assert len(tree.chain) == 1
    np.testing.assert_array_equal(tree.chain[0].toarray(), np.ones((L, 1)))


def test_one_label_over_the_leaf_size_gives_one_level():
    E = np.random.default_rng(0).random((11, 5))
    tree = build_label_tree(E, branching=4, max_leaf_size=10)
    assert tree.level_sizes == [4, 11]
    check_balanced_tree(tree, 11, 4, 10)


def test_deterministic_under_a_seed_and_seeds_matter(delicious):
    _, _, E = delicious
    a = build_label_tree(E, branching=4, max_leaf_size=16, seed=3)
    b = build_label_tree(E, branching=4, max_leaf_size=16, seed=3)
    assert same_tree(a, b)
    for x, y in zip(a.chain, b.chain):
        assert (x != y).nnz == 0
    c = build_label_tree(E, branching=4, max_leaf_size=16, seed=4)
    assert not np.array_equal(a.leaf_assignment(), c.leaf_assignment())
    check_balanced_tree(c, E.shape[0], 4, 16)


@pytest.mark.parametrize("spherical", [True, False])
def test_threads_do_not_change_the_tree(delicious, spherical):
    _, _, E = delicious
    # one thread splits clusters one by one; two threads score the root's few big clusters in
    # parallel and split later levels' clusters side by side
    ref = build_label_tree(E, branching=4, max_leaf_size=8, seed=1, n_threads=1, spherical=spherical)
    for t in (2, None, 16):
        assert same_tree(build_label_tree(E, branching=4, max_leaf_size=8, seed=1, n_threads=t,
                                          spherical=spherical), ref), t


def test_dense_and_sparse_embeddings_give_the_same_tree(delicious):
    _, _, E = delicious
    E = E[:200]
    a = build_label_tree(E, branching=4, max_leaf_size=5, seed=2)
    b = build_label_tree(E.toarray(), branching=4, max_leaf_size=5, seed=2)
    assert same_tree(a, b)
    # spherical k-means only sees directions: scaling the rows changes nothing
    scaled = sp.diags(np.linspace(0.5, 3.0, 200)) @ E
    assert same_tree(a, build_label_tree(scaled, branching=4, max_leaf_size=5, seed=2))


def binary_splits(tree):
    """(left labels, right labels) of every two-child node of a tree built with branching=2."""
    levels = node_of_label(tree)
    out = []
    for t in range(len(levels)):
        par = levels[t - 1] if t else np.zeros(tree.n_labels, dtype=np.int64)
        for p in np.unique(par):
            lab = np.flatnonzero(par == p)
            kids = np.unique(levels[t][lab])
            if kids.size == 2:  # the left part is the child with the smaller id
                out.append((lab[levels[t][lab] == kids[0]], lab[levels[t][lab] == kids[1]]))
    return out


@pytest.mark.parametrize("spherical", [True, False])
def test_every_split_is_a_converged_balanced_two_means(delicious, spherical):
    """Ranking by x . (c1/|c1| - c2/|c2|) (or the difference of means) of the final halves reproduces them."""
    _, _, E = delicious
    tree = build_label_tree(E, branching=2, max_leaf_size=16, seed=0, max_iter=100, spherical=spherical)
    Z = (normalize_rows(E) if spherical else E).toarray().astype(np.float64)
    splits = binary_splits(tree)
    assert len(splits) == 2 ** tree.depth - 1
    for left, right in splits:
        c1, c2 = Z[left].sum(axis=0), Z[right].sum(axis=0)
        if spherical:
            w = c1 / np.linalg.norm(c1) - c2 / np.linalg.norm(c2)
        else:
            w = c1 / left.size - c2 / right.size
        s = Z @ w
        assert s[left].min() >= s[right].max() - 1e-9
        assert abs(left.size - right.size) <= 1


def test_clusters_group_similar_labels(delicious):
    """Leaves hold labels that look alike: far more within-leaf similarity than a random balanced split."""
    _, _, E = delicious
    tree = build_label_tree(E, branching=8, max_leaf_size=16, seed=0)
    Z = normalize_rows(E).toarray()

    def within(leaf):
        total = 0.0
        for c in np.unique(leaf):
            S = Z[leaf == c]
            v = S.sum(axis=0)
            total += (v @ v - (S * S).sum()) / max(1, len(S) * (len(S) - 1))
        return total / np.unique(leaf).size

    leaf = tree.leaf_assignment()
    shuffled = np.random.default_rng(0).permutation(leaf)
    assert within(leaf) > 1.4 * within(shuffled)


def test_separated_groups_are_recovered():
    rng = np.random.default_rng(0)
    groups, per, block = 4, 8, 10
    E = np.zeros((groups * per, groups * block))
    for g in range(groups):
        E[g * per:(g + 1) * per, g * block:(g + 1) * block] = rng.random((per, block))
    order = rng.permutation(groups * per)
    E, group = E[order], (np.arange(groups * per) // per)[order]
    for seed in range(5):
        tree = build_label_tree(E, branching=4, max_leaf_size=8, seed=seed, spherical=False)
        leaf = tree.leaf_assignment()
        for c in range(4):
            assert np.unique(group[leaf == c]).size == 1, (seed, c)


def test_labels_without_positives(delicious):
    X, Y, _ = delicious
    Y = sp.csc_matrix(Y, copy=True)
    rng = np.random.default_rng(5)
    dead = rng.choice(Y.shape[1], 400, replace=False)
    Y = sp.csc_matrix(Y @ sp.diags(np.isin(np.arange(Y.shape[1]), dead, invert=True).astype(np.float32)))
    E = pifa(X, Y)
    zero = np.diff(E.indptr) == 0
    assert zero.sum() >= 400  # (some labels had no positives to begin with)
    tree = build_label_tree(E, branching=4, max_leaf_size=16, seed=0)
    check_balanced_tree(tree, E.shape[0], 4, 16)
    # all-zero embeddings: nothing to cluster, still a valid balanced tree
    tree = build_label_tree(sp.csr_matrix((50, 7)), branching=3, max_leaf_size=4, seed=0)
    check_balanced_tree(tree, 50, 3, 4)
    # and duplicates only
    tree = build_label_tree(np.ones((40, 3)), branching=2, max_leaf_size=3, seed=0)
    check_balanced_tree(tree, 40, 2, 3)


@pytest.mark.parametrize("kw, match", [
    (dict(branching=1), "branching"), (dict(branching=2.5), "branching"), (dict(branching="4"), "branching"),
    (dict(branching=None), "branching"), (dict(branching="x"), "branching"),
    (dict(max_leaf_size=0), "max_leaf_size"), (dict(max_leaf_size=-3), "max_leaf_size"),
    (dict(max_leaf_size=None), "max_leaf_size"), (dict(max_iter=0), "max_iter"), (dict(max_iter=1.5), "max_iter"),
])
def test_bad_parameters_raise_config_error(kw, match):
    E = np.random.default_rng(0).random((30, 4))
    with pytest.raises(ConfigError, match=match):
        build_label_tree(E, **kw)


def test_bad_embeddings_raise_config_error():
    with pytest.raises(ConfigError, match="0 labels"):
        build_label_tree(np.zeros((0, 3)))
    with pytest.raises(ConfigError, match="2-D"):
        build_label_tree(np.zeros(5))
    bad = np.ones((5, 2))
    bad[1, 1] = np.nan
    with pytest.raises(ConfigError, match="NaN"):
        build_label_tree(bad)
    with pytest.raises(ConfigError, match="NaN"):
        build_label_tree(sp.csr_matrix(np.where(np.isnan(bad), np.inf, bad)))


# ------------------------------------------------------------------------------------------------
# PIFA and concatenation
# ------------------------------------------------------------------------------------------------

def unit_rows(A):
    n = np.linalg.norm(A, axis=1, keepdims=True)
    return np.divide(A, n, out=np.zeros_like(A), where=n > 0)


def test_pifa_matches_its_definition():
    X = np.array([[3.0, 0.0, 4.0, 0.0],
                  [0.0, 1.0, 0.0, 0.0],
                  [0.0, 0.0, 0.0, 0.0],   # an empty document
                  [1.0, 1.0, 1.0, 1.0],
                  [0.0, 0.0, 0.0, 10.0]])
    Y = np.array([[1, 0, 0, 2],           # label weights are ignored: any non-zero is a positive
                  [1, 1, 0, 0],
                  [0, 1, 0, 0],
                  [0, 1, 0, -1],
                  [0, 0, 0, 1]], dtype=np.float64)
    expected = unit_rows((Y != 0).astype(float).T @ unit_rows(X))
    for Xin, Yin in ((sp.csr_matrix(X), sp.csr_matrix(Y)), (X, Y), (sp.csc_matrix(X), Y)):
        E = pifa(Xin, Yin)
        assert sp.isspmatrix_csr(E) and E.dtype == np.float32 and E.shape == (4, 4)
        np.testing.assert_allclose(E.toarray(), expected, rtol=1e-6, atol=1e-7)
    E = pifa(sp.csr_matrix(X), sp.csr_matrix(Y))
    assert np.diff(E.indptr)[2] == 0  # the label without positives is an empty (zero) row
    assert np.all(E.data != 0)
    # label 0 = doc0/5 + doc1: direction (0.6, 1, 0.8, 0) / |.|
    np.testing.assert_allclose(E[0].toarray().ravel(), np.array([0.6, 1, 0.8, 0]) / np.sqrt(2), rtol=1e-6)
    with pytest.raises(ConfigError, match="rows"):
        pifa(X[:4], Y)


def test_pifa_on_real_data(delicious):
    X, Y, E = delicious
    Xd, Yd = X.toarray().astype(np.float64), Y.toarray()
    expected = unit_rows((Yd != 0).T.astype(float) @ unit_rows(Xd))
    np.testing.assert_allclose(E.toarray(), expected, rtol=1e-5, atol=1e-6)


def test_normalize_rows():
    M = np.array([[3.0, 4.0], [0.0, 0.0], [0.0, -2.0]])
    expected = [[0.6, 0.8], [0, 0], [0, -1]]
    np.testing.assert_allclose(normalize_rows(M), expected, rtol=1e-6)
    S = sp.csr_matrix(M)
    out = normalize_rows(S)
    assert sp.isspmatrix_csr(out) and out.dtype == np.float32
    np.testing.assert_allclose(out.toarray(), expected, rtol=1e-6)
    np.testing.assert_array_equal(S.toarray(), M)  # copy=True leaves the input alone
    with pytest.raises(ConfigError):
        normalize_rows(np.zeros(3))


def test_concat_embeddings_definition_and_cosines():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(6, 5))
    B = sp.random(6, 9, density=0.6, random_state=1, format="csr")
    B = B + sp.csr_matrix((np.ones(6), (np.arange(6), np.arange(6))), shape=(6, 9))  # every row non-zero
    w = [0.5, 2.0]
    out = concat_embeddings(A, B, weights=w)
    assert sp.isspmatrix_csr(out) and out.dtype == np.float32 and out.shape == (6, 14)
    expected = np.hstack([w[0] * unit_rows(A), w[1] * unit_rows(B.toarray())])
    np.testing.assert_allclose(out.toarray(), expected, rtol=1e-6, atol=1e-7)
    # cosine of concatenations = w_i^2-weighted mean of the blocks' cosines
    C = unit_rows(out.toarray().astype(np.float64))
    ca, cb = unit_rows(A), unit_rows(B.toarray())
    np.testing.assert_allclose(C @ C.T, (w[0] ** 2 * ca @ ca.T + w[1] ** 2 * cb @ cb.T) / (w[0] ** 2 + w[1] ** 2),
                               atol=1e-6)
    # default weights are 1; a zero row stays zero in its block
    A[2] = 0
    out = concat_embeddings(sp.csr_matrix(A), B)
    np.testing.assert_allclose(out.toarray(), np.hstack([unit_rows(A), unit_rows(B.toarray())]), rtol=1e-6,
                               atol=1e-7)
    assert out[2, :5].nnz == 0


def test_concat_embeddings_errors():
    A = np.ones((3, 2))
    with pytest.raises(ConfigError, match="at least one"):
        concat_embeddings()
    with pytest.raises(ConfigError, match="different numbers of rows"):
        concat_embeddings(A, np.ones((4, 2)))
    with pytest.raises(ConfigError, match="weights"):
        concat_embeddings(A, A, weights=[1.0])
    with pytest.raises(ConfigError, match="weights"):
        concat_embeddings(A, A, weights=[1.0, -1.0])
    with pytest.raises(ConfigError, match="weights"):
        concat_embeddings(A, A, weights=[1.0, float("nan")])


# ------------------------------------------------------------------------------------------------
# LabelTree
# ------------------------------------------------------------------------------------------------

PARENTS = [[0, 0, 0], [1, 0, 2, 1], [3, 0, 1, 1, 2, 0, 3]]  # root -> 3 -> 4 -> 7 labels


def test_label_tree_from_parents_and_chain():
    tree = LabelTree.from_parents(PARENTS)
    assert tree.level_sizes == [3, 4, 7] and tree.depth == 2 and tree.n_labels == 7
    chain = tree.chain
    assert [C.shape for C in chain] == [(3, 1), (4, 3), (7, 4)]
    for C, p in zip(chain, PARENTS):
        assert sp.isspmatrix_csr(C) and C.dtype == np.float32
        dense = np.zeros(C.shape)
        dense[np.arange(len(p)), p] = 1
        np.testing.assert_array_equal(C.toarray(), dense)
    np.testing.assert_array_equal(tree.leaf_assignment(), PARENTS[-1])
    assert tree.leaf_assignment().dtype == np.int32
    # accessors return copies
    tree.parents[-1][:] = 0
    tree.leaf_assignment()[:] = 0
    tree.chain.clear()
    np.testing.assert_array_equal(tree.parents[-1], PARENTS[-1])
    assert len(tree.chain) == 3
    # the constructor accepts any sparse chain with one non-zero per row (values are binarised)
    again = LabelTree([sp.csc_matrix(C * 3.0) for C in chain])
    assert same_tree(again, tree)
    assert repr(tree) == "LabelTree(level_sizes=[3, 4, 7])"
    flat = LabelTree.from_parents([[0, 0, 0]])
    assert flat.depth == 0 and flat.level_sizes == [3]
    np.testing.assert_array_equal(flat.leaf_assignment(), [0, 0, 0])


def test_label_tree_level_targets():
    tree = LabelTree.from_parents(PARENTS)
    Y = np.array([[1, 0, 0, 0, 0, 0, 0],    # label 0 -> node 3 -> cluster 1
                  [0, 0, 0, 0, 2, 0, 0],    # label 4 -> node 2 -> cluster 2
                  [0, 1, 0, 0, 0, 1, 0],    # labels 1, 5 -> node 0 -> cluster 1
                  [0, 0, 0, 0, 0, 0, 0],
                  [0, 0, 1, 0, 0, 0, -1]])  # label 2 -> node 1 -> cluster 0; label 6 -> node 3 -> 1
    t1, t2, t3 = tree.level_targets(sp.csr_matrix(Y))
    np.testing.assert_array_equal(t3.toarray(), Y != 0)
    np.testing.assert_array_equal(t2.toarray(), [[0, 0, 0, 1], [0, 0, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0],
                                                 [0, 1, 0, 1]])
    np.testing.assert_array_equal(t1.toarray(), [[0, 1, 0], [0, 0, 1], [0, 1, 0], [0, 0, 0], [1, 1, 0]])
    for t in (t1, t2, t3):
        assert sp.isspmatrix_csr(t) and t.dtype == np.float32 and set(t.data.tolist()) <= {1.0}
    dense = tree.level_targets(Y)  # dense input is accepted too
    assert all((a != b).nnz == 0 for a, b in zip(dense, (t1, t2, t3)))
    with pytest.raises(ConfigError, match="7 labels"):
        tree.level_targets(np.zeros((2, 6)))


def test_label_tree_array_round_trip(tmp_path):
    tree = LabelTree.from_parents(PARENTS)
    arrays = tree.to_arrays()
    np.testing.assert_array_equal(arrays["level_sizes"], [3, 4, 7])
    np.testing.assert_array_equal(arrays["parents"], np.concatenate(PARENTS))
    np.savez(tmp_path / "tree.npz", **arrays)
    with np.load(tmp_path / "tree.npz", allow_pickle=False) as z:
        back = LabelTree.from_arrays(z)
    assert same_tree(back, tree)
    assert same_tree(LabelTree.from_arrays({k: v.astype(np.uint16) for k, v in arrays.items()}), tree)


@pytest.mark.parametrize("parents, match", [
    ([], "at least one level"),
    ([[0, 1]], r"parent ids must lie in \[0, 1\)"),
    ([[0, 0], [0, 2]], r"tree level 1: parent ids must lie in \[0, 2\)"),
    ([[0, 0], [-1, 0]], "parent ids must lie"),
    ([[0, 0], []], "non-empty 1-D"),
    ([[[0, 0]]], "non-empty 1-D"),
    ([[0, 0, 0], [0, 2, 2]], "node 1 of level 0 has no children"),
])
def test_label_tree_from_parents_errors(parents, match):
    with pytest.raises(ConfigError, match=match):
        LabelTree.from_parents(parents)


def test_label_tree_constructor_errors():
    with pytest.raises(ConfigError, match="at least one level"):
        LabelTree([])
    with pytest.raises(ConfigError, match="expected a sparse matrix"):
        LabelTree([np.ones((3, 1))])
    with pytest.raises(ConfigError, match="expected 1 columns"):
        LabelTree([sp.csr_matrix(np.ones((3, 2)))])
    with pytest.raises(ConfigError, match="exactly one parent"):
        LabelTree([sp.csr_matrix(np.array([[1.0], [0.0]]))])
    with pytest.raises(ConfigError, match="exactly one parent"):
        LabelTree([sp.csr_matrix(np.ones((2, 1))), sp.csr_matrix(np.array([[1.0, 1.0], [0.0, 1.0]]))])
    with pytest.raises(ConfigError, match="node 0 of level 0 has no children"):
        LabelTree([sp.csr_matrix(np.ones((2, 1))), sp.csr_matrix(np.array([[0.0, 1.0], [0.0, 1.0]]))])


@pytest.mark.parametrize("arrays, match", [
    (dict(parents=np.zeros(3, np.int32)), "lack 'level_sizes'"),
    (dict(level_sizes=np.array([3])), "lack 'parents'"),
    (dict(level_sizes=np.array([3.0]), parents=np.zeros(3, np.int32)), "1-D integer"),
    (dict(level_sizes=np.array([[3]]), parents=np.zeros(3, np.int32)), "1-D integer"),
    (dict(level_sizes=np.array([3]), parents=np.zeros(3, np.float32)), "1-D integer"),
    (dict(level_sizes=np.array([], np.int64), parents=np.zeros(0, np.int32)), "positive and non-empty"),
    (dict(level_sizes=np.array([2, 0]), parents=np.zeros(2, np.int32)), "positive and non-empty"),
    (dict(level_sizes=np.array([2, 3]), parents=np.zeros(4, np.int32)), "add up to 5"),
    (dict(level_sizes=np.array([2 ** 64 - 1], np.uint64), parents=np.zeros(1, np.int32)), "positive"),
    (dict(level_sizes=np.array([2, 3]), parents=np.array([0, 0, 0, 2, 1])), "inconsistent.*lie in"),
    (dict(level_sizes=np.array([2, 3]), parents=np.array([0, 0, 0, 0, 0])), "inconsistent.*no children"),
    (dict(level_sizes=np.array([2, 3]), parents=np.array([0, 1, 0, 0, 1])), "inconsistent.*lie in"),
])
def test_label_tree_from_arrays_errors(arrays, match):
    with pytest.raises(ModelFormatError, match=match):
        LabelTree.from_arrays(arrays)
