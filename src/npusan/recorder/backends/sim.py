"""The simulated-device adapter: :mod:`npusan.sim`'s hook registry -> recorder callbacks.

It is wired exactly like the CUDA adapter wires ``torch.cuda._gpu_trace``; the only
extra job is the allocator: CPU storages have no allocation hook, so the dispatch mode
hands every output tensor to :meth:`SimBackend.observe_output`, which reports storages it
has not seen as allocations on the current simulated stream and watches them with a weak
reference whose callback (run when the C++ storage dies; torch keeps one Python storage
object per storage) reports the free.
"""

from __future__ import annotations

import weakref
from typing import Any, Dict, Optional, Tuple

from .base import Backend, RecorderCallbacks


class SimBackend(Backend):
    name = "sim"
    observes_outputs = True

    def __init__(self) -> None:
        from ... import sim

        self._sim = sim
        self._rec: Optional[RecorderCallbacks] = None
        self._live: Dict[int, weakref.ref] = {}  # storage base ptr -> weakref to storage
        self._registered = False

    @classmethod
    def available(cls) -> bool:
        try:
            import torch  # noqa: F401
        except Exception:
            return False
        return True

    # -- hooks ---------------------------------------------------------------------

    def install(self, recorder: RecorderCallbacks) -> None:
        self._rec = recorder
        if self._registered:
            return
        t = self._sim.trace
        t.register_callback_for_stream_creation(lambda h: self._call("on_stream_created", h, 0))
        t.register_callback_for_event_creation(lambda e: self._call("on_event_created", e))
        t.register_callback_for_event_deletion(lambda e: self._call("on_event_deleted", e))
        t.register_callback_for_event_record(lambda e, h: self._call("on_event_record", e, h, 0))
        t.register_callback_for_event_wait(lambda e, h: self._call("on_event_wait", e, h, 0))
        t.register_callback_for_event_synchronization(lambda e: self._call("on_event_sync", e))
        t.register_callback_for_stream_synchronization(lambda h: self._call("on_stream_sync", h, 0))
        t.register_callback_for_device_synchronization(lambda: self._call("on_device_sync", None))
        t.register_callback_for_memory_allocation(
            lambda p, n: self._call("on_alloc", p, self._sim.current_stream().stream_id, 0, n)
        )
        t.register_callback_for_memory_deallocation(lambda p: self._call("on_free", p))
        self._registered = True

    def uninstall(self) -> None:
        self._rec = None
        self._live.clear()
        if self._registered:
            self._sim.trace.unregister_all()
            self._registered = False

    def _call(self, name: str, *args) -> None:
        rec = self._rec
        if rec is not None:
            getattr(rec, name)(*args)

    # -- questions ------------------------------------------------------------------

    def current_device(self) -> int:
        return 0

    def current_stream(self, device: int) -> int:
        return self._sim.current_stream().stream_id

    def default_streams(self) -> Dict[int, int]:
        return {0: self._sim.DEFAULT_HANDLE}

    def device_count(self) -> int:
        return 1

    def stream_key(self, stream_obj: Any) -> Tuple[int, int]:
        return (0, int(stream_obj.stream_id))

    def is_device_tensor(self, t: Any) -> bool:
        return t.is_cpu

    def tensor_device(self, t: Any) -> int:
        return 0

    # -- the simulated allocator ------------------------------------------------------

    def observe_output(self, t: Any) -> None:
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr == 0:
            return
        ref = self._live.get(ptr)
        if ref is not None and ref() is st:
            return
        live = self._live

        def freed(r, ptr=ptr, live=live):
            if live.get(ptr) is r:  # not already replaced by a newer storage at ptr
                del live[ptr]
                self._sim.trace.fire("memory_deallocation", ptr)

        live[ptr] = weakref.ref(st, freed)
        self._sim.trace.fire("memory_allocation", ptr, st.nbytes())
