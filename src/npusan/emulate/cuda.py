"""The emulated CUDA runtime: devices, streams, events, the allocator, and the trace hooks.

Everything a GPU run reports through ``torch.cuda._gpu_trace`` is fired here at the same
points (stream creation, event creation/deletion/record/wait/synchronize, stream and
device synchronize, allocation, deallocation), so npusan's CUDA backend records an
emulated run unchanged. Work runs at once on the CPU; only the order of what a GPU would
have enqueued is emulated, which is all the analyzer judges.

Stream handles are fake ``cudaStream_t`` values: 0 is the default stream, side streams are
``0x1000 + 16 * n`` (never 1 or 2, the legacy/per-thread handles). Event handles are fake
``cudaEvent_t`` values created lazily at the first record, as CUDA does.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, Dict, Optional

import torch

from .allocator import CachingAllocator

DEVICE = torch.device("cuda", 0)
#: The ``--emulate`` kind named in messages (``npu`` when :mod:`.npu` runs on this runtime).
KIND = "cuda"
_trace = None  # torch.cuda._gpu_trace, bound at install
#: Called with (old, new) when a thread's current stream changes (see :mod:`.backward`).
on_switch: Optional[Callable[["Stream", "Stream"], None]] = None


def _fire(name: str, *args: Any) -> None:
    getattr(_trace, name).fire_callbacks(*args)


class Unsupported(RuntimeError):
    """An API the emulator does not emulate (the message is the one line to show)."""


def unsupported(api: str) -> Any:
    def stop(*_a: Any, **_k: Any) -> Any:
        raise Unsupported(f"npusan --emulate {KIND}: {api} is not emulated")
    return stop


class _State:
    def __init__(self) -> None:
        self.allocator = CachingAllocator()
        self.tls = threading.local()
        self._ids = itertools.count(1)
        self._events = itertools.count(1)
        self.lock = threading.Lock()
        #: How many devices the machine has (``--emulate-devices``) and the one this
        #: process uses: every device storage and stream of a process is on it.
        self.count = 1
        self.device = 0
        self._fixed = False  # device memory or a side stream exists: the device is fixed
        #: The graph capturing now (:mod:`.graphs`), and the graph pools' blocks by address.
        self.capture: Any = None
        self.pool_of: Dict[int, CachingAllocator] = {}

    # devices
    def torch_device(self) -> torch.device:
        return torch.device(DEVICE.type, self.device)

    def use_device(self, index: Any, explicit: bool = True) -> int:
        """The device a factory, ``set_device`` or a stream names: this process's device.

        A process uses one device (a rank of ``torchrun`` uses ``cuda:LOCAL_RANK``): the
        first named one, which ``set_device`` may change until the first device memory
        or side stream exists; naming another one afterwards is not emulated."""
        if index is None:
            return self.device
        i = _index(index)
        if not 0 <= i < self.count:
            raise RuntimeError(f"CUDA error: invalid device ordinal (npusan --emulate cuda has {self.count} "
                               f"device{'s' if self.count != 1 else ''}; see --emulate-devices)")
        if i != self.device:
            if self._fixed:
                unsupported(f"more than one device in one process (cuda:{self.device} in use, cuda:{i} named)")()
            global DEFAULT
            old = DEFAULT
            self.device = i
            DEFAULT = Stream(stream_id=0)
            if getattr(self.tls, "stream", None) is old:
                self.tls.stream = DEFAULT
        return i

    # streams
    def new_handle(self) -> int:
        return 0x1000 + 16 * next(self._ids)

    def current(self) -> "Stream":
        s = getattr(self.tls, "stream", None)
        if s is None:
            s = self.tls.stream = DEFAULT
        return s

    def switch(self, stream: "Stream") -> None:
        """Make ``stream`` current in this thread (the backward model notes the switch)."""
        old = self.current()
        self.tls.stream = stream
        if on_switch is not None and stream != old:
            on_switch(old, stream)

    def current_handle(self, device: int = 0) -> int:
        s = getattr(self.tls, "stream", None)
        return DEFAULT.stream_id if s is None else s.stream_id

    def new_event(self) -> int:
        return 0xE0000 + 16 * next(self._events)

    # memory
    def alloc(self, nbytes: int) -> int:
        self._fixed = True
        with self.lock:
            g = self.capture
            if g is None:
                ptr = self.allocator.malloc(nbytes, self.current_handle())
            else:  # the capturing graph's private pool
                ptr = g.malloc(nbytes, self.current_handle())
                self.pool_of[ptr] = g._pool
        _fire("MemoryAllocationCallbacks", ptr)
        return ptr

    def free(self, ptr: int) -> None:
        _fire("MemoryDeallocationCallbacks", ptr)
        with self.lock:
            self.pool_of.pop(ptr, self.allocator).free(ptr)

    def record_stream(self, ptr: int, handle: int) -> None:
        with self.lock:
            self.pool_of.get(ptr, self.allocator).record_stream(ptr, handle)

    def host_reads_current_stream(self) -> None:
        """A blocking copy between host and device: CUDA synchronizes the current stream."""
        from .graphs import forbid_while_capturing

        forbid_while_capturing("a blocking copy between host and device")
        h = self.current_handle()
        _fire("StreamSynchronizationCallbacks", h)
        self.allocator.host_observed(h)


STATE = _State()


class Stream(torch.Stream):
    """``torch.cuda.Stream``: a ``torch.Stream`` of device type cuda with a fake handle."""

    def __new__(cls, device: Any = None, priority: int = 0, stream_id: Optional[int] = None,
                device_index: Optional[int] = None, device_type: Optional[int] = None, **_: Any) -> "Stream":
        if stream_id is None:
            STATE.use_device(device if device is not None else device_index)
            STATE._fixed = True
            stream_id = STATE.new_handle()
            created = True
        else:
            created = False
        self = super().__new__(cls, stream_id=stream_id, device_index=STATE.device, device_type=1)
        if created:
            _fire("StreamCreationCallbacks", stream_id)
        return self

    def __init__(self, *a: Any, **k: Any) -> None:
        pass

    @property
    def cuda_stream(self) -> int:
        return self.stream_id

    def wait_event(self, event: "Event") -> None:
        event.wait(self)

    def wait_stream(self, stream: "Stream") -> None:
        self.wait_event(stream.record_event())

    def record_event(self, event: Optional["Event"] = None) -> "Event":
        if event is None:
            event = Event()
        event.record(self)
        return event

    def query(self) -> bool:
        """Work runs at once, so the stream is always done: True. As on a GPU, no trace hook
        fires (npusan's CUDA backend records a True answer as the stream's synchronization);
        the allocator learns the host is ordered after the stream."""
        STATE.allocator.host_observed(self.stream_id)
        return True

    def is_capturing(self) -> bool:
        return STATE.capture is not None  # (one capture at a time, on the capturing thread's stream)

    def __enter__(self) -> "Stream":
        """``with stream:`` (``torch.Stream`` is a context manager too)."""
        stack = getattr(STATE.tls, "entered", None)
        if stack is None:
            stack = STATE.tls.entered = []
        stack.append(STATE.current())
        STATE.switch(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        STATE.switch(STATE.tls.entered.pop())

    def synchronize(self) -> None:
        _no_capture("Stream.synchronize")
        _fire("StreamSynchronizationCallbacks", self.stream_id)
        STATE.allocator.host_observed(self.stream_id)

    def __eq__(self, o: object) -> bool:
        return isinstance(o, torch.Stream) and o.stream_id == self.stream_id and o.device_type == 1

    def __hash__(self) -> int:
        return hash((self.stream_id, 1))

    def __repr__(self) -> str:
        return f"<torch.cuda.Stream device=cuda:{self.device_index} cuda_stream={self.stream_id:#x}>"


DEFAULT = Stream(stream_id=0)


class Event:
    """``torch.cuda.Event``: its handle is made at the first record (as CUDA does)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        if interprocess:
            unsupported("torch.cuda.Event(interprocess=True) (CUDA IPC)")()
        self._h: Optional[int] = None
        self._stream: Optional[int] = None
        self._pos = 0

    @property
    def cuda_event(self) -> int:
        return self._h or 0

    def record(self, stream: Optional[Stream] = None) -> None:
        if stream is None:
            stream = STATE.current()
        if self._h is None:
            self._h = STATE.new_event()
            _fire("EventCreationCallbacks", self._h)
        self._stream = stream.stream_id
        self._pos = STATE.allocator.position(self._stream)
        if STATE.capture is not None:  # a fork or join of the capture's streams (capture_joins.py)
            STATE.capture.event_recorded(self._h, stream.stream_id)
        _fire("EventRecordCallbacks", self._h, stream.stream_id)

    def wait(self, stream: Optional[Stream] = None) -> None:
        if self._h is None:
            return  # waiting on an unrecorded event is a no-op in CUDA
        if stream is None:
            stream = STATE.current()
        if STATE.capture is not None:
            STATE.capture.event_waited(self._h, stream.stream_id)
        _fire("EventWaitCallbacks", self._h, stream.stream_id)

    def query(self) -> bool:
        """Always True (see :meth:`Stream.query`); the host is ordered after the recorded
        work, as after :meth:`synchronize`."""
        if self._h is not None:
            STATE.allocator.host_observed(self._stream, self._pos)
        return True

    def synchronize(self) -> None:
        _no_capture("Event.synchronize")
        if self._h is None:
            return
        _fire("EventSynchronizationCallbacks", self._h)
        STATE.allocator.host_observed(self._stream, self._pos)

    def elapsed_time(self, end: "Event") -> float:
        return 0.0  # timing is not emulated

    def __del__(self) -> None:
        try:
            if self._h is not None:
                _fire("EventDeletionCallbacks", self._h)
        except Exception:
            pass


class StreamContext:
    def __init__(self, stream: Optional[Stream]) -> None:
        self.stream = stream
        self._prev: Optional[Stream] = None

    def __enter__(self) -> Optional[Stream]:
        if self.stream is not None:
            self._prev = STATE.current()
            STATE.switch(self.stream)
        return self.stream

    def __exit__(self, *exc: Any) -> None:
        if self.stream is not None and self._prev is not None:
            STATE.switch(self._prev)


def _no_capture(what: str) -> None:
    if STATE.capture is not None:
        from .graphs import forbid_while_capturing

        forbid_while_capturing(what)


def synchronize(device: Any = None) -> None:
    _no_capture("torch.cuda.synchronize")
    _fire("DeviceSynchronizationCallbacks")
    STATE.allocator.host_observed_all()


def set_stream(stream: Stream) -> None:
    STATE.switch(stream)


def _index(d: Any) -> int:
    """The device index of an int, ``"cuda:1"``, ``torch.device`` or a device-type-less
    ``"cuda"`` (this process's device)."""
    if isinstance(d, int):
        return d
    d = torch.device(d) if isinstance(d, str) else d
    if isinstance(d, torch.device):
        return STATE.device if d.index is None else d.index
    return int(d)


def set_device(d: Any) -> None:
    STATE.use_device(d)


class device:  # noqa: N801 -- torch.cuda.device
    """``with torch.cuda.device(i):``: this process's device only (see :meth:`_State.use_device`)."""

    def __init__(self, d: Any) -> None:
        self.idx = -1 if d is None else _index(d)

    def __enter__(self) -> None:
        if self.idx >= 0:
            STATE.use_device(self.idx)

    def __exit__(self, *exc: Any) -> None:
        pass


class _Props:
    name = "npusan emulated CUDA device"
    major, minor = 9, 0
    total_memory = 80 << 30
    multi_processor_count = 132
    is_integrated = False
    is_multi_gpu_board = False
    warp_size = 32

    def __repr__(self) -> str:
        return f"_CudaDeviceProperties(name='{self.name}', total_memory={self.total_memory >> 20}MB)"


def _graphs_module() -> Any:
    import torch.cuda.graphs

    return torch.cuda.graphs


def api() -> Dict[str, Any]:
    """The ``torch.cuda`` attributes the emulator replaces."""
    from . import graphs

    a = STATE.allocator
    return {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "_lazy_init": lambda: None,
        "init": lambda: None,
        "device_count": lambda: STATE.count,
        "current_device": lambda: STATE.device,
        "set_device": set_device,
        "device": device,
        "get_device_name": lambda d=None: _Props.name,
        "get_device_capability": lambda d=None: (_Props.major, _Props.minor),
        "get_device_properties": lambda d=None: _Props(),
        "Stream": Stream,
        "Event": Event,
        "StreamContext": StreamContext,
        "stream": lambda stream=None: StreamContext(stream),  # torch's signature: stream(stream)
        "current_stream": lambda device=None: STATE.current(),
        "default_stream": lambda device=None: DEFAULT,
        "set_stream": set_stream,
        "synchronize": synchronize,
        "memory_allocated": lambda device=None: a.allocated_bytes,
        "max_memory_allocated": lambda device=None: a.peak_allocated,
        "memory_reserved": lambda device=None: a.reserved_bytes,
        "max_memory_reserved": lambda device=None: a.peak_reserved,
        "reset_peak_memory_stats": lambda device=None: None,
        "empty_cache": lambda: a.empty_cache(),
        # Emulated tensors draw from the CPU generator (torch.manual_seed seeds it and
        # calls these): a seed of the CUDA generator alone is not emulated.
        "manual_seed": lambda seed: None,
        "manual_seed_all": lambda seed: None,
        "graph": _graphs_module().graph,
        "CUDAGraph": graphs.CUDAGraph,
        "graph_pool_handle": graphs.graph_pool_handle,
        "is_current_stream_capturing": graphs.is_current_stream_capturing,
        "make_graphed_callables": _graphs_module().make_graphed_callables,
        "ipc_collect": unsupported("torch.cuda.ipc_collect (CUDA IPC)"),
    }


def accelerator_api() -> Dict[str, Any]:
    """The ``torch.accelerator`` attributes the emulator replaces: the current accelerator
    is the emulated ``cuda`` (the DataLoader pins memory only when there is one)."""
    a = STATE.allocator
    return {
        "is_available": lambda: True,
        "current_accelerator": lambda check_available=False: torch.device("cuda"),
        "device_count": lambda: STATE.count,
        "current_device_index": lambda: STATE.device,
        "current_device_idx": lambda: STATE.device,
        "set_device_index": set_device,
        "set_device_idx": set_device,
        "current_stream": lambda device=None: STATE.current(),
        "set_stream": set_stream,
        "synchronize": synchronize,
        "empty_cache": lambda: a.empty_cache(),
        "memory_allocated": lambda device=None: a.allocated_bytes,
        "max_memory_allocated": lambda device=None: a.peak_allocated,
        "memory_reserved": lambda device=None: a.reserved_bytes,
        "max_memory_reserved": lambda device=None: a.peak_reserved,
    }
