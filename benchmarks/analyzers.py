#!/usr/bin/env python3
"""XR-Linear at defaults with each text analyzer (simple, snowball, simplemma, voikko) and stop words on/off.

    python benchmarks/analyzers.py --dataset yso-finna-sv --language sv
    python benchmarks/analyzers.py --dataset yso-finna-en --language en --configs simple,snowball,snowball+stop

Each configuration trains XR-Linear with default parameters on the dataset's train texts (TF-IDF included in
the train time) and scores the test texts. Prints a markdown table and writes the numbers as JSON to
benchmarks/out/analyzers-DATASET.json. Configurations: simple, snowball, simplemma, voikko, each optionally
``+stop`` (the language's shipped stop words) or ``+iso`` (stopwords-iso's list); ``auto+stop`` is what
``--language`` alone picks.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import _common  # noqa: E402

from xmtc import XRLinear  # noqa: E402
from xmtc.data import formats  # noqa: E402
from xmtc.data.data_root import data_root  # noqa: E402


def settings(config: str, language: str) -> dict:
    name, _, stop = config.partition("+")
    if name == "auto":
        return {"language": language, **({} if stop == "stop" else {"stop_words": "none"})}
    analyzer = "simple" if name == "simple" else f"{name}({language})"
    return {"analyzer": analyzer, "stop_words": {"": "none", "stop": language, "iso": f"iso:{language}"}[stop]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--language", required=True)
    ap.add_argument("--data-root", default=str(data_root()))
    ap.add_argument("--configs", default="simple,snowball,simplemma,snowball+stop")
    ap.add_argument("--max-train", type=int, default=None, help="first N train texts only (smoke runs)")
    ap.add_argument("--featurize-only", action="store_true",
                    help="time TF-IDF alone (fit_transform on train, transform on test), best of --repeat")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    folder = Path(args.data_root) / args.dataset
    train, test = formats.read_tsv(folder / "train.txt.gz"), formats.read_tsv(folder / "test.txt.gz")
    tr_texts, tr_labels = list(train.texts), list(train.labels)
    if args.max_train:
        tr_texts, tr_labels = tr_texts[: args.max_train], tr_labels[: args.max_train]
    print(f"{args.dataset}: {len(tr_texts):,} train / {len(test.texts):,} test texts; "
          f"{platform.machine()}, nproc {os.cpu_count()}", flush=True)
    if args.featurize_only:
        return featurize_only(args, tr_texts, list(test.texts))
    rows = []
    for config in args.configs.split(","):
        params = settings(config, args.language)
        t0 = time.perf_counter()
        model = XRLinear(**params).fit(tr_texts, tr_labels, progress=False)
        train_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        scores = model.evaluate(list(test.texts), list(test.labels))
        eval_s = time.perf_counter() - t1
        feat = model.featurizer_
        row = {"config": config, "analyzer": feat.analyzer, "stop_words": len(feat._stop_list or []),
               "n_features": int(model.n_features_), "train_s": round(train_s, 1), "eval_s": round(eval_s, 1),
               **{k: round(scores[k], 2) for k in ("P@1", "P@3", "P@5")}}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n" + render_table(rows))
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    payload = {"dataset": args.dataset, "language": args.language, "machine": _common.machine_info(),
               "configs": args.configs, "max_train": args.max_train, "rows": rows}
    (out / f"analyzers-{args.dataset}.json").write_text(json.dumps(payload, indent=1))


def render_table(rows: list[dict]) -> str:
    """One row per configuration (rows as written to analyzers-DATASET.json)."""
    lines = ["| analyzer | stop words | features | P@1 | P@3 | P@5 | train s | evaluate s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['analyzer']} | {r['stop_words'] or 'none'} | {r['n_features']:,} | {r['P@1']:.2f} | "
                     f"{r['P@3']:.2f} | {r['P@5']:.2f} | {r['train_s']:.1f} | {r['eval_s']:.1f} |")
    return "\n".join(lines)


def featurize_only(args, tr_texts: list, te_texts: list) -> None:
    from xmtc.methods.xr_linear.config import XRLinearConfig

    print("\n| analyzer | stop words | features | fit_transform s (train) | transform s (test) |")
    print("|---|---|---|---|---|")
    for config in args.configs.split(","):
        best = [float("inf"), float("inf")]
        for _ in range(args.repeat):
            feat = XRLinearConfig(**settings(config, args.language)).tfidf().make_featurizer()
            t0 = time.perf_counter()
            X = feat.fit_transform(tr_texts)
            t1 = time.perf_counter()
            feat.transform(te_texts)
            t2 = time.perf_counter()
            best = [min(best[0], t1 - t0), min(best[1], t2 - t1)]
        print(f"| {feat.analyzer} | {len(feat._stop_list or []) or 'none'} | {X.shape[1]:,} | {best[0]:.1f} | "
              f"{best[1]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
