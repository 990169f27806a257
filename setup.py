"""Build steps that pyproject.toml cannot express; the project's metadata is there.

- The compiled replay core (``npusan.analyzer.replay._core``). The extension is optional: without
  a C compiler or the Python headers the package still installs, and the analyzer falls
  back to its pure-Python engine (it says so on stderr).
- ``npusan.recorder._hostfault``: the page-fault watch of pinned host memory (optional too:
  without it host accesses outside torch ops are not seen, and the trace says so).
- ``npusan.pth``, installed into site-packages (for wheels and editable installs): the
  start-up hook that makes ``NPUSAN_TRACE=PATH`` / ``NPUSAN_ONLINE=raise|warn`` work in any
  Python process of the environment, the way coverage.py ships its ``.pth`` file. Python's
  ``site`` module runs a ``.pth`` line that starts with ``import`` at every interpreter
  start-up; ours costs two dictionary lookups when neither variable is set
  (docs/benchmarks.md), and imports nothing else.
"""

import glob
import importlib.util
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
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


# The compiled core's sources: a unity build, _core.c includes the other units (docs/native.md).
CORE_DIR = "src/npusan/analyzer/replay/csrc"
GEN_TABLES = f"{CORE_DIR}/gen_tables.py"


class build_ext_with_tables(build_ext):
    """``build_ext`` that first writes the core's ``_tables.h`` from the Python tables
    (``gen_tables.py``, loaded by path: nothing of the package is imported)."""

    def run(self) -> None:
        spec = importlib.util.spec_from_file_location("_npusan_gen_tables", GEN_TABLES)
        gen = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(gen)
        gen.write()
        super().run()


setup(
    cmdclass={"build_py": build_py_with_pth, "build_ext": build_ext_with_tables},
    ext_modules=[
        Extension(
            "npusan.analyzer.replay._core",
            [f"{CORE_DIR}/_core.c"],
            # the units _core.c includes, the headers, and what writes _tables.h: a change
            # to any rebuilds the core (and puts them in the sdist)
            depends=sorted(set(glob.glob(f"{CORE_DIR}/*.[ch]")) - {f"{CORE_DIR}/_core.c", f"{CORE_DIR}/_tables.h"})
            + [GEN_TABLES, "src/npusan/trace_format/records.py", "src/npusan/analyzer/replay/core_codes.py"],
            extra_compile_args=["-O3", "-std=gnu11"],
            optional=True,
        ),
        Extension(
            "npusan.recorder._kernelpack",
            ["src/npusan/recorder/_kernelpack.c"],
            extra_compile_args=["-O2", "-std=gnu11"],
            optional=True,
        ),
        Extension(
            "npusan.recorder._stackkey",
            ["src/npusan/recorder/_stackkey.c"],
            extra_compile_args=["-O2", "-std=gnu11"],
            # PyFrame_GetLasti is 3.11's: older Pythons walk the stack in Python
            optional=True,
        ),
        # the page-fault watch of pinned host memory (docs/semantics.md, "The host"); on
        # another OS it builds to a module whose import fails, and the recorder says so
        Extension(
            "npusan.recorder._hostfault",
            ["src/npusan/recorder/_hostfault.c"],
            extra_compile_args=["-O2", "-std=gnu11"],
            optional=True,
        ),
    ],
)
