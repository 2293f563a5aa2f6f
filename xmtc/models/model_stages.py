"""The stages every saved model holds around its method's own: labels, label counts, calibration, label-text route.

A model folder (:mod:`xmtc.models.storage`) is a manifest listing stages in order: ``labels`` (the label
vocabulary) and ``label-stats`` (training documents per label, and how many documents there were), then the
method's own stages (its ``_save_stages`` / ``_load_stages``), then ``calibration`` (the score maps,
:mod:`xmtc.models.calibration`) where the model has one, and the label-text route's stages
(:mod:`xmtc.models.open_labels`). Here they are written in that order and read back, the label statistics checked
against the labels. Separate from the model shell (:mod:`xmtc.models.base`) because this is the saved format that
every method shares: its stage names and types are what folders saved before must still be loaded by.
"""

from __future__ import annotations

import os

import numpy as np

from ..data.labels import LabelVocab
from ..errors import ModelFormatError
from .storage import ModelReader, ModelWriter

__all__ = ["load_model_state", "save_model"]


def save_model(model, folder: str | os.PathLike) -> str:
    """Write the folder of the fitted model ``model`` atomically (:meth:`XMCModel.save
    <xmtc.models.base.XMCModel.save>`); returns its path."""
    model._check_fitted()
    writer = ModelWriter(folder, stamp=True)  # written from this fitted model: its next load need not re-check
    try:
        stages = [{"name": "labels", "type": "label-vocab", "file": writer.json("labels", model.labels_.to_json())},
                  {"name": "label-stats", "type": "label-counts",
                   "file": writer.arrays("label_stats", {"counts": model.label_counts_,
                                                         "n_train": np.array([model.n_train_], dtype=np.int64)})}]
        stages += model._save_stages(writer)
        if getattr(model, "calibration_", None) is not None:
            params, arrays = model.calibration_.to_arrays()
            stages.append({"name": "calibration", "type": "score-calibration", "params": params,
                           "file": writer.arrays("calibration", arrays)})
        from .open_labels import route_stages

        stages += route_stages(model, writer)
        path = writer.commit(model.method, model.get_params(), stages)
    except BaseException:
        writer.abort()
        raise
    return str(path)


def load_model_state(model, reader: ModelReader) -> None:
    """Read the stages of ``reader``'s folder into ``model`` (built from the manifest's params): labels and label
    statistics (checked), the method's own stages (``model._load_stages``), the calibration and the route."""
    model.labels_ = LabelVocab.from_json(reader.json(reader.stage_value("labels", "file")))
    stats = reader.arrays(reader.stage_value("label-stats", "file"))
    try:
        model.label_counts_ = stats["counts"]
        n_train = stats["n_train"]
    except KeyError as exc:
        raise ModelFormatError(f"{reader.folder}: label statistics lack {exc}") from None
    if n_train.shape != (1,) or n_train.dtype.kind not in "iu" or n_train[0] < 1:
        raise ModelFormatError(f"{reader.folder}: label statistics: 'n_train' must be one positive integer")
    model.n_train_ = int(n_train[0])
    if model.label_counts_.shape != (len(model.labels_),) or model.label_counts_.dtype.kind not in "iuf" \
            or not np.all(np.isfinite(model.label_counts_)) or np.any(model.label_counts_ < 0):
        raise ModelFormatError(f"{reader.folder}: label counts do not match the {len(model.labels_)} labels")
    model._load_stages(reader)
    model.calibration_ = None
    if any(st.get("name") == "calibration" for st in reader.manifest["stages"]):
        from .calibration import Calibration

        st = reader.stage("calibration")
        model.calibration_ = Calibration.from_arrays(st.get("params", {}), reader.arrays(st["file"]),
                                                     len(model.labels_), f"{reader.folder / st['file']}")
    from .open_labels import load_route

    load_route(model, reader)
