"""Load the stand-in ``torch_npu`` into ``sys.modules`` for one test and remove it after.

Usage in a test module::

    from .fake_torch_npu.loader import fake_torch_npu  # noqa: F401  (a pytest fixture)

The fixture yields the imported package; its trigger API is ``torch_npu._fake``.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent


def _purge() -> None:
    for name in [m for m in sys.modules if m == "torch_npu" or m.startswith("torch_npu.")]:
        del sys.modules[name]


def load():
    """Import a fresh stand-in (new registries, new runtime state: a fresh import)."""
    _purge()
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module("torch_npu")


def unload() -> None:
    _purge()
    try:
        sys.path.remove(str(ROOT))
    except ValueError:
        pass


@pytest.fixture
def fake_torch_npu(monkeypatch):
    monkeypatch.delenv("TORCH_NPU_SANITIZER", raising=False)
    monkeypatch.delenv("ASCEND_OPP_DEBUG_PATH", raising=False)
    mod = load()
    try:
        yield mod
    finally:
        unload()
