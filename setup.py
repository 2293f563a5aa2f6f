"""Build step of xmtc's compiled kernels; everything else about the package is in pyproject.toml."""

import sys

from setuptools import Extension, setup

# -ffp-contract=off: no fused multiply-adds, so every build (and every CPU clone chosen at load time)
# computes the same bits; see xmtc/csrc/native.h.
if sys.platform == "win32":
    compile_args, link_args = ["/O2", "/fp:precise"], []
else:
    compile_args = ["-O3", "-std=c11", "-ffp-contract=off", "-fno-math-errno", "-fvisibility=hidden", "-pthread"]
    link_args = ["-pthread"]

setup(
    ext_modules=[
        Extension(
            "xmtc._native",
            sources=["xmtc/csrc/module.c", "xmtc/csrc/threads.c", "xmtc/csrc/solver.c", "xmtc/csrc/beam.c",
                     "xmtc/csrc/kmeans.c", "xmtc/csrc/text.c", "xmtc/csrc/isotonic.c",
                     "xmtc/csrc/char_fit.c"],
            depends=["xmtc/csrc/native.h"],
            extra_compile_args=compile_args,
            extra_link_args=link_args,
        )
    ]
)
