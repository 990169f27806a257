"""Hand-written Triton kernels: each launch recorded as one kernel on the current stream.

A ``@triton.jit`` kernel launched by the program (``kernel[grid](x, y, ...)``) is called
directly, never through PyTorch's dispatcher, so the dispatch mode does not see it. Every
launch -- of a compiled kernel (``JITFunction.run``) and of an interpreted one
(``TRITON_INTERPRET=1``: ``InterpretedFunction.run``), autotuned and heuristic kernels
included, since those end in the same ``run`` -- is recorded here as a kernel named
``triton:<function>`` on the stream current at the launch (where Triton launches it), with
the stack of the user's launch line. Its tensor arguments are its accesses, each the range
its view spans; the ones :mod:`.triton_writes` finds stored into are written, the others
read. A kernel whose writes the analysis could not tell puts a ``coarse:`` NOTE in the
trace, once per kernel, which the report repeats once.

The interpreter copies every argument to the host and back around the launch; those
copies are muted (:mod:`.quiet`) so that the launch reads as the kernel it stands for.

The hooks are installed while something records -- at once if Triton is imported, else
when it is (an import hook) -- and taken out when recording stops. They never raise into
the program: a failure stops the recording (warned once) and the launch goes on.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, Dict, Iterator, List, NamedTuple, Optional

from torch import Tensor

from ..trace_format.records import COARSE_NOTE_PREFIX
from . import session
from .after_import import hook_after_import, unhook_after_import
from .explicit import note_once, record_accesses
from .quiet import is_muted, muted
from .triton_writes import writes_of

#: Module -> the class whose ``run`` launches a kernel (``True``: runs the interpreter).
TARGETS = {"triton.runtime.jit": ("JITFunction", False),
           "triton.runtime.interpreter": ("InterpretedFunction", True)}
#: Kernels named in a coarse note per recording before one note says there are more.
MAX_NOTED = 8
#: Frames looked at for the user's launch line before giving up.
_MAX_WALK = 64
#: Depth of tuples/lists of tensors looked into (Triton's tuple arguments).
_MAX_NESTING = 4

_lock = threading.Lock()
#: (class, the original ``run``) of each class patched now.
_patched: List[tuple] = []
_triton_dir: Optional[str] = None
#: File name -> whether it is Triton's (the frames skipped to reach the launch line).
_triton_files: Dict[str, bool] = {}


class Launch(NamedTuple):
    """One launch, as recorded after it ran."""

    name: str
    reads: list
    writes: list
    key: Any
    unclear: str  # non-empty: why some writes are assumed (the note's text)


def install() -> None:
    """Hook Triton's launches now, or when Triton is imported (never raises)."""
    try:
        with _lock:
            for mod_name in TARGETS:
                mod = sys.modules.get(mod_name)
                if mod is not None:
                    _patch(mod)
            hook_after_import(TARGETS, _patch_if_recording, lock=_lock)
    except Exception:
        pass


def uninstall() -> None:
    """Take the hooks out (a ``run`` that someone else wrapped since is left alone)."""
    try:
        with _lock:
            unhook_after_import(_patch_if_recording)
            for cls, orig in _patched:
                if getattr(cls.__dict__.get("run"), "__wrapped__", None) is orig:
                    cls.run = orig
            _patched.clear()
    except Exception:
        pass


def _patch(mod: Any) -> None:
    """Wrap ``run`` of the launching class of ``mod`` (once; under ``_lock``)."""
    global _triton_dir
    cls_name, interpreted = TARGETS[mod.__name__]
    cls = getattr(mod, cls_name, None)
    run = getattr(cls, "__dict__", {}).get("run")
    if run is None or getattr(run, "_npusan_triton", False):
        return
    if _triton_dir is None:
        _triton_dir = _package_dir(mod)
    wrapped = _wrap(run, interpreted)
    cls.run = wrapped
    _patched.append((cls, run))


def _package_dir(mod: Any) -> str:
    """Triton's package directory (frames inside it are not the user's launch line)."""
    path = os.path.abspath(mod.__file__)
    return os.path.dirname(os.path.dirname(path)) + os.sep  # .../triton/runtime/jit.py -> .../triton/


def _wrap(run: Any, interpreted: bool) -> Any:
    def launch(self, *args, grid, warmup, **kwargs):
        rec = session._current
        if rec is None or not rec.active or warmup or is_muted():
            return run(self, *args, grid=grid, warmup=warmup, **kwargs)
        plan = _plan(rec, self, args, kwargs)
        if interpreted:
            with muted():
                out = run(self, *args, grid=grid, warmup=warmup, **kwargs)
        else:
            out = run(self, *args, grid=grid, warmup=warmup, **kwargs)
        if plan is not None:
            _record(rec, plan)
        return out

    launch.__wrapped__ = run  # type: ignore[attr-defined]
    launch._npusan_triton = True  # type: ignore[attr-defined]
    launch.__name__ = launch.__qualname__ = "run"
    return launch


def _plan(rec: Any, kernel: Any, args: tuple, kwargs: dict) -> Optional[Launch]:
    """What the launch of ``kernel`` with ``args``/``kwargs`` reads and writes; None when
    it has no tensor argument or the recording failed on it."""
    try:
        fn = getattr(kernel, "fn", None)
        names = list(getattr(kernel, "arg_names", ()) or ())
        bound = dict(zip(names, args))
        for k, v in kwargs.items():
            if k in bound or k not in names:
                continue  # launch options: num_warps, num_stages...
            bound[k] = v
        found = writes_of(fn) if fn is not None else None
        reads: list = []
        writes: list = []
        pointers: list = []
        for name, value in bound.items():
            tensors = list(_tensors(value, 0))
            if not tensors:
                continue
            pointers.append(name)
            if found is None or found.blind or name in found.written:
                writes.extend(tensors)
            else:
                reads.extend(tensors)
        if not pointers:
            return None
        fname = getattr(fn, "__name__", None) or type(kernel).__name__
        unclear = ""
        if found is None:
            unclear = "its source is not known"
        elif found.blind:
            unclear = found.blind
        else:
            why = [found.unclear[p] for p in pointers if p in found.unclear]
            unclear = "; ".join(why)
        key = _launch_key(rec) if rec.stacks.depth else None
        return Launch(f"triton:{fname}", reads, writes, key, unclear)
    except Exception as e:  # never into user code
        rec._fail(e)
        return None


def _tensors(value: Any, depth: int) -> Iterator[Any]:
    """The tensors an argument passes: a tensor, the tensors of a tuple or list argument,
    the base of a host-side tensor descriptor or ``triton.reinterpret`` wrapper."""
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        if depth < _MAX_NESTING:
            for v in value:
                yield from _tensors(v, depth + 1)
    else:
        base = getattr(value, "base", None)
        if isinstance(base, Tensor):
            yield base


def _launch_key(rec: Any) -> Any:
    """The stack key starting at the first frame outside Triton above the launch (the
    user's ``kernel[grid](...)`` line, past the launcher lambda and any autotuner)."""
    f = sys._getframe(3)  # _plan's caller's caller: the frame that called ``run``
    skip = 3
    tdir = _triton_dir
    walked = 0
    while tdir and f is not None and walked < _MAX_WALK and _in_triton(f.f_code.co_filename, tdir):
        f = f.f_back
        skip += 1
        walked += 1
    if f is None or walked >= _MAX_WALK:
        skip = 3
    return rec.stacks.key(skip)


def _in_triton(filename: str, tdir: str) -> bool:
    got = _triton_files.get(filename)
    if got is None:
        got = _triton_files[filename] = os.path.abspath(filename).startswith(tdir)
    return got


def _record(rec: Any, plan: Launch) -> None:
    """Record ``plan``; raises only the online mode's deliberate ``RaceError``."""
    if record_accesses(plan.name, plan.reads, plan.writes, key=plan.key) and plan.unclear:
        try:
            _note_unclear(rec, plan.name, plan.unclear)
        except Exception as e:  # never into user code
            rec._fail(e)


def _note_unclear(rec: Any, name: str, why: str) -> None:
    """A ``coarse:`` note for a kernel whose writes were partly assumed (once per kernel,
    at most :data:`MAX_NOTED` kernels named, then one note that there are more)."""
    seen = rec.__dict__.setdefault("_npusan_triton_unclear", set())
    if name in seen:
        return
    seen.add(name)
    if len(seen) <= MAX_NOTED:
        note_once(rec, name, f"{COARSE_NOTE_PREFIX}Triton kernel {name[len('triton:'):]} recorded as writing "
                             f"arguments it may not write: {why}")
    else:
        note_once(rec, "triton:more", f"{COARSE_NOTE_PREFIX}more Triton kernels recorded as writing "
                                      "arguments they may not write (first ones named above)")


def _patch_if_recording(mod: Any) -> None:
    """:func:`_patch` for a module imported while recording (imported after recording
    stopped: left alone). Called under ``_lock``."""
    rec = session._current
    if rec is not None and rec.active:
        _patch(mod)
