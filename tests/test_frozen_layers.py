"""frozen_layers: the cached output of a frozen encoder bottom gives the whole encoder's embeddings and the
same training as the whole encoder with those weights frozen (checked against that second implementation)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import xmtc  # noqa: E402
from xmtc.errors import ConfigError  # noqa: E402
from xmtc.features.encoder import Tokenized, encode, load_encoder  # noqa: E402
from xmtc.neural.frozen import FrozenPrefix  # noqa: E402
from xmtc.neural.heads import RowSparseHead  # noqa: E402
from xmtc.neural.shortlist import children_csr  # noqa: E402

# unequal lengths, not in length order: a wrong offset or a pad state that leaks would change the embeddings
TEXTS = ["a long text about the history of finland and its many lakes in the north", "birds",
         "maps of the old town", "a b c d e f g h i j k l m n o p", "war years", "poems of the sea and sky"]


@pytest.fixture()
def encoder(tiny_bert_builder, tmp_path):
    folder = tiny_bert_builder(tmp_path / "bert", TEXTS * 3, hidden=16, dropout=0.0)
    return folder, *load_encoder(str(folder), torch.device("cpu"))


@pytest.mark.parametrize("cache_bytes", [1 << 30, 0], ids=["cached", "recomputed"])
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_the_upper_layers_on_the_frozen_output_give_the_whole_encoders_embeddings(encoder, cache_bytes, pooling):
    _, tokenizer, model = encoder
    tok = Tokenized(tokenizer, TEXTS, 12)
    whole = encode(model, tok, pooling=pooling, precision="fp32", batch_size=4)
    frozen = FrozenPrefix(model, 1, tok, "cpu", "fp32", cache_bytes=cache_bytes, batch_size=4)
    assert (frozen.cache is None) == (cache_bytes == 0)
    ids = np.array([3, 0, 5])  # a subset, out of order
    part = encode(model, tok, ids, pooling=pooling, precision="fp32", batch_size=2, frozen=frozen)
    np.testing.assert_allclose(part, whole[ids], rtol=1e-5, atol=1e-6)
    frozen.release()
    assert all(p.requires_grad for p in model.parameters())


def test_training_on_the_cache_equals_training_the_whole_encoder_with_the_bottom_frozen(encoder):
    """Second implementation: the whole encoder run at every step, its embeddings and first layer switched
    off by hand (requires_grad False). Same losses at every step, same final weights."""
    from xmtc.methods.xr_transformer import finetune
    from xmtc.neural.distributed import DistContext

    folder, tokenizer, _ = encoder
    tok = Tokenized(tokenizer, TEXTS, 12)
    mass = sp.csr_matrix(np.eye(6, 3, dtype=np.float32) + np.eye(6, 3, k=-3, dtype=np.float32))
    settings = finetune.FinetuneSettings(epochs=4, batch_size=3, learning_rate=1e-2, head_learning_rate=1e-2,
                                         warmup_ratio=0.0, pooling="mean", precision="fp32")
    runs = []
    for cached in (True, False):
        _, model = load_encoder(str(folder), torch.device("cpu"))
        before = {k: v.clone() for k, v in model.state_dict().items()}
        if cached:
            frozen = FrozenPrefix(model, 1, tok, "cpu", "fp32")
        else:
            frozen = None
            for p in [*model.embeddings.parameters(), *model.encoder.layer[0].parameters()]:
                p.requires_grad_(False)
        rng = np.random.default_rng(1)
        head = RowSparseHead(rng.normal(scale=0.3, size=(3, 16)).astype(np.float32), np.zeros(3, np.float32))
        trainer = finetune.LevelTrainer(model, head, tok, mass, None, None, children_csr(np.zeros(3, np.int64), 1),
                                        settings, torch.device("cpu"), DistContext(), "level", rng_seed=0,
                                        frozen=frozen)
        trainer.run(progress=False)
        runs.append((trainer.losses, model.state_dict(), before))
    (loss_c, state_c, before), (loss_w, state_w, _) = runs
    assert len(loss_c) == 8
    np.testing.assert_allclose(loss_c, loss_w, rtol=1e-5)
    for key, value in state_c.items():
        torch.testing.assert_close(value, state_w[key], rtol=1e-5, atol=1e-6)
        bottom = key.startswith("embeddings.") or key.startswith("encoder.layer.0.")
        if key.startswith("encoder.") and "LayerNorm" not in key and key.endswith("weight") or \
                key.startswith("embeddings.") and key.endswith("embeddings.weight"):  # (the pooler is unused)
            assert torch.equal(value, before[key]) == bottom, key


def test_xr_transformer_keeps_the_frozen_weights_and_trains_the_rest(tsv_sample, encoder):
    folder, _, pretrained = encoder
    texts, labels = tsv_sample("yso-finna-en-2k-20k", "train", 120)
    # the default (3) on this 2-layer encoder freezes the embeddings and layer 0
    model = xmtc.XRTransformer(encoder=str(folder), max_leaf_size=20, branching=8, n_threads=2,
                               batch_size=16, max_length=12, learning_rate=1e-3, seed=0).fit(texts, labels,
                                                                              progress=False)
    after, before = model.encoder_.state_dict(), pretrained.state_dict()
    changed = {k for k in before if before[k].is_floating_point() and not torch.equal(before[k], after[k])}
    assert changed and not any(k.startswith(("embeddings.", "encoder.layer.0.")) for k in changed)
    assert any(k.startswith("encoder.layer.1.") for k in changed)
    assert all(p.requires_grad for p in model.encoder_.parameters())
    assert model.predict(texts[:2], k=3)


def test_frozen_layers_must_leave_a_layer_to_train(encoder):
    _, tokenizer, model = encoder
    tok = Tokenized(tokenizer, TEXTS, 12)
    with pytest.raises(ConfigError, match="1..1"):
        FrozenPrefix(model, 2, tok, "cpu", "fp32")


def test_a_default_deeper_than_the_encoder_freezes_all_but_its_top_layer_and_other_layouts_train_whole(encoder):
    from transformers import DistilBertConfig, DistilBertModel

    from xmtc.neural.frozen import effective_frozen_layers

    _, _, bert = encoder  # 2 layers
    assert [effective_frozen_layers(bert, k) for k in (0, 1, 2, 3)] == [0, 1, 1, 1]
    distil = DistilBertModel(DistilBertConfig(vocab_size=40, dim=16, hidden_dim=32, n_layers=3, n_heads=2))
    assert effective_frozen_layers(distil, 3) == 0 and effective_frozen_layers(distil, 1) == 0
