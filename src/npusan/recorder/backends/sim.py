"""The simulated-device adapter: :mod:`npusan.sim`'s hook registry -> recorder callbacks.

It is wired exactly like the CUDA adapter wires ``torch.cuda._gpu_trace``; the only
extra job is the allocator: CPU storages have no allocation hook, so the dispatch mode
hands every output tensor to :meth:`SimBackend.observe_output`, which reports storages it
has not seen as allocations on the current simulated stream and watches them with a weak
reference whose callback (run when the C++ storage dies; torch keeps one Python storage
object per storage) reports the free.

Reading a device value on the host synchronizes the current stream, as CUDA's
``memcpy_and_sync`` does (a copy on the current stream, then ``cudaStreamSynchronize``):
:meth:`SimBackend.host_read` reports it after ``aten::_local_scalar_dense`` (``t.item()``,
``float(t)``, ``bool(t)``), and while recording ``torch.Tensor.tolist`` and ``__repr__``
(``print(t)``; both a blocking ``t.to("cpu")`` on CUDA) do the same for device tensors:
on the CPU they dispatch no op the recorder could see.

Two more jobs make the simulation look like a device: tensors marked as host memory
(:func:`npusan.sim.host_tensor`) are not device tensors (a block already reported for
one is reported freed when it is marked), and collectives are played the way
ProcessGroupNCCL runs them (:attr:`comm_modeled`), with simulated events on a
communication stream per process group.
"""

from __future__ import annotations

import operator
import weakref
from typing import Any, Dict, Optional, Tuple

from . import host_readers
from .base import Backend, RecorderCallbacks


class SimBackend(Backend):
    name = "sim"
    observes_outputs = True
    single_device = True
    comm_modeled = True
    host_read_modeled = True

    def __init__(self) -> None:
        from ... import sim

        self._sim = sim
        self._rec: Optional[RecorderCallbacks] = None
        self._live: Dict[int, weakref.ref] = {}  # storage base ptr -> weakref to storage
        self._refs: Dict[int, int] = {}  # id(weakref) -> ptr (the weakref outlives its referent)
        self._registered = False
        self._direct = False
        self._patched: Optional[dict] = None  # torch.Tensor methods replaced while recording
        # C-level callables on the hot path (instance attributes shadow the methods).
        self.is_device_tensor = operator.attrgetter("is_cpu")  # type: ignore[method-assign]
        self.current_stream = sim.current_handle  # type: ignore[method-assign]
        self._died = self._storage_died  # one bound method for every weak reference
        self._fire = sim.trace.fire

    @classmethod
    def available(cls) -> bool:
        try:
            import torch  # noqa: F401
        except Exception:
            return False
        return True

    # -- hooks ---------------------------------------------------------------------

    def install(self, recorder: RecorderCallbacks) -> None:
        # The simulated registry can be emptied, so bound methods are registered directly
        # (one call less per hook than forwarding closures) and uninstall clears them.
        self.uninstall()
        self._rec = r = recorder
        t = self._sim.trace
        cur = self._sim.current_stream
        t.register_callback_for_stream_creation(lambda h: r.on_stream_created(h, 0))
        t.register_callback_for_event_creation(r.on_event_created)
        t.register_callback_for_event_deletion(r.on_event_deleted)
        t.register_callback_for_event_record(lambda e, h: r.on_event_record(e, h, 0))
        t.register_callback_for_event_wait(lambda e, h: r.on_event_wait(e, h, 0))
        t.register_callback_for_event_synchronization(r.on_event_sync)
        t.register_callback_for_stream_synchronization(lambda h: r.on_stream_sync(h, 0))
        t.register_callback_for_device_synchronization(lambda: r.on_device_sync(None))
        t.register_callback_for_memory_allocation(lambda p, n: r.on_alloc(p, cur().stream_id, 0, n))
        t.register_callback_for_memory_deallocation(r.on_free)
        self._registered = True
        self._patch_host_readers()
        self._sim._on_host = self._host_marked
        if self._sim._host:
            self._host_marked(0, 0)
        # The allocations this adapter discovers itself (observe_output) go straight to
        # the recorder -- what the two registrations above would do, three calls
        # shorter -- unless someone else also listens on the simulated registry.
        self._direct = all(len(t.callbacks[h]) == 1 for h in ("memory_allocation", "memory_deallocation"))

    def uninstall(self) -> None:
        self._unpatch_host_readers()
        if self._sim._on_host == self._host_marked:
            self._sim._on_host = None
        self._rec = None
        self.host_watch = None
        self._live.clear()
        self._refs.clear()
        if self._registered:
            self._sim.trace.unregister_all()
            self._registered = False

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

    # -- host reads: a blocking device-to-host copy synchronizes the current stream ---------

    def host_read(self) -> None:
        self._fire("stream_synchronization", self._sim.current_handle())

    def _patch_host_readers(self) -> None:
        """While recording, the host readers of a device tensor (``tolist``, printing,
        :mod:`.host_readers`) report the synchronization of the blocking copy to the host
        they make on CUDA, and their reads of watched pinned memory are host accesses."""
        self._unpatch_host_readers()
        self._patched = host_readers.patch(self, self.host_read)

    def _unpatch_host_readers(self) -> None:
        host_readers.unpatch(self._patched)
        self._patched = None

    # -- host memory ----------------------------------------------------------------------

    def _host_marked(self, base: int, end: int) -> None:
        """A storage became host memory: from now on every tensor is asked whether it is
        one (a slower test, paid only by programs that use host tensors), and a block
        already reported for it leaves the device."""
        is_host = self._sim.is_host
        self.is_device_tensor = lambda t: t.is_cpu and not is_host(t)  # type: ignore[method-assign]
        if self.host_watch is None:
            from ..host_memory import HostWatch

            self.host_watch = HostWatch(self._sim.is_pinned)
        ref = self._live.pop(base, None)
        if ref is not None:
            self._refs.pop(id(ref), None)
            r = self._rec
            if r is not None:
                r.on_free(base)

    # -- collectives: the simulated process group ------------------------------------------

    def comm_launch(self, group: str, device: int) -> int:
        sim = self._sim
        comm = sim.comm_stream(group)
        comm.wait_stream(sim.current_stream())
        return comm.stream_id

    def comm_end(self, handle: int, device: int) -> Any:
        sim = self._sim
        end = sim.Event()
        end.record(sim.comm_stream_by_handle(handle))
        return end

    def comm_wait(self, end: Any, device: int) -> None:
        end.wait(self._sim.current_stream())

    def pool_stream(self, device: int) -> Any:
        """A stream of the device's pool: where a torch Future runs its callbacks."""
        return self._sim.pool_stream()

    def using_stream(self, stream: Any) -> Any:
        """A context manager making ``stream`` (from :meth:`pool_stream`) current."""
        return self._sim.stream(stream)

    def record_current(self, device: int) -> Any:
        """An event recorded on the current stream (what a CUDA Future's ``markCompleted``
        records, to be waited by :meth:`comm_wait`)."""
        ev = self._sim.Event()
        ev.record(self._sim.current_stream())
        return ev

    # -- the simulated allocator ------------------------------------------------------

    def observe_output(self, t: Any) -> None:
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr == 0:
            return
        live = self._live
        ref = live.get(ptr)
        if ref is not None and ref() is st:
            return
        live[ptr] = ref = weakref.ref(st, self._died)
        self._refs[id(ref)] = ptr
        r = self._rec
        if r is not None and self._direct:
            r.on_alloc(ptr, self.current_stream(0), 0, st.nbytes())
        else:
            self._fire("memory_allocation", ptr, st.nbytes())

    def _storage_died(self, ref: weakref.ref) -> None:
        """Weakref callback: the C++ storage is gone (its memory is back to malloc)."""
        ptr = self._refs.pop(id(ref), None)
        if ptr is not None and self._live.get(ptr) is ref:  # not replaced by a newer storage
            del self._live[ptr]
            r = self._rec
            if r is not None and self._direct:
                r.on_free(ptr)
            else:
                self._sim.trace.fire("memory_deallocation", ptr)
