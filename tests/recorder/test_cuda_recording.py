"""End to end through the CUDA adapter without a GPU: hooks -> recorder -> trace -> analyzer.

``torch.cuda._gpu_trace`` is a fresh copy of torch's module (see test_cuda_adapter.py) and
the runtime is a small fake (per-thread current device and stream). CPU tensors play CUDA
tensors: the backend is :class:`CudaBackend` except that CPU tensors count as device
memory, the kernel's device is the fake's current device, and storages are reported
through the allocation/deallocation hooks (pointer only, as the caching allocator does).
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import threading
import weakref

import pytest
import torch

import npusan
from npusan.analyzer.replay.traces import analyze_traces
from npusan.recorder.backends.cuda import CudaBackend

MISSING = "missing-record-stream"
DATA_RACE = "data-race"


class Runtime:
    """Per-thread current device and streams; fires hooks through the registry module."""

    def __init__(self, mod) -> None:
        self.mod = mod
        self.tls = threading.local()
        self._ids = itertools.count(1)

    @property
    def device(self) -> int:
        return getattr(self.tls, "device", 0)

    @device.setter
    def device(self, d: int) -> None:
        self.tls.device = d

    def get_raw_stream(self, device: int) -> int:
        return getattr(self.tls, "streams", {}).get(device, 0)

    def use(self, handle: int, device: int = 0):
        rt = self

        class Ctx:
            def __enter__(self):
                if not hasattr(rt.tls, "streams"):
                    rt.tls.streams = {}
                self.prev = (rt.device, rt.tls.streams.get(device, 0))
                rt.device = device
                rt.tls.streams[device] = handle

            def __exit__(self, *exc):
                rt.device = self.prev[0]
                rt.tls.streams[device] = self.prev[1]

        return Ctx()

    def new_stream(self, device: int = 0) -> int:
        h = 0x7F00_0000_0000 + next(self._ids) * 0x1000
        prev, self.device = self.device, device
        self.mod.StreamCreationCallbacks.fire_callbacks(h)
        self.device = prev
        return h

    def wait_stream(self, waiter: int, other: int, device: int = 0) -> None:
        """What torch.cuda.Stream.wait_stream does: new event, record on other, wait, delete."""
        ev = 0xE000_0000 + next(self._ids)
        prev, self.device = self.device, device
        self.mod.EventCreationCallbacks.fire_callbacks(ev)
        self.mod.EventRecordCallbacks.fire_callbacks(ev, other)
        self.mod.EventWaitCallbacks.fire_callbacks(ev, waiter)
        self.mod.EventDeletionCallbacks.fire_callbacks(ev)
        self.device = prev

    def synchronize(self, devices=(0, 1)) -> None:
        """``torch.cuda.synchronize(d)`` for each device (it syncs the current device only)."""
        prev = self.device
        for d in devices:
            self.device = d
            self.mod.DeviceSynchronizationCallbacks.fire_callbacks()
        self.device = prev


@pytest.fixture
def rt(monkeypatch):
    import torch.cuda._gpu_trace as real

    spec = importlib.util.spec_from_file_location("torch.cuda._gpu_trace", real.__file__)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setitem(sys.modules, "torch.cuda._gpu_trace", mod)
    runtime = Runtime(mod)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: runtime.device, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", runtime.get_raw_stream, raising=False)
    monkeypatch.setattr(torch._C, "_activate_gpu_trace", lambda: None, raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    return runtime


class CpuAsCuda(CudaBackend):
    observes_outputs = True

    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self.rt = runtime
        self._live = {}

    def is_device_tensor(self, t) -> bool:
        return t.is_cpu

    def tensor_device(self, t) -> int:
        return self.rt.device

    def observe_output(self, t) -> None:
        st = t.untyped_storage()
        ptr = st.data_ptr()
        ref = self._live.get(ptr)
        if not ptr or (ref is not None and ref() is st):
            return
        mod, live = self.rt.mod, self._live

        def freed(r, ptr=ptr):
            if live.get(ptr) is r:
                del live[ptr]
                mod.MemoryDeallocationCallbacks.fire_callbacks(ptr)

        live[ptr] = weakref.ref(st, freed)
        mod.MemoryAllocationCallbacks.fire_callbacks(ptr)

    def uninstall(self) -> None:
        super().uninstall()
        self._live.clear()


def record(tmp_path, rt, prog):
    path = tmp_path / "cuda.npusan"
    with npusan.record(str(path), backend=CpuAsCuda(rt)):
        prog()
    return analyze_traces([str(path)])


def kinds(result):
    return {f.kind.value for f in result.findings}


def test_seed_worked_example(tmp_path, rt):
    def prog():
        x = torch.empty(4096)
        x.fill_(1.0)
        s1 = rt.new_stream()
        rt.wait_stream(s1, 0)
        with rt.use(s1):
            y = x + 1
        del x
        nxt = torch.empty(1 << 20)  # the default stream's next allocation: it could get x's block
        rt.synchronize()
        del y, nxt

    result = record(tmp_path, rt, prog)
    assert kinds(result) == {MISSING}
    (f,) = result.findings
    assert f.access.stream.handle == 0 and f.previous.stream.handle != 0


def test_creation_waiting_for_usage_is_clean(tmp_path, rt):
    def prog():
        x = torch.empty(4096)
        x.fill_(1.0)
        s1 = rt.new_stream()
        rt.wait_stream(s1, 0)
        with rt.use(s1):
            y = x + 1
        rt.wait_stream(0, s1)
        del x
        rt.synchronize()
        del y

    assert record(tmp_path, rt, prog).findings == []


def test_default_streams_of_two_devices_are_different_streams(tmp_path, rt):
    """Handle 0 on device 0 and handle 0 on device 1 must not be merged into one stream:
    a write on one and an unsynchronized read on the other is a race."""

    def prog():
        x = torch.zeros(4096)
        rt.synchronize()
        x.add_(1.0)  # device 0, default stream (handle 0)
        with rt.use(0, device=1):
            y = x * 2  # device 1, default stream (handle 0), e.g. a peer read
        rt.synchronize()
        del x, y

    result = record(tmp_path, rt, prog)
    assert kinds(result) == {DATA_RACE}
    (f,) = result.findings
    assert {f.access.stream.device, f.previous.stream.device} == {0, 1}
    assert f.access.stream.handle == f.previous.stream.handle == 0


def test_cross_device_wait_orders_the_default_streams(tmp_path, rt):
    def prog():
        x = torch.zeros(4096)
        rt.synchronize()
        x.add_(1.0)
        ev = 0xEE
        rt.mod.EventCreationCallbacks.fire_callbacks(ev)
        rt.mod.EventRecordCallbacks.fire_callbacks(ev, 0)  # on device 0's default stream
        with rt.use(0, device=1):
            rt.mod.EventWaitCallbacks.fire_callbacks(ev, 0)  # device 1's default stream waits
            y = x * 2
        rt.synchronize()
        del x, y

    assert record(tmp_path, rt, prog).findings == []


def test_device_synchronize_covers_only_the_current_device(tmp_path, rt):
    """``torch.cuda.synchronize()`` on device 0 says nothing about device 1's streams."""

    def prog():
        x = torch.zeros(4096)
        rt.synchronize()
        ev = 0xEF
        rt.mod.EventCreationCallbacks.fire_callbacks(ev)
        rt.mod.EventRecordCallbacks.fire_callbacks(ev, 0)
        with rt.use(0, device=1):
            rt.mod.EventWaitCallbacks.fire_callbacks(ev, 0)
            y = x * 2  # x (device 0's block) used on device 1's default stream
        rt.synchronize(devices=(0,))
        del x  # device 0's default stream never waited for device 1's use
        nxt = torch.empty(1 << 20)  # ... when it allocates again: it could get x's block
        rt.synchronize(devices=(1,))
        del y, nxt

    result = record(tmp_path, rt, prog)
    assert kinds(result) == {MISSING}
    (f,) = result.findings
    assert (f.access.stream.device, f.previous.stream.device) == (0, 1)
