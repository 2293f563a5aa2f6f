"""``xmtc info MODEL_DIR [--json] [--plot PNG]``: what a saved model is, read from its folder.

Everything shown comes from the manifest and the small files it names (the label vocabulary, the
label counts, the featurizer's and the calibration's parameters); the weights are not loaded, so
``info`` answers at once even for a model of a million labels.
"""

from __future__ import annotations

import argparse
import json
import logging
import os

log = logging.getLogger(__name__)


def add_parser(sub, common) -> None:
    p = sub.add_parser("info", help="Show what a saved model is: method, labels, training size, features,"
                                    " size on disk, score calibration and parameters.")
    p.add_argument("model_dir")
    p.add_argument("--json", action="store_true", help="Print one JSON object instead of text.")
    p.add_argument("--plot", default=None, metavar="PNG", help="Also draw the tree's level sizes and leaf balance.")
    common(p)


def describe(folder: str) -> dict:
    """The facts ``info`` prints, as one JSON-ready dict."""
    from ..models.storage import ModelReader

    reader = ModelReader(folder)
    m = reader.manifest
    stages = {st["name"]: st for st in m["stages"]}
    out: dict = {"method": m["method"], "xmtc_version": m.get("xmtc_version"), "format_version": m["format_version"]}
    if "labels" in stages:
        vocab = reader.json(stages["labels"]["file"])
        names = vocab.get("names", []) if isinstance(vocab, dict) else []
        out["labels"] = len(names)
        out["label_names"] = "yes" if isinstance(vocab, dict) and vocab.get("display") else "ids only"
    if "label-stats" in stages:
        stats = reader.arrays(stages["label-stats"]["file"])
        if "n_train" in stats:
            out["training_documents"] = int(stats["n_train"][0])
        if "counts" in stats:
            out["labels_with_training_documents"] = int((stats["counts"] > 0).sum())
    featurizer = stages.get("featurizer") or stages.get("tfidf")
    if featurizer and isinstance(featurizer.get("params"), dict):
        fp = featurizer["params"]
        out["features"] = {k: fp[k] for k in ("n_features", "ngram_range", "min_df", "analyzer", "stop_words")
                           if k in fp and not isinstance(fp[k], list) or k == "ngram_range" and k in fp}
    cal = stages.get("calibration")
    if cal:
        params = _object(reader, cal.get("params"), "stage 'calibration': 'params'")
        out["calibration"] = {"method": params.get("method"), "bands": params.get("n_bands"),
                              **_object(reader, params.get("fit_info"), "stage 'calibration': 'fit_info'")}
    else:
        out["calibration"] = None
    files = m["files"]
    out["files"] = len(files)
    out["size_mb"] = round(sum(_size(reader.folder / f) for f in files) / 2 ** 20, 2)
    out["stages"] = [f"{st['name']}: {st.get('type')}" for st in m["stages"]]
    out["params"] = m["params"]
    return out


def _object(reader, value, where: str) -> dict:
    """``value`` if it is a JSON object (``{}`` for none); a one-line ModelFormatError naming the manifest
    and the entry otherwise, as loading the model would give."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        from ..errors import ModelFormatError
        raise ModelFormatError(f"{reader.folder / 'manifest.json'}: {where} must be an object, got {value!r:.60}")
    return value


def _size(path) -> int:
    try:
        return os.stat(path).st_size if not os.path.isdir(path) else sum(
            os.stat(os.path.join(d, f)).st_size for d, _, fs in os.walk(path) for f in fs)
    except OSError:
        return 0


def run(args: argparse.Namespace) -> int:
    if args.plot:
        from ..plots import image_format
        image_format(args.plot)
    info = describe(args.model_dir)
    if args.json:
        print(json.dumps(info, ensure_ascii=False))
    else:
        print(f"method: {info['method']}  (xmtc {info['xmtc_version']}, format {info['format_version']})")
        if "labels" in info:
            names = "with display names" if info["label_names"] == "yes" else "ids only, no display names"
            print(f"labels: {info['labels']:,} ({info.get('labels_with_training_documents', 0):,} with training"
                  f" documents; {names})")
        if "training_documents" in info:
            print(f"trained on: {info['training_documents']:,} documents")
        if "features" in info:
            print("features: " + ", ".join(f"{k} {v}" for k, v in info["features"].items()))
        cal = info["calibration"]
        if cal:
            line = f"scores: calibrated ({cal['method']}, {cal['bands']} bands)"
            if cal.get("valid_docs"):
                line += (f" on {cal['valid_docs']:,} held-out documents (seed {cal.get('valid_seed')}):"
                         f" ECE@5 {cal.get('ECE@5_raw')}% raw -> {cal.get('ECE@5')}%")
            print(line)
        else:
            print("scores: raw (not calibrated; see `xmtc calibrate`)")
        print(f"size: {info['size_mb']:,} MB in {info['files']} files")
        print("stages:")
        for st in info["stages"]:
            print(f"  {st}")
        print("parameters:")
        for key, value in sorted(info["params"].items()):
            print(f"  {key} = {json.dumps(value)}")
    if args.plot:
        from ..models import load
        from ..plots import model_tree_report

        model_tree_report(args.plot, load(args.model_dir), title=f"{info['method']} {args.model_dir}")
        log.info("wrote %s", args.plot)
    return 0
