"""End-to-end estimators users call (fit / predict / save / load) and the method registry."""

from .base import XMCModel, estimator_class, load, method_names
from .xr_linear import XRLinear, XRLinearConfig
from .cascadexml import CascadeXML, CascadeXMLConfig
from .lightxml import LightXML, LightXMLConfig
from .xr_transformer import XRTransformer, XRTransformerConfig, XTransformer, XTransformerConfig

__all__ = ["XMCModel", "CascadeXML", "CascadeXMLConfig", "LightXML", "LightXMLConfig", "XRLinear", "XRLinearConfig", "XRTransformer", "XRTransformerConfig", "XTransformer",
           "XTransformerConfig", "estimator_class", "load", "method_names"]
