"""How often the language check of ``xmtc predict`` / ``serve`` warns, on real catalogue titles.

``python benchmarks/language_check.py [--limit N] [--json OUT]`` reads the test files of yso-finna-en
(English records) and yso-finna-sv (Swedish records), computes each title's simplemma shares over the
default candidates (:data:`xmtc.models.language.DEFAULT_CANDIDATES`), and reports, for the shipped rule
and a grid around it: the false-warning rate (an English model on the English titles, a Swedish model on
the Swedish ones) and the hit rate (the English model on the Swedish titles and the other way round).
A "false" warning may be a record really in another language (catalogues mix them): the script prints
examples of each so that a reader can judge.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from xmtc.models import language as L  # noqa: E402

DATA = ROOT.parent / "shared" / "data"


def titles(name: str, limit: int | None) -> list[str]:
    out = []
    with gzip.open(DATA / name / "test.txt.gz", "rt", encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if limit is not None and i >= limit:
                break
            out.append(line.rstrip("\n").split("\t", 1)[1])
    return out


def rate(rows, model_lang, min_words, min_share, min_margin):
    hits = []
    for text, shares, n in rows:
        if n < min_words:
            continue
        own = shares.get(model_lang, 0.0)
        best, share = max(((k, v) for k, v in shares.items() if k not in ("unk", model_lang)),
                          key=lambda kv: kv[1])
        if share >= min_share and share - own >= min_margin:
            hits.append((text, best, share))
    return hits


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=None, help="Titles per file (default: all).")
    ap.add_argument("--json", help="Write the figures here.")
    args = ap.parse_args()
    det = L.Detector(L.DEFAULT_CANDIDATES).load()
    rows = {}
    for name in ("yso-finna-en", "yso-finna-sv"):
        t0 = time.perf_counter()
        texts = titles(name, args.limit)
        rows[name] = [(t, *det.proportions(t)) for t in texts]
        dt = time.perf_counter() - t0
        print(f"{name}: {len(texts):,} titles, {dt:.1f} s ({dt / len(texts) * 1e6:.0f} us a title)")
    cases = [("en", "yso-finna-en", "false"), ("sv", "yso-finna-sv", "false"),
             ("en", "yso-finna-sv", "hit"), ("sv", "yso-finna-en", "hit")]
    grid = [(w, s, m) for w in (1, 2, 3, 4, 5) for s in (0.5, 0.75, 1.0) for m in (0.25, 0.5)]
    shipped = (L.MIN_WORDS, L.MIN_SHARE, L.MIN_MARGIN)
    results = []
    print("\nmin_words min_share min_margin | en-on-en  sv-on-sv  (false) | en-on-sv  sv-on-en (hit)")
    for rule in grid:
        row = {"min_words": rule[0], "min_share": rule[1], "min_margin": rule[2]}
        for lang, name, kind in cases:
            n = len(rows[name])
            row[f"{lang} model on {name} ({kind})"] = len(rate(rows[name], lang, *rule)) / n
        results.append(row)
        vals = list(row.values())[3:]
        mark = "  <- shipped" if rule == shipped else ""
        print(f"{rule[0]:9d} {rule[1]:9.2f} {rule[2]:10.2f} | {vals[0]:8.3%} {vals[1]:8.3%}          |"
              f" {vals[2]:8.3%} {vals[3]:8.3%}{mark}")
    short = {name: sum(n < L.MIN_WORDS for _, _, n in r) / len(r) for name, r in rows.items()}
    print(f"\ntitles with fewer than {L.MIN_WORDS} sampled words (never checked): "
          + ", ".join(f"{k} {v:.1%}" for k, v in short.items()))
    for lang, name, kind in cases[:2]:
        found = rate(rows[name], lang, *shipped)
        print(f"\n{lang} model on {name}: {len(found):,} warnings of {len(rows[name]):,}; examples:")
        for text, best, share in found[:: max(1, len(found) // 12)][:12]:
            print(f"  [{best} {share:.2f}] {text[:110]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"shipped": dict(zip(("min_words", "min_share", "min_margin"),
                                                                   shipped)),
                                               "candidates": L.DEFAULT_CANDIDATES, "never_checked": short,
                                               "grid": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
