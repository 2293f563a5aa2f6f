"""What the hyperparameters of a TF-IDF featurizer may be: scikit-learn's rules, checked before they are used.

The same rules as sklearn's ``TfidfVectorizer``: ``ngram_range`` two ints ``1 <= min_n <= max_n``; ``min_df`` /
``max_df`` an int (a count of texts, >= 1) or a float (a proportion in [0, 1]); ``max_features`` None or an int
>= 1; ``norm`` l2, l1 or None; a ``token_pattern`` that compiles, with at most one capturing group (the token).
Also an ``analyzer`` spec that parses (:mod:`xmtc.features.analyzers`) and ``stop_words`` None, a language or a
list of words. Separate from the estimator (:mod:`xmtc.features.tfidf`) because the same check guards two ways
in: a fit, and a saved featurizer being loaded (:mod:`xmtc.features.tfidf_arrays`, where a failure is a
ModelFormatError); it reads the hyperparameters and nothing of the vocabulary.
"""

from __future__ import annotations

import numbers
import re

from ..errors import ConfigError
from .analyzers import parse_analyzer

__all__ = ["NORM_CODES", "checked_params"]

NORM_CODES = {None: 0, "l1": 1, "l2": 2}  # ``norm`` as the row kernel's code (xmtc.features.tfidf_kernels)


def checked_params(featurizer) -> tuple[int, int, re.Pattern]:
    """Validate the hyperparameters of the TfidfFeaturizer ``featurizer`` (at fit, as sklearn does, and at load)
    and return ``(min_n, max_n, compiled token_pattern)``; a bad one raises ConfigError naming it."""
    rng = featurizer.ngram_range
    if (not isinstance(rng, (tuple, list)) or len(rng) != 2
            or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in rng)
            or not 1 <= rng[0] <= rng[1]):
        raise ConfigError(f"ngram_range must be two ints 1 <= min_n <= max_n, got {rng!r}")
    for name in ("min_df", "max_df"):
        v = getattr(featurizer, name)
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise ConfigError(f"{name} must be an int >= 1 or a float in [0, 1], got {v!r}")
        if isinstance(v, numbers.Integral):
            if v < 1:
                raise ConfigError(f"{name} as an int counts texts and must be >= 1, got {v!r}")
        elif not 0.0 <= v <= 1.0:
            raise ConfigError(f"{name} as a float is a proportion and must be in [0, 1], got {v!r}")
    mf = featurizer.max_features
    if mf is not None and (isinstance(mf, bool) or not isinstance(mf, numbers.Integral) or mf < 1):
        raise ConfigError(f"max_features must be None or an int >= 1, got {mf!r}")
    if featurizer.norm not in NORM_CODES:
        raise ConfigError(f"norm must be 'l2', 'l1' or None, got {featurizer.norm!r}")
    for name in ("sublinear_tf", "lowercase", "smooth_idf"):
        if not isinstance(getattr(featurizer, name), bool):
            raise ConfigError(f"{name} must be a bool, got {getattr(featurizer, name)!r}")
    if not isinstance(featurizer.token_pattern, str):
        raise ConfigError(f"token_pattern must be a str, got {type(featurizer.token_pattern).__name__}")
    try:
        pattern = re.compile(featurizer.token_pattern)
    except re.error as exc:
        raise ConfigError(f"token_pattern {featurizer.token_pattern!r} is not a valid regex: {exc}") from None
    if pattern.groups > 1:
        raise ConfigError(f"token_pattern {featurizer.token_pattern!r} has {pattern.groups} capturing groups; "
                          "at most one (the token) is allowed")
    parse_analyzer(featurizer.analyzer)
    sw = featurizer.stop_words
    if sw is not None and not isinstance(sw, str) and (
            not isinstance(sw, (list, tuple, set, frozenset)) or not all(isinstance(w, str) for w in sw)):
        raise ConfigError(f"stop_words must be None, a language or a list of words, got {type(sw).__name__}")
    return int(rng[0]), int(rng[1]), pattern

