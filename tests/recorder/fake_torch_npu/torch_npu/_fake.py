"""State and trigger API of the stand-in torch_npu (tests only).

Mimics what the real runtime does at the Python boundary: per-thread current device and
stream, ``aclrtStream``-like non-zero raw handles (the default stream's too), and hooks
fired through ``torch_npu.utils._npu_trace`` only once ``_activate_npu_trace(0)`` ran.
Reading a stream through a queue-draining accessor (``Stream.npu_stream``,
``_npu_getCurrentRawStream``) counts in :data:`state.drains` and raises, so a test can
assert that the adapter never does it even where the recorder swallows errors.
"""

from __future__ import annotations

import threading
from typing import Dict, List, Optional, Tuple

#: ``c10::DeviceType::PrivateUse1``, what torch_npu streams carry as device_type.
DEVICE_TYPE = 20


class DrainError(AssertionError):
    """A queue-draining stream accessor was used."""


class State:
    def __init__(self, device_count: int = 2) -> None:
        self.device_count = device_count
        self.trace_mode: Optional[int] = None
        self.activate_calls: List[int] = []
        self.drains = 0
        self.fired: List[Tuple[str, tuple]] = []
        self._lock = threading.Lock()
        self._tls = threading.local()
        # (device, stream_id) -> raw handle; stream id 0 is each device's default stream.
        self.raw: Dict[Tuple[int, int], int] = {}
        self.next_id: Dict[int, int] = {}
        for d in range(device_count):
            self.raw[(d, 0)] = 0xA000_0000 + d * 0x100_0000
            self.next_id[d] = 1
        self._next_event = 0xE000_0000
        self._next_ptr = 0x1_0000_0000

    # -- per-thread current device / stream ----------------------------------------
    @property
    def device(self) -> int:
        return getattr(self._tls, "device", 0)

    @device.setter
    def device(self, d: int) -> None:
        self._tls.device = d

    def current_id(self, device: int) -> int:
        cur = getattr(self._tls, "cur", None)
        return 0 if cur is None else cur.get(device, 0)

    def set_current(self, device: int, stream_id: int) -> None:
        cur = getattr(self._tls, "cur", None)
        if cur is None:
            cur = self._tls.cur = {}
        cur[device] = stream_id

    # -- ids ---------------------------------------------------------------------------
    def new_stream(self, device: int) -> Tuple[int, int]:
        with self._lock:
            sid = self.next_id[device]
            self.next_id[device] += 1
            raw = 0xA000_0000 + device * 0x100_0000 + sid * 0x1000
            self.raw[(device, sid)] = raw
        return sid, raw

    def new_event(self) -> int:
        with self._lock:
            self._next_event += 0x40
            return self._next_event

    def new_ptr(self, size: int = 4096) -> int:
        with self._lock:
            ptr = self._next_ptr
            self._next_ptr += max(512, (size + 511) // 512 * 512)
            return ptr

    def drain(self, what: str) -> None:
        self.drains += 1
        raise DrainError(f"{what} drains the NPU task queue; npusan must not call it")


state = State()


def reset(device_count: int = 2) -> State:
    """Fresh runtime state (the registries in _npu_trace are reset by the loader)."""
    global state
    state = State(device_count)
    return state


def fire(registry: str, *args) -> None:
    """Fire a hook the way the C++ side does: only in stream mode, all callbacks, in order."""
    from torch_npu.utils import _npu_trace

    if state.trace_mode != 0:
        return
    state.fired.append((registry, args))
    getattr(_npu_trace, registry).fire_callbacks(*args)


# -- allocator triggers (what NPUCachingAllocator does) ----------------------------------

def alloc(size: int = 4096, ptr: Optional[int] = None) -> int:
    """A block handed out on the current stream; the hook passes only the pointer."""
    ptr = state.new_ptr(size) if ptr is None else ptr
    fire("NPUMemoryAllocationCallbacks", ptr)
    return ptr


def free(ptr: int) -> None:
    fire("NPUMemoryDeallocationCallbacks", ptr)


def record_stream(ptr: int, stream) -> None:
    """``tensor.record_stream(stream)`` as the allocator reports it: (block ptr, aclrtStream)."""
    fire("NPURecordStreamCallbacks", ptr, state.raw[(stream.device_index, stream.stream_id)])


def erase_stream(ptr: int, stream) -> None:
    fire("NPUEraseStreamCallbacks", ptr, state.raw[(stream.device_index, stream.stream_id)])
