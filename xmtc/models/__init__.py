"""End-to-end estimators users call (fit / predict / save / load).

Which estimators exist is :mod:`xmtc.registry`'s table; this package exports each estimator and its
config class by name (``from xmtc.models import XRLinear``), importing a method's module only when
its name is first used.
"""

from ..registry import estimator_class, exported_names, method_names, resolve_export
from .base import XMCModel, load

__all__ = ["XMCModel", "estimator_class", "load", "method_names", *exported_names()]


def __getattr__(name):
    found = resolve_export(name)
    if found is None:
        raise AttributeError(f"module 'xmtc.models' has no attribute {name!r}")
    return found
