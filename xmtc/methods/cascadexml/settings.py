"""CascadeXML's per-level settings (Kharbanda et al., NeurIPS'22): the reference's rules and their string forms.

A CascadeXML network takes one entry per tree level for the encoder layers it reads, the dropout before its
classifier and its loss weight, and one shortlist width per cluster level. The estimator gives them as
strings (the command line's and the JSON configs' form: ``"auto"``, one number for every level, or one per
level); these functions turn them into lists, and ``auto`` into the reference code's choices (the layer
rule scaled to the encoder's depth, the per-level dropouts). The rules and why they were kept are in
:mod:`xmtc.methods.cascadexml.network` (*Layers*).

Separate from the network because they run before it exists, on the estimator's config and the encoder's
depth: the network receives plain lists and stores those.
"""

from __future__ import annotations

import numpy as np

from ...errors import ConfigError


def default_layers(n_layers: int, n_levels: int) -> list[tuple[int, ...]]:
    """The reference's layer rule scaled to an encoder of ``n_layers`` layers (see the network's *Layers*).

    An encoder too shallow for the tree (fewer layers than levels) shares its first layer among the
    coarse levels, and the first level reads a single layer when there is none below its own.
    """
    step = max(1, n_layers // 6)
    picks = [max(1, n_layers - step * (n_levels - 1 - t)) for t in range(n_levels)]
    first = (picks[0] - 1, picks[0]) if picks[0] >= 2 else (picks[0],)
    return [first] + [(p,) for p in picks[1:]]


def parse_layers(spec: str, n_layers: int, n_levels: int) -> list[tuple[int, ...]]:
    """``"auto"`` or one entry per level, ``+`` joining layers: ``"3+4,5,6"``."""
    if spec.strip() == "auto":
        return default_layers(n_layers, n_levels)
    try:
        out = [tuple(int(x) for x in part.split("+")) for part in spec.split(",")]
    except ValueError:
        raise ConfigError(f"layers must be 'auto' or comma-separated layer numbers ('3+4,5,6'), got {spec!r}") \
            from None
    if len(out) != n_levels:
        raise ConfigError(f"layers {spec!r} names {len(out)} levels; the tree has {n_levels}")
    for entry in out:
        for layer in entry:
            if not 1 <= layer <= n_layers:
                raise ConfigError(f"layer {layer} in {spec!r} does not exist: the encoder has layers 1..{n_layers}")
    return out


def parse_floats(spec: str, n: int, name: str, default: list[float]) -> list[float]:
    """``"auto"`` (``default``), one number for every level, or ``n`` comma-separated numbers."""
    if spec.strip() == "auto":
        return list(default)
    vals = _one_or_each(spec, n, float, f"{name} must be 'auto' or comma-separated numbers")
    if len(vals) != n or any(not np.isfinite(v) or v < 0 for v in vals):
        raise ConfigError(f"{name} needs {n} non-negative numbers (one per level), got {spec!r}")
    return vals


def parse_topk(spec: str, n: int) -> list[int]:
    """Nodes kept per cluster level (every level but the labels): ``"auto"``, one number for all, or ``n``.

    ``auto`` keeps 8 nodes at the first cluster level and 32 at every finer one: on the two cluster levels
    of yso-finna-en-2k-20k's tree that is the measured '8,32'; a deeper tree (more labels) keeps the same
    32-cluster shortlist above its labels instead of failing for want of a third number.
    """
    if spec.strip() == "auto":
        return [8] + [32] * (n - 1) if n > 0 else []
    vals = _one_or_each(spec, n, int, "topk must be comma-separated whole numbers")
    if len(vals) != n or any(v < 1 for v in vals):
        raise ConfigError(f"topk needs {n} positive numbers (one per cluster level), got {spec!r}")
    return vals


def _one_or_each(spec: str, n: int, cast, refusal: str) -> list:
    """The comma-separated values of ``spec`` read by ``cast``, one value repeated for all ``n`` levels;
    ``refusal`` (then ", got SPEC") where one does not read."""
    try:
        vals = [cast(x) for x in spec.split(",")]
    except ValueError:
        raise ConfigError(f"{refusal}, got {spec!r}") from None
    return vals * n if len(vals) == 1 else vals


def reference_dropouts(n_levels: int) -> list[float]:
    """The reference's per-level dropouts: 0.3, 0.3, 0.4 for three levels, 0.2, 0.25, 0.4, 0.5 for four."""
    if n_levels == 3:
        return [0.3, 0.3, 0.4]
    if n_levels == 4:
        return [0.2, 0.25, 0.4, 0.5]
    return list(np.round(np.linspace(0.2, 0.5, n_levels), 3)) if n_levels > 1 else [0.3]
