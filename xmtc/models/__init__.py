"""The model shell every method shares, and the estimators by name.

The methods themselves live in :mod:`xmtc.methods`, one folder each. Here is what they share: the base
class and its capabilities (:mod:`.base`, predicting in batches :mod:`.batched_topk`), model folders
(:mod:`.storage`, :mod:`.array_files`, the stages every model saves :mod:`.model_stages`, the crash-safe swap
:mod:`.swap`), calibrated scores (:mod:`.calibration`, :mod:`.calibrated_fit`), explanations (:mod:`.explain`,
:mod:`.term_contributions`), ensembles (:mod:`.ensemble`), learning after training
(:mod:`.learning`), the label-text route for labels without documents (:mod:`.label_route`,
:mod:`.open_labels`), the end-to-end estimator shell (:mod:`.end_to_end`) and its re-ranker
(:mod:`.reranker`). Which estimators exist is :mod:`xmtc.registry`'s table; this package exports each
estimator and its config class by name (``from xmtc.models import XRLinear``), importing a method's
module only when its name is first used.
"""

from ..registry import estimator_class, exported_names, method_names, resolve_export
from .base import XMCModel, load

__all__ = ["XMCModel", "estimator_class", "load", "method_names", *exported_names()]


def __getattr__(name):
    found = resolve_export(name)
    if found is None:
        raise AttributeError(f"module 'xmtc.models' has no attribute {name!r}")
    return found
