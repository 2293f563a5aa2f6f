"""The ASGI application: projects loaded once per worker, a micro-batcher each, the API and the pages.

Behind a reverse proxy under a prefix (``--root-path /xmtc``) the ASGI ``root_path`` carries it: routes
match with the prefix or without (whether the proxy strips it or not), and the API docs and the pages
(:mod:`.pages`) build their URLs from it. The write endpoints' token is read here (:mod:`.auth`), so
every worker process holds it.

``create_app`` is what tests and embedding code call; ``app_from_env`` is the factory uvicorn's
worker processes call (``--workers N``): the parent process passes the project list and settings in
one environment variable, and every worker loads its own copy of each model once, at import of the
factory, before it accepts a connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
from typing import Any, Mapping

from fastapi import FastAPI

from ..errors import ConfigError

from .._version import __version__
from ..config import build_config
from . import auth, problems
from .api import make_router
from .batching import MicroBatcher
from .config import ServeConfig
from .fastpath import SuggestFastPath
from .pages import make_pages
from .registry import Project

log = logging.getLogger(__name__)

ENV_SPEC = "XMTC_SERVE_SPEC"


def create_app(projects: Mapping[str, Any], config: ServeConfig | None = None, *, allow_learn: bool = False,
               token: str | None = None) -> FastAPI:
    """An app serving ``projects``: ``{id: model folder}``, ``{id: [folders of an ensemble]}`` or ``{id: fitted
    model}`` (for embedding/tests). ``allow_learn`` opens ``POST /v1/projects/{id}/learn``
    (:mod:`xmtc.serve.learn`). ``token`` (else ``config.token_file``, else ``$XMTC_TOKEN``) is the bearer
    token the write endpoints require; None leaves them open."""
    config = config or ServeConfig()
    root_path = normalize_root_path(config.root_path)
    token = token if token is not None else auth.read_token(config.token_file)
    check_languages = language_candidates(config.language_check)
    loaded: dict[str, Project] = {}
    for pid, item in projects.items():
        if isinstance(item, (str, os.PathLike, list, tuple)):  # a folder, or the folders of an ensemble
            loaded[pid] = Project.load(pid, item, config.language, config.ensemble_combine)
        else:
            loaded[pid] = Project(pid, f"<in-memory {type(item).__name__}>", item, config.language)
        if config.label_file:
            model = loaded[pid].model
            model.labels_ = model.labels_.with_label_file(config.label_file)
        loaded[pid].check_languages = check_languages
        loaded[pid].warm_up()
        log.info("project %s: %s model with %d labels from %s", pid, loaded[pid].method,
                 loaded[pid].n_labels, loaded[pid].folder)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        for project in loaded.values():
            # the project's model at call time: a learn replaces it between two batches
            project.batcher = MicroBatcher(lambda texts, k, p=project: p.model.predict_topk(texts, k),
                                           max_batch=config.batch_size,
                                           max_wait_s=config.batch_wait_ms / 1000.0, name=project.project_id)
            await project.batcher.start()
        watcher = None
        if config.reload_s > 0:
            from .reload import watch

            watcher = asyncio.create_task(watch(loaded, config, config.reload_s))
        try:
            yield
        finally:  # uvicorn gets here after in-flight requests finished (graceful SIGTERM)
            if watcher is not None:
                watcher.cancel()
            for project in loaded.values():
                await project.batcher.close()

    app = FastAPI(title="xmtc serve", version=__version__, lifespan=lifespan,
                  description="Extreme multi-label text classification models behind an Annif-compatible"
                              " REST API (/v1), with a web page at / and an active-learning page at"
                              " /label.")
    app.state.projects = loaded
    app.state.config = config
    app.state.allow_learn = allow_learn
    app.state.token = token
    problems.install(app)
    app.include_router(make_router())
    app.include_router(make_pages())
    auth.check_routes(app)
    app.add_middleware(SuggestFastPath, projects=loaded)
    app.add_middleware(problems.BodyLimit, limit=config.max_body_bytes)
    if root_path:
        app.add_middleware(RootPath, root_path=root_path)  # added last: runs first
    return app


class RootPath:
    """ASGI middleware: every request's ``root_path`` is ``--root-path`` (what uvicorn's own option sets, here
    also for ``create_app`` in tests and embedding); Starlette then matches routes with or without it."""

    def __init__(self, app, root_path: str):
        self.app = app
        self.root_path = root_path

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            scope = dict(scope, root_path=self.root_path)
        return await self.app(scope, receive, send)


def normalize_root_path(value: str) -> str:
    """``"/xmtc/"`` -> ``"/xmtc"``, ``"/"`` -> ``""``; a prefix must start with ``/`` and hold URL path characters."""
    value = (value or "").strip()
    if not value or value == "/":
        return ""
    if not value.startswith("/") or any(not (c.isascii() and (c.isalnum() or c in "/-._~")) for c in value):
        raise ConfigError(f"--root-path {value!r}: give a URL path such as /xmtc (letters, digits, / - . _ ~)")
    return value.rstrip("/")


def language_candidates(value: str) -> tuple[str, ...] | None:
    """``--language-check``'s languages, or None for ``none`` (or when simplemma is not installed)."""
    if (value or "").strip().lower() in ("", "none", "off"):
        return None
    try:
        from ..models.language import parse_languages

        return parse_languages(value, "--language-check")
    except ImportError:
        log.warning("simplemma is not installed: suggest texts are not checked for their language")
        return None


def spec_to_env(projects: Mapping[str, str], config: ServeConfig) -> str:
    return json.dumps({"projects": dict(projects), "config": dataclasses.asdict(config)})


def app_from_env() -> FastAPI:
    """uvicorn factory for worker processes (``xmtc serve --workers N``)."""
    spec = json.loads(os.environ[ENV_SPEC])
    return create_app(spec["projects"], build_config(ServeConfig, spec["config"], source=ENV_SPEC))
