"""The optional CPython accelerator (inert._accel), built from the generated C readers in c/, and
``inert-torch.pth``, the one-line start-up hook of ``INERT_TORCH_ENABLE=1`` (inert/_torch_hook.py).

Everything else is in pyproject.toml.  ``optional=True``: where no C compiler works, the build
warns and goes on, and the codecs run in pure Python (as with ``INERT_PURE_PYTHON=1``).
"""

from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# The run-time, the generated readers and their registry, and the builder of Python values.
SOURCES = sorted(str(p.relative_to(HERE)) for p in (HERE / "c").glob("inert_*.c")) + ["c/python/inert_accel.c"]
# The headers too: a grammar change may rewrite only a generated header (c/inert_grammar_hash.h at least),
# and a build that skipped it would carry the previous grammar (inert/_accelerator.py refuses it).
DEPENDS = sorted(str(p.relative_to(HERE)) for p in (HERE / "c").glob("inert_*.h")) + ["c/python/inert_crc32_fold.h"]

PTH = "inert-torch.pth"


class BuildWithPth(build_py):
    """build_py that also puts ``inert-torch.pth`` at the top of what is installed (site-packages).

    A wheel installs its build_lib whole; an editable install (setuptools' editable_wheel) builds
    into a scratch build_lib and installs what is in its ``install`` command's ``install_lib``,
    the unpacked wheel, so the file goes there.
    """

    def run(self) -> None:
        super().run()
        target = self.build_lib
        if getattr(self, "editable_mode", False):
            target = self.distribution.get_command_obj("install").install_lib or target
        self.copy_file(str(HERE / PTH), str(Path(target) / PTH), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = list(super().get_outputs(include_bytecode))
        return outputs if getattr(self, "editable_mode", False) else [*outputs, str(Path(self.build_lib) / PTH)]


setup(
    cmdclass={"build_py": BuildWithPth},
    ext_modules=[
        Extension(
            "inert._accel", sources=SOURCES, depends=DEPENDS, include_dirs=["c"], optional=True, extra_compile_args=["-O2"]
        ),
    ]
)
