"""Projects: the model folders a server offers, each under an id, loaded once per worker process.

Annif calls a configured model a *project*; so does this API, so that Annif's clients (and its
``http`` backend) can use an xmtc model unchanged. A project's id is its folder's name unless the
user names it (``--name ID=MODEL_DIR``); ids are what URLs carry, so they are restricted to URL-safe
characters and must be unique.
"""

from __future__ import annotations

import datetime as _dt
import inspect
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..errors import ConfigError

log = logging.getLogger(__name__)

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def project_specs(model_dirs: Sequence[str], names: Sequence[str] = (), ensembles: Sequence[str] = ()
                  ) -> dict[str, str | list[str]]:
    """``{project id: model folder, or a list of folders for an ensemble}`` from positional folders,
    ``ID=MODEL_DIR`` names and ``ID=DIR1,DIR2[,...]`` ensembles.

    A folder given both ways is served once, under its given name; an ensemble's members may also be
    served on their own.
    """
    named: dict[str, str | list[str]] = {}
    for item in names:
        pid, sep, folder = item.partition("=")
        if not sep or not pid or not folder:
            raise ConfigError(f"--name expects ID=MODEL_DIR, got {item!r}")
        _check_id(pid, f"--name {item!r}")
        if pid in named:
            raise ConfigError(f"--name: project id {pid!r} is given twice")
        named[pid] = folder
    named_paths = {os.path.realpath(f) for f in named.values()}
    for item in ensembles:
        pid, sep, folders = item.partition("=")
        members = [f for f in folders.split(",") if f]
        if not sep or not pid or len(members) < 2:
            raise ConfigError(f"--ensemble expects ID=MODEL_DIR,MODEL_DIR[,...] (two or more folders), got {item!r}")
        _check_id(pid, f"--ensemble {item!r}")
        if pid in named:
            raise ConfigError(f"--ensemble: project id {pid!r} is given twice")
        named[pid] = members
    specs = dict(named)
    for folder in model_dirs:
        if os.path.realpath(folder) in named_paths:
            continue
        pid = Path(os.path.abspath(folder)).name
        _check_id(pid, f"{folder}: folder name")
        if pid in specs:
            raise ConfigError(f"{folder}: project id {pid!r} is already used by {specs[pid]}; give one of"
                              " them another id with --name ID=MODEL_DIR")
        specs[pid] = folder
    if not specs:
        raise ConfigError("no model folders to serve")
    return specs


def _check_id(pid: str, where: str) -> None:
    if not _ID.match(pid):
        raise ConfigError(f"{where}: project id {pid!r} must be 1-128 letters, digits, '_', '.' or '-'"
                          " (it is part of the URL); choose one with --name ID=MODEL_DIR")


def load_model(folder: str):
    """``xmtc.load``, memory-mapping the weights where this xmtc's loader offers it."""
    from ..models import load

    if "mmap" in inspect.signature(load).parameters:
        return load(folder, mmap=True)
    return load(folder)


@dataclass
class Project:
    """One served model and what the API reports about it."""

    project_id: str
    folder: str
    model: Any
    language: str = "en"
    modified: _dt.datetime | None = None
    batcher: Any = field(default=None, repr=False)
    check_languages: tuple[str, ...] | None = None  # --language-check's candidates; None = no check
    _check: Any = field(default=None, repr=False)
    _checked_model: Any = field(default=None, repr=False)

    @classmethod
    def load(cls, project_id: str, folder: str | Sequence[str], language: str = "en",
             combine: str = "average") -> "Project":
        """The model at ``folder``, or the :class:`~xmtc.models.ensemble.Ensemble` of the models at a list of
        folders (scores combined by ``combine``); the modification time is the newest manifest's."""
        if isinstance(folder, (str, os.PathLike)):
            folders, model = [os.fspath(folder)], load_model(folder)
        else:
            from ..models.ensemble import Ensemble

            folders = [os.fspath(f) for f in folder]
            model = Ensemble([load_model(f) for f in folders], combine=combine)
            folder = ",".join(folders)
        mtime = max(os.path.getmtime(Path(f) / "manifest.json") for f in folders)
        modified = _dt.datetime.fromtimestamp(mtime, tz=_dt.timezone.utc).replace(microsecond=0)
        return cls(project_id, folder, model, language, modified)

    def warm_up(self) -> None:
        """Score one text before the first request: the first prediction loads the kernels, builds the
        tokenizer's word-character table and touches the model's memory-mapped weights, which must not land on
        a user's first request."""
        from ..errors import XmtcError
        try:
            self.model.predict_topk(["warm up"], 1)
        except XmtcError as exc:  # e.g. a model of precomputed features: its requests get a 503
            log.warning("project %s cannot score text: %s", self.project_id, exc)
        check = self.language_check()
        if check is not None:  # simplemma's dictionaries: seconds to load, not on a user's request
            check.detector.load()

    def language_check(self):
        """The :class:`~xmtc.models.language.LanguageCheck` of the served model's language (it may change with
        a reload), or None: no candidates, or a model trained without ``--language``."""
        if not self.check_languages:
            return None
        model = self.model
        if self._checked_model is not model:  # a new model (learn, reload): its language may differ
            from ..models.language import LanguageCheck, model_language

            lang = model_language(model)
            if self._check is None or self._check.language != lang:
                self._check = LanguageCheck.for_model(model, self.check_languages) if lang else None
            self._checked_model = model
        return self._check

    @property
    def n_labels(self) -> int:
        return len(self.model.labels_)

    @property
    def method(self) -> str:
        return getattr(self.model, "method", type(self.model).__name__)

    def vocab(self) -> dict:
        """Annif's ``Vocabulary`` object: every project carries its own label vocabulary."""
        return {"vocab_id": self.project_id, "languages": [self.language], "size": self.n_labels,
                "loaded": True}

    def dump(self) -> dict:
        """Annif's ``Project`` object (the keys of Annif's ``AnnifProject.dump``, in its order)."""
        return {
            "project_id": self.project_id,
            "name": self.project_id,
            "language": self.language,
            "backend": {"backend_id": self.method},
            "vocab": self.vocab(),
            "vocab_language": self.language,
            "is_trained": True,
            "modification_time": None if self.modified is None else self.modified.isoformat().replace(
                "+00:00", "Z"),
        }

    def subject(self, j: int, score: float) -> dict:
        """Annif's ``SuggestionResult``: ``uri`` is the label file's URI where it gave one, else the id."""
        labels = self.model.labels_
        return {"uri": labels.uri(j), "label": labels.display_name(j), "notation": None, "score": score}
