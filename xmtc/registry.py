"""The methods xmtc offers: the one list every other list derives from.

Each entry maps a method's name (``--method``, the ``method`` of a saved model's manifest) to the module
and class of its estimator. Nothing is imported until a method is asked for, so ``xmtc --help``,
``import xmtc`` and loading an XR-Linear model never import the neural code. ``xmtc.__all__``,
``xmtc.models``' exports, the CLI's ``--method`` choices, ``xmtc.load`` and the contract test over every
method (tests/test_contract.py) all read this table; a new method is added here and nowhere else.

What a method can do beyond fit / predict / save / load is declared by its estimator class
(:class:`xmtc.models.base.XMCModel`'s capability attributes), not by name checks at the call sites.
"""

from __future__ import annotations

import importlib

from .errors import ConfigError

#: method name -> (module, estimator class)
METHODS: dict[str, tuple[str, str]] = {
    "xr-linear": ("xmtc.methods.xr_linear.estimator", "XRLinear"),
    "xr-transformer": ("xmtc.methods.xr_transformer.estimator", "XRTransformer"),
    "x-transformer": ("xmtc.methods.xr_transformer.x_transformer", "XTransformer"),
    "lightxml": ("xmtc.methods.lightxml.estimator", "LightXML"),
    "elias": ("xmtc.methods.elias.estimator", "ELIAS"),
    "aplc": ("xmtc.methods.aplc.estimator", "APLC"),
    "cascadexml": ("xmtc.methods.cascadexml.estimator", "CascadeXML"),
    "dual-encoder": ("xmtc.methods.dual_encoder.estimator", "DualEncoder"),
    "label-text": ("xmtc.methods.label_text.estimator", "LabelText"),
    "knn": ("xmtc.methods.knn.estimator", "KNN"),
}


def method_names() -> list[str]:
    """Every method's name, sorted."""
    return sorted(METHODS)


def estimator_class(method: str) -> type:
    """The estimator class of ``method`` (imported on first use); ConfigError for an unknown name."""
    try:
        module, name = METHODS[method]
    except KeyError:
        raise ConfigError(f"unknown method {method!r}; available: {', '.join(method_names())}") from None
    return getattr(importlib.import_module(module), name)


def exported_names() -> dict[str, str]:
    """``{public name: method}``: each estimator class and its config class (``XRLinear``, ``XRLinearConfig``)."""
    out = {}
    for method, (_, name) in METHODS.items():
        out[name] = method
        out[name + "Config"] = method
    return out


def resolve_export(name: str):
    """The estimator or config class exported as ``name`` (see :func:`exported_names`), or None."""
    method = exported_names().get(name)
    if method is None:
        return None
    cls = estimator_class(method)
    return cls.config_class if name.endswith("Config") and name != cls.__name__ else cls
