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


def attach_route(model, valid_texts, valid_Y) -> None:
    """Fit ``model.label_route_`` on the validation split (when the vocabulary has label texts)."""
    from .label_route import LabelRoute

    vocab = model.labels_
    if getattr(model, "native_label_texts", False) or vocab.texts is None or not isinstance(valid_texts, list) \
            or not valid_texts:
        return
    # character n-grams of the label texts and the validation texts: label names in other inflections
    # than the texts' words (the featurizer module's figure); cheap, as neither set grows with the corpus
    featurizer = CharNgramFeaturizer().fit([t for t in vocab.texts if t and t.strip()] + list(valid_texts))
    model.label_route_ = LabelRoute.fit(featurizer, vocab.texts, model.label_counts_, valid_texts, valid_Y,
                                        own_featurizer=True)
    log.info("label-text route: %d labels without training documents are suggested from their text",
             len(model.label_route_))


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
    if "removed-labels" in names:
        mask = reader.arrays(reader.stage_value("removed-labels", "file")).get("removed")
        if mask is None or mask.shape != (len(model.labels_),):
            raise ModelFormatError(f"{reader.folder}: the removed-label mask does not match the labels")
        model.removed_ = mask.astype(bool)


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
            from .base import apply_threshold

            idx, scores = apply_threshold(np.where(gone, -1, idx), np.where(gone, -1.0, scores), -0.5)
    return idx[:, :k], scores[:, :k]


def add_labels(model, new: LabelVocab) -> int:
    """Add the labels of ``new`` (ids not yet in the model; names, texts, URIs) to ``model``; returns how many
    were added. A label of ``new`` already in the model and removed is unmasked; one present and active is
    refused (its text belongs to what the model learned)."""
    vocab = model.labels_
    present = [n for n in new.names if n in vocab.index]
    removed = getattr(model, "removed_", None)
    active = [n for n in present if removed is None or not removed[vocab.index[n]]]
    if active:
        raise ConfigError(f"{len(active)} of the labels are already in the model (e.g. {active[0]!r});"
                          " remove them first to replace them")
    if removed is not None:
        for n in present:
            removed[vocab.index[n]] = False
    fresh = [j for j, n in enumerate(new.names) if n not in vocab.index]
    if not fresh:
        return len(present)
    texts = [new.texts[j] if new.texts and new.texts[j] else (new.display[j] if new.display else new.names[j])
             for j in fresh]
    if any(not t.strip() for t in texts):
        raise ConfigError("every added label needs a text (or at least a name) to be suggested by")
    if hasattr(model, "add_labels"):  # the method embeds label texts itself
        model.add_labels(_grown_vocab(vocab, new, fresh, texts))
    else:
        route = getattr(model, "label_route_", None)
        if route is None:
            raise ConfigError(f"this {model.method} model has no label-text route (it was trained without label"
                              " texts): train it with --label-file to add labels by their text")
        grown = _grown_vocab(vocab, new, fresh, texts)
        first = len(vocab)
        model.labels_ = grown
        route.add(np.arange(first, first + len(fresh)), texts)
    _grow_label_arrays(model, len(fresh))
    return len(fresh) + len(present)


def _grown_vocab(vocab: LabelVocab, new: LabelVocab, fresh: list[int], texts: list[str]) -> LabelVocab:
    """``vocab`` with the labels ``fresh`` of ``new`` appended; ``texts``: their texts (name where none)."""
    def column(ours, theirs):
        if ours is None and theirs is None:
            return None
        base = list(ours) if ours is not None else [""] * len(vocab)
        return base + [theirs[j] if theirs is not None else "" for j in fresh]

    return LabelVocab(vocab.names + [new.names[j] for j in fresh], display=column(vocab.display, new.display),
                      texts=(list(vocab.texts) if vocab.texts is not None else list(vocab.display or vocab.names))
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
