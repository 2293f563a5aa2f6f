"""The ``--ray`` flag of ``xmtc train`` and ``xmtc predict``: checks and hooks, kept out of cli.py."""

from __future__ import annotations

from ..errors import ConfigError

RAY_METHODS = ("xr-linear", "xr-transformer", "x-transformer")


def train_hook(args, config) -> dict:
    """Extra ``fit`` keywords for ``xmtc train --ray SPEC`` (``config``: the method's settings as given):
    XR-Linear's tree, and the linear matcher and rankers of XR-/X-Transformer (on ``[tfidf, embedding]``,
    after fine-tuning), trained as Ray tasks (subtrees with tfn negatives, parent groups level by level with
    matcher-aware ones). What Ray cannot train is refused here, before any data is featurized or any
    encoder fine-tuned."""
    from .ray_backend import import_ray, linear_fit, parse_spec

    if args.method not in RAY_METHODS:
        raise ConfigError(f"--ray trains the linear models of {', '.join(RAY_METHODS)}; method {args.method!r} is"
                          " not supported")
    if getattr(config, "matcher", "linear") != "linear":
        raise ConfigError("--ray trains the rankers of matcher 'linear'; matcher 'neural' trains its own"
                          " (X-Transformer's default: add --matcher linear to train on Ray)")
    parse_spec(args.ray)
    import_ray()
    return {"linear_fit": linear_fit(args.ray)}


def predict_hook(model, args):
    """The loaded model wrapped so that ``predict_topk`` runs as Ray tasks over chunks of the input."""
    from .ray_backend import RayPredictor, import_ray, parse_spec

    parse_spec(args.ray)
    import_ray()
    return RayPredictor(model, args.model_dir, args.ray)
