"""The one check every model's input texts pass: a list of strings, not one string."""

from __future__ import annotations

from typing import Any

from ..errors import DataFormatError


def check_texts(X: Any) -> list[str]:
    """``X`` as a list of texts; a one-line DataFormatError naming the first item that is not a string."""
    if isinstance(X, str):
        raise DataFormatError(None, None, "expected a list of texts, got a single string; wrap it in a list")
    texts = list(X)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise DataFormatError(None, i + 1, f"text must be a string, got {type(t).__name__}")
    return texts
