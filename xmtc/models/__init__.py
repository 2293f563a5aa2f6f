"""End-to-end estimators users call (fit / predict / save / load) and the method registry."""

from .base import XMCModel, estimator_class, load, method_names
from .xr_linear import XRLinear, XRLinearConfig

__all__ = ["XMCModel", "XRLinear", "XRLinearConfig", "estimator_class", "load", "method_names"]
