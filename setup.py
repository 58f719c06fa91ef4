"""The one compiled part of hookkit: an optional C kernel for the CPU statistics (see
src/hookkit/backends/_cpu_kernels.c). Without a C compiler the install still succeeds and the
statistics use the framework's own ops on the CPU too (same rows, slower: BENCHMARKS.md)."""

import sys

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "hookkit.backends._cpu_kernels",
            ["src/hookkit/backends/_cpu_kernels.c"],
            # fp-contract off: no fused multiply-add, so histc's float32 roundings are kept exactly
            extra_compile_args=[] if sys.platform == "win32" else ["-O3", "-ffp-contract=off", "-fno-fast-math", "-pthread"],
            extra_link_args=[] if sys.platform == "win32" else ["-pthread"],
            optional=True,
        )
    ]
)
