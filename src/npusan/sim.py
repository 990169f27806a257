"""A simulated device: real PyTorch code on "streams" on a CPU-only machine.

``npusan.sim`` mirrors the shape of ``torch.cuda``'s stream API -- :class:`Stream`,
:class:`Event`, :func:`stream`, :func:`current_stream`, :func:`default_stream`,
:func:`set_stream`, :func:`synchronize` -- but nothing runs asynchronously: every op runs
on the CPU at once, so programs compute the same results as without streams. What the
simulation provides is the *trace*: while a recorder is installed, each stream/event call
fires a hook of :data:`trace` (a registry shaped like ``torch.cuda._gpu_trace``), and
:class:`npusan.recorder.backends.sim.SimBackend` routes those hooks into the recorder
exactly as the CUDA adapter routes ``_gpu_trace``. Tensors are ordinary CPU tensors;
while the simulated backend is recording, every CPU tensor counts as device memory.

``tensor.record_stream(s)`` works with a simulated stream: :class:`Stream` subclasses
``torch.Stream`` (device type CPU, ``stream_id`` = its handle), and importing this module
registers a no-op CPU kernel for ``aten::record_stream`` (CPU has none), so the call
dispatches normally and the recorder's dispatch mode sees ``aten.record_stream.default``
as it does on CUDA. :func:`record_stream` is the same call as a function.

Host memory: on a GPU, host tensors (pinned batches of a data loader) are not device
memory and a copy stream reading them races with nothing. Here every CPU tensor is
"device memory" unless it is marked with :func:`host_tensor` (the simulated
``pin_memory()``); :func:`to_device` is the simulated ``.cuda(non_blocking=True)``: a copy
into new device memory on the current stream.

Collectives: while recording, ``torch.distributed`` collectives on simulated tensors (a
gloo process group) are recorded the way ProcessGroupNCCL runs them on a GPU, on a
communication stream per process group (:func:`comm_stream`), with the same events and
waits; see ``docs/collectives.md``.

Differences from ``torch.cuda`` kept on purpose: the allocation hook passes
``(ptr, size)`` (the simulated allocator knows the size), and device indexes other than 0
are accepted but all map to device 0.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import weakref
from typing import Callable, Dict, Iterator, List, Optional

import torch

__all__ = [
    "Stream",
    "Event",
    "stream",
    "current_stream",
    "default_stream",
    "set_stream",
    "synchronize",
    "record_stream",
    "host_tensor",
    "is_host",
    "is_pinned",
    "to_device",
    "to_host",
    "comm_stream",
    "trace",
    "DEFAULT_HANDLE",
]

#: Handle of the default stream (like CUDA's legacy default stream, handle 0).
DEFAULT_HANDLE = 0
_CPU = 0  # c10::DeviceType::CPU

# A CPU kernel for aten::record_stream so that ``t.record_stream(sim_stream)`` dispatches
# (there is none for CPU in torch). It does nothing: the simulated allocator never reuses
# memory early, so there is nothing to tell it.
_lib: Optional[torch.library.Library] = None
try:
    if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::record_stream", "CPU"):
        _lib = torch.library.Library("aten", "IMPL")
        _lib.impl("record_stream", lambda self, s: None, "CPU")
except Exception:  # pragma: no cover - an older torch without these hooks
    _lib = None


class _TraceRegistry:
    """Hook lists shaped like ``torch.cuda._gpu_trace`` (``register_callback_for_*``).

    Hooks fire only while at least one callback is registered; callbacks must not raise
    (the recorder's never do) but a raising one is isolated from the program anyway.
    """

    HOOKS = (
        "event_creation",  # (event)
        "event_deletion",  # (event)
        "event_record",  # (event, stream)
        "event_wait",  # (event, stream)
        "memory_allocation",  # (ptr, size)
        "memory_deallocation",  # (ptr)
        "stream_creation",  # (stream)
        "device_synchronization",  # ()
        "stream_synchronization",  # (stream)
        "event_synchronization",  # (event)
    )

    def __init__(self) -> None:
        self.callbacks: Dict[str, List[Callable]] = {h: [] for h in self.HOOKS}
        for h in self.HOOKS:
            setattr(self, f"register_callback_for_{h}", self._registrar(h))

    def _registrar(self, hook: str) -> Callable[[Callable], None]:
        def register(cb: Callable) -> None:
            self.callbacks[hook].append(cb)

        register.__name__ = f"register_callback_for_{hook}"
        return register

    def unregister_all(self) -> None:
        for lst in self.callbacks.values():
            lst.clear()

    def fire(self, hook: str, *args) -> None:
        for cb in self.callbacks[hook]:
            try:
                cb(*args)
            except Exception:
                pass


#: The simulated device's hook registry.
trace = _TraceRegistry()

def _not_traced(fn: Callable) -> Callable:
    """Mark ``fn`` so that ``torch.compile`` (Dynamo) calls it instead of tracing into it.

    The stream API is the host's bookkeeping, not tensor math: traced, Dynamo would guard
    on this module's thread-local current stream (a guard that fails on the frame that
    made it: a crash) and fold stream switches into a graph that runs on one stream. Not
    traced, each call breaks the graph where it stands, and the ops between the calls
    are compiled into graphs that run on the stream current when they run, as the
    program says. The attribute is what ``torch.compiler.disable`` leaves on the
    functions it wraps, set here without importing Dynamo (seconds) in every program."""
    fn._torchdynamo_disable = True  # type: ignore[attr-defined]
    fn._torchdynamo_disable_msg = "npusan.sim stream API (runs on the host)"  # type: ignore[attr-defined]
    return fn


_stream_ids = itertools.count(1)
_event_ids = itertools.count(0x5E0000001)  # look like handles, never collide with small ints


class Stream(torch.Stream):
    """A simulated stream; ``handle`` (== ``stream_id``) names it in traces."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        if "stream_id" in kwargs:  # internal construction of the default stream
            handle = kwargs["stream_id"]
        else:
            handle = next(_stream_ids)
        self = super().__new__(cls, stream_id=handle, device_index=0, device_type=_CPU)
        return self

    def __init__(self, device=None, priority: int = 0, **kwargs) -> None:
        if "stream_id" not in kwargs:
            trace.fire("stream_creation", self.stream_id)

    @property
    def handle(self) -> int:
        return self.stream_id

    @_not_traced
    def wait_event(self, event: "Event") -> None:
        event.wait(self)

    @_not_traced
    def wait_stream(self, other: "Stream") -> None:
        """Like ``torch.cuda.Stream.wait_stream``: an event recorded on ``other``, waited here."""
        self.wait_event(other.record_event())

    @_not_traced
    def record_event(self, event: Optional["Event"] = None) -> "Event":
        if event is None:
            event = Event()
        event.record(self)
        return event

    @_not_traced
    def synchronize(self) -> None:
        trace.fire("stream_synchronization", self.stream_id)

    @_not_traced
    def query(self) -> bool:
        """Always True (nothing is timed): the host learned the stream's work is done, which
        orders it as :meth:`synchronize` does, and is recorded as that."""
        trace.fire("stream_synchronization", self.stream_id)
        return True

    def __eq__(self, other) -> bool:
        return isinstance(other, torch.Stream) and other.stream_id == self.stream_id and other.device_type == self.device_type

    def __hash__(self) -> int:
        return hash((self.stream_id, "npusan.sim"))

    def __repr__(self) -> str:
        return f"<npusan.sim.Stream handle={self.stream_id}>"


_DEFAULT = Stream(stream_id=DEFAULT_HANDLE)


class Event:
    """A simulated event. Like CUDA's, it is created lazily at its first record."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.handle: Optional[int] = None

    @_not_traced
    def record(self, stream: Optional[Stream] = None) -> None:
        if stream is None:
            stream = current_stream()
        if self.handle is None:
            self.handle = next(_event_ids)
            trace.fire("event_creation", self.handle)
            if trace.callbacks["event_deletion"]:
                # Only while someone listens: Python code run when an object dies can swallow
                # a Ctrl-C ("Exception ignored in ..."), and a program on the simulated device
                # drops an event at every wait_stream. (While recording, the recorder's signal
                # handling keeps the Ctrl-C for the program.)
                weakref.finalize(self, trace.fire, "event_deletion", self.handle).atexit = False
        trace.fire("event_record", self.handle, stream.stream_id)

    @_not_traced
    def wait(self, stream: Optional[Stream] = None) -> None:
        if stream is None:
            stream = current_stream()
        if self.handle is not None:  # CUDA: waiting on a never-recorded event is a no-op
            trace.fire("event_wait", self.handle, stream.stream_id)

    @_not_traced
    def synchronize(self) -> None:
        if self.handle is not None:
            trace.fire("event_synchronization", self.handle)

    @_not_traced
    def query(self) -> bool:
        """Always True: recorded as the event's synchronization (the host knows the work is
        done); nothing for an event never recorded."""
        if self.handle is not None:
            trace.fire("event_synchronization", self.handle)
        return True

    def elapsed_time(self, end_event: "Event") -> float:
        return 0.0

    def __repr__(self) -> str:
        return f"<npusan.sim.Event handle={self.handle}>"


class _Local(threading.local):
    stream: Stream = _DEFAULT  # class default: no AttributeError (slow) on the hot path


_tls = _Local()


@_not_traced
def current_stream(device=None) -> Stream:
    """The calling thread's current stream (the default stream unless set)."""
    return _tls.stream


@_not_traced
def current_handle(device=None) -> int:
    """Handle of the calling thread's current stream (the recorder's per-op question)."""
    return _tls.stream.stream_id


@_not_traced
def default_stream(device=None) -> Stream:
    return _DEFAULT


@_not_traced
def set_stream(s: Optional[Stream]) -> None:
    if s is not None:
        _tls.stream = s


@_not_traced
@contextlib.contextmanager
def stream(s: Optional[Stream]) -> Iterator[None]:
    """Make ``s`` the current stream of this thread inside the block (None: no change)."""
    if s is None:
        yield
        return
    prev = current_stream()
    _tls.stream = s
    try:
        yield
    finally:
        _tls.stream = prev


@_not_traced
def synchronize(device=None) -> None:
    """Block the host until every stream is done (a device synchronization)."""
    trace.fire("device_synchronization")


def record_stream(t: torch.Tensor, s: Stream) -> None:
    """``t.record_stream(s)``: the same dispatched call, as a function."""
    t.record_stream(s)


# -- host memory ---------------------------------------------------------------------

#: Storage base pointer -> end, of the storages marked as host memory (see host_tensor).
_host: Dict[int, int] = {}
#: The bases of those that are pinned (host_tensor(t, pinned=True)).
_pinned: set = set()
_host_lock = threading.Lock()
#: Called with (base, end) when a storage becomes host memory (the simulated backend
#: forgets the block); set by the recorder's adapter while it records.
_on_host: Optional[Callable[[int, int], None]] = None


def host_tensor(t: torch.Tensor, pinned: bool = True) -> torch.Tensor:
    """Mark ``t``'s memory as host memory (the simulated ``t.pin_memory()``); returns ``t``.

    Host memory is not device memory: no kernel writes it, so reading a host batch on a
    copy stream is not a race with another stream, just as a pinned batch copied to the
    GPU is not. Views of ``t`` are host memory too. Tensors computed from host tensors are
    ordinary (device) tensors again, like the result of a host-to-device copy; mark them
    if they stand for host data.

    Pinned memory (the default) is what a ``non_blocking`` copy reads or writes after the
    host moved on: an op that mixes it with device memory (:func:`to_device`,
    :func:`to_host`, ``dev.copy_(pinned)``) accesses it on the current stream, and ops
    that touch only host memory are the host's own accesses, ordered after that stream's
    work only by a synchronization (docs/semantics.md, "The host"). ``pinned=False``
    marks pageable host memory: copies from or to it finish before the host goes on, and
    nothing about it is recorded.
    """
    st = t.untyped_storage()
    base = st.data_ptr()
    if base:
        end = base + max(st.nbytes(), 1)
        with _host_lock:
            _host[base] = end
            if pinned:
                _pinned.add(base)
            else:
                _pinned.discard(base)
        weakref.finalize(st, _forget_host, base, end)
        cb = _on_host
        if cb is not None:
            cb(base, end)
    return t


def _forget_host(base: int, end: int) -> None:
    with _host_lock:
        if _host.get(base) == end:
            del _host[base]
            _pinned.discard(base)


def is_pinned(t: torch.Tensor) -> bool:
    """Whether ``t`` lies in memory marked by :func:`host_tensor` as pinned."""
    if not _pinned:
        return False
    try:
        p = t.data_ptr()
    except RuntimeError:
        return False
    for base, end in list(_host.items()):
        if base <= p < end:
            return base in _pinned
    return False


def is_host(t: torch.Tensor) -> bool:
    """Whether ``t`` lies in memory marked by :func:`host_tensor`."""
    if not _host:
        return False
    try:
        p = t.data_ptr()
    except RuntimeError:  # a wrapper subclass without storage of its own
        return False
    for base, end in list(_host.items()):
        if base <= p < end:
            return True
    return False


def to_device(t: torch.Tensor, non_blocking: bool = True) -> torch.Tensor:
    """The simulated ``t.cuda(non_blocking=...)``: a copy into new device memory on the
    current stream (``aten::_to_copy``). From pinned memory it reads that memory on the
    stream; with ``non_blocking=False`` the host waits for it (a stream synchronization)."""
    return t.to(copy=True, non_blocking=non_blocking, memory_format=torch.contiguous_format)


def to_host(t: torch.Tensor, out: Optional[torch.Tensor] = None, non_blocking: bool = True) -> torch.Tensor:
    """The simulated ``out.copy_(t, non_blocking=...)`` from device memory into pinned host
    memory (a new pinned tensor when ``out`` is None), on the current stream. Reading
    ``out`` on the host needs a synchronization first unless ``non_blocking=False``."""
    if out is None:
        out = host_tensor(torch.empty_like(t, memory_format=torch.contiguous_format))
    return out.copy_(t, non_blocking=non_blocking)


# -- communication streams ---------------------------------------------------------

_comm: Dict[str, Stream] = {}
_comm_lock = threading.Lock()


@_not_traced
def comm_stream(group_name: str) -> Stream:
    """The communication stream of process group ``group_name`` (created at first use).

    It is what ProcessGroupNCCL's internal stream per device is on a GPU: collectives
    that run asynchronously are recorded on it. Programs never need it (they synchronize
    through ``work.wait()``), but tests and tools may name it.
    """
    with _comm_lock:
        s = _comm.get(group_name)
        if s is None:
            s = _comm[group_name] = Stream()
        return s


def comm_stream_by_handle(handle: int) -> Stream:
    """The communication stream whose handle is ``handle``."""
    with _comm_lock:
        for s in _comm.values():
            if s.stream_id == handle:
                return s
    raise KeyError(handle)


# -- the stream pool --------------------------------------------------------------

#: CUDA's pool hands out 32 streams per device and priority, round robin (``kStreamsPerPool``).
POOL_SIZE = 32
_pool: list = []
_pool_next = itertools.count()


@_not_traced
def pool_stream(device=None) -> Stream:
    """A stream of the device's pool, as ``c10::cuda::getStreamFromPool`` hands them out
    (round robin over :data:`POOL_SIZE` streams made at first use): where a torch Future runs
    its ``then`` and ``add_done_callback`` callbacks."""
    with _comm_lock:
        i = next(_pool_next) % POOL_SIZE
        while len(_pool) <= i:
            _pool.append(Stream())
        return _pool[i]


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def _warn_if_recording_elsewhere() -> None:
    """A recorder already running on a real device does not see simulated streams."""
    import sys

    session = sys.modules.get("npusan.recorder.session")
    rec = session.current() if session is not None else None
    if rec is not None and rec.active and rec.backend.name != "sim":
        sys.stderr.write(
            f"npusan: warning: npusan.sim is used while recording the {rec.backend.name} backend; "
            "simulated streams and CPU tensors are not recorded (record with --backend sim)\n"
        )


_warn_if_recording_elsewhere()
