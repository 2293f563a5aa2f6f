"""The one training checkpoint of xmtc: a folder holding a run's state, replaced crash-safely.

Every long fit (XR-Transformer's level-by-level fine-tuning, the end-to-end methods' epochs, ELIAS's
second stage) keeps its state here after each unit of work and every ``checkpoint_every`` steps, so
that ``--resume`` ends with the same model as an uninterrupted run.

Layout: ``state.json`` (the state's structure, numbers and strings, and the run's ``fingerprint``),
``state.safetensors`` (every tensor and array of the state, under its path in the structure) and, when
the caller passes its encoder, ``encoder/`` (Hugging Face ``save_pretrained``, safetensors). The state
is any nesting of dicts (str or int keys), lists, tuples, numbers, strings, None, tensors and numpy
arrays; nothing is pickled, and each comes back as the type it was saved as.

A new checkpoint is written into a sibling folder, flushed to disk, and swapped into place by
:func:`xmtc.models.swap.replace_dir` (an atomic exchange where the kernel offers it), the same swap a
saved model goes through: a run killed at any moment leaves the previous checkpoint or the new one,
never a mix. ``fingerprint`` ties a checkpoint to its data and parameters: resuming another run's
checkpoint is refused.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np

from ..errors import ConfigError, ModelFormatError
from ..models import swap

log = logging.getLogger(__name__)

STATE_JSON = "state.json"
STATE_ARRAYS = "state.safetensors"
ENCODER = "encoder"


def flatten(obj, prefix: str, arrays: dict):
    """A JSON-able structure with every tensor and array moved into ``arrays`` under its path."""
    import torch

    if isinstance(obj, torch.Tensor):
        arrays[prefix] = obj.detach().cpu().contiguous()
        return {"__tensor__": prefix}
    if isinstance(obj, np.ndarray):
        arrays[prefix] = torch.from_numpy(np.ascontiguousarray(obj))
        return {"__ndarray__": prefix}
    if isinstance(obj, dict):
        if not all(isinstance(k, (str, int)) for k in obj):
            raise TypeError(f"{prefix}: checkpoint keys must be str or int")
        return {"__dict__": [[k, flatten(v, f"{prefix}.{k}", arrays)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return {"__list__": [flatten(v, f"{prefix}.{i}", arrays) for i, v in enumerate(obj)],
                "tuple": isinstance(obj, tuple)}
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    return obj


def unflatten(obj, arrays: dict):
    """The inverse of :func:`flatten`."""
    if isinstance(obj, dict):
        if "__tensor__" in obj:
            return arrays[obj["__tensor__"]]
        if "__ndarray__" in obj:
            return arrays[obj["__ndarray__"]].numpy()
        if "__dict__" in obj:
            return {k: unflatten(v, arrays) for k, v in obj["__dict__"]}
        if "__list__" in obj:
            items = [unflatten(v, arrays) for v in obj["__list__"]]
            return tuple(items) if obj.get("tuple") else items
    return obj


class Checkpoint:
    """One run's training state in ``folder`` (see the module doc)."""

    def __init__(self, folder, fingerprint: str):
        self.folder = Path(folder)
        self.fingerprint = fingerprint

    def clear(self) -> None:
        """Remove an earlier run's checkpoint; a folder that is not one is left alone (and is an error)."""
        if self.folder.exists():
            if not (self.folder / STATE_JSON).is_file() and any(self.folder.iterdir()):
                raise ConfigError(f"{self.folder}: exists and is not an xmtc checkpoint; refusing to replace it")
            shutil.rmtree(self.folder)

    def save(self, state: dict, *, encoder=None, tokenizer=None) -> None:
        """Write ``state`` (and the encoder's weights and tokenizer, when given) and swap it into place."""
        from safetensors.torch import save_file

        arrays: dict = {}
        meta = {"fingerprint": self.fingerprint, "state": flatten(state, "s", arrays)}
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = swap.temp_name(self.folder)
        tmp.mkdir()
        try:
            if encoder is not None:
                encoder.save_pretrained(str(tmp / ENCODER), safe_serialization=True)
                if tokenizer is not None:
                    tokenizer.save_pretrained(str(tmp / ENCODER))
            save_file(arrays, str(tmp / STATE_ARRAYS))
            (tmp / STATE_JSON).write_text(json.dumps(meta))
            swap.fsync_tree(tmp)
            old = swap.replace_dir(tmp, self.folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        log.info("checkpoint saved to %s", self.folder)

    def load(self, *, encoder=None, device="cpu") -> dict | None:
        """The saved state (the encoder's weights restored into ``encoder`` when given), or None when
        there is no checkpoint."""
        from safetensors.torch import load_file

        meta_path = self.folder / STATE_JSON
        if not meta_path.is_file():
            log.info("resume: no checkpoint in %s, starting from the beginning", self.folder)
            return None
        try:
            meta = json.loads(meta_path.read_text())
            arrays = load_file(str(self.folder / STATE_ARRAYS))
        except (OSError, ValueError) as exc:
            raise ModelFormatError(f"{self.folder}: unreadable checkpoint ({exc})") from None
        if meta.get("fingerprint") != self.fingerprint:
            raise ConfigError(f"{self.folder}: checkpoint was made with other data or parameters; remove it"
                              " or train without --resume")
        try:
            state = unflatten(meta["state"], arrays)
        except KeyError as exc:
            raise ModelFormatError(f"{self.folder}: checkpoint lacks {exc}") from None
        if encoder is not None:
            path = self.folder / ENCODER / "model.safetensors"
            if not path.is_file():
                raise ModelFormatError(f"{self.folder}: checkpoint holds no encoder weights")
            _, unexpected = encoder.load_state_dict(load_file(str(path), device=str(device)), strict=False)
            if unexpected:
                raise ModelFormatError(f"{self.folder}: checkpoint encoder does not match ({unexpected[:3]})")
        log.info("resume: from the checkpoint in %s", self.folder)
        return state
