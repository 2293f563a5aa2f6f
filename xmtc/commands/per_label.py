"""The table of ``xmtc evaluate --per-label TSV``: how each label fares on the test set.

One line per label that occurs in the test set or is suggested, worst first (F1 ascending, then
support descending), after a header line: ``id, name, support, predicted, P, R, F1, train_count``.
The numbers are :func:`xmtc.metrics.per_label_metrics` of the suggestions evaluate looked at (the
top k, or those a ``--threshold`` kept), in percent; ``train_count`` is how many training documents
carried the label (0 for a label only the test set has). Tabs and line breaks in names become spaces.
"""

from __future__ import annotations

import numpy as np


def write_per_label(path: str, Y, idx, vocab, train_counts) -> None:
    """The ``--per-label`` table (:func:`xmtc.metrics.per_label_metrics`): a header line, then one label a
    line, worst F1 first; P, R and F1 in percent; ``name`` is the display name, empty when there is none."""
    from ..data.io import atomic_output
    from ..metrics import per_label_metrics

    m = per_label_metrics(Y, idx)
    counts = np.zeros(m["support"].shape[0], dtype=np.float64)
    tc = np.asarray(train_counts, dtype=np.float64)[:counts.size]
    counts[:tc.size] = tc
    with atomic_output(path) as out:
        out.write("id\tname\tsupport\tpredicted\tP\tR\tF1\ttrain_count\n")
        for j in m["order"].tolist():
            name = vocab.display[j] if vocab.display is not None and j < len(vocab) else ""
            clean = [" ".join(str(x).split()) for x in (vocab.names[j] if j < len(vocab) else str(j), name)]
            count = counts[j]
            out.write(f"{clean[0]}\t{clean[1]}\t{m['support'][j]}\t{m['predicted'][j]}\t{m['P'][j]:.2f}"
                      f"\t{m['R'][j]:.2f}\t{m['F1'][j]:.2f}\t{int(count) if count.is_integer() else count}\n")
