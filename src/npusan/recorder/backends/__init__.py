"""Device runtime adapters behind one interface (:class:`~.base.Backend`).

Adapters are imported lazily by name so that ``import npusan.recorder.backends`` never
imports a runtime: ``cuda`` -> :mod:`.cuda` ``CudaBackend``, ``npu`` -> :mod:`.npu`
``NpuBackend``, ``sim`` -> :mod:`.sim` ``SimBackend``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Dict, Optional, Tuple, Type

from .base import CALLBACK_NAMES, Backend, RecorderCallbacks

__all__ = ["Backend", "RecorderCallbacks", "CALLBACK_NAMES", "BACKENDS", "backend_class", "npu_installed", "select_backend",
           "device_problem"]

#: name -> (module, class) of each adapter.
BACKENDS: Dict[str, Tuple[str, str]] = {
    "cuda": ("npusan.recorder.backends.cuda", "CudaBackend"),
    "npu": ("npusan.recorder.backends.npu", "NpuBackend"),
    "sim": ("npusan.recorder.backends.sim", "SimBackend"),
}


def backend_class(name: str) -> Type[Backend]:
    """The adapter class registered under ``name`` (imports its module)."""
    try:
        mod, cls = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r} (choose from auto, {', '.join(BACKENDS)})") from None
    return getattr(importlib.import_module(mod), cls)


def npu_installed() -> bool:
    """Whether ``torch_npu`` is imported or importable (looked up, never imported here)."""
    if "torch_npu" in sys.modules:
        return True
    try:
        return importlib.util.find_spec("torch_npu") is not None
    except (ImportError, ValueError):  # a broken torch_npu entry on sys.path
        return False


def device_problem(name: str) -> Optional[str]:
    """Why the device ``name`` (cuda or npu) cannot be recorded here, or None.

    A recording of a program that cannot reach its device holds no device work, and a check
    on it passes whatever the program does: ``npusan record --backend cuda`` and
    ``pytest --npusan-backend cuda`` refuse to start instead. None also when this Python has
    no torch (it cannot tell; the program's own Python may have torch), and for auto and sim.
    """
    if name not in ("cuda", "npu") or importlib.util.find_spec("torch") is None:
        return None
    if backend_class(name).available():
        return None
    if name == "cuda":
        return ("no usable CUDA device here (torch.cuda.is_available() is False, or this torch has no GPU "
                "trace hooks)")
    if not npu_installed():
        return "torch_npu is not installed here"
    return "torch_npu reports no usable NPU here"


def select_backend(name: str = "auto") -> Backend:
    """An adapter instance for ``name``.

    ``auto`` picks NPU when ``torch_npu`` is imported or importable and usable (creating the
    NPU adapter imports it; a plain ``import npusan`` never does), else CUDA when available,
    else the simulated device.
    """
    if name != "auto":
        return backend_class(name)()
    order = []
    if npu_installed():
        order.append("npu")
    order.append("cuda")
    for cand in order:
        try:
            cls = backend_class(cand)
            if cls.available():
                return cls()
        except Exception:  # a missing or broken adapter must not stop recording
            continue
    return backend_class("sim")()
