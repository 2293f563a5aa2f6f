"""The settings of ``xmtc serve``, declared once: the CLI options are generated from this dataclass.

Why these knobs: the server binds to loopback unless told otherwise (a model server is an internal
service; exposing it is a decision, and its write endpoints then need a token: :mod:`xmtc.serve.auth`), request bodies are bounded (a 10 MB paste must get a 413, not
an out-of-memory worker), and the micro-batching window is a trade of a lone request's latency
against throughput under load (see :mod:`xmtc.serve.batching` for the figures).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..config import param


@dataclass
class ServeConfig:
    """Settings of ``xmtc serve`` (models are given as arguments, not here)."""

    host: str = param("127.0.0.1", "Address to bind; the default serves this machine only.")
    port: int = param(8000, "TCP port.", minimum=0, maximum=65535)
    workers: int = param(1, "Worker processes; each loads every model once.", minimum=1)
    language: str = param("en", "Language reported for every project (Annif's 'language'); a request"
                          " asking for another language gets a 400, as in Annif.")
    max_body_bytes: int = param(4 * 1024 * 1024, "Largest request body accepted; larger ones get a 413.",
                                minimum=1024)
    batch_size: int = param(64, "Most texts scored by one predict call of the micro-batcher.", minimum=1)
    batch_wait_ms: float = param(1.0, "How long the micro-batcher waits for more requests once it holds"
                                 " one (0 = only what has queued while the previous call ran).", minimum=0.0)
    ensemble_combine: str = param("average", "How an --ensemble project combines its members' scores (as"
                                  " `xmtc ensemble --combine`).", choices=("average", "rank-average",
                                                                         "sigmoid-average"))
    reload_s: float = param(2.0, "Every this many seconds, serve the new model of a folder that was rewritten"
                            " (train -o, learn, labels add/remove); 0 = never.", minimum=0.0)
    label_file: Optional[str] = param(None, "Label names, texts and URIs (the layout `xmtc train --label-file`"
                                      " reads) applied to every project: for models trained without one.")
    label_pool: Optional[str] = param(None, "Unlabelled texts (one a line, or TSV/JSONL) offered for"
                                      " labelling on the /label page.")
    label_output: Optional[str] = param(None, "JSONL file the /label page appends {\"text\", \"labels\"}"
                                        " lines to (the format `xmtc train` reads).")
    token_file: Optional[str] = param(None, "File whose first line is the bearer token that the write endpoints"
                                      " (learn, the /label page's saves) require; without it the XMTC_TOKEN"
                                      " environment variable, and without either they are open, which only a"
                                      " loopback --host allows. Read endpoints never need it.")
    root_path: str = param("", "Path prefix the server is reached under behind a reverse proxy (e.g. /xmtc): the"
                           " pages' links, the API docs and the API then work under it, whether the proxy strips"
                           " the prefix or passes it on.")
    language_check: str = param("en,fi,sv,de,fr", "Languages (simplemma codes) each suggest text is checked"
                                " against when its project's model was trained with --language: a text clearly in"
                                " another one gets a 'warning' and 'detected_language' in its result; none = no"
                                " check.")
    select_strategy: Optional[str] = param(None, "Active-learning strategy that orders the pool on the"
                                           " /label page (see `xmtc select`; none = its default).",
                                           choices=(None, "uncertainty", "label-coverage", "diversity",
                                                    "hybrid", "random"))
