"""Open label sets for every method: labels added to or removed from a trained model without retraining.

* ``xmtc labels add MODEL labels.tsv`` (:func:`add_labels`): the label-file layout (id, URI, name, text).
  A method that scores label texts natively (it defines ``add_labels``: the dual encoder) embeds them;
  every other method routes them through its :class:`~xmtc.models.label_route.LabelRoute`, fitted at
  training time on the model's validation split, so their scores are on the model's calibrated scale.
  The vocabulary, the label counts (0: no training document) and the calibration's per-label arrays
  grow with them.
* ``xmtc labels remove MODEL ids.txt`` (:func:`remove_labels`): the labels stay in the vocabulary (their
  columns keep their meaning for every stage) and are masked: never suggested again, and a label added
  back later is unmasked.

The route's stages in a model folder: ``label-route`` (its arrays) and ``label-route-featurizer`` (the
character n-grams it reads texts with; a model saved before those may have none and read texts with the
model's own TF-IDF featurizer); ``removed-labels`` holds the mask.
"""

from __future__ import annotations

import logging

import numpy as np

from ..data.labels import LabelVocab
from ..errors import ConfigError
from ..features.char_ngrams import CharNgramFeaturizer

log = logging.getLogger(__name__)


def text_featurizer(model):
    """The TF-IDF featurizer a model reads texts with, or None (methods without one)."""
    return getattr(model, "featurizer_", None) or getattr(getattr(model, "reranker_", None), "featurizer", None)


def attach_route(model, valid_texts, valid_Y, fit_counts=None) -> None:
    """Fit ``model.label_route_`` on the validation split (when the vocabulary has label texts);
    ``fit_counts``: the label counts of the documents the split was held out from (default: the model's)."""
    from .label_route import LabelRoute

    vocab = model.labels_
    if getattr(model, "native_label_texts", False) or vocab.texts is None or not isinstance(valid_texts, list) \
            or not valid_texts:
        return
    # character n-grams of the label texts and the validation texts: label names in other inflections
    # than the texts' words (the featurizer module's figure); cheap, as neither set grows with the corpus
    featurizer = CharNgramFeaturizer().fit([t for t in vocab.texts if t and t.strip()] + list(valid_texts))
    model.label_route_ = LabelRoute.fit(featurizer, vocab.texts, model.label_counts_, valid_texts, valid_Y,
                                        own_featurizer=True, fit_counts=fit_counts)
    route = model.label_route_
    log.info("label-text route: %d labels without training documents are suggested from their text; share of"
             " label occurrences on such labels %.4f%% (validation), prior ratio %.3g", len(route),
             100 * route.unseen_mass, route.prior_ratio())


def route_stages(model, writer) -> list[dict]:
    """The stages that save the route and the removed-label mask (none when the model has neither)."""
    stages = []
    route = getattr(model, "label_route_", None)
    if route is not None:
        if route.own_featurizer:
            params, arrays = route.featurizer.to_arrays()
            kind = "char-ngrams" if isinstance(route.featurizer, CharNgramFeaturizer) else "tfidf"
            stages.append({"name": "label-route-featurizer", "type": kind, "params": params,
                           "file": writer.arrays("label_route_featurizer", arrays)})
        params, arrays = route.to_arrays()
        stages.append({"name": "label-route", "type": "label-text-route", "params": params,
                       "file": writer.arrays("label_route", arrays)})
    removed = getattr(model, "removed_", None)
    if removed is not None and removed.any():
        stages.append({"name": "removed-labels", "type": "label-mask",
                       "file": writer.arrays("removed_labels", {"removed": removed.astype(np.uint8)})})
    return stages


def load_route(model, reader) -> None:
    """Restore what :func:`route_stages` saved."""
    from ..errors import ModelFormatError
    from .label_route import LabelRoute

    names = {st.get("name") for st in reader.manifest["stages"]}
    model.label_route_, model.removed_ = None, None
    if "label-route" in names:
        featurizer = text_featurizer(model)
        if "label-route-featurizer" in names:
            from ..features.tfidf import TfidfFeaturizer

            st = reader.stage("label-route-featurizer")
            kind = CharNgramFeaturizer if st.get("type") == "char-ngrams" else TfidfFeaturizer
            try:
                featurizer = kind.from_arrays(st.get("params", {}), reader.arrays(st["file"]))
            except ModelFormatError as exc:
                raise ModelFormatError(f"{reader.folder / st['file']}: {exc}") from None
        if featurizer is None:
            raise ModelFormatError(f"{reader.folder}: the label-text route has no featurizer to read texts with")
        st = reader.stage("label-route")
        model.label_route_ = LabelRoute.from_arrays(st.get("params", {}), reader.arrays(st["file"]), featurizer,
                                                    len(model.labels_), f"{reader.folder / st['file']}")
    model.removed_ = removed_mask(reader, len(model.labels_))


def removed_mask(reader, n_labels: int) -> np.ndarray | None:
    """The ``removed-labels`` stage's mask of a model folder being read (None when the model has none), checked
    against its ``n_labels`` labels."""
    from ..errors import ModelFormatError

    if not any(st.get("name") == "removed-labels" for st in reader.manifest["stages"]):
        return None
    mask = reader.arrays(reader.stage_value("removed-labels", "file")).get("removed")
    if mask is None or mask.shape != (n_labels,):
        raise ModelFormatError(f"{reader.folder}: the removed-label mask does not match the labels")
    return mask.astype(bool)


def apply_open_labels(model, idx: np.ndarray, scores: np.ndarray, X, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The calibrated top-k of ``X`` merged with the route's labels and cleared of removed labels."""
    route = getattr(model, "label_route_", None)
    if route is not None and len(route) and getattr(model, "calibration_", None) is not None \
            and isinstance(X, list):
        idx, scores = route.merge(idx, scores, X, idx.shape[1])
    removed = getattr(model, "removed_", None)
    if removed is not None and removed.any():
        gone = (idx >= 0) & removed[np.maximum(idx, 0)]
        if gone.any():
            from .topk import apply_threshold

            idx, scores = apply_threshold(np.where(gone, -1, idx), np.where(gone, -1.0, scores), -0.5)
    return idx[:, :k], scores[:, :k]


class LabelChanges(int):
    """What :func:`add_labels` did with a label file's labels: ``added`` (new to the model), ``updated`` (known,
    with a name, URI or text that changed), ``unchanged`` (known, as they were); the three add up to the
    file's labels. ``restored``: how many known ones were removed labels, now unmasked.

    An ``int`` whose value is ``added + restored`` (the labels the model can now suggest that it could not),
    what ``add_labels`` returned before it took known labels, so code that counts on it keeps working.
    ``unrouted``: added labels with neither a name nor a text, which a method that routes label texts
    cannot suggest (0 for methods that index label texts themselves)."""

    added: int
    updated: int
    unchanged: int
    restored: int
    unrouted: int

    def __new__(cls, added: int, updated: int, unchanged: int, restored: int, unrouted: int = 0) -> "LabelChanges":
        obj = super().__new__(cls, added + restored)
        obj.added, obj.updated, obj.unchanged, obj.restored = added, updated, unchanged, restored
        obj.unrouted = unrouted
        return obj

    def __repr__(self) -> str:
        extra = f", unrouted={self.unrouted}" if self.unrouted else ""
        return (f"LabelChanges(added={self.added}, updated={self.updated}, unchanged={self.unchanged},"
                f" restored={self.restored}{extra})")

    def summary(self) -> str:
        """One line for people: ``added 3, updated 2, unchanged 1,994 labels (1 removed label restored)``;
        added labels with neither a name nor a text are counted apart (nothing can suggest them)."""
        line = f"added {self.added:,}, updated {self.updated:,}, unchanged {self.unchanged:,} labels"
        notes = []
        if self.restored:
            notes.append(f"{self.restored:,} removed label{'s' if self.restored != 1 else ''} restored")
        if self.unrouted:
            notes.append(f"{self.unrouted:,} without a name or text, not suggested until learned from documents")
        return line + (f" ({'; '.join(notes)})" if notes else "")


def add_labels(model, new: LabelVocab) -> LabelChanges:
    """Take the labels of ``new`` (a label file: ids, names, texts, URIs) into ``model`` as a new release of a
    vocabulary is taken: labels the model lacks are added, and known ones get the file's display names, URIs
    and texts (a value the file leaves empty keeps the model's). A known label the label-text route scores
    (no training document) is re-routed by its new text; one learned from documents keeps its ranker, only
    its vocabulary entry changes. A removed label in the file is unmasked. On an error nothing changes.

    Methods that score label texts natively (``model.add_labels``: dual encoder, label-text, knn) index the
    added labels themselves; a known label's new text reaches their index when they are next trained.

    A label's text is the one training reads (:func:`~xmtc.data.labels.read_label_file`, the route's
    :meth:`~xmtc.models.label_route.LabelRoute.fit`): its text, else its display name -- whichever columns
    ``new`` comes with. A label with neither is added but cannot be routed (its id is no text): it is counted
    in ``unrouted`` and a warning says so; learning documents of it makes it suggestible."""
    vocab = model.labels_
    new = _texts_or_names(new)
    fresh = [j for j, n in enumerate(new.names) if n not in vocab.index]
    texts = [new.texts[j] for j in fresh]
    native = hasattr(model, "add_labels")  # the method embeds label texts itself
    route = getattr(model, "label_route_", None)
    if fresh and not native and route is None:
        raise ConfigError(f"this {model.method} model has no label-text route (it was trained without label"
                          " texts): train it with --label-file to add labels by their text")
    updated, changes = _updated_vocab(vocab, new)
    model.labels_ = updated
    if fresh:
        grown = _grown_vocab(updated, new, fresh, texts)
        if native:
            try:
                model.add_labels(grown)
            except BaseException:
                model.labels_ = vocab
                raise
        else:
            model.labels_ = grown
            routable = [i for i, t in enumerate(texts) if t.strip()]
            route.add(len(vocab) + np.asarray(routable, dtype=np.int64), [texts[i] for i in routable])
        _grow_label_arrays(model, len(fresh))
    unrouted = 0 if native else sum(1 for t in texts if not t.strip())
    if unrouted:
        log.warning("%d added label%s without a name or text cannot be suggested by text (a label id is no"
                    " text): give %s a name or text with `xmtc labels add`, or learn documents of %s",
                    unrouted, "s" if unrouted != 1 else "", "them" if unrouted != 1 else "it",
                    "them" if unrouted != 1 else "it")
    retexted = [c for c, fields in changes.items() if "text" in fields]
    if retexted and native:
        log.warning("%d known label%s got a new text: this %s model scores by the texts it indexed until it"
                    " is trained again", len(retexted), "s" if len(retexted) != 1 else "", model.method)
    elif retexted and route is not None:
        unseen = [c for c in retexted if model.label_counts_[c] == 0]  # scored by their text, not by documents
        route.add(np.asarray(unseen, dtype=np.int64), [updated.texts[c] for c in unseen])
    removed = getattr(model, "removed_", None)
    back = [] if removed is None else [c for c in map(vocab.index.get, new.names) if c is not None and removed[c]]
    if back:
        removed[back] = False
    n_known = len(new) - len(fresh)
    return LabelChanges(len(fresh), len(changes), n_known - len(changes), len(back), unrouted)


def _texts_or_names(new: LabelVocab) -> LabelVocab:
    """``new`` with each label's text its text, else its display name, else empty (the rule of
    :func:`~xmtc.data.labels.read_label_file`; never the id)."""
    texts = [(new.texts[j] if new.texts is not None else "").strip() or
             (new.display[j] if new.display is not None else "").strip() for j in range(len(new))]
    return LabelVocab(new.names, display=new.display, texts=texts, uris=new.uris)


def _updated_vocab(vocab: LabelVocab, new: LabelVocab) -> tuple[LabelVocab, dict[int, set[str]]]:
    """``vocab`` with the labels it shares with ``new`` given ``new``'s non-empty names, URIs and texts, and
    ``{column: the fields that changed ("name", "uri", "text")}``."""
    cols = {key: None if getattr(vocab, key) is None else list(getattr(vocab, key))
            for key in ("display", "uris", "texts")}
    changes: dict[int, set[str]] = {}
    for j, name in enumerate(new.names):
        c = vocab.index.get(name)
        if c is None:
            continue
        for key, field in (("display", "name"), ("uris", "uri"), ("texts", "text")):
            theirs = getattr(new, key)
            value = theirs[j] if theirs is not None else ""
            if not value:
                continue
            if cols[key] is None:  # a column the model lacks: texts default to names, as in _grown_vocab
                cols[key] = _default_texts(vocab) if key == "texts" else [""] * len(vocab)
            if cols[key][c] != value:
                cols[key][c] = value
                changes.setdefault(c, set()).add(field)
    return LabelVocab(vocab.names, display=cols["display"], texts=cols["texts"], uris=cols["uris"]), changes


def _default_texts(vocab: LabelVocab) -> list[str]:
    """The texts of a vocabulary without a texts column: each label's display name, empty where it has none."""
    return list(vocab.display) if vocab.display is not None else [""] * len(vocab)


def _grown_vocab(vocab: LabelVocab, new: LabelVocab, fresh: list[int], texts: list[str]) -> LabelVocab:
    """``vocab`` with the labels ``fresh`` of ``new`` appended; ``texts``: their texts (name where none)."""
    def column(ours, theirs):
        if ours is None and theirs is None:
            return None
        base = list(ours) if ours is not None else [""] * len(vocab)
        return base + [theirs[j] if theirs is not None else "" for j in fresh]

    return LabelVocab(vocab.names + [new.names[j] for j in fresh], display=column(vocab.display, new.display),
                      texts=(list(vocab.texts) if vocab.texts is not None else _default_texts(vocab))
                      + texts, uris=column(vocab.uris, new.uris))


def _grow_label_arrays(model, n_new: int) -> None:
    """Per-label arrays follow the vocabulary: counts 0, calibration's bands by count 0, thresholds global."""
    model.label_counts_ = np.concatenate([model.label_counts_, np.zeros(n_new, dtype=model.label_counts_.dtype)])
    cal = getattr(model, "calibration_", None)
    if cal is not None:
        cal.label_counts = np.concatenate([cal.label_counts, np.zeros(n_new, dtype=cal.label_counts.dtype)])
        if cal.thresholds is not None:
            fill = cal.global_threshold if cal.global_threshold is not None else 1.0
            cal.thresholds = np.concatenate([cal.thresholds, np.full(n_new, fill)])
    removed = getattr(model, "removed_", None)
    if removed is not None:
        model.removed_ = np.concatenate([removed, np.zeros(n_new, dtype=bool)])


def remove_labels(model, ids: list[str]) -> int:
    """Mask the labels ``ids`` (see the module doc); returns how many were active. Unknown ids are an error."""
    vocab = model.labels_
    unknown = [i for i in ids if i not in vocab.index]
    if unknown:
        raise ConfigError(f"{len(unknown)} ids are not labels of the model (e.g. {unknown[0]!r})")
    if getattr(model, "removed_", None) is None:
        model.removed_ = np.zeros(len(vocab), dtype=bool)
    cols = np.array([vocab.index[i] for i in ids], dtype=np.int64)
    was = int((~model.removed_[cols]).sum())
    model.removed_[cols] = True
    return was
