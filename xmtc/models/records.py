"""What ``xmtc predict`` (and ``ensemble``) write for each input: one JSON object a line.

::

    {"line": 3, "labels": ["p21028"], "names": ["railways"], "scores": [0.62]}

``line`` is the input's 1-based line (``document_id`` instead, where a JSONL input object has one),
so that a line of output can be traced to its document even when a file is split or filtered.
``names`` (parallel to ``labels``) appears whenever the model knows display names, from the label file
it was trained with. A text the model can hardly read (less than half of its words in the model's
vocabulary, :data:`xmtc.models.calibration.MIN_KNOWN`) gets ``"known_words"`` (that share) and a
``"warning"``; its calibrated scores are already lowered in proportion. A blank text, or one with no word
in the vocabulary, gets no labels at all (:func:`xmtc.models.topk.drop_unreadable`).
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from ..data.labels import LabelVocab
from .calibration import MIN_KNOWN


def reading_warning(known: float) -> str | None:
    """The warning for a text of which the share ``known`` of words is in the vocabulary, if any."""
    if known >= MIN_KNOWN:
        return None
    if known == 0:
        return ("no word of this text is in the model's vocabulary: no suggestion, except labels whose text it"
                " resembles")
    return (f"only {100 * known:.0f}% of this text's words are in the model's vocabulary: scores lowered"
            " in proportion")


def prediction_records(labels: LabelVocab, idx: np.ndarray, scores: np.ndarray, known: np.ndarray | None = None,
                       lines: Sequence[int] | None = None, ids: Sequence[str | None] | None = None
                       ) -> Iterator[dict]:
    """One dict per row of ``(idx, scores)`` (-1 padded), in the layout of the module doc."""
    names = labels.names
    show = labels.display is not None
    for i, (ri, rs) in enumerate(zip(idx, scores)):
        rec: dict = {}
        if ids is not None and ids[i] is not None:
            rec["document_id"] = ids[i]
        elif lines is not None:
            rec["line"] = int(lines[i])
        kept = ri[ri >= 0].tolist()
        rec["labels"] = [names[j] for j in kept]
        if show:
            rec["names"] = [labels.display_name(j) for j in kept]
        rec["scores"] = [round(float(s), 6) for s in rs[ri >= 0]]
        if known is not None:
            warning = reading_warning(float(known[i]))
            if warning:
                rec["known_words"] = round(float(known[i]), 3)
                rec["warning"] = warning
        yield rec
