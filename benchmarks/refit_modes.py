"""What ``xmtc train`` does with its calibration split once the score maps are fitted, measured per mode.

    python benchmarks/refit_modes.py --datasets reuters21578-apte90,yso-finna-en-2k-20k,mulan-bibtex,mulan-delicious
        [--modes none,fold,full] [--seeds 0,1] [--json OUT]

Each mode runs :func:`xmtc.models.calibrated_fit.fit_calibrated` as ``xmtc train`` calls it (XR-Linear at its
defaults, the seeded split of ``--valid-size`` auto), in this process, then scores the test file:

* ``none``: the model fitted on the training part only (the split's documents are lost to it);
* ``fold``: that model with the split learned into it (``XRLinear.learn``, proximal, the memory for labels
  that only the split carries);
* ``full``: a second fit on every document (the exact model of a fit on all of them).

Reported: test P@1 / P@5 / ECE@5 and the CPU seconds (``time.process_time``, both threads summed) and wall
seconds of the whole ``fit_calibrated`` call, and of what follows the calibration (``after_s``, from its log).
The CPU seconds are the comparable cost on a shared machine; the wall seconds hold only on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import xmtc  # noqa: E402
from xmtc.data.data_root import data_root  # noqa: E402
from xmtc.models.calibrated_fit import fit_calibrated  # noqa: E402


def _files(root: Path, name: str) -> tuple[Path, Path]:
    d = root / name
    for stem in ("train", "train_xc"):
        if (d / f"{stem}.txt.gz").exists():
            test = "test" if stem == "train" else "test_xc"
            return d / f"{stem}.txt.gz", d / f"{test}.txt.gz"
    raise SystemExit(f"refit_modes: no train file in {d}")


def run(name: str, mode: str, seed: int, root: Path) -> dict:
    train_file, test_file = _files(root, name)
    train = xmtc.read_dataset(str(train_file))
    test = xmtc.read_dataset(str(test_file), labels=train.labels, unknown_labels="ignore")
    model = xmtc.XRLinear()
    c0, w0 = time.process_time(), time.perf_counter()
    info = fit_calibrated(model, train, seed=seed, refit=mode)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    r = model.evaluate(test.inputs, test.Y, ks=(1, 5))
    return {"dataset": name, "mode": mode, "seed": seed, "P@1": round(r["P@1"], 2), "P@5": round(r["P@5"], 2),
            "ECE@5": round(r["ECE@5"], 2), "cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
            "valid_docs": info.get("valid_docs"), "load": open("/proc/loadavg").read().split()[0]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default="reuters21578-apte90,yso-finna-en-2k-20k,mulan-bibtex,mulan-delicious")
    ap.add_argument("--modes", default="none,fold,full")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--json", default=None, help="write the rows here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    root = data_root()
    rows = []
    print("| set | refit | seed | P@1 | P@5 | ECE@5 | CPU s | wall s | load |\n|---|---|---|---|---|---|---|---|---|")
    for name in args.datasets.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            for mode in args.modes.split(","):
                row = run(name, mode, seed, root)
                rows.append(row)
                print(f"| {name} | {mode} | {seed} | {row['P@1']:.2f} | {row['P@5']:.2f} | {row['ECE@5']:.2f} |"
                      f" {row['cpu_s']:.2f} | {row['wall_s']:.2f} | {row['load']} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
