"""Data-driven head initialisation (xmtc/neural/head_init.py) against its definition."""

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")

from xmtc.neural.head_init import centroid_weights, cluster_membership  # noqa: E402
from xmtc.methods.lightxml.network import LightXMLNetwork  # noqa: E402


def test_centroid_rows_follow_the_definition():
    rep = np.array([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [0.0, 4.0]], dtype=np.float32)
    member = sp.csr_matrix(np.array([[1, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]], dtype=np.float32))
    W, b, has = centroid_weights(rep, member, kappa=2.0)
    mu = rep.mean(0)                                       # (1, 1.5)
    c0 = (rep[[0, 1, 3]] - mu).sum(0)                      # (1, 1.5): normalised direction of group 0
    c1 = (rep[[2, 3]] - mu).sum(0)                         # (-2, 3)
    assert has.tolist() == [True, True, False]
    np.testing.assert_allclose(W[0] / np.linalg.norm(W[0]), c0 / np.linalg.norm(c0), rtol=1e-6)
    np.testing.assert_allclose(W[1] / np.linalg.norm(W[1]), c1 / np.linalg.norm(c1), rtol=1e-6)
    assert not W[2].any()
    # both rows share one scale, and the bias gives an average text its group's smoothed prior
    assert np.linalg.norm(W[0]) == pytest.approx(np.linalg.norm(W[1]), rel=1e-6)
    prior = (np.array([3, 2]) + 0.5) / 5.0
    np.testing.assert_allclose(W[:2] @ mu + b[:2], np.log(prior / (1 - prior)), rtol=1e-5)


def test_logit_spread_is_kappa():
    rng = np.random.default_rng(1)
    rep = rng.normal(size=(600, 16)).astype(np.float32) * rng.uniform(0.1, 3, 16).astype(np.float32) + 5.0
    member = sp.csr_matrix((rng.random((600, 12)) < 0.2).astype(np.float32))
    for kappa in (1.0, 4.0):
        W, b, has = centroid_weights(rep, member, kappa=kappa)
        spread = ((rep - rep.mean(0)) @ W[has].T).std()
        assert spread == pytest.approx(kappa, rel=0.1)


def test_cluster_membership():
    Y = sp.csr_matrix(np.array([[1, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0]], dtype=np.float32))
    M = cluster_membership(Y, np.array([0, 0, 1, 1]), 3)
    assert M.toarray().tolist() == [[1, 1, 0], [0, 1, 0], [0, 0, 0]]


def _six_labels_in_three_clusters():
    """Labels 0..5 in clusters [0, 0, 1, 1, 2, 2]; 20 texts per label near its own random direction (24-d)."""
    rng = np.random.default_rng(0)
    col = np.array([0, 0, 1, 1, 2, 2])
    basis = rng.normal(size=(6, 24)).astype(np.float32) * 3
    label = np.repeat(np.arange(6), 20)
    rep = (basis[label] + rng.normal(scale=0.3, size=(label.size, 24)) + 1.0).astype(np.float32)
    Y = sp.csr_matrix((np.ones(label.size, dtype=np.float32), (np.arange(label.size), label)), shape=(label.size, 6))
    return col, label, rep, Y


def test_lightxml_heads_start_on_the_centroids():
    """Six labels in three clusters, texts near their label's direction: the initialised network ranks
    every text's own label first before any training step (a random start does not)."""
    col, label, rep, Y = _six_labels_in_three_clusters()

    def top1(init: bool):
        net = LightXMLNetwork(col, 24, n_layers=1, hidden_dim=16, dropout=0.0, topk=1, seed=3)
        if init:
            net.init_from_data(rep, Y)
        net.eval()
        with torch.no_grad():
            idx, _ = net.predict(torch.from_numpy(rep), 1)
        return idx[:, 0].numpy()

    assert (top1(True) == label).all()
    assert (top1(False) == label).mean() < 0.5


def test_a_method_without_it_refuses_centroid_before_encoding(reuters_small, tiny_bert):
    import xmtc
    from xmtc.errors import ConfigError

    (tr, ytr), _ = reuters_small
    enc = tiny_bert
    with pytest.raises(ConfigError, match="head_init=centroid is not available"):
        xmtc.APLC(encoder=str(enc), head_init="centroid", epochs=1, valid_size=0).fit(tr[:200], ytr[:200],
                                                                                   progress=False)


def test_cascadexml_levels_start_on_the_centroids():
    """Three clusters of two labels; each level reads its own representation (side by side in ``rep``).
    After init_from_data the cascade ranks every text's own label first before any step; a random start
    does not. Level rows equal centroid_weights of that level's slice and the level's targets."""
    from xmtc.index.tree import LabelTree
    from xmtc.methods.cascadexml.network import CascadeNetwork

    rng = np.random.default_rng(0)
    h = 24
    parents = [np.zeros(3, dtype=np.int64), np.array([0, 0, 1, 1, 2, 2])]
    tree = LabelTree.from_parents(parents)
    label = np.repeat(np.arange(6), 20)
    cl_basis = rng.normal(size=(3, h)).astype(np.float32) * 3
    lab_basis = rng.normal(size=(6, h)).astype(np.float32) * 3
    noise = lambda: rng.normal(scale=0.3, size=(label.size, h))  # noqa: E731
    rep0 = (cl_basis[label // 2] + noise() + 1.0).astype(np.float32)
    rep1 = (lab_basis[label] + noise() - 2.0).astype(np.float32)
    Y = sp.csr_matrix((np.ones(label.size, dtype=np.float32), (np.arange(label.size), label)), shape=(label.size, 6))

    def net_top1(init: bool):
        net = CascadeNetwork(tree, h, layers=[(1,), (1,)], topk=[1], dropouts=[0.0, 0.0], loss_weights=[1.0, 1.0],
                             seed=3)
        if init:
            net.init_from_data(np.hstack([rep0, rep1]), Y)
        net.eval()
        with torch.no_grad():
            idx, _ = net.predict([torch.from_numpy(rep0), torch.from_numpy(rep1)], 1)
        return net, idx[:, 0].numpy()

    net, top = net_top1(True)
    assert (top == label).all()
    assert (net_top1(False)[1] == label).mean() < 0.5
    W1, b1, _ = centroid_weights(rep1, Y)
    np.testing.assert_allclose(net.sparse_heads["level1"].weight.numpy(), W1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(net.sparse_heads["level1"].bias.numpy(), b1, rtol=1e-5, atol=1e-6)
    W0, b0, _ = centroid_weights(rep0, cluster_membership(Y, parents[1], 3))
    np.testing.assert_allclose(net.head0.weight.detach().numpy(), W0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(net.head0.bias.detach().numpy(), b0, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="side by side"):
        net.init_from_data(rep1, Y)


def test_elias_heads_start_on_the_centroids():
    """Stage 1 of ELIAS on a 3-cluster tree of six labels: after init_from_data, W_C's and W_L's rows are
    centroid_weights of the clusters' and labels' texts, and every text's own label ranks first before any
    step (a random start does not)."""
    from xmtc.methods.elias.adjacency import tree_adjacency
    from xmtc.methods.elias.network import ELIASNetwork

    col, label, rep, Y = _six_labels_in_three_clusters()

    def build(init: bool):
        net = ELIASNetwork(24, 6, tree_adjacency(col, 3), alpha=3.0, beam_size=1, shortlist_size=2, dropout=0.0,
                           seed=3)
        if init:
            net.init_from_data(rep, Y)
        net.eval()
        with torch.no_grad():
            idx, _ = net.predict(torch.from_numpy(rep), 1)
        return net, idx[:, 0].numpy()

    net, top = build(True)
    assert (top == label).all()
    assert (build(False)[1] == label).mean() < 0.5
    Wc, bc, _ = centroid_weights(rep, cluster_membership(Y, col, 3))
    np.testing.assert_allclose(net.cluster_head.weight.detach().numpy(), Wc, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(net.cluster_head.bias.detach().numpy(), bc, rtol=1e-5, atol=1e-6)
    Wl, bl, _ = centroid_weights(rep, Y)
    np.testing.assert_allclose(net.sparse_heads["labels"].weight.numpy(), Wl, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(net.sparse_heads["labels"].bias.numpy(), bl, rtol=1e-5, atol=1e-6)
