"""The interface between the recorder and a device runtime (CUDA, Ascend NPU, simulated).

A backend adapter does two jobs and nothing else:

1. it answers small questions the recorder asks on its hot path (which stream is current
   in this thread, is this tensor on the device, how do I name this stream object), and
2. :meth:`Backend.install` wires the runtime's trace hooks (``torch.cuda._gpu_trace``,
   ``torch_npu.utils._npu_trace``, :mod:`npusan.sim`'s registry) to the recorder's
   callbacks listed in :class:`RecorderCallbacks`.

Kernels are not a backend concern: they come from the recorder's ``TorchDispatchMode``,
which asks the backend for the current stream and for :meth:`Backend.is_device_tensor`.

Streams are always named by ``(device, raw handle)`` where the handle is an int
(``cudaStream_t``, ``aclrtStream``, a simulated id): CUDA's default stream is handle 0 on
every device, so the handle alone is ambiguous. Events and pointers are raw ints.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Dict, Optional, Protocol, Tuple, runtime_checkable


@runtime_checkable
class RecorderCallbacks(Protocol):
    """What a backend's hooks call. Implemented by :class:`npusan.recorder.session.Recorder`.

    Every method is thread-safe (hooks may fire from runtime worker threads) and never
    raises: an unexpected error inside one stops recording with one warning and returns
    normally, so the host program is never disturbed. All ids are plain ints.
    Callbacks may be invoked after recording stopped; they then do nothing.
    """

    def on_stream_created(self, handle: int, device: int) -> None:
        """A stream was created. A second creation of a known stream is harmless."""

    def on_event_created(self, ev: int) -> None:
        """An event was created (wipes any snapshot a reused event id held)."""

    def on_event_deleted(self, ev: int) -> None:
        """An event was destroyed. May arrive twice for one event on NPU; harmless."""

    def on_event_record(self, ev: int, handle: int, device: int) -> None:
        """Event ``ev`` was recorded on stream ``(device, handle)``."""

    def on_event_wait(self, ev: int, handle: int, device: int) -> None:
        """Stream ``(device, handle)`` was made to wait for event ``ev``."""

    def on_event_sync(self, ev: int) -> None:
        """The host blocked on event ``ev`` (``Event.synchronize``)."""

    def on_stream_sync(self, handle: int, device: int) -> None:
        """The host blocked on stream ``(device, handle)`` (``Stream.synchronize``)."""

    def on_device_sync(self, device: Optional[int]) -> None:
        """The host blocked on a whole device (``synchronize()``); ``None``: every device."""

    def on_alloc(self, ptr: int, handle: int, device: int, size: Optional[int]) -> None:
        """A block at ``ptr`` was handed out for use on stream ``(device, handle)``.

        Hooks that do not pass the stream (CUDA) read the current stream of the calling
        thread; hooks that do not pass the size pass ``None``.
        """

    def on_free(self, ptr: int) -> None:
        """The block at ``ptr`` went back to the allocator (may be reused after this)."""

    def on_record_stream(self, ptr: int, handle: int, device: int) -> None:
        """``record_stream``: the block containing ``ptr`` is in use on ``(device, handle)``."""

    def on_erase_stream(self, ptr: int, handle: int, device: int) -> None:
        """NPU/HCCL ``erase_stream``: forget a stream previously recorded on the block."""

    def on_graph_begin(self, graph: int, handle: int, device: int) -> None:
        """The capture of graph ``graph`` (an id the backend chooses: the graph object's)
        began on stream ``(device, handle)``; the kernels until :meth:`on_graph_end` are its
        program, not work run now (format 1.3)."""

    def on_graph_end(self, graph: int) -> None:
        """The capture of graph ``graph`` ended."""

    def on_graph_launch(self, graph: int, handle: int, device: int) -> None:
        """Graph ``graph`` was replayed on stream ``(device, handle)`` (called before the
        replay enqueues its work)."""

    def on_graph_replayed(self, graph: int) -> None:
        """The replay of graph ``graph`` returned. Online mode checks the replay here, so
        that a race inside it comes out of the replay call, not out of the next op: the
        one callback that raises, and only the deliberate ``RaceError`` of raise mode."""


#: The callback names, in the order listed above (used by adapters to register them).
CALLBACK_NAMES: Tuple[str, ...] = (
    "on_stream_created",
    "on_event_created",
    "on_event_deleted",
    "on_event_record",
    "on_event_wait",
    "on_event_sync",
    "on_stream_sync",
    "on_device_sync",
    "on_alloc",
    "on_free",
    "on_record_stream",
    "on_erase_stream",
    "on_graph_begin",
    "on_graph_end",
    "on_graph_launch",
    "on_graph_replayed",
)

#: The graph callbacks: no runtime fires them through a trace hook; a backend wraps the
#: graph class's capture and replay methods instead (:mod:`.graphs`).
GRAPH_CALLBACK_NAMES: Tuple[str, ...] = ("on_graph_begin", "on_graph_end", "on_graph_launch", "on_graph_replayed")


class Backend(ABC):
    """One device runtime, as the recorder sees it.

    Adapters must not import their runtime (``torch_npu``) at module import time; import
    it inside :meth:`available` / :meth:`install`. An instance is created per recording.
    """

    #: Short name written into the trace header ("cuda", "npu", "sim").
    name: ClassVar[str] = "?"

    #: True for backends whose allocator has no hook (the simulated device): the dispatch
    #: mode then calls :meth:`observe_output` for every device-tensor output it sees.
    observes_outputs: ClassVar[bool] = False

    #: True for backends whose runtime fires no events for collectives (the simulated
    #: device): the adapter then plays the process group itself (:meth:`comm_launch`,
    #: :meth:`comm_end`, :meth:`comm_wait`). CUDA and NPU process groups record and wait
    #: their events through the runtime's own trace hooks.
    comm_modeled: ClassVar[bool] = False

    #: True when every device tensor is on device 0 (the simulated device): the dispatch
    #: mode then skips :meth:`tensor_device`.
    single_device: ClassVar[bool] = False

    #: True for backends whose runtime reports no synchronization when the host reads a
    #: device value (the simulated device): the dispatch mode then calls
    #: :meth:`host_read` after ``aten::_local_scalar_dense`` (``t.item()``). On CUDA and
    #: NPU the blocking copy (``memcpy_and_sync``) reports its stream synchronization
    #: through the runtime's own trace hooks.
    host_read_modeled: ClassVar[bool] = False

    #: Pinned host memory that streams copy from or to (:class:`~..host_memory.HostWatch`),
    #: or None while the backend knows of none: the dispatch mode then skips the host's
    #: accesses altogether.
    host_watch: Any = None

    @classmethod
    @abstractmethod
    def available(cls) -> bool:
        """Whether this runtime is usable in this process now (cheap; never raises)."""

    @abstractmethod
    def install(self, recorder: RecorderCallbacks) -> None:
        """Route the runtime's trace hooks to ``recorder``'s callbacks.

        Contract: hook registries of real runtimes cannot be unregistered, so an adapter
        registers forwarding functions at most once per process and points them at the
        current recorder; :meth:`uninstall` points them at nothing. ``install`` may be
        called again later with a new recorder. The forwarding functions must not raise
        into the runtime (the recorder's callbacks already never raise; argument
        conversion in the adapter must be guarded too). If another tool (CSAN,
        ``TORCH_NPU_SANITIZER``) already owns the hooks, coexist: register alongside it.
        """

    def uninstall(self) -> None:
        """Stop forwarding hooks to the recorder (hooks stay registered but become no-ops)."""

    @abstractmethod
    def current_device(self) -> int:
        """Index of the calling thread's current device."""

    @abstractmethod
    def current_stream(self, device: int) -> int:
        """Raw handle of the calling thread's current stream on ``device``.

        Called once per recorded op, so it must be cheap, and on NPU it must not drain
        the task queue (use ``_npu_getCurrentRawStreamNoWait``, not ``.npu_stream``).
        """

    @abstractmethod
    def default_streams(self) -> Dict[int, int]:
        """``{device: raw handle of its default stream}`` for the trace header."""

    @abstractmethod
    def device_count(self) -> int:
        """Number of visible devices (0 when none)."""

    @abstractmethod
    def stream_key(self, stream_obj: Any) -> Tuple[int, int]:
        """``(device, raw handle)`` naming a runtime stream object.

        Used for ``aten.record_stream``'s stream argument (a ``torch.Stream`` or the
        runtime's own class) and for stream objects handed over by user-facing APIs.
        """

    @abstractmethod
    def is_device_tensor(self, t: Any) -> bool:
        """Whether tensor ``t`` lives in this backend's device memory (only those count)."""

    def tensor_device(self, t: Any) -> int:
        """Device index of a device tensor (the kernel runs on that device's current stream)."""
        idx = t.device.index
        return 0 if idx is None else idx

    def comm_launch(self, group: str, device: int) -> int:
        """``syncStream``: the communication stream of ``group`` on ``device`` waits for the
        current stream; returns its handle (only where :attr:`comm_modeled`)."""
        raise NotImplementedError

    def comm_end(self, handle: int, device: int) -> Any:
        """Record the end event of a collective on communication stream ``handle``."""
        raise NotImplementedError

    def comm_wait(self, end: Any, device: int) -> None:
        """``work.wait()``: the current stream waits for the end event ``end``."""
        raise NotImplementedError

    def host_read(self) -> None:
        """The host read a device value through the calling thread's current stream (a
        blocking device-to-host copy): report that stream's synchronization (only where
        :attr:`host_read_modeled`)."""

    def observe_output(self, t: Any) -> None:
        """Called for each device-tensor output when :attr:`observes_outputs` is set.

        Backends without allocation hooks use it to discover new storages and report
        them through ``on_alloc`` (and their release through ``on_free``).
        """
