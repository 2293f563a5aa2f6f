"""Errors as RFC 7807 ``application/problem+json``, the way Annif's API (Connexion) reports them.

Every failure a client can cause is a 4xx with ``type``, ``title``, ``status`` and ``detail``:
401 / 403 for a write endpoint's missing / wrong bearer token (:mod:`.auth`),
400 for a request that does not match the API (missing text, ``limit=-1``, malformed JSON, more than
32 documents; Annif's Connexion answers these with 400, not FastAPI's usual 422, and so do we), 404
for an unknown project or path, 405 for a wrong method, 413 for a body over the limit, 415 for a
body type the endpoint does not read. 503 is Annif's answer when a project cannot serve (here: the
model cannot score text, or the server is shutting down). Nothing a client sends may end in a 500.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)

PROBLEM = "application/problem+json"
_TITLES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           405: "Method Not Allowed", 413: "Payload Too Large", 415: "Unsupported Media Type", 422: "Unprocessable Entity",
           500: "Internal Server Error", 503: "Service Unavailable"}


class Problem(Exception):
    """Raise anywhere in a request to answer with this problem."""

    def __init__(self, status: int, detail: str, title: str | None = None, headers: dict | None = None):
        super().__init__(detail)
        self.status = status
        self.title = title or _TITLES.get(status, "Error")
        self.detail = detail
        self.headers = headers


def problem_response(status: int, detail: str, title: str | None = None,
                     headers: dict | None = None) -> JSONResponse:
    body = {"type": "about:blank", "title": title or _TITLES.get(status, "Error"), "status": status,
            "detail": detail}
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


def problem_bytes(status: int, detail: str, title: str | None = None) -> bytes:
    return json.dumps({"type": "about:blank", "title": title or _TITLES.get(status, "Error"), "status": status,
                       "detail": detail}).encode()


def _describe(errors: list[dict[str, Any]]) -> str:
    """Pydantic's error list as one line: ``'limit' (form): Input should be greater than or equal to 0``."""
    parts = []
    for err in errors[:5]:
        loc = [str(x) for x in err.get("loc", ()) if x not in ("body", "query", "path", "form")]
        if err.get("type") == "json_invalid":
            parts.append(f"request body is not valid JSON ({err.get('ctx', {}).get('error', 'parse error')})")
            continue
        where = repr(".".join(loc)) if loc else "request body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


def install(app: FastAPI) -> None:
    """Register the handlers that turn every error into problem+json."""

    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem):
        return problem_response(exc.status, exc.detail, exc.title, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        return problem_response(400, _describe(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        detail = exc.detail if isinstance(exc.detail, str) else _TITLES.get(exc.status_code, "Error")
        return problem_response(exc.status_code, detail, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception):  # a bug of ours, never the client's input
        log.exception("internal error on %s %s", request.method, request.url.path)
        return problem_response(500, f"internal error: {type(exc).__name__}")


class BodyLimit:
    """ASGI middleware: read at most ``limit`` bytes of a request body; more gets a 413 problem.

    The body is read here and replayed to the app, so a client that lies in (or omits)
    ``Content-Length`` is caught too, and the app never holds more than ``limit`` bytes of it.
    """

    def __init__(self, app, limit: int):
        self.app = app
        self.limit = int(limit)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > self.limit
            except ValueError:
                return await self._reply(send, 400, "Content-Length is not a number")
            if too_big:
                return await self._reply(send, 413, f"request body of {int(declared)} bytes is over the"
                                                    f" limit of {self.limit} bytes")
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                return await self._reply(send, 413, f"request body is over the limit of {self.limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    @staticmethod
    async def _reply(send, status: int, detail: str) -> None:
        payload = problem_bytes(status, detail)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", PROBLEM.encode()),
                                (b"content-length", str(len(payload)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": payload})
