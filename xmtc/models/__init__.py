"""End-to-end estimators users call (fit / predict / save / load) and the method registry."""

from .base import XMCModel, estimator_class, load, method_names
from .xr_linear import XRLinear, XRLinearConfig
from .aplc import APLC, APLCConfig
from .cascadexml import CascadeXML, CascadeXMLConfig
from .elias import ELIAS, ELIASConfig
from .lightxml import LightXML, LightXMLConfig
from .xr_transformer import XRTransformer, XRTransformerConfig, XTransformer, XTransformerConfig

__all__ = ["XMCModel", "APLC", "APLCConfig", "CascadeXML", "CascadeXMLConfig", "ELIAS", "ELIASConfig", "LightXML", "LightXMLConfig", "XRLinear", "XRLinearConfig", "XRTransformer", "XRTransformerConfig", "XTransformer",
           "XTransformerConfig", "estimator_class", "load", "method_names"]
