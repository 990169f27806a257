"""``torch.compile`` under the emulator: it runs eagerly, and says so where that matters.

Dynamo compiles nothing while a ``TorchDispatchMode`` that does not ignore compile
internals is active; it then runs the function eagerly (``torch/_dynamo/convert_frame.py``,
``is_in_any_mode_without_ignore_compile_internals``). The emulation mode cannot ignore
them: the emulated device *is* that mode (its tensors are CPU tensors whose device-ness
it keeps per storage), and code that Inductor compiled would run CPU kernels on them
directly, unseen by it, and hand back tensors it never marked as device memory. So every
compiled function runs its ops one by one through the emulation, and the recorder records
each of them -- finer than the one access per compiled region of a real GPU.

That is said once, at the first call of a compiled function or module (a line on stderr,
and a ``coarse:`` NOTE in the trace the report repeats): a user who compiled the program
must not read a clean report as a check of what Inductor generates. What is checked is
what the function does as written, op by op, on the streams it puts them on; not checked
are Inductor's fused kernels and where it would place them.

What is lost besides is what ``mode="reduce-overhead"`` (and ``"max-autotune"``, and the option
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


#: What the note at the first compiled call says.
EAGER_TEXT = ("torch.compile runs eagerly under the emulator: the ops of compiled functions are "
              "recorded one by one, on the streams the program puts them on, and checked as eager "
              "code; Inductor's generated kernels and their stream placement are not run or checked")
EAGER_TOPIC = "emulate-compiled-eager"


def uses_cudagraphs(mode: Any, options: Any) -> bool:
    """Whether a torch.compile call asks for Inductor's CUDA graph trees."""
    return mode in CUDAGRAPH_MODES or (isinstance(options, dict) and bool(options.get("triton.cudagraphs")))


def _announce(mode: Any) -> None:
    """Once per process on stderr; once per recording in the trace (never raises)."""
    global _said
    if not _said:
        _said = True
        _say(TOPIC, text(mode))
    else:
        _say(TOPIC, text(mode), stderr=False)


def _say(topic: str, what: str, stderr: bool = True) -> None:
    """``what`` on stderr (if ``stderr``) and, once per recording, as a NOTE (never raises)."""
    try:
        if stderr:
            sys.stderr.write(f"npusan: note: {what}\n")
        from ..recorder import session
        from ..recorder.explicit import note_once
        from ..trace_format.records import COARSE_NOTE_PREFIX

        rec = session.current()
        if rec is not None:
            note_once(rec, topic, COARSE_NOTE_PREFIX + what)
    except Exception:  # a note must never stop the program
        pass


_said = False
#: The stderr line of the first compiled call was written (once per process).
_eager_said = False
#: The recording that has the first compiled call's NOTE (a new one gets it at its first).
_eager_noted: Any = None


def _first_call() -> None:
    """At a compiled function's call: the eager note, once per process and recording."""
    global _eager_said, _eager_noted
    try:
        from ..recorder import session

        rec = session.current()
    except Exception:
        return
    if _eager_said and (rec is None or rec is _eager_noted):
        return
    _say(EAGER_TOPIC, EAGER_TEXT, stderr=not _eager_said)
    _eager_said = True
    _eager_noted = rec


def _announcing(compiled: Any) -> Any:
    """``compiled`` (what ``torch.compile`` returned), saying :data:`EAGER_TEXT` at its
    calls while that is still to say: a module gets a forward pre-hook (it stays the
    ``OptimizedModule`` the program expects), a function a wrapper with its attributes."""
    if isinstance(compiled, torch.nn.Module):
        compiled.register_forward_pre_hook(lambda module, args: _first_call())
        return compiled
    if not callable(compiled):
        return compiled

    @functools.wraps(compiled)
    def call(*args: Any, **kwargs: Any) -> Any:
        _first_call()
        return compiled(*args, **kwargs)

    return call


def patch() -> None:
    """Wrap ``torch.compile`` so that a call asking for CUDA graphs is announced, and the
    first call of what it compiled says that it runs eagerly."""
    orig = torch.compile
    if getattr(orig, "_npusan_emulated", False):
        return

    @functools.wraps(orig)
    def compile_(*args: Any, **kwargs: Any) -> Any:
        if uses_cudagraphs(kwargs.get("mode"), kwargs.get("options")):
            _announce(kwargs.get("mode") or "default, options={'triton.cudagraphs': True}")
        out = orig(*args, **kwargs)
        if (args[0] if args else kwargs.get("model")) is None:
            return out  # the decorator form: it calls torch.compile (this) with the function
        return _announcing(out)

    compile_._npusan_emulated = True  # type: ignore[attr-defined]
    torch.compile = compile_
