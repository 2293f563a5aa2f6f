"""The console script defers numpy's submodules that ``from numpy import *`` (SciPy's array-API layer) loads and no
command uses (xmtc.startup): they must not run at start, and must still work for whoever imports them later."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from xmtc.data import sample_path

PROBE = """
import json, sys
{defer}
import scipy.sparse
loaded = {{n: n in sys.modules for n in ("numpy.f2py.crackfortran", "charset_normalizer", "unittest")}}
lazy = {{n: type(sys.modules[n]).__name__ for n in ("numpy.f2py", "numpy.testing") if n in sys.modules}}
import numpy, numpy.testing
numpy.testing.assert_allclose(numpy.ones(2), [1.0, 1.0])   # still usable: runs on first use
from numpy.f2py import crackfortran                       # and its submodules import
print(json.dumps({{"loaded": loaded, "lazy": lazy, "same": numpy.testing is sys.modules["numpy.testing"],
                  "crack": crackfortran.__name__}}))
"""


def _probe(defer: bool) -> dict:
    code = PROBE.format(defer="from xmtc.startup import defer_unused_imports; defer_unused_imports()" if defer else "")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_deferred_modules_do_not_run_at_import_and_work_when_used():
    plain, deferred = _probe(False), _probe(True)
    if not plain["loaded"]["numpy.f2py.crackfortran"]:
        pytest.skip("this scipy / numpy pair does not load numpy.f2py with scipy.sparse: nothing to defer")
    assert deferred["loaded"] == {"numpy.f2py.crackfortran": False, "charset_normalizer": False, "unittest": False}
    assert deferred["lazy"] == {"numpy.f2py": "_LazyModule", "numpy.testing": "_LazyModule"}
    assert deferred["same"] and deferred["crack"] == "numpy.f2py.crackfortran"
    assert plain["same"] and plain["crack"] == "numpy.f2py.crackfortran"


def test_imported_and_missing_names_are_left_to_the_normal_import(monkeypatch):
    import types

    from xmtc.startup import defer_unused_imports

    real = types.ModuleType("numpy.f2py")
    monkeypatch.setitem(sys.modules, "numpy.f2py", real)
    assert defer_unused_imports(("numpy.f2py", "numpy.no_such_module_here")) == []
    assert sys.modules["numpy.f2py"] is real and "numpy.no_such_module_here" not in sys.modules


def test_the_console_script_defers_them(tmp_path):
    """``python -m xmtc train`` (xmtc.cli.entry) imports scipy.sparse without running numpy.f2py: read from the
    interpreter's own import log, since the script ends with os._exit."""
    import gzip

    lines = gzip.open(sample_path("train"), "rt", encoding="utf-8").read().splitlines()[:300]
    train = tmp_path / "train.tsv"
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "xmtc", "train", str(train), "-o",
                          str(tmp_path / "m"), "-q", "--n-threads", "1"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "scipy.sparse" in imported
    assert "numpy.f2py.crackfortran" not in imported and "charset_normalizer" not in imported
