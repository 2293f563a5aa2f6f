"""What an XR-Transformer / X-Transformer model folder holds beyond XR-Linear's stages
(:mod:`xmtc.methods.xr_linear.stages`): the fine-tuned encoder and its tokenizer (``encoder``, a Hugging Face
folder), the level heads (``heads``), and with ``matcher="neural"`` the cluster rankers (``rankers``) and the
matcher levels' parent arrays (``tree``) in place of XR-Linear's ``tree-T`` stages. Used by
:class:`~xmtc.methods.xr_transformer.estimator.XRTransformer` and
:class:`~xmtc.methods.xr_transformer.x_transformer.XTransformer`; separate from the estimator as XR-Linear's
stages are from its own, since the folder format is its own concern (stage names and files are what saved models
are read back by). The manifest and its checksums are :mod:`xmtc.models.storage`'s."""

from __future__ import annotations

import numpy as np

from ...errors import ModelFormatError
from ...models.storage import ModelReader, ModelWriter


def save_stages(model, writer: ModelWriter, stages: list[dict]) -> list[dict]:
    """``stages`` (XR-Linear's, already written) with the transformer's added, each array file written by
    ``writer`` and the encoder saved in its own folder."""
    if model.matcher == "neural":
        stages.append({"name": "rankers", "type": "cluster-rankers", "matcher_levels": model.matcher_levels_,
                       "file": writer.arrays("rankers", model.rankers_.to_arrays())})
        stages.append({"name": "tree", "type": "label-tree",
                       "file": writer.arrays("tree", {f"parent{t}": C.indices.astype(np.int64)
                                                      for t, C in enumerate(model._matcher_chain())})})
    folder = writer.folder("encoder")
    model.encoder_.save_pretrained(str(folder), safe_serialization=True)
    model.tokenizer_.save_pretrained(str(folder))
    stages.insert(1, {"name": "encoder", "type": "hf-transformer", "folder": "encoder",
                      "pooling": model.pooling, "max_length": model.max_length})
    heads = {}
    for level, (W, b) in sorted(model.heads_.items()):
        heads[f"level{level}.weight"] = W
        heads[f"level{level}.bias"] = b
    stages.insert(2, {"name": "heads", "type": "level-heads", "levels": sorted(model.heads_),
                      "file": writer.arrays("heads", heads)})
    return stages


def load_neural_stages(model, reader: ModelReader) -> None:
    """Set ``model``'s featurizer, cluster rankers and neural matcher levels from a ``matcher="neural"`` folder
    (which has them in place of XR-Linear's trees), each checked against the manifest's features."""
    from ...features.tfidf import TfidfFeaturizer
    from ...neural.shortlist import children_csr
    from ...linear.cluster_rankers import ClusterRankers

    st = reader.stage("featurizer")
    model.featurizer_ = TfidfFeaturizer.from_arrays(st.get("params", {}), reader.arrays(st["file"]))
    model.n_features_ = int(reader.stage("features")["n_features"])
    model.models_ = []
    st = reader.stage("rankers")
    model.rankers_ = ClusterRankers.from_arrays(reader.arrays(st["file"]))
    model.matcher_levels_ = [int(t) for t in st["matcher_levels"]]
    tree = reader.arrays(reader.stage("tree")["file"])
    model.matcher_children_ = []
    n_par = 1
    for i, _ in enumerate(model.matcher_levels_):
        try:
            parent = np.asarray(tree[f"parent{i}"], dtype=np.int64)
        except KeyError:
            raise ModelFormatError(f"{reader.folder}: tree lacks parent{i}") from None
        n_par = int(parent.max()) + 1 if i == 0 and parent.size else n_par
        model.matcher_children_.append(children_csr(parent, n_par))
        n_par = parent.size
    if model.rankers_.n_features != model.n_features_:
        raise ModelFormatError(f"{reader.folder}: rankers have {model.rankers_.n_features} features, the model"
                               f" {model.n_features_}")


def load_encoder_stages(model, reader: ModelReader) -> None:
    """Load ``model``'s fine-tuned encoder, tokenizer and level heads (onto the device its ``device`` picks), then
    check that the featurizer and encoder make the features the rankers were trained on."""
    from ...features.encoder import load_saved_encoder, pick_device

    st = reader.stage("encoder")
    folder = reader.subfolder(st["folder"])
    model.device_ = pick_device(model.device)
    model.tokenizer_, model.encoder_ = load_saved_encoder(folder, model.device_)
    hidden = getattr(model.encoder_.config, "hidden_size", None)
    if isinstance(hidden, int):
        model._check_feature_count(reader, model.featurizer_.n_features_ + hidden)
    arrays = reader.arrays(reader.stage("heads")["file"])
    model.heads_ = {}
    for level in reader.stage("heads")["levels"]:
        try:
            model.heads_[int(level)] = (arrays[f"level{level}.weight"], arrays[f"level{level}.bias"])
        except KeyError as exc:
            raise ModelFormatError(f"{reader.folder}: heads lack {exc}") from None
    if model.matcher == "neural":
        missing = [t for t in model.matcher_levels_ if t not in model.heads_]
        if missing:
            raise ModelFormatError(f"{reader.folder}: the neural matcher needs the heads of levels {missing}")
