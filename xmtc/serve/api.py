"""The Annif-compatible REST API under ``/v1``.

Matched against Annif's own ``annif/openapi/annif.yaml``, ``annif/rest.py`` and
``annif/backend/http.py`` (NatLibFi/Annif, v1.4): the same paths, the same form-encoded ``suggest``
(``text``, ``limit`` default 10 and >= 0, ``threshold`` in [0, 1], ``language``, ``metadata_*``
fields accepted and unused), the same JSON ``suggest-batch`` (at most 32 documents; ``limit``,
``threshold``, ``language`` as query parameters; each result carries the document's
``document_id``, null when it had none), the same response shapes and problem+json errors. Results
follow Annif's filter: the ``limit`` best labels whose score is >= ``threshold``; a zero score is no
suggestion (Annif keeps suggestions in a sparse matrix, where a zero is absent).

Form-encoded ``suggest`` requests, the hot path, are answered by :mod:`xmtc.serve.fastpath` with
the functions below, before FastAPI's routing; the route here serves multipart bodies and the docs.

``POST /v1/detect-language`` is Annif's too (JSON ``{"text", "languages": [1-5 codes]}``, answered by
:func:`xmtc.models.language.detect`, simplemma's detector as in Annif: ``{"results": [{"language": "en"
or null for unknown, "score": share}, ...]}`` best first; an unsupported candidate is Annif's 400
"unsupported candidate languages"); a form body (``text``, ``languages`` repeated or comma-separated)
is read as well.

What differs, on purpose: ``learn`` answers 403 unless the server runs with ``--allow-learn`` (Annif
answers the same for a project not configured to learn; with it, :mod:`xmtc.serve.learn`), and it
takes the server's bearer token when one is set (:mod:`xmtc.serve.auth`); every project is its own
vocabulary (``vocab_id`` = project id), and ``GET /v1/`` names xmtc and its version rather than
Annif's. A suggest result may carry keys Annif's clients ignore: ``warning`` (the text is mostly
unknown to the model, or clearly in another language than the model's) and ``detected_language``.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Optional
from urllib.parse import parse_qsl, urlencode

import numpy as np
from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from .._version import __version__
from ..errors import XmtcError
from .auth import require_token
from .batching import BatcherClosed
from .problems import Problem
from .registry import Project

MAX_BATCH_DOCUMENTS = 32  # Annif's suggest-batch maxItems
SUGGEST_FORM_SCHEMA = {  # Annif's, from annif.yaml
    "type": "object", "required": ["text"],
    "properties": {
        "text": {"type": "string", "description": "input text"},
        "limit": {"type": "integer", "format": "int32", "default": 10, "minimum": 0,
                  "description": "maximum number of results to return"},
        "threshold": {"type": "number", "default": 0.0, "minimum": 0.0, "maximum": 1.0,
                      "description": "minimum score threshold, below which results will not be returned"},
        "language": {"type": "string", "description": "language of subject labels"}},
    "additionalProperties": {"type": "string", "description": "Additional metadata properties, starting"
                                                              " with 'metadata_'"}}


def parse_suggest_form(body: bytes) -> tuple[str, int, float, str | None]:
    """The suggest form (``text``, ``limit``, ``threshold``, ``language``), checked as Annif's spec says.

    Parsed here rather than through FastAPI's ``Form`` parameters: the same checks for a third of the
    per-request CPU time, which is what bounds the p99 under load on two cores (see benchmarks/RESULTS.md).
    """
    try:
        fields = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False,
                                errors="strict"))
    except UnicodeDecodeError as exc:
        raise Problem(400, f"request body is not UTF-8 form data ({exc.reason} at byte {exc.start})") from None
    if "text" not in fields:
        raise Problem(400, "'text': Field required (a form-encoded body with text=...)")
    limit = fields.get("limit", "10")
    try:
        limit_i = int(limit)
    except ValueError:
        raise Problem(400, f"'limit': must be an integer >= 0, got {limit!r}") from None
    if limit_i < 0:
        raise Problem(400, f"'limit': must be an integer >= 0, got {limit!r}")
    threshold = fields.get("threshold", "0")
    try:
        threshold_f = float(threshold)
    except ValueError:
        threshold_f = math.nan
    if not 0.0 <= threshold_f <= 1.0:
        raise Problem(400, f"'threshold': must be a number in [0, 1], got {threshold!r}")
    return fields["text"], limit_i, threshold_f, fields.get("language") or None


class Document(BaseModel):
    """Annif's ``Document``: a text with an optional identifier and metadata."""

    model_config = ConfigDict(extra="allow")
    text: str
    document_id: Optional[str] = None
    metadata: Optional[dict[str, str]] = None


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    documents: list[Document] = Field(max_length=MAX_BATCH_DOCUMENTS)


class SuggestionResult(BaseModel):
    uri: str
    label: str
    notation: Optional[str] = None
    score: float


class SuggestionResultList(BaseModel):
    results: list[SuggestionResult]


class BatchSuggestionResult(SuggestionResultList):
    document_id: Optional[str] = None


def project_or_404(request: Request, project_id: str) -> Project:
    project = request.app.state.projects.get(project_id)
    if project is None:
        raise Problem(404, f"Project '{project_id}' not found", "Project not found")
    return project


def check_language(project: Project, language: str | None) -> None:
    if language and language != project.language:
        raise Problem(400, f'language "{language}" not supported by vocabulary')


async def topk_rows(project: Project, texts: list[str], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Micro-batched top-``k`` (label indices, scores) of each text, errors mapped to problems."""
    try:
        return await project.batcher.submit_many(texts, min(int(k), project.n_labels))
    except BatcherClosed as exc:
        raise Problem(503, str(exc), "Service unavailable") from None
    except XmtcError as exc:  # the model cannot score text (e.g. it was trained on given features)
        raise Problem(503, f"project '{project.project_id}': {exc}", "Service unavailable") from None


def kept(idx: np.ndarray, scores: np.ndarray, threshold: float) -> list[tuple[int, float]]:
    """Annif's filter of one row: real labels with a score above zero and at least ``threshold``."""
    keep = (idx >= 0) & (scores > 0) & (scores >= threshold)
    return [(int(j), float(s)) for j, s in zip(idx[keep], np.asarray(scores[keep], dtype=np.float64))]


async def suggest_texts(project: Project, texts: list[str], limit: int, threshold: float) -> list[dict]:
    """``[{"results": [...]}]`` per text: the micro-batched top-``limit`` filtered by ``threshold``."""
    if limit == 0 or not texts:
        return [{"results": []} for _ in texts]
    rows = await topk_rows(project, texts, limit)
    out = [{"results": [project.subject(j, s) for j, s in kept(idx, scores, threshold)]} for idx, scores in rows]
    known = project.model.known_fraction(texts) if hasattr(project.model, "known_fraction") else None
    if known is not None:  # an extra key Annif's clients ignore: the text is mostly unknown to the model
        from ..models.records import reading_warning
        for result, share in zip(out, known.tolist()):
            warning = reading_warning(share)
            if warning:
                result["warning"] = warning
    check = project.language_check()
    if check is not None:  # the model was trained for one language (--language): is the text in it?
        for result, text in zip(out, texts):
            found = check.foreign(text)
            if found:
                result["warning"] = "; ".join(w for w in (result.get("warning"), check.message(found)) if w)
                result["detected_language"] = found[0]
    return out


DETECT_SCHEMA = {  # Annif's, from annif.yaml
    "type": "object", "required": ["text", "languages"],
    "properties": {
        "text": {"type": "string", "description": "input text",
                 "example": "A quick brown fox jumped over the lazy dog."},
        "languages": {"type": "array", "description": "candidate languages as IETF BCP 47 codes",
                      "items": {"type": "string", "maxLength": 3, "minLength": 2, "example": "en"},
                      "minItems": 1, "maxItems": 5}}}


def parse_detect_body(body: bytes, content_type: str) -> tuple[str, list[str]]:
    """``(text, languages)`` of a detect-language request, checked as Annif's spec says (400 otherwise)."""
    if content_type.startswith("application/x-www-form-urlencoded"):
        data: object = {}
        for key, value in parse_qsl(body.decode("utf-8", errors="replace"), keep_blank_values=True):
            if key == "text":
                data.setdefault("text", value)
            elif key == "languages":
                data.setdefault("languages", []).extend(c for c in value.split(",") if c)
    else:
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise Problem(400, f"request body is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise Problem(400, "the body must be an object with 'text' and 'languages'")
    for key in ("text", "languages"):
        if key not in data:
            raise Problem(400, f"'{key}' is a required property")
    text, langs = data["text"], data["languages"]
    if not isinstance(text, str):
        raise Problem(400, f"'text': {text!r} is not of type 'string'")
    if not isinstance(langs, list) or not 1 <= len(langs) <= 5:
        raise Problem(400, "'languages': must be a list of 1 to 5 language codes")
    for code in langs:
        if not isinstance(code, str) or not 2 <= len(code) <= 3:
            raise Problem(400, f"'languages': {code!r} is not a language code of 2 or 3 letters")
    return text, langs


def make_router() -> APIRouter:
    router = APIRouter(prefix="/v1")

    # the two hot paths first: routes are matched in order, on every request
    @router.post("/projects/{project_id}/suggest", response_model=SuggestionResultList,
                 summary="suggest subjects for a given text", tags=["Automatic subject indexing"],
                 openapi_extra={"requestBody": {"required": True, "content": {
                     "application/x-www-form-urlencoded": {"schema": SUGGEST_FORM_SCHEMA}}}})
    async def suggest(request: Request, project_id: str):
        project = project_or_404(request, project_id)
        if request.headers.get("content-type", "").startswith("multipart/form-data"):  # curl -F, browsers' FormData
            form = await request.form()
            body = urlencode([(k, v) for k, v in form.multi_items() if isinstance(v, str)]).encode()
        else:
            body = await request.body()
        text, limit, threshold, language = parse_suggest_form(body)
        check_language(project, language)
        result = (await suggest_texts(project, [text], limit, threshold))[0]
        return Response(json.dumps(result, ensure_ascii=False), media_type="application/json")

    @router.post("/projects/{project_id}/suggest-batch", response_model=list[BatchSuggestionResult],
                 summary="suggest subjects for a batch of up to 32 documents",
                 tags=["Automatic subject indexing"])
    async def suggest_batch(request: Request, project_id: str, body: BatchRequest,
                            limit: int = Query(10, ge=0, description="maximum number of results to return"),
                            threshold: float = Query(0.0, ge=0.0, le=1.0,
                                                     description="minimum score of a returned result"),
                            language: Optional[str] = Query(None, description="language of subject labels")):
        project = project_or_404(request, project_id)
        check_language(project, language)
        results = await suggest_texts(project, [d.text for d in body.documents], limit, threshold)
        for res, doc in zip(results, body.documents):
            res["document_id"] = doc.document_id
        return Response(json.dumps(results, ensure_ascii=False), media_type="application/json")

    @router.get("/", summary="basic information about the API service", tags=["API information"])
    async def show_info():
        return {"title": "xmtc REST API (Annif-compatible)", "version": __version__}

    @router.get("/vocabs", summary="list the vocabularies (one per project)", tags=["Vocabulary information"])
    async def list_vocabs(request: Request):
        return {"vocabs": [p.vocab() for p in request.app.state.projects.values()]}

    @router.get("/projects", summary="list the projects", tags=["Project administration"])
    async def list_projects(request: Request):
        return {"projects": [p.dump() for p in request.app.state.projects.values()]}

    @router.get("/projects/{project_id}", summary="show project information", tags=["Project administration"])
    async def show_project(request: Request, project_id: str):
        return project_or_404(request, project_id).dump()

    @router.post("/detect-language", summary="detect the language of a text given a list of candidate languages",
                 tags=["Language detection"], openapi_extra={"requestBody": {"required": True, "content": {
                     "application/json": {"schema": DETECT_SCHEMA}}}})
    async def detect_language(request: Request):
        from ..models.language import detect

        text, langs = parse_detect_body(await request.body(), request.headers.get("content-type", ""))
        try:  # dictionaries load on first use (seconds): off the event loop
            ranked = await asyncio.to_thread(detect, text, tuple(langs))
        except ValueError:
            raise Problem(400, "unsupported candidate languages", "Bad Request") from None
        return {"results": [{"language": lang, "score": score} for lang, score in ranked]}

    @router.post("/projects/{project_id}/learn", status_code=204, tags=["Learning from feedback"],
                 dependencies=[Depends(require_token)],
                 summary="learn from manually indexed documents (with `xmtc serve --allow-learn`; else 403,"
                         " as Annif answers a project not configured to learn; with the server's bearer token"
                         " when it has one)")
    async def learn(request: Request, project_id: str):
        project = project_or_404(request, project_id)
        if not getattr(request.app.state, "allow_learn", False):
            raise Problem(403, f"Project '{project_id}' is not configured to allow learning via API",
                          "Learning not allowed")
        from .learn import learn as learn_documents

        try:
            body = json.loads(await request.body())
        except (ValueError, UnicodeDecodeError) as exc:
            raise Problem(400, f"the body is not JSON ({exc})") from None
        await learn_documents(project, body)
        return Response(status_code=204)

    return router
