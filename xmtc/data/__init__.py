"""Datasets in memory, their readers and writers, and the bundled yso-finna-en sample."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from .dataset import Dataset, label_matrix, read_dataset, read_datasets, read_inputs, write_dataset
from .io import FORMATS, guess_format
from .labels import LabelVocab, read_label_file

__all__ = ["Dataset", "LabelVocab", "FORMATS", "guess_format", "label_matrix", "read_dataset", "read_datasets", "read_inputs",
           "read_label_file", "write_dataset", "sample_path"]

_SAMPLE_FILES = {"train": "train.txt.gz", "test": "test.txt.gz", "labels": "labels.txt.gz"}


def sample_path(part: str) -> Path:
    """Path of the bundled yso-finna-en sample's ``train``, ``test`` or ``labels`` file (see sample/README)."""
    if part not in _SAMPLE_FILES:
        raise ValueError(f"sample part must be one of {', '.join(_SAMPLE_FILES)}, got {part!r}")
    return Path(str(resources.files(__package__) / "sample" / _SAMPLE_FILES[part]))
