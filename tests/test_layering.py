"""The package's layers import one way: recorder -> trace_format -> analyzer -> cli.

Checked statically, every import statement of every module, those inside functions too (a
lazy import is still a dependency): the recorder reaches the analyzer only through
``analyzer.replay.online``; the trace format and the analyzer never import the recorder,
the CLI or the top package (whose ``__init__`` imports the recorder); the trace format
never imports the analyzer.
"""

from __future__ import annotations

import ast
import pathlib
from typing import Iterator

import pytest

import npusan

SRC = pathlib.Path(npusan.__file__).resolve().parent
#: The one analyzer module the recorder may import.
RECORDER_GATE = "npusan.analyzer.replay.online"


def module_name(path: pathlib.Path, root: pathlib.Path = SRC) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, module: str, is_package: bool) -> Iterator[tuple[int, list[str]]]:
    """(line, absolute module names) of every import statement in ``source``; ``from X
    import y`` names both ``X`` and ``X.y`` (``y`` may be a submodule)."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield node.lineno, [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                if node.module:
                    base.append(node.module)
                target = ".".join(base)
            else:
                target = node.module or ""
            yield node.lineno, [target] + [f"{target}.{alias.name}" for alias in node.names if alias.name != "*"]


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def violation(module: str, target: str) -> str | None:
    """Why ``module`` may not import ``target``, or None."""
    if not _within(target, "npusan"):
        return None
    if _within(module, "npusan.recorder") and _within(target, "npusan.analyzer"):
        # the gate itself and the packages that hold it (importing it imports them)
        if not (_within(target, RECORDER_GATE) or target in ("npusan.analyzer", "npusan.analyzer.replay")):
            return f"the recorder imports the analyzer only through {RECORDER_GATE}"
    for layer in ("npusan.analyzer", "npusan.trace_format"):
        if _within(module, layer):
            if target == "npusan" or _within(target, "npusan.recorder") or _within(target, "npusan.cli"):
                return f"{layer} never imports the recorder, the CLI or the top package"
    if _within(module, "npusan.trace_format") and _within(target, "npusan.analyzer"):
        return "the trace format never imports the analyzer"
    return None


def violations(root: pathlib.Path = SRC) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        for line, targets in imported_modules(path.read_text(encoding="utf-8"), module, path.name == "__init__.py"):
            for target in targets:  # one line per import statement
                why = violation(module, target)
                if why is not None:
                    found.append(f"{path.relative_to(root.parent)}:{line}: {module} imports {target}: {why}")
                    break
    return found


def test_the_layers_import_one_way():
    assert violations() == []


@pytest.mark.parametrize(
    "where, source",
    [
        ("recorder/x.py", "def f():\n    from ..analyzer.report import text\n"),
        ("recorder/x.py", "from ..analyzer.replay import native\n"),
        ("recorder/backends/x.py", "import npusan.analyzer.findings.model\n"),
        ("analyzer/report/x.py", "from ... import __version__\n"),
        ("analyzer/x.py", "def f():\n    from ..recorder import session\n"),
        ("analyzer/x.py", "from npusan.cli import main\n"),
        ("trace_format/x.py", "def f():\n    from ..analyzer.replay import engine\n"),
        ("trace_format/x.py", "from .. import __version__\n"),
    ],
)
def test_a_wrong_way_import_is_caught(tmp_path, where, source):
    root = tmp_path / "npusan"
    (root / where).parent.mkdir(parents=True)
    (root / where).write_text(source)
    assert len(violations(root)) == 1


@pytest.mark.parametrize(
    "where, source",
    [
        ("recorder/x.py", "def f():\n    from ..analyzer.replay import online\n"),
        ("recorder/x.py", "from ..trace_format.encoder import RecordEncoder\n"),
        ("analyzer/report/x.py", "from ..._version import __version__\n"),
        ("cli/x.py", "from ..recorder import status\nfrom ..analyzer import report\n"),
    ],
)
def test_a_one_way_import_passes(tmp_path, where, source):
    root = tmp_path / "npusan"
    (root / where).parent.mkdir(parents=True)
    (root / where).write_text(source)
    assert violations(root) == []
