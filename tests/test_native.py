"""The compiled kernels' loader: argument checks, thread counts, and what an XR-Linear job loads."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import xmtc
from xmtc import native


def test_ptr_accepts_only_contiguous_arrays_of_the_exact_dtype():
    a = np.zeros(8, dtype=np.int64)
    assert native.ptr(a, np.int64) == a.ctypes.data
    with pytest.raises(TypeError, match="int32"):
        native.ptr(a, np.int32)
    with pytest.raises(TypeError, match="not contiguous"):
        native.ptr(np.zeros((4, 4), dtype=np.float32)[:, 1], np.float32)
    with pytest.raises(TypeError, match="list"):
        native.ptr([1, 2], np.int64)


def test_resolve_threads():
    assert native.resolve_threads(3) == 3
    assert native.resolve_threads(None) == native.resolve_threads(0) == native.available_threads() >= 1
    assert native.resolve_threads(-1) == native.available_threads()


def test_out_of_memory_status_raises():
    native.check(0, "x")
    with pytest.raises(MemoryError, match="training"):
        native.check(-1, "training")


def test_xr_linear_on_given_features_never_loads_numba():
    """The linear path is C only (no JIT: numba's ~54 MB and ~0.5 s of set-up); no bar, no tqdm."""
    code = textwrap.dedent("""
        import sys
        import numpy as np, scipy.sparse as sp
        import xmtc
        rng = np.random.default_rng(0)
        X = sp.random(300, 500, density=0.05, format="csr", random_state=1, dtype=np.float32)
        Y = sp.csr_matrix((rng.random((300, 40)) < 0.1).astype(np.float32))
        m = xmtc.XRLinear(n_threads=2, max_leaf_size=8, branching=2).fit(X, Y, progress=False)  # k-means too
        m.predict_topk(X[:100], k=5)
        print(sorted(k for k in sys.modules if k.split(".")[0] in ("numba", "llvmlite", "tqdm")))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_missing_build_says_how_to_build(monkeypatch):
    monkeypatch.setattr(native, "_lib", None)
    monkeypatch.setitem(sys.modules, "xmtc._native", None)  # import of the extension fails, as unbuilt
    monkeypatch.delattr(xmtc, "_native", raising=False)  # once loaded, the package holds it as an attribute
    with pytest.raises(native.NativeBuildError, match="pip install"):
        native.lib()
