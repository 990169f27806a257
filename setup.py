"""Build steps that pyproject.toml cannot express; the project's metadata is there.

- The compiled replay core (``npusan.analyzer.replay._core``). The extension is optional: without
  a C compiler or the Python headers the package still installs, and the analyzer falls
  back to its pure-Python engine (it says so on stderr).
- ``npusan.pth``, installed into site-packages (for wheels and editable installs): the
  start-up hook that makes ``NPUSAN_TRACE=PATH`` / ``NPUSAN_ONLINE=raise|warn`` work in any
  Python process of the environment, the way coverage.py ships its ``.pth`` file. Python's
  ``site`` module runs a ``.pth`` line that starts with ``import`` at every interpreter
  start-up; ours costs two dictionary lookups when neither variable is set
  (docs/benchmarks.md), and imports nothing else.
"""

import os

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

PTH_NAME = "npusan.pth"

# Runs only when one of the variables is set: arm the recorder (it starts when the program
# imports torch). A Python that cannot import npusan says so in one line and runs on.
_HOOK = """\
try:
    from npusan.recorder.activate import autostart
except Exception as e:
    sys.stderr.write(f"npusan: warning: this Python cannot import npusan ({e}); not recording\\n")
else:
    autostart()
"""

PTH_LINE = (
    f"import os, sys; exec({_HOOK!r}) "
    "if 'NPUSAN_TRACE' in os.environ or 'NPUSAN_ONLINE' in os.environ else None\n"
)


class build_py_with_pth(build_py):
    """``build_py`` that also writes ``npusan.pth`` at the top of the wheel."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            # An editable wheel carries no build_lib files (it points at src/); setuptools
            # installs the editable wheel's own root as install_lib, so the file goes there.
            target = self.get_finalized_command("install").install_lib
        else:
            target = self.build_lib
        os.makedirs(target, exist_ok=True)
        with open(os.path.join(target, PTH_NAME), "w", encoding="utf-8") as f:
            f.write(PTH_LINE)

    def get_outputs(self, include_bytecode=True):
        outputs = super().get_outputs(include_bytecode)
        if not self.editable_mode:
            outputs.append(os.path.join(self.build_lib, PTH_NAME))
        return outputs


setup(
    cmdclass={"build_py": build_py_with_pth},
    ext_modules=[
        Extension(
            "npusan.analyzer.replay._core",
            ["src/npusan/analyzer/replay/_core.c"],
            extra_compile_args=["-O3", "-std=gnu11"],
            optional=True,
        ),
        Extension(
            "npusan.recorder._kernelpack",
            ["src/npusan/recorder/_kernelpack.c"],
            extra_compile_args=["-O2", "-std=gnu11"],
            optional=True,
        ),
    ],
)
