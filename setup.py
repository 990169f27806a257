"""Build of the compiled replay core; everything else is in pyproject.toml.

The extension is optional: without a C compiler or the Python headers the package still
installs, and the analyzer falls back to its pure-Python engine (it says so on stderr).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "npusan.analyzer._core",
            ["src/npusan/analyzer/_core.c"],
            extra_compile_args=["-O2", "-std=gnu11"],
            optional=True,
        )
    ]
)
