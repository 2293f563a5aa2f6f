"""``xmtc serve``: models behind an Annif-compatible REST API (FastAPI on uvicorn) and two web pages.

Layout, one idea a module: :mod:`.config` (settings), :mod:`.registry` (projects = model folders),
:mod:`.batching` (micro-batching of concurrent requests), :mod:`.problems` (problem+json errors, body
limit), :mod:`.api` (``/v1``), :mod:`.pages` (``/``, ``/label`` and their ``/ui/api``), :mod:`.app`
(the application), :mod:`.cli` (the command). Needs the ``serve`` extra (FastAPI, uvicorn,
python-multipart); importing this package alone does not import them.
"""

from __future__ import annotations


def create_app(projects, config=None):
    """See :func:`xmtc.serve.app.create_app`."""
    from .app import create_app as _create

    return _create(projects, config)


__all__ = ["create_app"]
