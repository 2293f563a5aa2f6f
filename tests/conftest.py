import gzip
import os
from pathlib import Path

import pytest

# Idle OpenMP threads (torch's, MKL's) sleep instead of spinning. The suite runs on shared 2-core machines:
# with spinning threads a 2-thread fit under load burned its time slices waiting at barriers (measured: an
# ELIAS fit on 400 titles 55-76 s wall with n_threads=2 at load 15, 2-4 s with this set, as with one thread).
# Set before torch is imported (conftest is imported first); subprocesses of the tests inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
if not DATA.exists():  # a checkout whose shared/ lies elsewhere
    DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


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
        pytest.skip("shared data not available")
    return read_tsv_sample(d / "train.txt.gz", 2000), read_tsv_sample(d / "test.txt.gz", 600)


def make_tiny_bert(folder: Path, texts, vocab_size: int = 3000, hidden: int = 32, seed: int = 0,
                   dropout: float = 0.1) -> Path:
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
