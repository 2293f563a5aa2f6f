import gzip
import os
from pathlib import Path

import pytest

# Idle OpenMP threads (torch's, MKL's) sleep instead of spinning. The suite runs on shared 2-core machines:
# with spinning threads a 2-thread fit under load burned its time slices waiting at barriers (measured: an
# ELIAS fit on 400 titles 55-76 s wall with n_threads=2 at load 15, 2-4 s with this set, as with one thread).
# Set before torch is imported (conftest is imported first); subprocesses of the tests inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from scratch import remove_scratch  # noqa: E402

from xmtc.data.data_root import data_root, missing_reason  # noqa: E402

DATA = data_root()  # XMTC_DATA, or shared/data beside the checkout
SKIP_NO_DATA = missing_reason()


def pytest_report_header(config):
    """Where the real data sets were looked for: on a fresh clone without them, many tests are skipped."""
    state = "found" if DATA.exists() else "absent: its tests are skipped"
    return f"shared data: {DATA} ({state}; set XMTC_DATA to move it)"


@pytest.fixture(autouse=True, scope="module")
def _scratch_folders():
    """The folders a test module made with :func:`scratch.scratch_dir` are removed when it ends."""
    yield
    remove_scratch()


def read_tsv_sample(path: Path, n: int):
    texts, labels = [], []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i >= n:
                break
            lab, text = line.rstrip("\n").split("\t", 1)
            texts.append(text)
            labels.append([x for x in lab.split(",") if x])
    return texts, labels


@pytest.fixture(scope="session")
def reuters_small():
    """First 2,000 train / 600 test Reuters documents: real text, seconds to fit."""
    d = DATA / "reuters21578-apte90"
    if not d.exists():
        pytest.skip(SKIP_NO_DATA)
    return read_tsv_sample(d / "train.txt.gz", 2000), read_tsv_sample(d / "test.txt.gz", 600)


# LightXML at test size, for its own tests and the end-to-end core's. head_init random: the tiny random BERT's
# [CLS] barely varies between texts, so standardised centroids (LightXML's default) are degenerate on it;
# test_lightxml.py::test_centroid_start_is_what_fit_trains_from covers that path.
LIGHTXML_FAST = dict(n_threads=2, max_length=32, learning_rate=1e-3, head_learning_rate=5e-3, cluster_size=8, topk=4,
                     dropout=0.1, epochs=3, valid_size=0, head_init="random", ranker=False, dense_learning_rate=0.0)


@pytest.fixture(scope="session")
def reuters_1200(reuters_small):
    """The first 1,200 train / 300 test documents of ``reuters_small``: LightXML and end-to-end fits."""
    (tr, ytr), (te, yte) = reuters_small
    return (tr[:1200], ytr[:1200]), (te[:300], yte[:300])


def make_tiny_bert(folder: Path, texts, vocab_size: int = 3000, hidden: int = 32, seed: int = 0,
                   dropout: float = 0.1) -> Path:
    """A random 2-layer BERT whose word-level vocabulary is the ``vocab_size`` commonest words of ``texts``
    (nothing downloaded). Tests take the shared one (the ``tiny_bert`` fixture); ``tiny_bert_builder`` gives
    this function to a test that needs its own (no dropout, a vocabulary of its own texts)."""
    import collections
    import re

    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    counts = collections.Counter(w for t in texts for w in re.findall(r"\w+|[^\w\s]", t.lower()))
    words = [w for w, _ in counts.most_common(vocab_size)]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(words) + 5, hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=2 * hidden, max_position_embeddings=64,
                        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    BertModel(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared data folder (``XMTC_DATA``, or shared/data beside the checkout); the test is skipped where it
    is absent."""
    if not DATA.exists():
        pytest.skip(SKIP_NO_DATA)
    return DATA


@pytest.fixture(scope="session")
def tsv_sample():
    """``read(dataset, split, n)``: the first ``n`` (texts, label lists) of shared/data/<dataset>/<split>.txt.gz;
    the test is skipped where the shared data is not available."""
    def read(dataset: str, split: str, n: int):
        path = DATA / dataset / f"{split}.txt.gz"
        if not path.exists():
            pytest.skip(SKIP_NO_DATA)
        return read_tsv_sample(path, n)
    return read


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> str:
    """The one tiny random BERT of the suite (hidden 32, 2 layers, dropout 0.1), built once a session: its
    vocabulary is the 10,000 commonest words of the texts the tests train on (the first Reuters and
    yso-finna-en-2k-20k documents where the shared data is available, and the bundled sample), so every
    test's words are mostly known."""
    pytest.importorskip("torch", reason="the transformer extra is not installed")
    pytest.importorskip("transformers", reason="the transformer extra is not installed")
    from xmtc.data import sample_path

    texts = read_tsv_sample(sample_path("train"), 2000)[0]
    for dataset, split, n in (("reuters21578-apte90", "train", 2000), ("yso-finna-en-2k-20k", "train", 8000),
                              ("yso-finna-en-2k-20k", "test", 3000)):
        if (DATA / dataset / f"{split}.txt.gz").exists():
            texts += read_tsv_sample(DATA / dataset / f"{split}.txt.gz", n)[0]
    return str(make_tiny_bert(tmp_path_factory.mktemp("bert") / "tiny", texts, vocab_size=10000))


@pytest.fixture(scope="session")
def tiny_bert_builder():
    """``make_tiny_bert``, for a test that needs an encoder of its own (no dropout, its own vocabulary)."""
    pytest.importorskip("torch", reason="the transformer extra is not installed")
    pytest.importorskip("transformers", reason="the transformer extra is not installed")
    return make_tiny_bert
