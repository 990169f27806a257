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

import os
from typing import Any

from ..recorder.after_import import patch_after_import
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
    patch_after_import((JIT_MODULE,), _patch)


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
