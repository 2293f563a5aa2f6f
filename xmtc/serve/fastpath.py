"""The one hot endpoint, answered below FastAPI: ``POST /v1/projects/{id}/suggest`` with a form body.

Why: on two cores the p99 of a loaded server is set by the CPU each request costs, and for a short
text FastAPI's routing, dependency resolution and exception middleware cost more than parsing the
form and scoring the text. This ASGI layer recognises the path, and answers with the very functions
the FastAPI route uses (:func:`~xmtc.serve.api.parse_suggest_form`, :func:`~xmtc.serve.api.suggest_texts`,
the same :class:`~xmtc.serve.problems.Problem` errors), so the answers are the same bytes either way.
Everything else, multipart bodies of this path included, goes on to FastAPI, which also still
documents the endpoint in the OpenAPI schema. Measured: see benchmarks/RESULTS.md (server CPU per request).
"""

from __future__ import annotations

import json
import logging

from starlette._utils import get_route_path

from .api import check_language, parse_suggest_form, suggest_texts
from .problems import PROBLEM, Problem, problem_bytes

log = logging.getLogger(__name__)

_PREFIX, _SUFFIX = "/v1/projects/", "/suggest"


class SuggestFastPath:
    """ASGI middleware answering form-encoded suggest requests for the projects in ``projects``."""

    def __init__(self, app, projects: dict):
        self.app = app
        self.projects = projects

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        path = get_route_path(scope)  # without the root path (--root-path), whether the proxy kept it or not
        if not (path.startswith(_PREFIX) and path.endswith(_SUFFIX)) or "/" in path[len(_PREFIX):-len(_SUFFIX)]:
            return await self.app(scope, receive, send)
        for key, value in scope.get("headers") or ():
            if key == b"content-type" and value.startswith(b"multipart/"):
                return await self.app(scope, receive, send)
        pid = path[len(_PREFIX):-len(_SUFFIX)]
        body = await _read_body(receive)
        if body is None:
            return  # the client went away
        try:
            project = self.projects.get(pid)
            if project is None:
                raise Problem(404, f"Project '{pid}' not found", "Project not found")
            text, limit, threshold, language = parse_suggest_form(body)
            check_language(project, language)
            result = (await suggest_texts(project, [text], limit, threshold))[0]
            status, ctype, payload = 200, b"application/json", json.dumps(result, ensure_ascii=False).encode()
        except Problem as exc:
            status, ctype, payload = exc.status, PROBLEM.encode(), problem_bytes(exc.status, exc.detail, exc.title)
        except Exception as exc:  # a bug of ours, never the client's input: answered like FastAPI's handler
            log.exception("internal error on POST %s", path)
            status, ctype = 500, PROBLEM.encode()
            payload = problem_bytes(500, f"internal error: {type(exc).__name__}")
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", ctype), (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})


async def _read_body(receive) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)
