"""Kernels from a ``TorchDispatchMode`` -- in every thread.

A dispatch mode lives on a thread-local stack: entered in one thread, it does not see ops
that other threads run (checked with torch 2.13; CSAN is blind to worker threads because of this). So
:class:`ModeInstaller` enters a :class:`RecordingMode` in the thread that starts recording
and wraps ``threading.Thread._bootstrap_inner`` (which every ``threading.Thread`` -- and
so every ``ThreadPoolExecutor`` worker, DataLoader pin-memory thread... -- runs first) so
that each thread started afterwards enters its own mode before running its target. The
autograd engine copies the dispatch-mode stack into its worker threads by itself.

Limitation: threads that were already running when recording started, and threads made
with ``_thread.start_new_thread`` directly, are not seen (record from process start with
``npusan record`` / ``NPUSAN_TRACE`` to avoid the first).

The mode looks the recorder up at each op (``session._current``), so it is inert (one
attribute check, then the op) once recording stops, and serves a later recorder too.

Tensor subclasses with their own ``__torch_dispatch__`` (DTensor, AsyncCollectiveTensor, a
user's wrapper): the mode answers ``NotImplemented`` to an op on one, so the subclass's
``__torch_dispatch__`` runs with the mode still on the stack and re-dispatches its ops on
the plain tensors it holds, which reach the mode and are recorded: only those, which touch
the real memory (see :mod:`npusan.tensor_subclasses`). Ops on FakeTensors (DTensor's
sharding propagation runs some) are run and not recorded. A ``_make_subclass`` subclass or
an ``nn.Parameter`` is recorded directly.
"""

from __future__ import annotations

import threading
from typing import Any, Optional

from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

from ..tensor_subclasses import PLAIN, SUBCLASS, dispatch_kind
from . import session
from .access import RET_NEW, op_info, view_of
from .quiet import ANY as _MUTED_ANY
from .quiet import QUIET

_tls = threading.local()


class RecordingMode(TorchDispatchMode):
    """Runs each op, then records it as a kernel on the calling thread's current stream.

    This is the per-op hot path, so the access collection is inlined: for each tensor the
    schema slots of :class:`~.access.OpInfo` name (arguments, then fresh outputs), the
    byte range of :func:`~.access.span` (kept equivalent; the tests check both).
    """

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """True: ``torch.compile`` compiles as without npusan (Dynamo falls back to eager
        under a mode that says False) and the mode is off while it compiles; the compiled
        regions are recorded by :mod:`.compiled`."""
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        rec = session._current
        if rec is None or not rec.active or (_MUTED_ANY[0] and QUIET.depth):  # (see .quiet)
            return func(*args, **(kwargs or {}))
        if types:
            kind = dispatch_kind(types)
            if kind == SUBCLASS:
                return NotImplemented  # its inner ops on plain tensors come back here
            if kind != PLAIN:  # fake tensors: no memory
                return func(*args, **(kwargs or {}))
        if rec._recent_works:
            rec._recent_works.clear()
        try:
            info = func.__dict__.get("_npusan_info")
            if info is None:
                info = op_info(func)
        except Exception as e:  # never into user code
            rec._fail(e)
            return func(*args, **(kwargs or {}))
        pw = rec.pages
        if pw is not None and pw.armed and (not info.view or info.host_read):  # protected pinned pages (host_faults)
            try:
                pw.before_op(args, kwargs)
            except Exception as e:  # never into user code
                rec._fail(e)
        if info.collective is not None and rec.collectives is not None:
            out = rec.collectives.run(func, info.collective, args, kwargs)
            if rec._findings:
                rec._report_findings()
            return out
        out = func(*args, **(kwargs or {}))
        rec = session._current
        if rec is None or not rec.active:
            return out
        try:
            if info.view:
                if info.wait_tensor and rec.collectives is not None:
                    rec.collectives.tensor_waited(args[0] if args else None)
                elif info.host_read:
                    be = rec.backend
                    if be.host_read_modeled and args and be.is_device_tensor(args[0]):
                        be.host_read()
                    elif be.host_watch is not None and args and isinstance(args[0], Tensor):
                        rec.host_op(info.name, [(args[0], False)], ())  # t.item() of pinned memory
            elif info.record_stream:
                # NPU reports record_stream from its allocator hook (every path, not only
                # the aten op): recording the op as well would log each call twice.
                be = rec.backend
                if not getattr(be, "native_record_stream", False) and be.is_device_tensor(args[0]):
                    rec.record_stream_op(args[0], args[1], rec.stacks.key(1))
            else:
                be = rec.backend
                is_dev = be.is_device_tensor
                hw = be.host_watch
                oth = [] if hw is not None else None  # the op's other tensors: maybe pinned memory
                acc = []
                nargs = len(args)
                for idx, nm, write, is_list in info.slots:
                    if idx < nargs:
                        a = args[idx]
                    elif kwargs:
                        a = kwargs.get(nm)
                    else:
                        continue
                    if a is None:
                        continue
                    if is_list:
                        for x in a:
                            if isinstance(x, Tensor):
                                if is_dev(x):
                                    acc.append((x, write))
                                elif oth is not None:
                                    oth.append((x, write))
                    elif isinstance(a, Tensor):
                        if is_dev(a):
                            acc.append((a, write))
                        elif oth is not None:
                            oth.append((a, write))
                rets = info.returns
                new = ()
                if rets and out is not None:
                    if len(rets) == 1:
                        if rets[0] == RET_NEW:
                            if info.list_return:
                                new = [x for x in out if isinstance(x, Tensor) and is_dev(x)]
                            elif isinstance(out, Tensor):
                                if is_dev(out):
                                    new = (out,)
                                elif acc and oth is not None:
                                    # A copy to the host (``.to("cpu", non_blocking=True)``
                                    # makes pinned memory): the stream writes it.
                                    oth.append((out, True))
                    else:
                        new = [x for k, x in zip(rets, out) if k == RET_NEW and isinstance(x, Tensor) and is_dev(x)]
                stacks = rec.stacks
                key = None
                if new and not acc and type(new[0]) is not Tensor and dispatch_kind((type(new[0]),)) != PLAIN:
                    new = ()  # a factory run by the fake mode below: a FakeTensor, no memory
                if new:
                    if be.observes_outputs:
                        if stacks.depth:
                            key = stacks.key(1)
                        # The allocations the outputs report come from this same user
                        # stack (the recorder's and torch's frames are folded away).
                        pin = rec._pinned
                        pin.key = None if stacks.keep_internal else key
                        try:
                            for x in new:
                                be.observe_output(x)
                        finally:
                            pin.key = None
                    for x in new:
                        acc.append((x, True))
                dev_t = acc[0][0] if acc else None  # the device the op runs on: its first device tensor's
                if oth:  # pinned memory: a copy's on the stream, or the host's own access
                    oth = rec.host_op(info.name, oth, acc, args, kwargs)
                if acc:
                    spans = []
                    for t, w in acc:
                        nb = t.nbytes
                        if not nb:
                            continue  # zero-size: touches no memory
                        try:
                            st = t.untyped_storage()
                            base = st.data_ptr()
                        except RuntimeError:  # a wrapper subclass: record its payload
                            t = getattr(t, "elem", None)
                            if not isinstance(t, Tensor):
                                continue
                            st = t.untyped_storage()
                            base = st.data_ptr()
                        if not base:
                            continue
                        so = t.storage_offset()
                        if t.is_contiguous():
                            ext = nb
                            off = so * t.element_size() if so else 0
                            view = None
                        else:
                            isz = t.element_size()
                            ext, view = view_of(t.shape, t.stride(), isz)
                            off = so * isz
                        spans.append((base, off, ext, st.nbytes(), w, view))
                    if key is None and stacks.depth:
                        key = stacks.key(1)
                    device = 0 if be.single_device else be.tensor_device(dev_t)
                    if rec._kmax == 1 and rec._put is not None:  # durable: in the file before the op returns
                        rec.kernel_now(info.name, device, be.current_stream(device), spans, key)
                    else:
                        # rec.record_kernel(...), inlined: one append to the recorder's queue
                        q = rec._deferred
                        q.append((rec._kernel_fn, (info.name, device, be.current_stream(device), spans, key)))
                        if len(q) >= rec._kmax:
                            rec._drain_now()
                    if oth:  # a blocking copy: the host waits for it, after the copy
                        if be.host_read_modeled:
                            be.host_read()
                        else:  # (the runtime reported its synchronization before the copy's record)
                            rec.on_stream_sync(be.current_stream(device), device)
        except Exception as e:  # never into user code
            rec._fail(e)
        if rec._findings:
            rec._report_findings()  # online mode: may raise RaceError (on purpose)
        return out


def _enter_mode() -> Optional[RecordingMode]:
    if getattr(_tls, "mode", None) is not None:
        return None  # this thread already has one
    mode = RecordingMode()
    mode.__enter__()
    _tls.mode = mode
    return mode


def _exit_mode(mode: RecordingMode) -> bool:
    """Leave ``mode`` if it is on top of this thread's stack (else leave it, inert)."""
    try:
        if _get_current_dispatch_mode() is mode:
            mode.__exit__(None, None, None)
            if getattr(_tls, "mode", None) is mode:
                _tls.mode = None
            return True
    except Exception:
        pass
    return False


_orig_bootstrap_inner = None


def _patch_threads() -> None:
    global _orig_bootstrap_inner
    if _orig_bootstrap_inner is not None:
        return
    _orig_bootstrap_inner = orig = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]

    def _bootstrap_inner(self):  # runs in the new thread
        mode = None
        rec = session._current
        if rec is not None and rec.active:
            try:
                mode = _enter_mode()
            except Exception:
                mode = None
        try:
            orig(self)
        finally:
            if mode is not None:
                _exit_mode(mode)

    threading.Thread._bootstrap_inner = _bootstrap_inner  # type: ignore[attr-defined]


class ModeInstaller:
    """Enters the mode in the starting thread and in every thread started later."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        self._mode: Optional[RecordingMode] = None
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        _patch_threads()
        self._thread = threading.current_thread()
        self._mode = _enter_mode()

    def stop(self) -> None:
        """Take the starting thread's mode out, so that the program runs at full speed.

        A thread can only change its own mode stack, and not while the mode is handling
        an op (it is stashed then). Called from the starting thread outside the mode, the
        mode is popped now. Otherwise, when the starting thread is the main thread (a
        full disk found while recording an op, or a stop from another thread), the pop
        runs there at its next bytecode outside the mode (:func:`_pop_later`). Threads
        that were already running keep an inert mode (one attribute check per op).
        """
        mode = self._mode
        if mode is None:
            return
        if threading.current_thread() is self._thread and _exit_mode(mode):
            self._mode = None
        elif self._thread is threading.main_thread():
            self._mode = None
            _pop_later(mode)


def _pop_later(mode: RecordingMode) -> None:
    """Pop ``mode`` off the main thread's stack as soon as it is on top there.

    Uses CPython's pending calls (``Py_AddPendingCall``: run by the main thread between
    two bytecodes); while the mode is busy with an op the call is scheduled again.
    """
    try:
        import ctypes

        api = ctypes.pythonapi
    except Exception:  # not CPython: the mode stays, inert
        return
    if _PENDING is None:
        return

    def attempt(_arg) -> int:
        try:
            if _tls.mode is mode and not _exit_mode(mode) and not _under_another(mode):
                api.Py_AddPendingCall(callback, None)  # busy with an op: again later
                return 0
        except BaseException:
            pass
        _keep.pop(id(callback), None)
        return 0

    callback = _PENDING(attempt)
    _keep[id(callback)] = callback  # a ctypes callback must outlive the call
    try:
        api.Py_AddPendingCall(callback, None)
    except Exception:
        _keep.pop(id(callback), None)


def _under_another(mode: RecordingMode) -> bool:
    """Whether ``mode`` is on this thread's stack below another mode (it cannot be popped
    without popping the program's own mode: it stays, inert)."""
    from torch._C import _get_dispatch_stack_at, _len_torch_dispatch_stack

    return any(_get_dispatch_stack_at(i) is mode for i in range(_len_torch_dispatch_stack()))


try:
    import ctypes as _ctypes

    _PENDING = _ctypes.CFUNCTYPE(_ctypes.c_int, _ctypes.c_void_p)
except Exception:  # pragma: no cover - no ctypes
    _PENDING = None
_keep: dict = {}
