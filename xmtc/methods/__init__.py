"""The methods, one folder each: everything that belongs to one method and to no other.

A folder holds the method's parts under names that say their role:

* ``estimator.py`` -- the estimator users call (``fit`` / ``predict`` / ``save`` / ``load``) and,
  unless it has its own ``config.py``, its parameter dataclass;
* ``network.py`` -- for the neural methods, the output layers and training loss of the paper, plugged
  into the shared end-to-end training loop (:mod:`xmtc.neural.training_loop`);
* anything else only this method uses (XR-Transformer's multi-resolution fine-tuning, neural matcher and
  eq. 11 bootstrap).

What several methods share stays in the layers below: features (:mod:`xmtc.features`), label trees and
indexes (:mod:`xmtc.index`), linear models and beam search (:mod:`xmtc.linear`), the neural core
(:mod:`xmtc.neural`: encoder heads, losses, samplers, the training loop) and the model shell
(:mod:`xmtc.models`: base class, storage, calibration, explanations, ensembles). A method becomes
available by one entry in :data:`xmtc.registry.METHODS`; the CLI, ``xmtc.__all__`` and the contract test
over every method (``tests/test_contract.py``) read that table.
"""
