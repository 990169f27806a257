"""The forwarder behind the CUDA and NPU adapters: the functions registered as trace hooks.

Both runtimes fire the same ten hooks with raw ints (events, stream handles, block
pointers) and no device. A forwarder is registered once per process (trace hooks cannot be
unregistered) and passes each call on to whichever recorder is installed as ``target``, or
to nothing. Every method swallows every error: the runtime's registry would log a
traceback into the user's program, and the recorder must never harm it.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple

from .base import RecorderCallbacks

#: The hooks both runtimes fire (suffix after ``register_callback_for_`` on CUDA,
#: ``register_callback_for_npu_`` on NPU); :class:`TraceHooks` has a method of each name.
COMMON_HOOK_NAMES: Tuple[str, ...] = (
    "event_creation",
    "event_deletion",
    "event_record",
    "event_wait",
    "memory_allocation",
    "memory_deallocation",
    "stream_creation",
    "device_synchronization",
    "stream_synchronization",
    "event_synchronization",
)


class TraceHooks:
    """One method per hook; subclasses add backend quirks (shared handles, extra hooks)."""

    def __init__(self, get_device: Callable[[], int], get_stream: Callable[[int], int]) -> None:
        self.target: Optional[RecorderCallbacks] = None
        self.get_device = get_device
        self.get_stream = get_stream
        # Stream handle -> device, learned at creation: a lookup is cheaper than asking the
        # runtime and stays right if a caller lacks a device guard.
        self.dev_of: Dict[int, int] = {}

    def _dev(self, handle: int) -> int:
        d = self.dev_of.get(handle)
        return self.get_device() if d is None else d

    def _learn_device(self, handle: int, device: int) -> None:
        self.dev_of[handle] = device

    def event_creation(self, ev: int) -> None:
        r = self.target
        if r is not None:
            try:
                r.on_event_created(ev)
            except Exception:
                pass

    def event_deletion(self, ev: int) -> None:
        r = self.target
        if r is not None:
            try:
                r.on_event_deleted(ev)
            except Exception:
                pass

    def event_record(self, ev: int, stream: int) -> None:
        r = self.target
        if r is not None:
            try:
                r.on_event_record(ev, stream, self._dev(stream))
            except Exception:
                pass

    def event_wait(self, ev: int, stream: int) -> None:
        r = self.target
        if r is not None:
            try:
                r.on_event_wait(ev, stream, self._dev(stream))
            except Exception:
                pass

    def memory_allocation(self, ptr: int) -> None:
        """Only the pointer is given: the stream is the thread's current one (what the
        allocator used), the size is unknown."""
        r = self.target
        if r is not None:
            try:
                dev = self.get_device()
                r.on_alloc(ptr, self.get_stream(dev), dev, None)
            except Exception:
                pass

    def memory_deallocation(self, ptr: int) -> None:
        r = self.target
        if r is not None:
            try:
                r.on_free(ptr)
            except Exception:
                pass

    def stream_creation(self, stream: int) -> None:
        try:
            dev = self.get_device()
            self._learn_device(stream, dev)
            r = self.target
            if r is not None:
                r.on_stream_created(stream, dev)
        except Exception:
            pass

    def device_synchronization(self) -> None:
        r = self.target
        if r is not None:
            try:
                r.on_device_sync(self.get_device())
            except Exception:
                pass

    def stream_synchronization(self, stream: int) -> None:
        r = self.target
        if r is not None:
            try:
                r.on_stream_sync(stream, self._dev(stream))
            except Exception:
                pass

    def event_synchronization(self, ev: int) -> None:
        r = self.target
        if r is not None:
            try:
                r.on_event_sync(ev)
            except Exception:
                pass
