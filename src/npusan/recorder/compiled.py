"""``torch.compile`` under the recorder: compiled as without it, recorded one region a call.

Dynamo refuses to compile while a ``TorchDispatchMode`` is active unless the mode says it
ignores compile internals; the recording mode says so (:mod:`.dispatch`), so a program
compiles to the same graphs with and without npusan. The mode is then off while Dynamo
traces and Inductor compiles, and on again while the compiled code runs, where it sees
what that code still dispatches (extern kernels such as ``aten::mm.out``, AOTAutograd's
eager epilogues) but not Inductor's fused kernels, which are called directly.

Those are recorded here: every call of an Inductor graph (``CompiledFxGraph``: forward
and backward graphs alike) becomes one kernel named ``compiled:<function>`` (the
function Dynamo compiled; ``.backward`` for its backward graph) on the stream current at
the call, reading the graph's inputs and writing its outputs and the inputs the graph
mutates (Inductor's ``mutated_input_idxs``, from AOTAutograd's mutation metadata), with
the stack of the user's call. Intermediate buffers the region allocates and frees
within itself are not seen, nor the order of its kernels: a race is found between the
region as a whole and other streams. The first region of a recording puts a NOTE in the
trace saying so, which the report repeats once.

Inductor is imported lazily by ``torch.compile``; the hook is installed into it when it
is imported (an import hook), or at once when it already is. It stays installed and is
inert (one attribute check) when nothing records.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from typing import Any, Optional

from ..trace_format.records import COARSE_NOTE_PREFIX
from . import session
from .explicit import note_once, record_accesses

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
            elif not any(isinstance(f, _Finder) for f in sys.meta_path):
                sys.meta_path.insert(0, _Finder())
    except Exception:
        pass


def _patch(mod: Any) -> None:
    global _patched
    cls = mod.CompiledFxGraph
    call = cls.__call__
    post_compile = cls.post_compile

    def __call__(self, inputs):
        rec = session._current
        if rec is None or not rec.active:
            return call(self, inputs)
        args = list(inputs)  # the compiled code empties ``inputs`` (boxed calling convention)
        key = None
        try:
            name, skip = _compiled_frame()
            if name is not None and not self._npusan_backward:
                _names[self._npusan_cid] = name
            if rec.stacks.depth:
                key = rec.stacks.key(skip)
        except Exception:
            pass
        out = call(self, inputs)
        _record_region(self, args, out, key)
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


def region_name(graph: Any) -> str:
    """``compiled:<function>`` of a graph (``.backward`` for a backward graph); the
    function is the one whose compiled frame ran the forward graph of the same compilation."""
    fn = _names.get(getattr(graph, "_npusan_cid", None))
    name = f"compiled:{fn or 'graph'}"
    return name + ".backward" if getattr(graph, "_npusan_backward", False) else name


def _record_region(graph: Any, args: list, out: Any, key: Any) -> None:
    """One kernel for one call of ``graph``: ``args`` read, outputs and mutated inputs written."""
    from torch import Tensor

    rec = session._current
    if rec is None or not rec.active:
        return
    try:
        outs = out if isinstance(out, (list, tuple)) else (out,)
        outs = [t for t in outs if isinstance(t, Tensor)]
        mutated = getattr(graph, "mutated_input_idxs", ()) or ()
        writes = [args[i] for i in mutated if i < len(args)]
        inputs_at = set()
        for t in args:
            if isinstance(t, Tensor):
                try:
                    inputs_at.add(t.untyped_storage().data_ptr())
                except Exception:
                    pass
        # An output that is a view of an input is not written by returning it.
        fresh = [t for t in outs if _storage_ptr(t) not in inputs_at]
        writes.extend(fresh)
        name = region_name(graph)
    except Exception as e:
        rec._fail(e)
        return
    if record_accesses(name, args, writes, fresh=fresh, key=key):
        note_once(rec, "compiled", COARSE_NOTE)


def _storage_ptr(t: Any) -> Optional[int]:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:
        return None


class _Finder(importlib.abc.MetaPathFinder):
    """Patches :data:`MODULE` right after it is executed (then leaves ``sys.meta_path``)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != MODULE:
            return None
        for other in sys.meta_path:
            if other is self or not hasattr(other, "find_spec"):
                continue
            spec = other.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec
        finder = self

        def exec_and_patch(module):
            exec_module(module)
            try:
                sys.meta_path.remove(finder)
            except ValueError:
                pass
            with _lock:
                if not _patched:
                    try:
                        _patch(module)
                    except Exception:
                        pass

        loader.exec_module = exec_and_patch  # this module's own loader (one per spec)
        return spec
