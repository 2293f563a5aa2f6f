"""What the ``xmtc`` command's process does before it imports the numeric stack: defer numpy's unused submodules.

SciPy 1.17's array-API layer (``scipy._lib.array_api_compat.numpy``, imported by ``scipy.sparse``) clones numpy's
namespace with ``from numpy import *``. numpy 2 lists its submodules ``f2py`` and ``testing`` in ``__all__`` and
loads them on first access, so every process that imports ``scipy.sparse`` also imports the Fortran wrapper
generator (``numpy.f2py``, which imports ``charset_normalizer``) and numpy's test helpers (which import
``unittest``). No command uses either. Measured with ``python -X importtime`` on ``xmtc train``: 0.17 s of the
0.21 s that ``import scipy.sparse`` took, on a command whose whole run on reuters is 2.3 s
(benchmarks/RESULTS.md, "A command's start").

:func:`defer_unused_imports` registers both as lazy modules (the standard library's
:class:`importlib.util.LazyLoader`): the name is bound at once and the module runs on its first attribute
access, so ``import numpy.testing`` and ``numpy.f2py.crackfortran`` still work wherever something needs them.
Only the console script calls it (:func:`xmtc.cli.entry`): a program that imports xmtc as a library keeps its
imports as it set them up.
"""

from __future__ import annotations

import importlib.util
import sys

#: numpy submodules that ``from numpy import *`` loads and no xmtc command uses
DEFERRED = ("numpy.f2py", "numpy.testing")


def defer_unused_imports(names: tuple[str, ...] = DEFERRED) -> list[str]:
    """Register each not yet imported module of ``names`` as a lazy module and bind it on its parent package;
    returns the names deferred. A name that cannot be found is left to the normal import (and its error)."""
    deferred = []
    for name in names:
        if name in sys.modules:
            continue
        parent, _, attr = name.rpartition(".")
        spec = importlib.util.find_spec(name)  # imports the parent package
        if spec is None or spec.loader is None:
            continue
        spec.loader = importlib.util.LazyLoader(spec.loader)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        # what the import system does after loading a submodule; numpy's __getattr__ would otherwise import it
        # again under the same name, and find this one
        setattr(sys.modules[parent], attr, module)
        deferred.append(name)
    return deferred
