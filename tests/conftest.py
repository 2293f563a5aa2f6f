import gzip
from pathlib import Path

import pytest

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
