"""``POST /v1/projects/{id}/learn`` when ``xmtc serve --allow-learn`` is given: Annif's learn endpoint.

Annif's contract (``annif/openapi/annif.yaml``, ``annif/rest.py``): the body is a JSON list of documents
``{"text": ..., "subjects": [{"uri": ..., "label": ...}, ...]}``; documents without ``text`` or
``subjects`` are skipped; success is an empty 204; an unknown project 404; a project that may not learn
403 ("Learning not allowed"); a backend that cannot learn 503 with the reason. Here a subject is the
model's label whose URI (from the label file) or id equals its ``uri``; any other subject is a new label
named by its ``uri`` (shown as its ``label``), which is how vocabularies grow through this API.

What happens: the model is read afresh from its folder, learns with
:meth:`xmtc.methods.xr_linear.estimator.XRLinear.learn` (the code of ``xmtc learn``) in a worker thread, is saved over the folder atomically, and then replaces
the served model in one assignment. Requests already scoring keep the model object they started with and
finish on it; later ones see the new model. Learns of one project run one at a time (a lock), so none
is lost. ``--workers N`` is refused with ``--allow-learn``: the other worker processes would keep
serving the old model.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import os
from pathlib import Path
from typing import Any

from ..errors import DataFormatError, XmtcError
from .problems import Problem

log = logging.getLogger(__name__)

def parse_documents(body: Any) -> list[tuple[str, list[tuple[str, str | None]]]]:
    """``[(text, [(uri, label or None), ...])]`` of the documents Annif would learn from (see module doc);
    a body that is not a list of objects, or a subject without a string ``uri``, is a 400."""
    if not isinstance(body, list):
        raise Problem(400, "the body must be a JSON list of documents {\"text\": ..., \"subjects\": [...]}")
    docs = []
    for i, doc in enumerate(body):
        if not isinstance(doc, dict):
            raise Problem(400, f"document {i}: must be an object with 'text' and 'subjects'")
        if "text" not in doc or "subjects" not in doc:
            continue  # Annif skips these
        text, subjects = doc["text"], doc["subjects"]
        if not isinstance(text, str) or not isinstance(subjects, list):
            raise Problem(400, f"document {i}: 'text' must be a string and 'subjects' a list")
        subs = []
        for s in subjects:
            if not isinstance(s, dict) or not isinstance(s.get("uri"), str) or not s["uri"]:
                raise Problem(400, f"document {i}: every subject needs a 'uri' string")
            label = s.get("label")
            subs.append((s["uri"], label if isinstance(label, str) else None))
        docs.append((text, subs))
    return docs


def label_lists(docs, vocab) -> tuple[list[str], list[list[str]], dict[str, str]]:
    """Texts, label-name lists and display names of new labels: a subject's ``uri`` matched against the
    vocabulary's URIs first, then its ids; unmatched ones become new labels named by their ``uri``."""
    by_uri = {vocab.uri(j): name for j, name in enumerate(vocab.names)}
    texts, lists, new_display = [], [], {}
    for text, subjects in docs:
        names = []
        for uri, label in subjects:
            name = by_uri.get(uri) or (uri if uri in vocab.index else None)
            if name is None:
                name = uri
                if label:
                    new_display.setdefault(uri, label)
            names.append(name)
        texts.append(text)
        lists.append(sorted(set(names)))
    return texts, lists, new_display


async def learn(project, body: Any) -> None:
    """Learn the body's documents into ``project`` and serve the result (see the module doc)."""
    from ..models.learning import refusal

    docs = [d for d in parse_documents(body) if d[1]]
    if not isinstance(project.folder, str) or not os.path.isfile(Path(project.folder) / "manifest.json"):
        raise Problem(503, f"project '{project.project_id}' is not one model folder (an ensemble or an"
                           " in-memory model); it cannot learn", "Service unavailable")
    if not getattr(project.model, "can_learn", False):
        raise Problem(503, refusal(project.method), "Service unavailable")
    if not docs:
        return
    if getattr(project, "learn_lock", None) is None:
        project.learn_lock = asyncio.Lock()
    async with project.learn_lock:
        try:
            model = await asyncio.to_thread(_learn_and_save, project, docs)
        except DataFormatError as exc:
            raise Problem(400, str(exc)) from None
        except XmtcError as exc:
            raise Problem(503, str(exc), "Service unavailable") from None
        project.model = model  # one assignment: in-flight requests hold the old object
        mtime = os.path.getmtime(Path(project.folder) / "manifest.json")
        project.modified = _dt.datetime.fromtimestamp(mtime, tz=_dt.timezone.utc).replace(microsecond=0)
    log.info("project %s learned %d documents; now %d labels", project.project_id, len(docs), project.n_labels)


def _learn_and_save(project, docs):
    """The blocking part, in a worker thread: a fresh copy learns, is saved atomically and loaded back."""
    from .registry import load_model

    served = project.model
    model = load_model(project.folder)
    # the folder's vocabulary (`xmtc labels add` may have rewritten it since the served model was loaded),
    # with the served one's names and URIs (a `serve --label-file`'s) where the folder has none
    model.labels_ = _served_names(model.labels_, served.labels_)
    texts, lists, new_display = label_lists(docs, model.labels_)
    model.learn(texts, lists)
    if new_display:
        model.labels_ = _with_display(model.labels_, new_display)
    model.save(project.folder)
    fresh = load_model(project.folder)
    fresh.labels_ = model.labels_
    fresh.predict_topk(["warm up"], 1)
    return fresh


def _served_names(vocab, served):
    """``vocab`` with each label's empty display name and URI taken from ``served`` (the same label by id)."""
    from ..data.labels import LabelVocab

    def column(ours, theirs):
        if theirs is None:
            return ours
        base = list(ours) if ours is not None else [""] * len(vocab)
        return [v or (theirs[served.index[n]] if n in served.index else "") for v, n in zip(base, vocab.names)]

    return LabelVocab(vocab.names, display=column(vocab.display, served.display), texts=vocab.texts,
                      uris=column(vocab.uris, served.uris))


def _with_display(vocab, display: dict[str, str]):
    from ..data.labels import LabelVocab

    names = vocab.names
    shown = [display.get(n, vocab.display[j] if vocab.display else "") for j, n in enumerate(names)]
    return LabelVocab(names, display=shown, texts=vocab.texts, uris=vocab.uris)
