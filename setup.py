"""The optional CPython accelerator (inert._accel), built from the generated C readers in c/.

Everything else is in pyproject.toml.  ``optional=True``: where no C compiler works, the build
warns and goes on, and the codecs run in pure Python (as with ``INERT_PURE_PYTHON=1``).
"""

from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).resolve().parent
# The run-time, the generated readers and their registry, and the builder of Python values.
SOURCES = sorted(str(p.relative_to(HERE)) for p in (HERE / "c").glob("inert_*.c")) + ["c/python/inert_accel.c"]

setup(
    ext_modules=[
        Extension("inert._accel", sources=SOURCES, include_dirs=["c"], optional=True, extra_compile_args=["-O2"]),
    ]
)
