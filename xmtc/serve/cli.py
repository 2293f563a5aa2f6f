"""``xmtc serve MODEL_DIR [MODEL_DIR ...] [--name ID=MODEL_DIR] [--ensemble ID=DIR1,DIR2] [--host H] ...``.

The options besides the model folders are generated from :class:`~xmtc.serve.config.ServeConfig`.
Every model folder is checked (manifest, format version) before the server binds its port, so a
typo ends in one ``xmtc: error:`` line rather than a worker crash loop. So are the token, the root
path and the language-check languages; and a write endpoint (``--allow-learn``, ``--label-output``)
on a non-loopback ``--host`` without a token is refused (:func:`xmtc.serve.auth.check_exposure`).
"""

from __future__ import annotations

import argparse
import logging
import os

from ..config import add_config_arguments, config_from_args
from ..errors import ConfigError

log = logging.getLogger(__name__)


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("serve", help="Serve models over an Annif-compatible REST API with a web page.",
                       description="Serve model folders as Annif-compatible projects (REST API under /v1,"
                                   " OpenAPI docs at /docs, a web page at /, active learning at /label).")
    p.add_argument("model_dirs", nargs="*", metavar="MODEL_DIR",
                   help="Model folders; each is a project whose id is the folder's name.")
    p.add_argument("--name", action="append", default=[], metavar="ID=MODEL_DIR",
                   help="Serve MODEL_DIR as project ID (repeatable).")
    p.add_argument("--ensemble", action="append", default=[], metavar="ID=DIR1,DIR2",
                   help="Serve the models in these folders combined as one project ID (repeatable; scores"
                        " combined by --ensemble-combine).")
    p.add_argument("--allow-learn", action="store_true",
                   help="Accept POST /v1/projects/ID/learn (Annif's learn endpoint): the project's model learns"
                        " the documents as `xmtc learn` does, its folder is rewritten atomically and the new model"
                        " is served. Off by default; needs --workers 1, and the bearer token when one is set"
                        " (--token-file or XMTC_TOKEN), which a non-loopback --host requires.")
    add_config_arguments(p, _config_class(), title="server settings")
    return p


def _config_class():
    from .config import ServeConfig
    return ServeConfig


def _check_port_free(host: str, port: int) -> None:
    """A taken port in one line, before the log says "serving" (uvicorn would log that it serves, then fail
    with its own traceback-free error and exit 3). Binds and closes a socket as uvicorn binds its own
    (``SO_REUSEADDR``), so a port left in TIME_WAIT by a server just stopped counts as free."""
    import errno
    import socket

    if port == 0:  # the system picks a free one
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(f"port {port} on {host} is in use (another server?); choose another with"
                                  " --port") from None
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn  # noqa: F401
        import fastapi  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"xmtc serve needs FastAPI and uvicorn ({exc.name} is missing);"
                          ' install them with: pip install "xmtc[serve]"') from None
    import uvicorn

    from ..models.storage import ModelReader
    from .app import ENV_SPEC, create_app, language_candidates, normalize_root_path, spec_to_env
    from .auth import check_exposure, read_token
    from .registry import project_specs

    cfg = config_from_args(_config_class(), args)
    specs = project_specs(args.model_dirs, args.name, args.ensemble)
    allow_learn = getattr(args, "allow_learn", False)
    if allow_learn and cfg.workers > 1:
        raise ConfigError("--allow-learn needs --workers 1: other worker processes would keep serving the old"
                          " model after a learn")
    root = normalize_root_path(cfg.root_path)
    language_candidates(cfg.language_check)
    token = read_token(cfg.token_file)
    writes = [name for name, on in (("--allow-learn", allow_learn),
                                    ("the /label page's saves (--label-output)", bool(cfg.label_output))) if on]
    check_exposure(cfg.host, writes, token)
    for spec in specs.values():
        for folder in [spec] if isinstance(spec, str) else spec:
            ModelReader(folder)  # missing/corrupt folder or foreign format: one-line error before binding
    _check_port_free(cfg.host, cfg.port)
    level = "warning" if args.quiet else (args.log_level or "info").lower()
    common = dict(host=cfg.host, port=cfg.port, log_level=level, access_log=False,
                  timeout_graceful_shutdown=30)
    if cfg.workers == 1:
        app = create_app(specs, cfg, allow_learn=allow_learn, token=token)
        log.info("serving %s on http://%s:%d%s/ (API docs at %s/docs)", ", ".join(specs), cfg.host, cfg.port,
                 root, root)
        uvicorn.run(app, **common)
    else:
        os.environ[ENV_SPEC] = spec_to_env(specs, cfg)
        log.info("serving %s on http://%s:%d/ with %d workers", ", ".join(specs), cfg.host, cfg.port,
                 cfg.workers)
        uvicorn.run("xmtc.serve.app:app_from_env", factory=True, workers=cfg.workers, **common)
    return 0
