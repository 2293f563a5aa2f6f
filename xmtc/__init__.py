"""xmtc: extreme multi-label text classification.

Quick start::

    import xmtc
    model = xmtc.XRLinear().fit(texts, label_lists)
    model.predict(["a new text"], k=5)          # [[(label, score), ...]]
    model.save("model_dir"); xmtc.load("model_dir")
"""

from ._version import __version__
from .errors import ConfigError, DataFormatError, ModelFormatError, NotFittedError, XmtcError

from .registry import exported_names as _exported_names

__all__ = ["__version__", *(n for n in _exported_names() if not n.endswith("Config")), "load", "read_dataset",
           "evaluate", "XmtcError", "DataFormatError", "ModelFormatError", "ConfigError", "NotFittedError"]


def __getattr__(name):
    # Heavy modules (scipy, sklearn, torch) load on first use, so `xmtc --help` and `import xmtc` stay fast.
    from .registry import resolve_export

    found = resolve_export(name)
    if found is not None:
        return found
    if name == "load":
        from .models import load
        return load
    if name == "read_dataset":
        from .data import read_dataset
        return read_dataset
    if name == "select":  # active learning (xmtc.select.select_documents)
        import importlib
        return importlib.import_module(".select", __name__)
    if name == "evaluate":
        from .metrics import evaluate
        return evaluate
    raise AttributeError(f"module 'xmtc' has no attribute {name!r}")
