"""``xmtc labels add MODEL_DIR LABEL_FILE`` and ``xmtc labels remove MODEL_DIR IDS_FILE``: change a trained
model's label set without retraining (:mod:`xmtc.models.open_labels` says how each method takes it).

The label file has the layout ``--label-file`` reads (``#id uri prefLabel label_text`` header, or
``id<TAB>name[<TAB>text]``), usually a new release of the model's vocabulary: labels the model lacks are
added, known ones take the file's names, URIs and texts, and the counts of each are printed (``added 3,
updated 2, unchanged 1,994 labels``). The ids file has one label id a line. The model folder is rewritten
atomically, as ``xmtc train -o`` writes it (``-o OTHER`` writes the result elsewhere): killed at any moment,
the folder holds the old model or the new one. A serving ``xmtc serve`` picks the change up on reload.
"""

from __future__ import annotations

import argparse
import logging

log = logging.getLogger(__name__)


def _add_add(sub, common) -> None:
    p = sub.add_parser("add", help="Add labels (id, URI, name, text) to a trained model, without retraining.",
                       description="Add the labels of LABEL_FILE that the model does not have, and give those it"
                                   " has the file's names, URIs and texts (a new release of the vocabulary)."
                                   " Methods that score label texts embed new ones; the others suggest them"
                                   " through the label-text route fitted at training time, on the model's"
                                   " calibrated scale. Prints how many labels were added, updated and unchanged.")
    p.add_argument("model_dir")
    p.add_argument("label_file", help="Labels to add or update: the --label-file layout (id, URI, name, text).")
    p.add_argument("-o", "--output", help="Write the changed model here (default: MODEL_DIR, replaced atomically).")
    common(p)


def _add_remove(sub, common) -> None:
    p = sub.add_parser("remove", help="Stop a model from suggesting some labels (ids, one a line).",
                       description="Mask the labels listed in IDS_FILE: they are never suggested again. `labels add`"
                                   " brings a removed label back.")
    p.add_argument("model_dir")
    p.add_argument("ids_file", help="Label ids to remove, one a line ('-' reads stdin).")
    p.add_argument("-o", "--output", help="Write the changed model here (default: MODEL_DIR, replaced atomically).")
    common(p)


def read_new_labels(path, known=None):
    """The labels of a label file as a :class:`~xmtc.data.labels.LabelVocab` (names, texts, URIs).
    ``known``: the model's label ids, which tell a file with its columns swapped (see ``read_label_file``)."""
    from ..data.labels import LabelVocab, read_label_file, read_label_uris
    from ..errors import DataFormatError

    info = read_label_file(path, known)
    if not info:
        raise DataFormatError(path, None, "no labels found")
    ids = list(info)
    uris = read_label_uris(path)
    return LabelVocab(ids, display=[info[i][0] for i in ids], texts=[info[i][1] for i in ids],
                      uris=[uris.get(i, "") for i in ids] if uris else None)


def _run_add(args: argparse.Namespace) -> int:
    from ..models import load
    from ..models.open_labels import add_labels

    model = load(args.model_dir, mmap=False)  # the folder is rewritten: read everything first
    before = len(model.labels_)
    changes = add_labels(model, read_new_labels(args.label_file, model.labels_.names))
    path = model.save(args.output or args.model_dir)
    print(changes.summary())
    log.info("%d -> %d labels; saved %s", before, len(model.labels_), path)
    return 0


def _run_remove(args: argparse.Namespace) -> int:
    from ..data.io import iter_lines
    from ..models import load
    from ..models.open_labels import remove_labels

    ids = [line.strip() for _, line in iter_lines(args.ids_file) if line.strip()]
    model = load(args.model_dir, mmap=False)
    n = remove_labels(model, ids)
    path = model.save(args.output or args.model_dir)
    log.info("removed %d labels (%d listed) and saved %s", n, len(ids), path)
    return 0


SUBCOMMANDS = {"add": (_add_add, _run_add), "remove": (_add_remove, _run_remove)}
