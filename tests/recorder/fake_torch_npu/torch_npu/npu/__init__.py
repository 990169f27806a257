"""Stand-in for ``torch_npu.npu``: streams, events, synchronize, with torch.cuda's shapes.

Each call fires the hook the real runtime fires, from the calling thread, with the
calling thread's device made current for the duration (as the C++ device guards do).
"""

from __future__ import annotations

import contextlib
from typing import Optional

from .. import _fake


def _st():
    return _fake.state


def is_available() -> bool:
    return _st().device_count > 0


def device_count() -> int:
    return _st().device_count


def current_device() -> int:
    return _st().device


def set_device(device: int) -> None:
    _st().device = int(device)


@contextlib.contextmanager
def _on_device(device: int):
    st = _st()
    prev = st.device
    st.device = device
    try:
        yield
    finally:
        st.device = prev


class Stream:
    """A pool stream (new id and raw handle) or, given ``stream_id``, an existing one."""

    def __init__(self, device: Optional[int] = None, priority: int = 0, *, stream_id: Optional[int] = None,
                 device_index: Optional[int] = None, device_type: int = _fake.DEVICE_TYPE) -> None:
        st = _st()
        dev = device_index if device_index is not None else (st.device if device is None else int(device))
        self.device_index = dev
        self.device_type = device_type
        if stream_id is not None:
            self.stream_id = stream_id
        else:
            self.stream_id, raw = st.new_stream(dev)
            with _on_device(dev):
                _fake.fire("NPUStreamCreationCallbacks", raw)

    @property
    def _raw(self) -> int:
        return _st().raw[(self.device_index, self.stream_id)]

    @property
    def npu_stream(self) -> int:
        """The real property drains the task queue before returning the handle."""
        _st().drain("Stream.npu_stream")
        return self._raw

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and (self.device_index, self.stream_id) == (other.device_index, other.stream_id)

    def __hash__(self) -> int:
        return hash((self.device_index, self.stream_id))

    def record_event(self, event: Optional["Event"] = None) -> "Event":
        event = Event() if event is None else event
        event.record(self)
        return event

    def wait_event(self, event: "Event") -> None:
        event.wait(self)

    def wait_stream(self, stream: "Stream") -> None:
        """What PyTorch does: a temporary event recorded on ``stream``, waited here, destroyed."""
        ev = stream.record_event()
        self.wait_event(ev)
        ev.destroy()

    def synchronize(self) -> None:
        with _on_device(self.device_index):
            _fake.fire("NPUStreamSynchronizationCallbacks", self._raw)

    def query(self) -> bool:
        """Done, or not (``query_answer``); like torch_npu's, fires no hook."""
        return Event.query_answer


class Event:
    """Created lazily at its first record, like NPUEvent."""

    #: Set by tests: report each destruction twice (the quirk seen on real torch_npu).
    double_delete = False

    def __init__(self, enable_timing: bool = False, blocking: bool = False) -> None:
        self.handle: Optional[int] = None
        self.device_index: Optional[int] = None

    def record(self, stream: Optional[Stream] = None) -> None:
        stream = current_stream() if stream is None else stream
        if self.handle is None:
            self.handle = _st().new_event()
            self.device_index = stream.device_index
            _fake.fire("NPUEventCreationCallbacks", self.handle)
        with _on_device(stream.device_index):
            _fake.fire("NPUEventRecordCallbacks", self.handle, stream._raw)

    def wait(self, stream: Optional[Stream] = None) -> None:
        stream = current_stream() if stream is None else stream
        if self.handle is not None:
            with _on_device(stream.device_index):
                _fake.fire("NPUEventWaitCallbacks", self.handle, stream._raw)

    def synchronize(self) -> None:
        if self.handle is not None:
            _fake.fire("NPUEventSynchronizationCallbacks", self.handle)

    #: Set by tests: what ``query`` answers (the work is done, or not yet).
    query_answer = True

    @property
    def npu_event(self) -> int:
        return self.handle or 0

    def query(self) -> bool:
        """Like torch_npu's: fires no hook."""
        return self.query_answer

    def destroy(self) -> None:
        if self.handle is not None:
            h, self.handle = self.handle, None
            _fake.fire("NPUEventDeletionCallbacks", h)
            if self.double_delete:
                _fake.fire("NPUEventDeletionCallbacks", h)


def current_stream(device: Optional[int] = None) -> Stream:
    st = _st()
    dev = st.device if device is None else int(device)
    return Stream(stream_id=st.current_id(dev), device_index=dev)


def default_stream(device: Optional[int] = None) -> Stream:
    dev = _st().device if device is None else int(device)
    return Stream(stream_id=0, device_index=dev)


def set_stream(stream: Stream) -> None:
    _st().set_current(stream.device_index, stream.stream_id)


@contextlib.contextmanager
def stream(s: Stream):
    st = _st()
    prev = st.current_id(s.device_index)
    st.set_current(s.device_index, s.stream_id)
    try:
        yield s
    finally:
        st.set_current(s.device_index, prev)


def synchronize(device: Optional[int] = None) -> None:
    dev = _st().device if device is None else int(device)
    with _on_device(dev):
        _fake.fire("NPUDeviceSynchronizationCallbacks")


class NPUGraph:
    """``torch_npu.npu.NPUGraph``: capture and replay only change its state (no device)."""

    def __init__(self) -> None:
        self.state = "new"
        self.replays = 0

    def capture_begin(self, pool=None, capture_error_mode: str = "global") -> None:
        self.state = "capturing"

    def capture_end(self) -> None:
        self.state = "captured"

    def replay(self) -> None:
        if self.state != "captured":
            raise RuntimeError("NPUGraph.replay: not captured")
        self.replays += 1
