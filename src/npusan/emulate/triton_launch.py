"""Triton under the emulated CUDA device: kernels run by Triton's interpreter, on the CPU.

A compiled Triton kernel needs a real GPU: at its first launch Triton's driver looks for
``libcuda.so`` and fails deep inside Triton ("libcuda.so cannot found"). Triton's own
interpreter (``TRITON_INTERPRET=1``) runs the same kernel on the host, on the emulator's
device tensors, with the same results. Triton reads the variable when a kernel is
defined (``@triton.jit``), so :func:`install` sets it before the program runs, unless the
user set it. A kernel that is compiled all the same (``TRITON_INTERPRET=0``, or a kernel
defined before the emulator started) stops at its first launch with one line that says
what to do (:class:`~.cuda.Unsupported`), instead of Triton's traceback.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from typing import Any

from .cuda import Unsupported

#: Triton's switch between the compiler (a GPU) and the interpreter (the host).
INTERPRET_ENV = "TRITON_INTERPRET"
#: The module whose class launches a compiled kernel (``JITFunction.run``).
JIT_MODULE = "triton.runtime.jit"


def install() -> None:
    """Have Triton interpret its kernels from now on (when the user did not say otherwise)
    and stop a compiled kernel's launch with one line. Never imports Triton."""
    if not os.environ.get(INTERPRET_ENV, "").strip():
        os.environ[INTERPRET_ENV] = "1"
    mod = sys.modules.get(JIT_MODULE)
    if mod is not None:
        _patch(mod)
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def _patch(mod: Any) -> None:
    """Make ``JITFunction.run`` of ``mod`` raise :class:`Unsupported` (once)."""
    cls = getattr(mod, "JITFunction", None)
    run = getattr(cls, "__dict__", {}).get("run")
    if run is None or getattr(run, "_npusan_emulated", False):
        return

    def run_compiled(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise Unsupported(refusal(getattr(getattr(self, "fn", None), "__name__", None) or "?"))

    run_compiled._npusan_emulated = True  # type: ignore[attr-defined]
    run_compiled.__wrapped__ = run  # type: ignore[attr-defined]
    run_compiled.__name__ = run_compiled.__qualname__ = "run"
    cls.run = run_compiled


def refusal(kernel: str) -> str:
    """The one line for the launch of compiled kernel ``kernel``: why, and what to do."""
    v = os.environ.get(INTERPRET_ENV, "").strip()
    why = (f"{INTERPRET_ENV}={v} is set" if v and v.lower() not in ("1", "true", "on", "yes")
           else "it was defined before the emulator started")
    return (f"npusan --emulate cuda: Triton kernel {kernel} is compiled for a GPU ({why}), and a compiled "
            f"Triton kernel is not emulated: run with {INTERPRET_ENV}=1 (or leave it unset) so that "
            "Triton runs its kernels on the CPU under the emulator")


class _Finder(importlib.abc.MetaPathFinder):
    """Patches :data:`JIT_MODULE` right after it is executed, then leaves ``sys.meta_path``.

    The spec comes from the path finder itself, not from the other finders on
    ``sys.meta_path``: the recorder's own Triton hook asks those, and two finders that
    asked each other would never return."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != JIT_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        exec_module = getattr(getattr(spec, "loader", None), "exec_module", None)
        if exec_module is None:
            return None  # (not found where the path finder looks: left to the other finders)
        finder = self

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            if finder in sys.meta_path:
                sys.meta_path.remove(finder)
            try:
                _patch(module)
            except Exception:  # Triton's launch then fails its own way
                pass

        spec.loader.exec_module = exec_and_patch  # this module's own loader (one per spec)
        return spec
