"""The ASGI application: projects loaded once per worker, a micro-batcher each, the API and the pages.

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

from .._version import __version__
from ..config import build_config
from . import problems
from .api import make_router
from .batching import MicroBatcher
from .config import ServeConfig
from .fastpath import SuggestFastPath
from .pages import make_pages
from .registry import Project

log = logging.getLogger(__name__)

ENV_SPEC = "XMTC_SERVE_SPEC"


def create_app(projects: Mapping[str, Any], config: ServeConfig | None = None, *, allow_learn: bool = False
               ) -> FastAPI:
    """An app serving ``projects``: ``{id: model folder}``, ``{id: [folders of an ensemble]}`` or ``{id: fitted
    model}`` (for embedding/tests). ``allow_learn`` opens ``POST /v1/projects/{id}/learn``
    (:mod:`xmtc.serve.learn`)."""
    config = config or ServeConfig()
    loaded: dict[str, Project] = {}
    for pid, item in projects.items():
        if isinstance(item, (str, os.PathLike, list, tuple)):  # a folder, or the folders of an ensemble
            loaded[pid] = Project.load(pid, item, config.language, config.ensemble_combine)
        else:
            loaded[pid] = Project(pid, f"<in-memory {type(item).__name__}>", item, config.language)
        if config.label_file:
            model = loaded[pid].model
            model.labels_ = model.labels_.with_label_file(config.label_file)
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
    problems.install(app)
    app.include_router(make_router())
    app.include_router(make_pages())
    app.add_middleware(SuggestFastPath, projects=loaded)
    app.add_middleware(problems.BodyLimit, limit=config.max_body_bytes)  # added last: runs first
    return app


def spec_to_env(projects: Mapping[str, str], config: ServeConfig) -> str:
    return json.dumps({"projects": dict(projects), "config": dataclasses.asdict(config)})


def app_from_env() -> FastAPI:
    """uvicorn factory for worker processes (``xmtc serve --workers N``)."""
    spec = json.loads(os.environ[ENV_SPEC])
    return create_app(spec["projects"], build_config(ServeConfig, spec["config"], source=ENV_SPEC))
