"""Runs on Annif's own interpreter (benchmarks/.venv-annif), called by annif_peer.py: one project's top-10
suggestions for every document of an Annif TSV corpus, timed in-process.

    .venv-annif/bin/python _annif_suggest.py PROJECT_ID TEST.tsv OUT.jsonl

ANNIF_PROJECTS and ANNIF_DATADIR come from the environment. The project (and an ensemble's sources) is
loaded and warmed on a few documents before the clock starts; then ``AnnifProject.suggest_corpus`` runs
over the whole corpus in Annif's own batches (what ``annif eval`` and ``annif index`` do) and the top 10
of every document is kept, as ``annif suggest --limit 10`` would. One JSON line of URIs per document goes
to OUT.jsonl; the last line of stdout is a JSON object with the timings.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time


def main() -> int:
    project_id, corpus_path, out_path = sys.argv[1:4]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import annif
    import annif.corpus
    import annif.registry

    logging.getLogger("annif").setLevel(logging.WARNING)
    app = annif.create_flask_app()
    with app.app_context():
        t0 = time.perf_counter()
        project = annif.registry.get_project(project_id)
        corpus = annif.corpus.DocumentFileTSV(corpus_path, project.subjects)
        docs = list(corpus.documents)
        project.suggest(docs[:8])  # loads the model (and the sources' models), warms caches
        load_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        results = list(project.suggest_corpus(annif.corpus.DocumentList(docs)).filter(limit=10))
        suggest_s = time.perf_counter() - t1
        with open(out_path, "w", encoding="utf-8") as out:
            for hits in results:
                ranked = sorted(hits, key=lambda h: -h.score)[:10]
                out.write(json.dumps([project.subjects[h.subject_id].uri for h in ranked]) + "\n")
    print(json.dumps({"project": project_id, "n_docs": len(docs), "load_s": round(load_s, 3),
                      "suggest_s": round(suggest_s, 3), "loadavg": list(os.getloadavg())}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
