"""The ``--ray`` flag of ``xmtc train`` and ``xmtc predict``: checks and hooks, kept out of cli.py."""

from __future__ import annotations

from ..errors import ConfigError


def train_hook(args) -> dict:
    """Extra ``fit`` keywords for ``xmtc train --ray SPEC`` (xr-linear only)."""
    from .ray_backend import import_ray, linear_fit, parse_spec

    if args.method != "xr-linear":
        raise ConfigError(f"--ray trains xr-linear models; method {args.method!r} is not supported")
    parse_spec(args.ray)
    import_ray()
    return {"linear_fit": linear_fit(args.ray, args.output)}


def predict_hook(model, args):
    """The loaded model wrapped so that ``predict_topk`` runs as Ray tasks over chunks of the input."""
    from .ray_backend import RayPredictor, import_ray, parse_spec

    parse_spec(args.ray)
    import_ray()
    return RayPredictor(model, args.model_dir, args.ray)
