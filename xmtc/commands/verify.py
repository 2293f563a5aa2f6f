"""``xmtc verify MODEL_DIR``: check every byte of a saved model, whatever the verification stamps say.

A load checks the checksums and the weights' structure of a model folder the first time, and then
trusts a file while its stat is unchanged (:mod:`xmtc.models.verified`), so that a memory-mapped model
of millions of labels loads in a moment. What that cannot see is a change under an unchanged stat (bit
rot on the disk, a write to the raw device). ``verify`` forgets the folder's stamp, loads the model with
every check (every file hashed against the manifest, every stage's structural checks), hashes any file
the load did not read, and, when all pass, stamps the folder again. Exit status 0 when the model is
sound, 2 (the CLI's model-format error) naming the first bad file otherwise.
"""

from __future__ import annotations

import argparse
import json
import time


def add_parser(sub, common) -> None:
    p = sub.add_parser("verify", help="Check every file of a saved model against its manifest (checksums,"
                                      " array layouts, the weights' structure), ignoring verification stamps.")
    p.add_argument("model_dir")
    p.add_argument("--json", action="store_true", help="Print one JSON object instead of a line.")
    common(p)


def verify(folder: str) -> dict:
    """Full check of ``folder``; raises ModelFormatError at the first problem, else returns the facts."""
    from ..models import load
    from ..models import verified
    from ..models.storage import ModelReader

    t0 = time.perf_counter()
    verified.forget(folder)
    model = load(folder)  # no stamp: every file it reads is hashed, every stage checks its arrays
    reader = ModelReader(folder)  # the stamp the load wrote vouches for what it read; the rest is hashed now
    size = reader.check_files()
    return {"model": str(folder), "method": reader.manifest["method"], "files": len(reader.manifest["files"]),
            "bytes": size, "labels": len(model.labels_), "seconds": round(time.perf_counter() - t0, 3), "ok": True}


def run(args: argparse.Namespace) -> int:
    facts = verify(args.model_dir)
    if args.json:
        print(json.dumps(facts))
    else:
        print(f"{facts['model']}: OK ({facts['method']}, {facts['files']} files, {facts['bytes'] / 2**20:.1f} MB,"
              f" {facts['labels']} labels checked in {facts['seconds']:.1f} s)")
    return 0
