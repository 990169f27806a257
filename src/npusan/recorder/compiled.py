"""``torch.compile`` under the recorder: compiled as without it, recorded one region a call.

Dynamo refuses to compile while a ``TorchDispatchMode`` is active unless the mode says it
ignores compile internals; the recording mode says so (:mod:`.dispatch`), so a program
compiles to the same graphs with and without npusan. The mode is then off while Dynamo
traces and Inductor compiles, and on again while the compiled code runs, where it sees
what runs around the graphs (AOTAutograd's eager epilogues) but not Inductor's fused
kernels, which are called directly.

Those are recorded here: every call of an Inductor graph (``CompiledFxGraph``: forward
and backward graphs alike) becomes one kernel named ``compiled:<function>`` (the
function Dynamo compiled; ``.backward`` for its backward graph) on the stream current at
the call, reading the graph's inputs and writing its outputs and the inputs the graph
mutates (Inductor's ``mutated_input_idxs``, from AOTAutograd's mutation metadata), with
the stack of the user's call. Intermediate buffers the region allocates and frees
within itself are not seen, nor the order of its kernels: a race is found between the
region as a whole and other streams. The first region of a recording puts a NOTE in the
trace saying so, which the report repeats once.

While a graph runs, the recording mode is taken off the dispatch stack (from under the
modes above it, if any, which stay on in their order): the extern kernels the graph calls
through the dispatcher (``aten::mm.out``...) touch, outside the region, only its inputs and outputs, which its record has, and every
op through a Python mode costs the step several microseconds. A graph whose code calls
what the recorder records as more than an access (collectives, host reads, streams)
keeps the mode on. What the record needs from a graph is learnt once and kept on it.

Inductor is imported lazily by ``torch.compile``; the hook is installed into it when it
is imported (an import hook), or at once when it already is. It stays installed and is
inert (one attribute check) when nothing records.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Optional

from torch import Tensor
from torch._C import (_get_dispatch_stack_at, _len_torch_dispatch_stack, _pop_torch_dispatch_stack,
                      _push_on_torch_dispatch_stack)

from ..trace_format.records import COARSE_NOTE_PREFIX
from . import session
from .after_import import hook_after_import
from .access import span
from .explicit import _payload, note_once

#: The module holding ``CompiledFxGraph``.
MODULE = "torch._inductor.output_code"
#: The NOTE a trace gets at its first compiled region (the report recognizes the prefix).
COARSE_NOTE = (COARSE_NOTE_PREFIX + "compiled code (torch.compile) recorded as one access per compiled region: "
               "the inputs it reads, the outputs and inputs it writes; kernels and buffers inside a "
               "region are not seen")

_lock = threading.Lock()
_patched = False
#: Dynamo compile id -> the function compiled (learnt at the forward graph's calls).
_names: dict = {}
#: Frames looked at for the compiled function's frame before giving up.
_MAX_WALK = 64


def install() -> None:
    """Hook Inductor's compiled graphs now, or when Inductor is imported (never raises)."""
    try:
        with _lock:
            if _patched:
                return
            mod = sys.modules.get(MODULE)
            if mod is not None and hasattr(mod, "CompiledFxGraph"):
                _patch(mod)
            else:
                hook_after_import((MODULE,), _patch_once, lock=_lock)
    except Exception:
        pass


class _Graph:
    """What is known of one compiled graph, learnt at its first recorded calls and kept on
    it (``_npusan_meta``) so that a call costs no more than its record."""

    __slots__ = ("name", "cid", "backward", "mutated", "skip", "quiet")

    def __init__(self, graph: Any) -> None:
        self.name: Optional[str] = None  # compiled:<function>, once the function is known
        fx = getattr(graph, "fx_kwargs", None) or {}
        # Graphs compiled before the hook was installed have no compile id: the forward and
        # backward graphs of one compilation share AOTAutograd's graph id.
        self.cid = graph._npusan_cid if graph._npusan_cid is not None else ("aot", fx.get("graph_id"))
        self.backward = bool(graph._npusan_backward or fx.get("is_backward"))
        self.mutated = tuple(getattr(graph, "mutated_input_idxs", ()) or ())
        self.skip: Optional[int] = None  # StackCapture.key skip to the user's call (forward)
        self.quiet = _may_suspend(graph)


#: Markers, in the code of Inductor's graph call, of a call the recording mode must see
#: even inside a region: collectives and their waits, host reads of device values (a
#: synchronization), streams and events used inside the graph, record_stream.
_LOUD = ("c10d_functional", "ops.c10d", "wait_tensor", ".item()", "_local_scalar_dense", "ops.streams",
         "record_stream", "record_event", "wait_event", "synchronize")


def _may_suspend(graph: Any) -> bool:
    """Whether the recording mode can be off while ``graph`` runs: what it dispatches then
    is extern kernels on the region's own stream, whose reads and writes of memory outside
    the region are its inputs and outputs, which the region's record has already. Not when
    its code calls what the recorder records as more than an access (a collective, a
    synchronization, a stream switch), nor when its code cannot be read."""
    src = getattr(graph, "source_code", None)
    if not isinstance(src, str):
        return False
    start = src.find("\ndef call(")
    if start < 0:
        start = src.find("class Runner")  # (the module's imports name c10d whatever it calls)
    if start < 0:
        return False
    end = src.find("def benchmark_compiled_module", start)
    body = src[start:end] if end > 0 else src[start:]
    return not any(m in body for m in _LOUD)


def _patch(mod: Any) -> None:
    global _patched
    cls = mod.CompiledFxGraph
    call = cls.__call__
    post_compile = cls.post_compile
    from .dispatch import RecordingMode

    def __call__(self, inputs):
        rec = session._current
        if rec is None or not rec.active:
            return call(self, inputs)
        args = list(inputs)  # the compiled code empties ``inputs`` (boxed calling convention)
        g = self.__dict__.get("_npusan_meta")
        if g is None:
            try:
                g = self.__dict__["_npusan_meta"] = _Graph(self)
            except Exception as e:  # never into user code
                rec._fail(e)
                return call(self, inputs)
        key = None
        try:
            skip = 1
            if not g.backward:
                skip = g.skip
                if skip is None or not _is_compiled_frame(skip):
                    name, skip = _compiled_frame()
                    g.skip = skip if name is not None else None
                    if name is not None:
                        _names[g.cid] = name
            if rec.stacks.depth:
                key = rec.stacks.key(skip)
        except Exception:  # no name, no stack: the region is still recorded
            pass
        lifted = _lift(RecordingMode) if g.quiet else None
        if lifted is None:
            out = call(self, inputs)
        else:
            try:
                out = call(self, inputs)
            finally:
                _restore(*lifted)
        _record_region(self, g, args, out, key)
        return out

    def post_compile_hook(self, example_inputs, constants, graph_kwargs):
        try:
            from torch._guards import CompileContext

            self._npusan_cid = str(CompileContext.current_compile_id())
            self._npusan_backward = bool(graph_kwargs.get("is_backward"))
        except Exception:
            pass
        return post_compile(self, example_inputs, constants, graph_kwargs)

    __call__.__wrapped__ = call  # type: ignore[attr-defined]
    post_compile_hook.__wrapped__ = post_compile  # type: ignore[attr-defined]
    cls._npusan_cid = None
    cls._npusan_backward = False
    cls.__call__ = __call__
    cls.post_compile = post_compile_hook
    _patched = True


def _lift(mode_type: type) -> Optional[tuple]:
    """Take the topmost ``mode_type`` mode off the dispatch stack for a region's call:
    ``(mode, above)``, ``above`` the modes that were over it (top first), which stay on,
    in their order; None when there is none (or the stack cannot be read).

    A mode over it sees the same ops with or without it underneath (it passes them down),
    so lifting ours from under one changes nothing it computes; on the first call of a
    function compiled with autograd AOTAutograd runs the graph under a mode of its own
    (``_AnalyzeCustomOpInputOutputMode``), and without this the recording mode would see
    the region's extern kernels one by one, at the line of Inductor's generated file."""
    try:
        n = _len_torch_dispatch_stack()
        i = n - 1
        # User modes are above the infra modes (fake tensors, proxies): ours is among them.
        while i >= 0 and type(_get_dispatch_stack_at(i)) is not mode_type:
            i -= 1
        if i < 0:
            return None
        above = [_pop_torch_dispatch_stack(None) for _ in range(n - 1 - i)]
        mode = _pop_torch_dispatch_stack(None)
        for m in reversed(above):
            _push_on_torch_dispatch_stack(m)
        return mode, above
    except Exception:
        return None


def _restore(mode: Any, above: list) -> None:
    """Put ``mode`` back under the ``above`` modes that :func:`_lift` left on top."""
    back = [_pop_torch_dispatch_stack(None) for _ in above]
    _push_on_torch_dispatch_stack(mode)
    for m in reversed(back):
        _push_on_torch_dispatch_stack(m)


def _is_compiled_frame(skip: int) -> bool:
    """Whether the frame ``skip`` - 1 above the hook that calls this is still a
    Dynamo-compiled frame (the cached :func:`_compiled_frame` answer holds)."""
    from torch._dynamo.utils import orig_code_map

    try:
        return sys._getframe(skip).f_code in orig_code_map
    except ValueError:
        return False


def _compiled_frame() -> tuple:
    """``(function, skip)``: the name of the function whose Dynamo-compiled frame runs
    the graph (None when there is none: a backward graph, run by autograd), and the
    ``StackCapture.key`` skip, for the hook that calls this, that starts the stack at that
    frame's caller -- the user's line that called the compiled function (the compiled
    frame itself only shows the function's first line)."""
    from torch._dynamo.utils import orig_code_map

    f = sys._getframe(2)
    depth = 1  # f is that many frames above the hook
    while f is not None and depth < _MAX_WALK:
        orig = orig_code_map.get(f.f_code)
        if orig is not None:
            return orig.co_name, depth + 1
        f = f.f_back
        depth += 1
    return None, 1


def _record_region(graph: Any, g: _Graph, args: list, out: Any, key: Any) -> None:
    """One kernel for one call of ``graph``: ``args`` read, outputs and mutated inputs
    written (the record :func:`.explicit.record_accesses` writes, on the dispatch mode's
    path: straight into a durable trace)."""
    rec = session._current
    if rec is None or not rec.active:
        return
    try:
        name = g.name
        if name is None:
            fn = _names.get(g.cid)
            name = f"compiled:{fn or 'graph'}" + (".backward" if g.backward else "")
            if fn is not None:
                g.name = name  # the function is known: it stays so
        be = rec.backend
        is_dev = be.is_device_tensor
        acc: dict = {}  # (base, off, ext, view) -> span; a range read and written is a write
        first = None
        inputs_at = set()
        for t in args:
            if isinstance(t, Tensor):
                sp = _span(t, is_dev)
                if sp is not None:
                    inputs_at.add(sp[0])
                    if first is None:
                        first = t
                    acc[(sp[0], sp[1], sp[2], sp[5])] = sp
        nargs = len(args)
        for i in g.mutated:
            if i < nargs:
                t = args[i]
                if isinstance(t, Tensor):
                    sp = _span(t, is_dev, True)
                    if sp is not None:
                        acc[(sp[0], sp[1], sp[2], sp[5])] = sp
        fresh = []
        for t in (out if isinstance(out, (list, tuple)) else (out,)):
            if isinstance(t, Tensor):
                sp = _span(t, is_dev, True)
                # An output that is a view of an input is not written by returning it.
                if sp is not None and sp[0] not in inputs_at:
                    fresh.append(t)
                    if first is None:
                        first = t
                    acc[(sp[0], sp[1], sp[2], sp[5])] = sp
        if first is None:
            return
        if fresh and be.observes_outputs:
            pin = rec._pinned
            pin.key = None if rec.stacks.keep_internal else key
            try:
                for t in fresh:
                    be.observe_output(t)
            finally:
                pin.key = None
        device = 0 if be.single_device else be.tensor_device(first)
        spans = list(acc.values())
        if rec._kmax == 1 and rec._put is not None:  # durable: in the file before the region returns
            rec.kernel_now(name, device, be.current_stream(device), spans, key)
        else:
            rec.record_kernel(name, device, be.current_stream(device), spans, key)
    except Exception as e:  # never into user code
        rec._fail(e)
        return
    if "compiled" not in rec.__dict__.get("_npusan_noted", ()):
        note_once(rec, "compiled", COARSE_NOTE)
    if rec._findings:
        rec._report_findings()  # online mode: may raise RaceError (on purpose)


def _span(t: Tensor, is_dev: Any, write: bool = False) -> Optional[tuple]:
    """The dispatch mode's access of ``t`` (``(base, off, ext, total, write, view)``), or
    None for a tensor off the device, of no size or without memory."""
    if not is_dev(t):
        return None
    try:
        sp = span(t)
    except (RuntimeError, NotImplementedError):  # a wrapper subclass: its payload
        t = _payload(t)
        if t is None:
            return None
        sp = span(t)
    if sp is None or not sp[0]:
        return None
    base, off, ext, total, view = sp
    return base, off, ext, total, write, view


def _patch_once(mod: Any) -> None:
    """:func:`_patch` unless it ran already (under ``_lock``)."""
    if not _patched:
        _patch(mod)
