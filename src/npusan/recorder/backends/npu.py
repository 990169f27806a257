"""Ascend NPU adapter: ``torch_npu.utils._npu_trace`` hooks routed to the recorder.

What torch_npu gives (read from the Ascend/pytorch sources: ``torch_npu/csrc/sanitizer/
PyCallbackTrigger.h``, ``NPUTrace.cpp``, ``torch_npu/npu/_sanitizer.py``, ``_stream_check.py``):

- ``torch_npu._C._activate_npu_trace(mode)``: 0 = stream mode (the hooks below fire),
  1 = kernel mode (only ACL start/finish hooks fire). The first activation in a process
  wins (``call_once``); later calls change nothing.
- ``torch_npu.utils._npu_trace.register_callback_for_npu_<hook>(cb, cb_name)`` -- note the
  second argument -- for the event, memory, stream and synchronization hooks of CUDA plus
  ``record_stream(ptr, stream)`` and ``erase_stream(ptr, stream)`` fired from the caching
  allocator (the chokepoint every record_stream path goes through: the aten op, HCCL,
  RPC, pluggable allocators). Arguments are raw ints; stream ids are ``aclrtStream``
  pointers, non-zero even for the default stream, unique across devices.
- The C++ side fires with the GIL taken from whichever thread did the work, including
  task-queue worker threads, and an event's deletion can be reported twice.

Stream ids are read with ``torch_npu._C._npu_getCurrentRawStreamNoWait(device)``: the
obvious ``current_stream().npu_stream`` drains the task queue (a device sync per op).

record_stream: this adapter reports it from the native hook (it sees every path, and
with the storage's block pointer). The recorder's dispatch mode should therefore pass
``aten.record_stream`` through without emitting a record when the backend's
:attr:`NpuBackend.native_record_stream` is true. If both paths do report one call, the
trace holds the same ``(block, stream)`` twice; the analyzer treats recorded streams as a
set, so nothing changes (an ``erase_stream`` still removes the stream).

``TORCH_NPU_SANITIZER``: when torch_npu's own sanitizer is already on, npusan does not
re-activate the trace or touch its callbacks; it only appends its own and warns once.
In kernel mode the stream hooks never fire; npusan then still records kernels (from its
dispatch mode) but no stream/event/allocation events, and says so.

Never imports torch_npu at module import time.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import warnings
from typing import Any, Callable, Dict, Optional, Set, Tuple

from ..host_memory import HostWatch
from . import host_readers
from .graphs import patch_graphs
from .base import Backend, RecorderCallbacks
from .hooks import COMMON_HOOK_NAMES, TraceHooks
from .queries import forward_event_query, forward_stream_query, wrap_query

_HOOKS_ATTR = "_npusan_npu_hooks"
#: The sanitizer mode number of ``torch_npu._C._activate_npu_trace`` that npusan activates
#: (its stream mode; the kernel mode is never used).
STREAM_MODE = 0
#: Bound on remembered deleted events (only used to drop duplicate deletions).
_MAX_DEAD_EVENTS = 4096

#: The twelve hooks of torch_npu's stream mode (suffix after ``register_callback_for_npu_``).
HOOK_NAMES: Tuple[str, ...] = COMMON_HOOK_NAMES + ("record_stream", "erase_stream")

_warned: Set[str] = set()


def _warn_once(key: str, text: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn("npusan: " + text, RuntimeWarning, stacklevel=3)


class _NpuHooks(TraceHooks):
    """The functions registered with ``torch_npu.utils._npu_trace``.

    Thread-safe: hooks fire from task-queue worker threads too. The state kept here
    (stream -> device, recently deleted events) is guarded by a lock. Adds the two hooks
    CUDA lacks (record_stream, erase_stream) and drops the second report of an event's
    deletion.
    """

    def __init__(self, get_device: Callable[[], int], get_stream: Callable[[int], int]) -> None:
        super().__init__(get_device, get_stream)
        self._dead: Set[int] = set()
        self._lock = threading.Lock()
        self.duplicate_deletions = 0

    def _learn_device(self, handle: int, device: int) -> None:
        with self._lock:
            self.dev_of[handle] = device

    def event_creation(self, ev: int) -> None:
        with self._lock:
            self._dead.discard(ev)
        super().event_creation(ev)

    def event_deletion(self, ev: int) -> None:
        with self._lock:
            if ev in self._dead:  # the second report of one destruction
                self.duplicate_deletions += 1
                return
            if len(self._dead) >= _MAX_DEAD_EVENTS:
                self._dead.clear()
            self._dead.add(ev)
        super().event_deletion(ev)

    def event_record(self, ev: int, stream: int) -> None:
        with self._lock:  # a recorded event is alive (ids are reused)
            self._dead.discard(ev)
        super().event_record(ev, stream)

    def record_stream(self, ptr: int, stream: int) -> None:
        r = self.target
        if r is not None:
            try:
                r.on_record_stream(ptr, stream, self._dev(stream))
            except Exception:
                pass

    def erase_stream(self, ptr: int, stream: int) -> None:
        r = self.target
        if r is not None:
            try:
                r.on_erase_stream(ptr, stream, self._dev(stream))
            except Exception:
                pass


def hooks_for(trace_mod: Any, get_device: Callable[[], int], get_stream: Callable[[int], int]) -> _NpuHooks:
    """The forwarder registered on ``trace_mod``, registering a new one the first time.

    A torch_npu without some hook (older releases lack record_stream / erase_stream) gets
    the ones it has, and a warning naming the missing ones.
    """
    hooks = getattr(trace_mod, _HOOKS_ATTR, None)
    if hooks is None:
        hooks = _NpuHooks(get_device, get_stream)
        missing = []
        for name in HOOK_NAMES:
            register = getattr(trace_mod, "register_callback_for_npu_" + name, None)
            if register is None:
                missing.append(name)
                continue
            register(getattr(hooks, name), "npusan_" + name)
        setattr(trace_mod, _HOOKS_ATTR, hooks)
        if missing:
            _warn_once(
                "missing-hooks",
                "this torch_npu has no trace hook for " + ", ".join(missing)
                + "; those operations are not recorded (record_stream still comes from the dispatch mode)",
            )
    else:
        hooks.get_device, hooks.get_stream = get_device, get_stream
    return hooks


def torch_npu_sanitizer() -> Optional[Any]:
    """torch_npu's own sanitizer object if it is already enabled in this process."""
    mod = sys.modules.get("torch_npu.npu._sanitizer")
    san = getattr(mod, "npu_sanitizer", None) if mod is not None else None
    if san is not None and getattr(san, "enabled", False):
        return san
    return None


def _pinned(t: Any) -> bool:
    """Whether a host tensor lies in pinned (page-locked) memory."""
    return t.is_cpu and t.is_pinned()


def _import_torch_npu() -> Any:
    mod = sys.modules.get("torch_npu")
    if mod is not None:
        return mod
    return importlib.import_module("torch_npu")


class NpuBackend(Backend):
    """Ascend NPU streams, events and allocator blocks, via torch_npu's trace hooks."""

    name = "npu"
    #: torch_npu fires record_stream/erase_stream from its allocator: the dispatch mode
    #: must not also report ``aten.record_stream`` (see the module docstring).
    native_record_stream = True

    def __init__(self) -> None:
        self._npu = _import_torch_npu()
        C = self._npu._C
        self._C = C
        get_dev = getattr(C, "_npu_getDevice", None)
        self._get_device: Callable[[], int] = get_dev if get_dev is not None else self._npu.npu.current_device
        # The no-wait accessor is the only acceptable one (see module docstring); a
        # torch_npu without it cannot be recorded without slowing it to a crawl.
        self._get_stream: Callable[[int], int] = C._npu_getCurrentRawStreamNoWait
        self._rec: Optional[RecorderCallbacks] = None
        self._readers: Optional[dict] = None  # torch.Tensor host readers wrapped while recording
        self._hooks: Optional[_NpuHooks] = None
        self._handles: Dict[Tuple[int, int], int] = {}
        self._handles_lock = threading.Lock()
        self.coexisting_with: Optional[str] = None

    @classmethod
    def available(cls) -> bool:
        try:
            if "torch_npu" not in sys.modules and importlib.util.find_spec("torch_npu") is None:
                return False
            npu = _import_torch_npu()
            return bool(npu.npu.is_available()) and hasattr(npu._C, "_npu_getCurrentRawStreamNoWait")
        except Exception:
            return False

    def install(self, recorder: RecorderCallbacks) -> None:
        trace_mod = importlib.import_module("torch_npu.utils._npu_trace")
        hooks = hooks_for(trace_mod, self._get_device, self._get_stream)
        hooks.target = recorder
        self._hooks = hooks
        # No hook reports a query answering True, which orders the host as a synchronize:
        # the methods are wrapped (never ``.npu_stream``, which drains the task queue).
        npu = self._npu.npu
        wrap_query(npu.Event, forward_event_query(hooks, lambda ev: getattr(ev, "npu_event", 0)))
        wrap_query(npu.Stream, forward_stream_query(hooks, self.stream_key))
        self.host_watch = HostWatch(_pinned)
        self._rec = recorder
        self._readers = host_readers.patch(self, None)
        try:  # NPUGraph captures and replays (format 1.3), as CUDA graphs are recorded
            patch_graphs(getattr(npu, "NPUGraph", None), hooks)
        except Exception:  # (a torch_npu without graphs: nothing to patch)
            pass
        theirs = torch_npu_sanitizer()
        if theirs is None:
            self._C._activate_npu_trace(STREAM_MODE)
            return
        mode = getattr(theirs, "mode", STREAM_MODE)
        if mode == STREAM_MODE:
            self.coexisting_with = "TORCH_NPU_SANITIZER"
            _warn_once(
                "coexist",
                "torch_npu's own sanitizer (TORCH_NPU_SANITIZER) is on; npusan records "
                "alongside it and leaves its callbacks and dispatch mode alone",
            )
        else:
            self.coexisting_with = "TORCH_NPU_SANITIZER (kernel mode)"
            _warn_once(
                "kernel-mode",
                "torch_npu's sanitizer is on in kernel mode (ASCEND_OPP_DEBUG_PATH), so the "
                "NPU stream, event and allocation hooks never fire: this trace has kernels "
                "only; unset TORCH_NPU_SANITIZER to record stream synchronization",
            )

    def uninstall(self) -> None:
        host_readers.unpatch(self._readers)
        self._readers = None
        self._rec = None
        self.host_watch = None
        if self._hooks is not None:
            self._hooks.target = None
            self._hooks = None

    @property
    def duplicate_event_deletions(self) -> int:
        """How many repeated event-deletion reports were dropped (diagnostics)."""
        return self._hooks.duplicate_deletions if self._hooks is not None else 0

    def current_device(self) -> int:
        return self._get_device()

    def current_stream(self, device: int) -> int:
        return self._get_stream(device)

    def default_streams(self) -> Dict[int, int]:
        """The current device's default stream only.

        Reading another device's stream would make that device current for a moment and
        create a context on it (every rank of a multi-process job would touch every NPU).
        """
        try:
            dev = self._get_device()
            sid, sdev, stype = self._C._npu_getDefaultStream(dev)
            return {dev: self._raw_of(sid, sdev, stype)}
        except Exception:
            return {}

    def device_count(self) -> int:
        try:
            return int(self._npu.npu.device_count())
        except Exception:
            return 0

    def _raw_of(self, stream_id: int, device: int, device_type: int) -> int:
        """The ``aclrtStream`` of a stream given as (id, device, type), without draining.

        torch_npu has no no-wait accessor for an arbitrary stream, only for the current
        one, so the stream is made current for a moment (same device: no device switch,
        no context creation). Cached: pool streams live as long as the process.
        """
        key = (device, stream_id)
        raw = self._handles.get(key)
        if raw is not None:
            return raw
        C = self._C
        with self._handles_lock:
            prev_dev = self._get_device()
            prev = C._npu_getCurrentStream(device)
            if prev[0] == stream_id and prev[1] == device:
                raw = self._get_stream(device)
            else:
                C._npu_setStream(stream_id=stream_id, device_index=device, device_type=device_type)
                try:
                    raw = self._get_stream(device)
                finally:
                    C._npu_setStream(stream_id=prev[0], device_index=prev[1], device_type=prev[2])
                    if self._get_device() != prev_dev:
                        C._npu_setDevice(prev_dev)
            self._handles[key] = raw
        if self._hooks is not None:
            self._hooks.dev_of.setdefault(raw, device)
        return raw

    def stream_key(self, stream_obj: Any) -> Tuple[int, int]:
        """``(device, aclrtStream)`` of a ``torch_npu.npu.Stream`` or an NPU ``torch.Stream``.

        Never reads ``.npu_stream`` (that drains the task queue).
        """
        dev = stream_obj.device_index
        if dev is None or dev < 0:
            dev = self._get_device()
        return int(dev), int(self._raw_of(stream_obj.stream_id, dev, stream_obj.device_type))

    def is_device_tensor(self, t: Any) -> bool:
        """Neither a CPU nor a meta tensor.

        Called for every tensor argument of every op: ``is_cpu``/``is_meta`` are C getters
        (~0.15 us each) where ``t.device.type == "npu"`` builds a device object (~1 us).
        torch_npu cannot share a process with CUDA, so what is left is NPU memory.
        """
        return not (t.is_cpu or t.is_meta)

    def tensor_device(self, t: Any) -> int:
        return t.get_device()  # a C getter; t.device.index builds a device object
