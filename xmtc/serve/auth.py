"""Bearer tokens for the write endpoints, and the rule that keeps an open write endpoint off the network.

Why: ``--allow-learn`` lets whoever reaches the port rewrite the model, and the ``/label`` page appends to
a file. Reading stays open, as Annif's suggest and project endpoints are: a token guards only what
changes state. The token comes from ``--token-file FILE`` (first line, surrounding white space
stripped) or else the ``XMTC_TOKEN`` environment variable; a request to a guarded route carries
``Authorization: Bearer TOKEN``. No header (or another scheme) is a 401, a wrong token a 403, both as
problem+json with a ``WWW-Authenticate: Bearer`` header (RFC 6750); the comparison is
``hmac.compare_digest`` on the UTF-8 bytes, so its time does not tell how much of a guess was right.

Guarded routes declare ``dependencies=[Depends(require_token)]``; :func:`check_routes` refuses to build an
app with a state-changing route (any method but GET/HEAD/OPTIONS) that is neither guarded nor one of the
known read-only POSTs in :data:`READ_ROUTES`, so a future admin route cannot be left open by mistake.

Without a token the write endpoints are open, which :func:`check_exposure` allows on a loopback address
only: ``xmtc serve --host 0.0.0.0 --allow-learn`` without a token refuses to start.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
from typing import Mapping, Optional

from fastapi import Request

from ..errors import ConfigError
from .problems import Problem

log = logging.getLogger(__name__)

TOKEN_ENV = "XMTC_TOKEN"
MIN_TOKEN_CHARS = 16
MAKE_ONE = "python -c 'import secrets; print(secrets.token_urlsafe(32))' > token && chmod 600 token"
# POSTs that only read: they score or explain a text and change nothing.
READ_ROUTES = frozenset({"/v1/projects/{project_id}/suggest", "/v1/projects/{project_id}/suggest-batch",
                         "/v1/detect-language", "/ui/api/projects/{project_id}/explain"})


def read_token(token_file: Optional[str], environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """The token from ``token_file`` or else ``$XMTC_TOKEN``; None when neither gives one. A file that
    cannot be read, is empty, or a token shorter than :data:`MIN_TOKEN_CHARS` is a one-line ConfigError."""
    if token_file:
        try:
            with open(token_file, encoding="utf-8") as fh:
                token = fh.readline().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--token-file {token_file}: cannot read it ({exc})") from None
        where = f"--token-file {token_file}"
        if not token:
            raise ConfigError(f"{where}: the file is empty; make a token with: {MAKE_ONE}")
    else:
        token = (environ.get(TOKEN_ENV) or "").strip()
        where = f"${TOKEN_ENV}"
        if not token:
            return None
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"{where}: the token has {len(token)} characters; give one of at least"
                          f" {MIN_TOKEN_CHARS} (make one with: {MAKE_ONE})")
    if token_file:
        try:
            if os.stat(token_file).st_mode & 0o077:
                log.warning("%s can be read by other users of this machine (chmod 600 it)", token_file)
        except OSError:
            pass
    return token


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` serves this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check_exposure(host: str, writes: list[str], token: Optional[str]) -> None:
    """Refuse to serve write endpoints without a token on a non-loopback address (see the module doc)."""
    if writes and token is None:
        if not is_loopback(host):
            raise ConfigError(f"--host {host} would let anyone who reaches the port use {' and '.join(writes)}"
                              f" without a token: give --token-file FILE (or set {TOKEN_ENV}), or bind to"
                              " 127.0.0.1")
        log.info("%s open to every user of this machine (no --token-file or %s)", " and ".join(writes),
                 TOKEN_ENV)


def _bearer(request: Request) -> Optional[str]:
    scheme, _, given = request.headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return None
    return given.strip()


async def require_token(request: Request) -> None:
    """FastAPI dependency of every write route: passes when the server has no token (loopback only, see
    :func:`check_exposure`) or the request's bearer token equals it; else a 401 or 403 problem."""
    token = getattr(request.app.state, "token", None)
    if token is None:
        return
    given = _bearer(request)
    if given is None:
        raise Problem(401, "No authorization token provided: send 'Authorization: Bearer TOKEN'",
                      "Unauthorized", headers={"WWW-Authenticate": 'Bearer realm="xmtc"'})
    if not hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8")):
        raise Problem(403, "The authorization token is not valid", "Forbidden",
                      headers={"WWW-Authenticate": 'Bearer realm="xmtc", error="invalid_token"'})


def iter_routes(routes, prefix: str = ""):
    """``(path, methods, route)`` of every endpoint under ``routes`` (an app's or a router's), descending into
    included routers (FastAPI >= 0.150 keeps them as one entry each; older ones list their routes flat)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            extra = getattr(getattr(route, "include_context", None), "prefix", "") or ""
            yield from iter_routes(inner.routes, prefix + extra)
        elif getattr(route, "path", None) is not None:
            yield prefix + route.path, set(getattr(route, "methods", None) or ()), route


def unguarded_writes(app) -> list[str]:
    """``"METHOD PATH"`` of each state-changing route that neither requires the token nor only reads."""
    out = []
    for path, methods, route in iter_routes(app.routes):
        methods -= {"GET", "HEAD", "OPTIONS"}
        if not methods or path in READ_ROUTES:
            continue
        deps = [d.call for d in getattr(getattr(route, "dependant", None), "dependencies", ())]
        if require_token not in deps:
            out.extend(f"{m} {path}" for m in sorted(methods))
    return out


def check_routes(app) -> None:
    """Raise when a write route was added without ``Depends(require_token)`` (a bug of ours, caught at start)."""
    open_writes = unguarded_writes(app)
    if open_writes:
        raise RuntimeError(f"write routes without the token check: {', '.join(open_writes)}")
