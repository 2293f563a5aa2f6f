"""Transformer methods on a tiny randomly initialised BERT: end to end, shortlist, bootstrapping, resume, DDP.

The encoder is built from a config (2 layers, hidden 32) with a word-level WordPiece vocabulary made
from the sample's own texts, so nothing is downloaded and a fit takes seconds.
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import xmtc  # noqa: E402
from xmtc.cli import main  # noqa: E402
from xmtc.errors import ConfigError  # noqa: E402
from xmtc.neural.bootstrap import bootstrap_inherit, bootstrap_linear  # noqa: E402
from xmtc.neural.heads import LazyAdam, RowSparseHead, merge_row_grads  # noqa: E402
from xmtc.neural.losses import shortlist_loss  # noqa: E402
from xmtc.neural.shortlist import build_shortlist, children_csr  # noqa: E402

from conftest import DATA, read_tsv_sample  # noqa: E402

FAST = dict(max_leaf_size=20, branching=8, n_threads=2, batch_size=32, max_length=16, seed=0,
            head_learning_rate=5e-3, learning_rate=1e-3)


def make_tiny_bert(folder: Path, texts, vocab_size: int = 3000, hidden: int = 32, seed: int = 0) -> Path:
    from transformers import BertConfig, BertModel, BertTokenizerFast

    counts = collections.Counter(w for t in texts for w in re.findall(r"\w+|[^\w\s]", t.lower()))
    words = [w for w, _ in counts.most_common(vocab_size)]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(words) + 5, hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=2 * hidden, max_position_embeddings=64)
    BertModel(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def sample():
    d = DATA / "yso-finna-en-2k-20k"
    if not d.exists():
        pytest.skip("shared data not available")
    return read_tsv_sample(d / "train.txt.gz", 1500), read_tsv_sample(d / "test.txt.gz", 300)


@pytest.fixture(scope="module")
def encoder_dir(sample, tmp_path_factory):
    return make_tiny_bert(tmp_path_factory.mktemp("bert") / "tiny", sample[0][0])


@pytest.fixture(scope="module")
def fitted(sample, encoder_dir):
    (texts, labels), _ = sample
    return xmtc.XRTransformer(encoder=str(encoder_dir), **FAST).fit(texts, labels, progress=False)


# -- shortlist and heads against their definitions ------------------------------------------------------
def test_shortlist_equals_its_definition_on_a_hand_made_tree():
    # level t-1 has 3 nodes; level t has 6 nodes with parents [0, 0, 1, 1, 2, 2]
    children = children_csr(np.array([0, 0, 1, 1, 2, 2]), 3)
    prev_topk = np.array([[0, -1], [2, 1]])
    # doc 0 has 2 labels under node 4 and 1 under node 0; doc 1 has 1 label under node 3
    mass = sp.csr_matrix(np.array([[1, 0, 0, 0, 2, 0], [0, 0, 0, 1, 0, 0]], dtype=np.float32))
    ids, targets, weights = build_shortlist(prev_topk, mass, children, neg_weight=0.5)
    # doc 0: children of node 0 = {0, 1} ∪ positives {0, 4} -> [0, 1, 4]
    # doc 1: children of nodes 2, 1 = {2, 3, 4, 5} ∪ positives {3} -> [2, 3, 4, 5]
    assert ids.tolist() == [[0, 1, 4, -1], [2, 3, 4, 5]]
    assert targets.tolist() == [[1, -1, 1, 0], [-1, 1, -1, -1]]
    # positive weight = n_pos * share: doc 0 has 2 positive nodes with shares 1/3 and 2/3
    np.testing.assert_allclose(weights, [[2 / 3, 0.5, 4 / 3, 0], [0.5, 1.0, 0.5, 0.5]], rtol=1e-6)
    ids0, t0, w0 = build_shortlist(None, mass, children)
    assert ids0.tolist() == [list(range(6))] * 2 and (w0 > 0).all()


def test_rankers_features_equal_scipys_stack_of_tfidf_and_normalised_embedding():
    from xmtc.index.pifa import normalize_rows
    from xmtc.models.xr_transformer import concat_features

    rng = np.random.default_rng(0)
    X = sp.random(500, 40, density=0.1, format="csr", dtype=np.float32, random_state=1)
    X = sp.csr_matrix(X.multiply((np.arange(500) % 9 != 3)[:, None]))  # some empty TF-IDF rows
    X.eliminate_zeros()
    E = rng.standard_normal((500, 7)).astype(np.float32)
    E[5] = 0.0      # an all-zero embedding stays zero
    E[7, 2] = 0.0   # a single exact zero is not stored
    ref = sp.hstack([X, sp.csr_matrix(normalize_rows(E) * np.float32(0.5))], format="csr", dtype=np.float32)
    got = concat_features(X, E, 0.5, rows_per_chunk=64)  # several chunks, the last one partial
    assert got.shape == ref.shape and got.has_canonical_format
    for a in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(got, a), getattr(ref, a))


def test_bootstrapped_heads_equal_their_definitions():
    rng = np.random.default_rng(0)
    W_parent, b_parent = rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=3).astype(np.float32)
    W, b = bootstrap_inherit(W_parent, b_parent, np.array([2, 0, 0, 1]))
    np.testing.assert_array_equal(W, W_parent[[2, 0, 0, 1]])
    np.testing.assert_array_equal(b, b_parent[[2, 0, 0, 1]])
    E = rng.normal(size=(50, 4))
    T = sp.csr_matrix((rng.random((50, 5)) < 0.3).astype(np.float32))
    W, b = bootstrap_linear(E, T, lam=0.7)
    # definition: argmin ||[E 1][W b]^T - (2T - 1)||^2 + 0.7 ||[W b]||^2, solved densely
    A = np.hstack([E, np.ones((50, 1))])
    ref = np.linalg.solve(A.T @ A + 0.7 * np.eye(5), A.T @ (2 * T.toarray() - 1))
    np.testing.assert_allclose(W, ref[:-1].T, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(b, ref[-1], rtol=1e-4, atol=1e-5)
    with pytest.raises(ConfigError):
        bootstrap_linear(E, T, lam=0.0)


def test_sparse_head_scores_only_the_shortlist_and_loss_definition():
    head = LevelHead(torch.nn.Parameter(torch.arange(12.0).reshape(4, 3)), torch.nn.Parameter(torch.ones(4)))
    emb = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
    ids = torch.tensor([[3, 0], [1, -1]])
    scores = head.score(emb, ids)
    assert scores.tolist() == [[10.0, 1.0], [10.0, 0.0]]  # W[3]·e0 + 1, W[0]·e0 + 1, W[1]·e1 + 1, padding 0
    targets = torch.tensor([[1.0, -1.0], [-1.0, 0.0]])
    weights = torch.tensor([[1.0, 2.0], [0.5, 0.0]])
    # squared hinge: max(0, 1 - y s)^2 -> [0, 4, 121, -], weighted and summed over 2 documents
    assert shortlist_loss(scores, targets, weights).item() == pytest.approx((0 + 2 * 4 + 0.5 * 121) / 2)


# -- end to end ------------------------------------------------------------------------------------------
def test_xr_transformer_trains_loss_decreases_and_predicts(fitted, sample):
    _, (texts, labels) = sample
    assert sorted(fitted.heads_) == list(range(len(fitted.models_[0].level_sizes)))  # every level fine-tuned
    first_level = fitted.loss_curves_[0]
    assert first_level[-1] < first_level[0]
    m = fitted.evaluate(texts, labels)
    assert m["P@1"] > 5.0  # far above chance (1 / ~1,600 labels)
    emb = fitted.encode(texts[:7])
    assert emb.shape == (7, 32) and emb.dtype == np.float32 and np.isfinite(emb).all()


def test_finetune_sample_fine_tunes_on_a_subset_and_ranks_on_every_text(sample, encoder_dir, monkeypatch):
    from xmtc.neural import finetune

    (texts, labels), (test_texts, test_labels) = sample
    embedded = []
    real = finetune.embed_all
    monkeypatch.setattr(finetune, "embed_all", lambda enc, tok, *a, **kw: embedded.append(len(tok)) or real(enc, tok, *a, **kw))
    model = xmtc.XRTransformer(encoder=str(encoder_dir), finetune_sample=320, **FAST).fit(
        texts, labels, progress=False)
    # 320 texts at batch 32: ten optimisation steps per level, where the whole set would take 47
    assert {len(c) for c in model.loss_curves_.values()} == {10}
    # each level embeds the sample for its top-k; the rankers' features embed every text
    assert embedded == [320] * len(model.loss_curves_) + [len(texts)]
    assert model.predict_topk(test_texts, k=5)[0].shape == (len(test_texts), 5)
    assert model.evaluate(test_texts, test_labels)["P@1"] > 5.0


def test_save_load_identical_predictions(fitted, sample, tmp_path):
    _, (texts, _) = sample
    path = fitted.save(tmp_path / "m")
    assert (Path(path) / "encoder" / "model.safetensors").is_file()
    assert not list(Path(path).rglob("*.bin")) and not list(Path(path).rglob("*.pkl"))
    loaded = xmtc.load(path)
    i1, s1 = fitted.predict_topk(texts, 5)
    i2, s2 = loaded.predict_topk(texts, 5)
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_allclose(s1, s2, rtol=1e-5, atol=1e-6)
    (Path(path) / "encoder" / "model.safetensors").write_bytes(b"corrupt")
    with pytest.raises(xmtc.ModelFormatError, match="checksum"):
        xmtc.load(path)


def test_x_transformer_with_each_indexer(sample, encoder_dir):
    (texts, labels), (test_texts, test_labels) = sample
    for indexer in ("pifa-tfidf", "pifa-neural"):
        model = xmtc.XTransformer(encoder=str(encoder_dir), indexer=indexer, **FAST).fit(texts, labels, progress=False)
        assert list(model.heads_) == [len(model.models_[0].level_sizes) - 2]  # the leaf clusters only
        assert model.evaluate(test_texts, test_labels)["P@1"] > 3.0
    with pytest.raises(ConfigError, match="label texts"):
        xmtc.XTransformer(encoder=str(encoder_dir), indexer="text-emb", **FAST).fit(texts, labels, progress=False)
    # with label texts (yso-finna-en's label file covers the 2k-20k cut's labels)
    from xmtc.data import LabelVocab, label_matrix

    Y, vocab = label_matrix(labels)
    vocab = vocab.with_label_file(DATA / "yso-finna-en" / "labels.txt.gz")
    assert all(vocab.texts)
    model = xmtc.XTransformer(encoder=str(encoder_dir), indexer="text-emb", **FAST).fit(texts, Y, labels=vocab,
                                                                                       progress=False)
    assert isinstance(model.labels_, LabelVocab) and model.labels_.texts == vocab.texts
    assert model.evaluate(test_texts, test_labels)["P@1"] > 3.0


def test_missing_encoder_says_how_to_provide_one(sample, tmp_path):
    (texts, labels), _ = sample
    with pytest.raises(ConfigError, match="Nothing is downloaded"):
        xmtc.XRTransformer(encoder=str(tmp_path / "nope")).fit(texts, labels, progress=False)


def test_resume_continues_from_the_last_finished_level(sample, encoder_dir, tmp_path, monkeypatch):
    import xmtc.neural.finetune as ft

    (texts, labels), (test_texts, _) = sample
    texts, labels = texts[:600], labels[:600]
    real = ft.train_level
    calls = []

    def interrupted_after_first_level(*a, **kw):
        calls.append(a[-2])
        if len(calls) == 2:
            raise KeyboardInterrupt("simulated interruption")
        return real(*a, **kw)

    ckpt = tmp_path / "ckpt"
    monkeypatch.setattr(ft, "train_level", interrupted_after_first_level)
    with pytest.raises(KeyboardInterrupt):
        xmtc.XRTransformer(encoder=str(encoder_dir), **FAST).fit(texts, labels, progress=False, checkpoint_dir=ckpt)
    assert json.loads((ckpt / "state.json").read_text())["done"] == [0]

    def counting(*a, **kw):
        calls.append(a[-2])
        return real(*a, **kw)

    calls.clear()
    monkeypatch.setattr(ft, "train_level", counting)
    resumed = xmtc.XRTransformer(encoder=str(encoder_dir), **FAST).fit(texts, labels, progress=False,
                                                                         checkpoint_dir=ckpt, resume=True)
    n_levels = len(resumed.models_[0].level_sizes)
    assert len(calls) == n_levels - 1 and not calls[0].startswith("level 1/")  # level 1 came from the checkpoint
    calls.clear()
    straight = xmtc.XRTransformer(encoder=str(encoder_dir), **FAST).fit(texts, labels, progress=False)
    assert len(calls) == n_levels
    np.testing.assert_array_equal(resumed.predict_topk(test_texts, 5)[0], straight.predict_topk(test_texts, 5)[0])
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.txt").write_text("not a checkpoint")
    with pytest.raises(ConfigError, match="not an xmtc checkpoint"):
        xmtc.XRTransformer(encoder=str(encoder_dir), **FAST).fit(texts, labels, progress=False,
                                                                 checkpoint_dir=precious)
    assert (precious / "thesis.txt").read_text() == "not a checkpoint"
    with pytest.raises(ConfigError, match="other data or parameters"):
        xmtc.XRTransformer(encoder=str(encoder_dir), **dict(FAST, seed=1)).fit(
            texts, labels, progress=False, checkpoint_dir=ckpt, resume=True)


def test_cli_train_predict_encode_ensemble(sample, encoder_dir, tmp_path, capsys):
    (texts, labels), (test_texts, test_labels) = sample
    train = tmp_path / "train.tsv"
    train.write_text("".join(",".join(l) + "\t" + t + "\n" for t, l in zip(texts[:500], labels[:500])))
    test = tmp_path / "test.tsv"
    test.write_text("".join(",".join(l) + "\t" + t + "\n" for t, l in zip(test_texts, test_labels)))
    args = ["--encoder", str(encoder_dir), "--max-leaf-size", "20", "--branching", "8", "--max-length", "16",
            "--epochs", "1", "--batch-size", "32", "-q"]
    assert main(["train", str(train), "-o", str(tmp_path / "a"), "--method", "xr-transformer", *args]) == 0
    assert main(["train", str(train), "-o", str(tmp_path / "b"), "--method", "x-transformer", *args]) == 0
    assert main(["encode", str(tmp_path / "a"), str(test), "-o", str(tmp_path / "emb.npy"), "-q"]) == 0
    emb = np.load(tmp_path / "emb.npy", allow_pickle=False)
    assert emb.shape == (len(test_texts), 32)
    assert main(["evaluate", str(tmp_path / "a"), str(test), "--json", "-q"]) == 0
    single = json.loads(capsys.readouterr().out)
    for combine in ("average", "rank-average", "sigmoid-average"):
        assert main(["ensemble", str(tmp_path / "a"), str(tmp_path / "b"), "--input", str(test), "--evaluate",
                     "--json", "--combine", combine, "-q"]) == 0
        metrics = json.loads(capsys.readouterr().out)
        assert 0 <= metrics["P@1"] <= 100 and set(single) == set(metrics)
    assert main(["ensemble", str(tmp_path / "a"), str(tmp_path / "a"), "--input", str(test), "-k", "3", "-q"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(rows) == len(test_texts) and all(len(r["labels"]) == 3 for r in rows)


def test_two_process_gloo_training_completes(sample, encoder_dir, tmp_path):
    (texts, labels), (test_texts, test_labels) = sample
    train = tmp_path / "train.tsv"
    train.write_text("".join(",".join(l) + "\t" + t + "\n" for t, l in zip(texts[:400], labels[:400])))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29531",
           "-m", "xmtc.cli", "train", str(train), "-o", str(tmp_path / "ddp"), "--method", "xr-transformer",
           "--encoder", str(encoder_dir), "--max-leaf-size", "20", "--branching", "8", "--max-length", "16",
           "--batch-size", "16", "--n-threads", "1", "-q"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    model = xmtc.load(tmp_path / "ddp")
    assert model.method == "xr-transformer" and len(model.heads_) >= 1
    assert model.evaluate(test_texts, test_labels)["P@1"] >= 0.0
    assert not (tmp_path / "ddp.checkpoint").exists()  # the implicit checkpoint is removed after saving
