"""Serve a model folder's new contents once it is rewritten: ``xmtc train -o``, ``xmtc learn``, ``xmtc labels
add`` / ``remove`` on a served folder take effect without a restart.

Every ``reload_s`` seconds the watcher compares each served folder's ``manifest.json`` (its inode, size and
modification time: a save swaps a whole new folder in, so the manifest is a new file) with what it saw;
a changed folder is loaded in a worker thread, warmed up, and replaces the served model in one assignment
(requests already scoring finish on the old object, as after a learn). A folder that fails to load keeps
the old model serving and is logged; it is tried again when it changes again. Ensembles are watched
member by member and rebuilt when any member changes.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


def _signature(folders: list[str]) -> tuple:
    out = []
    for f in folders:
        try:
            st = os.stat(Path(f) / "manifest.json")
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


def _folders(project) -> list[str] | None:
    if not isinstance(project.folder, str) or project.folder.startswith("<"):
        return None  # an in-memory model
    return project.folder.split(",")


def _reload(project, config):
    from .registry import Project

    folders = _folders(project)
    fresh = Project.load(project.project_id, folders[0] if len(folders) == 1 else folders, project.language,
                         config.ensemble_combine)
    if config.label_file:
        fresh.model.labels_ = fresh.model.labels_.with_label_file(config.label_file)
    fresh.warm_up()
    return fresh


async def watch(projects: dict, config, interval: float) -> None:
    """Run until cancelled: reload each project whose folder changed (see the module doc)."""
    seen = {pid: _signature(f) for pid, p in projects.items() if (f := _folders(p))}
    while True:
        await asyncio.sleep(interval)
        for pid, project in projects.items():
            folders = _folders(project)
            if not folders:
                continue
            sig = _signature(folders)
            if sig == seen.get(pid) or any(s is None for s in sig):
                continue  # unchanged, or a folder caught mid-swap: look again next time
            seen[pid] = sig
            lock = getattr(project, "learn_lock", None)
            if lock is not None and lock.locked():
                continue  # a learn is writing this folder; it installs its own model
            try:
                fresh = await asyncio.to_thread(_reload, project, config)
            except Exception as exc:  # keep serving the old model
                log.warning("project %s: %s changed but could not be loaded (%s); still serving the old model",
                            pid, project.folder, exc)
                continue
            project.model = fresh.model
            project.modified = fresh.modified or _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
            log.info("project %s: reloaded %s (%d labels)", pid, project.folder, project.n_labels)
