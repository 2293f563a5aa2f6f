"""How long a text xmtc reads from a file: one 11 MB line once took 30 s and 2.2 GB to predict, silently.

Texts longer than the limit are cut to their first ``limit`` characters when a file is read (training,
prediction and evaluation alike), with one warning per file naming how many texts were cut, the longest one's
line and length, and how much of it was read. The limit is the environment variable ``XMTC_MAX_TEXT_CHARS``
(0: no limit); its default, :data:`DEFAULT_MAX_CHARS`, is the REST API's default body limit
(``xmtc serve --max-body-bytes``, 4 MiB) in characters, so a text the server takes whole the command line
takes whole too, and one over it is cut rather than refused. 4 Mi characters is a long book (some 700,000
words); catalogue records and abstracts are thousands.
"""

from __future__ import annotations

import logging
import os

from ..errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_MAX_CHARS = 4 * 1024 * 1024
ENV = "XMTC_MAX_TEXT_CHARS"


def max_text_chars() -> int:
    """The limit in characters (0: none), from ``XMTC_MAX_TEXT_CHARS`` or the default."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return DEFAULT_MAX_CHARS
    try:
        limit = int(value.replace("_", ""))
    except ValueError:
        limit = -1
    if limit < 0:
        raise ConfigError(f"{ENV} must be a number of characters (0: no limit), got {value!r}")
    return limit


def bound_texts(texts: list[str] | None, lines: list[int] | None, source) -> list[str] | None:
    """``texts`` with those over :func:`max_text_chars` cut to it (in place), warning once for ``source``."""
    limit = max_text_chars()
    if not texts or not limit:
        return texts
    long = [i for i, text in enumerate(texts) if len(text) > limit]
    if not long:
        return texts
    worst = max(long, key=lambda i: len(texts[i]))
    where = f"line {lines[worst]}" if lines is not None else f"document {worst + 1}"
    log.warning("%s: %d %s over %s characters cut to that length (the longest, %s: %s of %s characters read);"
                " %s sets the limit (0: none)", source, len(long), "text" if len(long) == 1 else "texts",
                f"{limit:,}", where, f"{limit:,}", f"{len(texts[worst]):,}", ENV)
    for i in long:
        texts[i] = texts[i][:limit]
    return texts
