"""The two web pages and the small JSON API behind them (under ``/ui/api``, apart from Annif's ``/v1``).

``/``: type or paste a text, see the suggested labels with score bars and, where the model offers
``explain``, the words that led to each; ``/?text=...`` fills the box and suggests at once, so a link
shows a result. ``/label``: active learning: the next pool documents to label (ordered by
``xmtc.select`` where it is installed, else in pool order, which the page says), each with the
model's suggestions to accept, remove or extend; saving appends ``{"text", "labels"}`` to a JSONL
file, the format ``xmtc train`` reads; when the server has a token (:mod:`.auth`) a save needs it, and
the page asks for it once per browser tab. Plain HTML and a little JavaScript from the package: no build.

Every URL in the pages and their script is relative to a ``<base href>`` the server fills in with its
root path, so the pages work behind a reverse proxy under a prefix (``xmtc serve --root-path /xmtc``).
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import os
import threading
from importlib import resources
from typing import Optional

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, Field

from ..errors import XmtcError
from .api import kept, project_or_404, topk_rows
from .auth import require_token
from .problems import Problem
from .registry import Project

log = logging.getLogger(__name__)

_STATIC = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}


def _static(name: str) -> str:
    return resources.files("xmtc.serve").joinpath("static", name).read_text(encoding="utf-8")


def page(name: str, request: Request) -> str:
    """A page with its ``<base href>`` set to the server's root path (see the module doc)."""
    root = request.scope.get("root_path", "") or ""
    return _static(name).replace('<base href="/">', f'<base href="{html.escape(root.rstrip("/"))}/">', 1)


class ExplainRequest(BaseModel):
    text: str
    limit: int = Field(5, ge=1, le=100)
    n_terms: int = Field(8, ge=1, le=50)


class LabelledDocument(BaseModel):
    text: str = Field(max_length=1_000_000)
    labels: list[str] = Field(max_length=1000)
    pool_index: Optional[int] = None


def has_explain(project: Project) -> bool:
    return callable(getattr(project.model, "explain", None))


def select_module():
    """``xmtc.select`` where this xmtc has it (built alongside the server), else None."""
    try:
        from .. import select
    except ImportError:
        return None
    return select if hasattr(select, "select_documents") else None


class LabelQueue:
    """The pool of unlabelled texts, its active-learning order per project, and the output file."""

    def __init__(self, pool_path: str | None, output: str | None, strategy: str | None):
        self.pool_path, self.output, self.strategy = pool_path, output, strategy
        self.texts: list[str] | None = None
        self.order: dict[str, list[int]] = {}
        self.done: set[str] = set()
        self.lines: int | None = None  # lines in the output file, counted once, then kept up to date
        self.lock = threading.Lock()

    def load_pool(self) -> list[str]:
        if self.texts is None:
            if not self.pool_path:
                raise Problem(404, "no pool of documents to label: start the server with --label-pool FILE")
            from ..data import read_inputs
            texts = read_inputs(self.pool_path)
            if not isinstance(texts, list):
                raise Problem(503, f"{self.pool_path}: the pool must hold texts, not feature vectors")
            self.texts = texts
            self.done = set(self._already_saved())
        return self.texts

    def _already_saved(self):
        if not self.output or not os.path.exists(self.output):
            return
        with open(self.output, encoding="utf-8") as fh:
            for line in fh:
                try:
                    yield json.loads(line)["text"]
                except (ValueError, KeyError, TypeError):
                    continue

    def ordered(self, project: Project) -> tuple[list[int], str]:
        texts = self.load_pool()
        if project.project_id not in self.order:
            sel = select_module()
            if sel is None:
                self.order[project.project_id] = list(range(len(texts)))
            else:  # the first 2,000 picks: an afternoon's labelling; a restart picks again
                n = min(len(texts), 2000)
                self.order[project.project_id] = [int(i) for i in sel.select_documents(
                    project.model, texts, n, self.strategy_name())]
        return self.order[project.project_id], self.strategy_name()

    def strategy_name(self) -> str:
        sel = select_module()
        if sel is None:
            return "pool order (xmtc.select is not installed)"
        return self.strategy or sel.DEFAULT_STRATEGY

    def save(self, doc: LabelledDocument) -> int:
        if not self.output:
            raise Problem(404, "no output file: start the server with --label-output FILE.jsonl")
        line = json.dumps({"text": doc.text, "labels": doc.labels}, ensure_ascii=False) + "\n"
        with self.lock:
            if self.lines is None:
                self.lines = 0
                if os.path.exists(self.output):
                    with open(self.output, "rb") as fh:
                        self.lines = sum(1 for _ in fh)
            with open(self.output, "a", encoding="utf-8") as fh:  # one write of one whole line, then fsync:
                fh.write(line)                                      # a crash loses at most this line
                fh.flush()
                os.fsync(fh.fileno())
            self.done.add(doc.text)
            self.lines += 1
            return self.lines


def make_pages() -> APIRouter:
    router = APIRouter()

    @router.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index(request: Request):
        return HTMLResponse(page("index.html", request))

    @router.get("/label", response_class=HTMLResponse, include_in_schema=False)
    async def label_page(request: Request):
        return HTMLResponse(page("label.html", request))

    @router.get("/static/{name}", include_in_schema=False)
    async def static(name: str):
        if name not in _STATIC:
            raise Problem(404, f"no static file {name!r}")
        return Response(_static(name), media_type=_STATIC[name])

    def queue(request: Request) -> LabelQueue:
        app = request.app
        if not hasattr(app.state, "label_queue"):
            cfg = app.state.config
            app.state.label_queue = LabelQueue(cfg.label_pool, cfg.label_output, cfg.select_strategy)
        return app.state.label_queue

    @router.get("/ui/api/projects", tags=["Web pages"], summary="projects and what the pages can show for each")
    async def ui_projects(request: Request):
        cfg = request.app.state.config
        return {"projects": [{"project_id": p.project_id, "method": p.method, "n_labels": p.n_labels,
                              "explain": has_explain(p), "label_pool": bool(cfg.label_pool),
                              "label_output": bool(cfg.label_output)}
                             for p in request.app.state.projects.values()]}

    @router.post("/ui/api/projects/{project_id}/explain", tags=["Web pages"],
                 summary="suggested labels with the words that led to each (model.explain)")
    async def ui_explain(request: Request, project_id: str, body: ExplainRequest):
        project = project_or_404(request, project_id)
        if not has_explain(project):
            raise Problem(404, f"project '{project_id}' ({project.method}) offers no explanations")
        try:
            expl = (await asyncio.to_thread(project.model.explain, [body.text], k=body.limit,
                                            n_terms=body.n_terms))[0]
        except XmtcError as exc:
            raise Problem(503, f"project '{project_id}': {exc}") from None
        index = project.model.labels_.index
        out = []
        for item in expl:
            j = index.get(item["label"])
            entry = project.subject(j, float(item["score"])) if j is not None else {
                "uri": item["label"], "label": item["label"], "notation": None, "score": float(item["score"])}
            entry["source"] = item.get("source")  # "ranker", "label-text" (the label's own text) or None
            if entry["source"] is None:  # not explained: why, and no terms (the page shows none for it)
                entry["reason"] = str(item.get("reason", ""))
            else:
                entry["terms"] = [{"term": str(t["term"]), "weight": float(t["weight"])} for t in item["terms"]]
            out.append(entry)
        return {"results": out}

    @router.get("/ui/api/projects/{project_id}/labels", tags=["Web pages"],
                summary="labels whose name or id contains q (to extend a document's labels)")
    async def ui_labels(request: Request, project_id: str, q: str = Query("", max_length=200),
                        limit: int = Query(20, ge=1, le=200)):
        project = project_or_404(request, project_id)
        labels = project.model.labels_
        needle = q.strip().lower()
        out = []
        if needle:
            for j, name in enumerate(labels.names):
                shown = labels.display_name(j)
                if needle in shown.lower() or needle == name.lower():
                    out.append({"id": name, "label": shown, "uri": labels.uri(j)})
                    if len(out) >= limit:
                        break
        return {"labels": out}

    @router.get("/ui/api/projects/{project_id}/next", tags=["Web pages"],
                summary="the next pool documents to label, with the model's suggestions")
    async def ui_next(request: Request, project_id: str, n: int = Query(5, ge=1, le=100),
                      limit: int = Query(5, ge=1, le=50)):
        project = project_or_404(request, project_id)
        q = queue(request)
        order, how = await asyncio.to_thread(q.ordered, project)
        picked = [i for i in order if q.texts[i] not in q.done][:n]
        texts = [q.texts[i] for i in picked]
        rows = await topk_rows(project, texts, limit) if texts else []
        names = project.model.labels_.names
        docs = [{"pool_index": i, "text": text,
                 "suggestions": [dict(project.subject(j, s), id=names[j]) for j, s in kept(idx, scores, 0.0)]}
                for i, text, (idx, scores) in zip(picked, texts, rows)]
        return {"strategy": how, "remaining": sum(1 for i in order if q.texts[i] not in q.done),
                "documents": docs}

    @router.post("/ui/api/projects/{project_id}/labelled", tags=["Web pages"],
                 dependencies=[Depends(require_token)],
                 summary="append one labelled document to the JSONL output file (with the server's bearer"
                         " token when it has one)")
    async def ui_labelled(request: Request, project_id: str, body: LabelledDocument):
        project_or_404(request, project_id)
        labels = [lab.strip() for lab in body.labels]
        if any(not lab or any(c in lab for c in "\t\n\r") for lab in labels):
            raise Problem(400, "labels must be non-empty strings without tabs or line breaks")
        body.labels = list(dict.fromkeys(labels))
        lines = await asyncio.to_thread(queue(request).save, body)
        return {"saved": lines, "file": request.app.state.config.label_output}

    return router

