"""debian-debtags: Debian package descriptions and their debtags, built from this machine's own apt lists.

Issue 33's held-out set is "22.6k package descriptions, 564 labels" with long texts; this is the public set of
that shape, for timing ``xmtc train`` and its peers where text length, not the label count, sets the cost.
Nothing is downloaded here: the script reads the apt index files already on disk (``/var/lib/apt/lists``, through
``apt-helper cat-file``, which decompresses them). The long descriptions live in the ``Translation-en`` index,
which apt fetches only with English among its languages; if it is missing, run once
``apt-get update -o Acquire::Languages=en`` (Debian's own client, the project's allowed source).

Cut, deterministic:

* a document is a binary package of the main ``Packages`` index that has a ``Tag:`` field; its text is the
  description of its ``Description-md5`` in ``Translation-en`` (the short line, then the long one, paragraph
  marks `` .`` dropped), its labels its tags without the ``*::TODO`` placeholders (a tag meaning "not yet
  tagged"); a package left without a tag is dropped;
* packages with the same text (a library's versions and flavours share one description) keep one document,
  the first by package name, with the union of their tags;
* labels with fewer than ``--min-docs`` (2) documents are dropped, and documents left without one;
* the split is a hash of the text (``blake2b``): ``--test-share`` (0.2) of the documents are test documents, so
  a text is on one side whatever else changes. Files are sorted by text, as the shared sets are.

Output ``train.txt.gz`` / ``test.txt.gz`` (``label1,label2<TAB>text``) under ``--out`` (default
``benchmarks/out/data/debian-debtags``, ignored by git), so that ``benchmarks/train_command.py --data-root
benchmarks/out/data --dataset debian-debtags`` runs on it. The counts it prints go to RESULTS.md with the
release the lists came from (``apt-cache policy``): the set moves with the lists.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import subprocess
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
LISTS = Path("/var/lib/apt/lists")
HELPER = "/usr/lib/apt/apt-helper"


def stanzas(path: Path):
    """The fields of each stanza of a (compressed) apt index, continuation lines joined with newlines."""
    text = subprocess.run([HELPER, "cat-file", str(path)], check=True, capture_output=True).stdout.decode(
        "utf-8", errors="replace")
    for block in text.split("\n\n"):
        fields, key = {}, None
        for line in block.split("\n"):
            if line.startswith((" ", "\t")) and key is not None:
                fields[key] += "\n" + line[1:]
            elif ":" in line:
                key, value = line.split(":", 1)
                fields[key] = value.strip()
        if fields:
            yield fields


def description(text: str) -> str:
    """A Debian description as plain text: the short line, then the long one's lines, `` .`` marks dropped."""
    lines = [ln.strip() for ln in text.split("\n")]
    return " ".join(ln for ln in lines if ln and ln != ".")


def one_index(pattern: str) -> Path:
    """The release's own index (``dists_<release>_main``), not its ``-updates`` / ``-security`` suites'."""
    found = sorted(p for p in LISTS.glob(pattern) if "-" not in p.name.split("_dists_")[1].split("_")[0])
    if len(found) != 1:
        raise SystemExit(f"debtags_cut: expected one {pattern} in {LISTS}, found {len(found)}"
                         + (" (run: apt-get update -o Acquire::Languages=en)" if "Translation" in pattern else ""))
    return found[0]


def build(min_docs: int, test_share: float) -> tuple[list, list, dict]:
    packages = one_index("*_dists_*_main_binary-amd64_Packages*")
    translations = one_index("*_dists_*_main_i18n_Translation-en*")
    texts = {f["Description-md5"]: description(f["Description-en"])
             for f in stanzas(translations) if "Description-md5" in f and "Description-en" in f}
    docs: dict[str, set] = {}
    n_tagged = 0
    for f in sorted(stanzas(packages), key=lambda f: f.get("Package", "")):
        tags = [t.strip() for t in f.get("Tag", "").replace("\n", " ").split(",")]
        tags = [t for t in tags if t and not t.endswith("::TODO")]
        text = texts.get(f.get("Description-md5", ""))
        if not tags or not text:
            continue
        n_tagged += 1
        docs.setdefault(text.replace("\t", " "), set()).update(tags)
    counts = Counter(t for tags in docs.values() for t in tags)
    keep = {t for t, c in counts.items() if c >= min_docs}
    train, test = [], []
    for text in sorted(docs):
        labels = sorted(docs[text] & keep)
        if not labels:
            continue
        h = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big") / 2.0 ** 64
        (test if h < test_share else train).append((labels, text))
    info = {"packages": str(packages), "tagged_packages": n_tagged, "distinct_texts": len(docs),
            "labels": len(keep), "train": len(train), "test": len(test)}
    return train, test, info


def write(path: Path, docs: list) -> None:
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=6) as f:
        for labels, text in docs:
            f.write(",".join(labels) + "\t" + text + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--min-docs", type=int, default=2, help="documents a tag needs to stay a label")
    ap.add_argument("--test-share", type=float, default=0.2, help="share of the documents hashed to the test file")
    ap.add_argument("--out", default=str(HERE / "out" / "data" / "debian-debtags"))
    args = ap.parse_args()
    train, test, info = build(args.min_docs, args.test_share)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write(out / "train.txt.gz", train)
    write(out / "test.txt.gz", test)
    words = sorted(len(t.split()) for _, t in train)
    info["median_words"] = words[len(words) // 2]
    info["labels_per_doc"] = round(sum(len(lb) for lb, _ in train) / max(1, len(train)), 2)
    print(" ".join(f"{k}={v}" for k, v in info.items()))


if __name__ == "__main__":
    main()
