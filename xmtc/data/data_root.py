"""Where the real data sets of the tests, benchmarks and scripts live: ``XMTC_DATA``, or ``shared/data``
beside the checkout.

The tests read real corpora (yso-finna-en, Reuters-21578, ...) that are too large to ship; on a fresh clone
without them those tests are skipped, and on a machine that keeps them elsewhere ``XMTC_DATA=/path/to/data``
points the tests, the benchmarks and the scripts there. The folder holds one sub-folder per data set
(``yso-finna-en-2k-20k/train.txt.gz``, ...).
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "XMTC_DATA"


def data_root() -> Path:
    """``$XMTC_DATA`` if set, else ``shared/data`` beside the checkout this package was imported from."""
    value = os.environ.get(ENV, "").strip()
    if value:
        return Path(value).expanduser()
    return Path(__file__).resolve().parents[3] / "shared" / "data"


def missing_reason() -> str:
    """The skip reason of a test whose data set is absent: where it was looked for and how to say where it is."""
    return f"shared data not available at {data_root()} (set {ENV} to the folder of the data sets)"
