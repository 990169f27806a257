"""``torch.compile`` under the emulator: it runs eagerly, and says so where that matters.

Dynamo compiles nothing while a ``TorchDispatchMode`` that does not ignore compile
internals is active; it then runs the function eagerly (``torch/_dynamo/convert_frame.py``,
``is_in_any_mode_without_ignore_compile_internals``). The emulation mode cannot ignore
them: the emulated device *is* that mode (its tensors are CPU tensors whose device-ness
it keeps per storage), and code that Inductor compiled would run CPU kernels on them
directly, unseen by it, and hand back tensors it never marked as device memory. So every
compiled function runs its ops one by one through the emulation, and the recorder records
each of them -- finer than the one access per compiled region of a real GPU.

What is lost is what ``mode="reduce-overhead"`` (and ``"max-autotune"``, and the option
``triton.cudagraphs``) adds on a GPU: Inductor's CUDA graph trees, which replay the
compiled code from static buffers in a private pool and overwrite a previous call's
outputs at the next replay. Emulating them would need Inductor to generate code for a
device its C++ side sees as the CPU, and the CUDA caching allocator's private-pool and
checkpoint entry points that cudagraph trees call
(``torch._C._cuda_beginAllocateCurrentThreadToPool``, ``_cuda_getCheckpointState``...),
which work on real CUDA memory: a CPU build of torch lacks some and cannot run the others. So such a call runs
eagerly too, and says so once: a line on stderr and a ``coarse:`` NOTE in the trace,
which the report repeats (races of the graph trees' static buffers are not checked).
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import torch

#: Modes of torch.compile that use CUDA graphs (Inductor's cudagraph trees).
CUDAGRAPH_MODES = ("reduce-overhead", "max-autotune")
TOPIC = "emulate-cudagraph-trees"


def text(mode: Any) -> str:
    """What the stderr line and the trace's NOTE say."""
    return (f"torch.compile(mode={mode!r}) runs eagerly under the emulator: no CUDA graphs are "
            "captured, each op is recorded on its own; races of the CUDA graph trees' static "
            "buffers (an output overwritten by the next replay) are not checked")


def uses_cudagraphs(mode: Any, options: Any) -> bool:
    """Whether a torch.compile call asks for Inductor's CUDA graph trees."""
    return mode in CUDAGRAPH_MODES or (isinstance(options, dict) and bool(options.get("triton.cudagraphs")))


def _announce(mode: Any) -> None:
    """Once per process on stderr; once per recording in the trace (never raises)."""
    global _said
    try:
        if not _said:
            _said = True
            sys.stderr.write(f"npusan: note: {text(mode)}\n")
        from ..recorder import session
        from ..recorder.explicit import note_once
        from ..trace_format.records import COARSE_NOTE_PREFIX

        rec = session.current()
        if rec is not None:
            note_once(rec, TOPIC, COARSE_NOTE_PREFIX + text(mode))
    except Exception:  # a note must never stop the program
        pass


_said = False


def patch() -> None:
    """Wrap ``torch.compile`` so that a call asking for CUDA graphs is announced."""
    orig = torch.compile
    if getattr(orig, "_npusan_emulated", False):
        return

    @functools.wraps(orig)
    def compile_(*args: Any, **kwargs: Any) -> Any:
        if uses_cudagraphs(kwargs.get("mode"), kwargs.get("options")):
            _announce(kwargs.get("mode") or "default, options={'triton.cudagraphs': True}")
        return orig(*args, **kwargs)

    compile_._npusan_emulated = True  # type: ignore[attr-defined]
    torch.compile = compile_
