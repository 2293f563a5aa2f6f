"""What an XR-Linear model folder holds, stage by stage: the TF-IDF featurizer (``featurizer``), the feature count
(``features``), one ``tree-T`` per tree (its weights in the beam layout, memory-mapped on load), and, where the
model has them, the training memory of :mod:`xmtc.models.memory` and the few-shot stage of
:mod:`xmtc.models.few_shot`. Used by :class:`~xmtc.methods.xr_linear.estimator.XRLinear` and the transformer
methods built on it; the manifest and its checksums are :mod:`xmtc.models.storage`'s."""

from __future__ import annotations

from ...errors import ModelFormatError
from ...linear.hierarchy import HierarchicalLinearModel
from ...models.storage import ModelReader, ModelWriter


def save_stages(model, writer: ModelWriter) -> list[dict]:
    """The stages of an XR-Linear model folder, each array file written by ``writer``."""
    stages = []
    if model.featurizer_ is not None:
        params, arrays = model.featurizer_.to_arrays()
        stages.append({"name": "featurizer", "type": "tfidf", "params": params,
                       "file": writer.arrays("featurizer", arrays)})
    stages.append({"name": "features", "type": "dimension", "n_features": model.n_features_})
    for t, tree in enumerate(model.models_):
        stages.append({"name": f"tree-{t}", "type": "hierarchical-linear",
                       "file": writer.arrays(f"tree-{t}", tree.to_arrays(layout="beam"))})
    memory = getattr(model, "memory_", None)
    if memory is not None:
        from ...models.memory import STAGE

        params, arrays = memory.to_arrays()
        stages.append({"name": STAGE, "type": "sparse-rows", "params": params,
                       "file": writer.arrays("training_memory", arrays)})
    few_shot = getattr(model, "few_shot_", None)
    if few_shot is not None and len(few_shot):
        from ...models.few_shot import STAGE as FEW_SHOT

        params, arrays = few_shot.to_arrays()
        stages.append({"name": FEW_SHOT, "type": "flat-rankers", "params": params,
                       "file": writer.arrays("few_shot_rankers", arrays)})
    return stages


def load_stages(model, reader: ModelReader) -> None:
    """Set ``model``'s fitted parts from the stages of its folder (trees memory-mapped), each checked against the
    manifest's labels and features."""
    names = [st.get("name") for st in reader.manifest["stages"]]
    model.featurizer_ = None
    if "featurizer" in names:
        from ...features.tfidf import TfidfFeaturizer

        st = reader.stage("featurizer")
        model.featurizer_ = TfidfFeaturizer.from_arrays(st.get("params", {}),
                                                       reader.arrays(reader.stage_value("featurizer", "file")))
    model.n_features_ = reader.stage_value("features", "n_features", int)
    if model.n_features_ < 1:
        raise ModelFormatError(f"{reader.folder}: stage 'features' declares {model.n_features_} features")
    if model.featurizer_ is not None and model._own_features_only():
        model._check_feature_count(reader, model.featurizer_.n_features_)
    model.models_ = []
    n_trees = sum(1 for name in names if isinstance(name, str) and name.startswith("tree-"))
    wanted = getattr(model, "n_trees", 1)  # the transformer methods have one tree and no such parameter
    if n_trees < 1 or (wanted > 0 and n_trees != wanted):
        raise ModelFormatError(f"{reader.folder}: the manifest has {n_trees} tree stage(s); n_trees is"
                               f" {wanted}" + (" (0 = auto)" if wanted == 0 else ""))
    for t in range(n_trees):
        # memory-mapped: the beam layout (format 2) is used in place, so a model larger than RAM
        # predicts and processes serving one model share its pages; format 1 files are rebuilt
        tree = HierarchicalLinearModel.from_arrays(reader.arrays(reader.stage_value(f"tree-{t}", "file"),
                                                                 mmap=True))
        # labels added after training (``xmtc labels add``) follow the tree's: the label-text route scores them
        trained = model.models_[0].n_labels if model.models_ else tree.n_labels
        if tree.n_labels != trained or tree.n_labels > len(model.labels_) or tree.n_features != model.n_features_:
            raise ModelFormatError(f"{reader.folder}: tree-{t} has {tree.n_labels} labels and"
                                   f" {tree.n_features} features; the model has {len(model.labels_)}"
                                   f" labels and {model.n_features_} features")
        model.models_.append(tree)
    model.memory_ = None
    from ...models.memory import STAGE, TrainingMemory

    if STAGE in names:
        st = reader.stage(STAGE)
        model.memory_ = TrainingMemory.from_arrays(st.get("params", {}), reader.arrays(st["file"]),
                                                  model.n_features_, len(model.labels_), f"{reader.folder / st['file']}")
    model.few_shot_ = None
    from ...models.few_shot import STAGE as FEW_SHOT, FewShotRankers

    if FEW_SHOT in names:
        st = reader.stage(FEW_SHOT)
        model.few_shot_ = FewShotRankers.from_arrays(st.get("params", {}), reader.arrays(st["file"]),
                                                    model.n_features_, len(model.labels_),
                                                    f"{reader.folder / st['file']}")
