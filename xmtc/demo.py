"""``xmtc demo``: train XR-Linear on the bundled yso-finna-en sample, evaluate, show examples.

The sample is real library catalogue data (book titles with YSO subject concepts), so the demo
shows what the method does on the kind of text users bring, not on a toy.
"""

from __future__ import annotations

import random
import time

from .data import read_dataset, sample_path


def run_demo(examples: int = 5, output: str | None = None, progress: bool = True) -> int:
    from .models import XRLinear
    from .models.calibrated_fit import fit_calibrated

    t0 = time.perf_counter()
    train = read_dataset(sample_path("train"), label_file=sample_path("labels"))
    test = read_dataset(sample_path("test"), labels=train.labels, unknown_labels="ignore")
    print(f"yso-finna-en sample: {len(train)} training and {len(test)} test book titles,"
          f" {len(train.labels)} YSO subjects")
    model = XRLinear()
    info = fit_calibrated(model, train, progress=progress)  # as `xmtc train` does: scores read as probabilities
    t_train = time.perf_counter() - t0
    t1 = time.perf_counter()
    metrics = model.evaluate(test.texts, test.Y, ks=(1, 3, 5))
    t_eval = time.perf_counter() - t1
    print(f"\ntrained in {t_train:.1f}s (reading + TF-IDF + tree + linear models, score calibration on"
          f" {info['valid_docs']} held-out titles); predicted {len(test)} titles in {t_eval:.2f}s")
    print("  ".join(f"{k} {metrics[k]:.2f}" for k in ("P@1", "P@3", "P@5", "nDCG@5", "PSP@5"))
          + f"  ECE@5 {metrics['ECE@5']:.2f} (a score of 0.6 is right about 60% of the time)")
    names = [train.labels.display_name(j) for j in range(len(train.labels))]
    rng = random.Random(0)
    picks = rng.sample(range(len(test)), min(examples, len(test)))
    preds = model.predict([test.texts[i] for i in picks], k=5)
    for i, pred in zip(picks, preds):
        true = {names[j] for j in test.Y[i].indices}
        print(f"\n  {test.texts[i][:110]}")
        shown = []
        for label, score in pred:
            name = names[model.labels_.index[label]]
            shown.append(f"{'*' + name + '*' if name in true else name} {score:.2f}")
        print("    predicted: " + ", ".join(shown))
        print("    true:      " + ", ".join(sorted(true)))
    print("\n(* = correct.) Data: Finna.fi metadata (CC0); subject names from YSO, General Finnish Ontology,"
          " National Library of Finland and partners (CC BY 4.0).")
    if output:
        print(f"model saved to {model.save(output)}")
    return 0
