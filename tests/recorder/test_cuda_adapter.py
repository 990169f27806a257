"""The CUDA adapter's hook wiring, driven without a GPU.

``torch.cuda._gpu_trace`` is replaced (in ``sys.modules``, where the C++ side looks it up
too) by a fresh copy of torch's own module, so the registries have torch's real shape;
the device/stream accessors the adapter reads are replaced by a small fake runtime.
Hooks are fired with ``<Registry>.fire_callbacks(...)`` exactly as ``CONCRETE_TRACE_GPU``
does it in C++.
"""

from __future__ import annotations

import importlib.util
import sys
import threading

import pytest
import torch

from npusan.recorder.backends import cuda as cuda_mod
from npusan.recorder.backends.base import CALLBACK_NAMES, GRAPH_CALLBACK_NAMES
from npusan.recorder.backends.cuda import CudaBackend

REGISTRIES = {
    "event_creation": "EventCreationCallbacks",
    "event_deletion": "EventDeletionCallbacks",
    "event_record": "EventRecordCallbacks",
    "event_wait": "EventWaitCallbacks",
    "memory_allocation": "MemoryAllocationCallbacks",
    "memory_deallocation": "MemoryDeallocationCallbacks",
    "stream_creation": "StreamCreationCallbacks",
    "device_synchronization": "DeviceSynchronizationCallbacks",
    "stream_synchronization": "StreamSynchronizationCallbacks",
    "event_synchronization": "EventSynchronizationCallbacks",
}


class CallLog:
    def __init__(self) -> None:
        self.calls = []

    def __getattr__(self, name):
        if name not in CALLBACK_NAMES:
            raise AttributeError(name)
        return lambda *args: self.calls.append((name, args))

    def of(self, name):
        return [a for n, a in self.calls if n == name]


class FakeRuntime:
    """Per-thread current device and per-(thread, device) current raw stream."""

    def __init__(self) -> None:
        self.tls = threading.local()
        self.activations = 0

    @property
    def device(self) -> int:
        return getattr(self.tls, "device", 0)

    @device.setter
    def device(self, d: int) -> None:
        self.tls.device = d

    def get_device(self) -> int:
        return self.device

    def get_raw_stream(self, device: int) -> int:
        return getattr(self.tls, "streams", {}).get(device, 0)

    def set_stream(self, device: int, handle: int) -> None:
        if not hasattr(self.tls, "streams"):
            self.tls.streams = {}
        self.tls.streams[device] = handle

    def activate(self) -> None:
        self.activations += 1


@pytest.fixture
def gpu_trace(monkeypatch):
    """A fresh ``torch.cuda._gpu_trace`` (torch's own source) plus a fake device runtime."""
    import torch.cuda._gpu_trace as real

    spec = importlib.util.spec_from_file_location("torch.cuda._gpu_trace", real.__file__)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setitem(sys.modules, "torch.cuda._gpu_trace", mod)
    rt = FakeRuntime()
    monkeypatch.setattr(torch._C, "_cuda_getDevice", rt.get_device, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", rt.get_raw_stream, raising=False)
    monkeypatch.setattr(torch._C, "_activate_gpu_trace", rt.activate, raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    return mod, rt


def fire(mod, hook, *args):
    getattr(mod, REGISTRIES[hook]).fire_callbacks(*args)


def test_not_available_on_this_cpu_build():
    assert CudaBackend.available() is (torch.cuda.is_available())


def test_torch_registry_shape_is_what_the_adapter_registers_with():
    import torch.cuda._gpu_trace as real

    assert set(cuda_mod.HOOK_NAMES) == set(REGISTRIES)
    for suffix in cuda_mod.HOOK_NAMES:
        assert callable(getattr(real, "register_callback_for_" + suffix))
        assert hasattr(getattr(real, REGISTRIES[suffix]), "fire_callbacks")


def test_install_registers_each_hook_once_and_activates(gpu_trace):
    mod, rt = gpu_trace
    b = CudaBackend()
    b.install(CallLog())
    assert rt.activations == 1
    for reg in REGISTRIES.values():
        assert len(getattr(mod, reg).callback_list) == 1
    b.uninstall()
    b2 = CudaBackend()
    log = CallLog()
    b2.install(log)  # tracing can't be switched off: reuse the registered forwarders
    for reg in REGISTRIES.values():
        assert len(getattr(mod, reg).callback_list) == 1
    fire(mod, "memory_deallocation", 0x100)
    assert log.of("on_free") == [(0x100,)]


def test_every_hook_is_forwarded_with_device_and_stream(gpu_trace):
    mod, rt = gpu_trace
    log = CallLog()
    b = CudaBackend()
    b.install(log)
    side = 0x7F00_0000_1000
    fire(mod, "stream_creation", side)
    assert log.of("on_stream_created") == [(side, 0)]

    fire(mod, "memory_allocation", 0x2000)  # on the default stream of device 0
    rt.set_stream(0, side)
    fire(mod, "memory_allocation", 0x3000)  # the allocator used the current stream
    assert log.of("on_alloc") == [(0x2000, 0, 0, None), (0x3000, side, 0, None)]

    fire(mod, "event_creation", 0xE1)
    fire(mod, "event_record", 0xE1, 0)
    fire(mod, "event_wait", 0xE1, side)
    fire(mod, "event_synchronization", 0xE1)
    fire(mod, "event_deletion", 0xE1)
    assert log.of("on_event_created") == [(0xE1,)]
    assert log.of("on_event_record") == [(0xE1, 0, 0)]
    assert log.of("on_event_wait") == [(0xE1, side, 0)]
    assert log.of("on_event_sync") == [(0xE1,)]
    assert log.of("on_event_deleted") == [(0xE1,)]

    fire(mod, "stream_synchronization", side)
    fire(mod, "device_synchronization")
    fire(mod, "memory_deallocation", 0x2000)
    assert log.of("on_stream_sync") == [(side, 0)]
    assert log.of("on_device_sync") == [(0,)]
    assert log.of("on_free") == [(0x2000,)]
    assert {n for n, _ in log.calls} == set(CALLBACK_NAMES) - {"on_record_stream", "on_erase_stream"} - set(
        GRAPH_CALLBACK_NAMES)


def test_default_stream_handle_zero_is_told_apart_by_device(gpu_trace):
    mod, rt = gpu_trace
    log = CallLog()
    CudaBackend().install(log)
    fire(mod, "event_record", 0xE1, 0)
    rt.device = 1  # the C++ caller holds a guard for the event's device
    fire(mod, "event_record", 0xE2, 0)
    fire(mod, "memory_allocation", 0x9000)
    fire(mod, "device_synchronization")
    assert log.of("on_event_record") == [(0xE1, 0, 0), (0xE2, 0, 1)]
    assert log.of("on_alloc") == [(0x9000, 0, 1, None)]
    assert log.of("on_device_sync") == [(1,)]


def test_pool_stream_keeps_the_device_it_was_created_on(gpu_trace):
    mod, rt = gpu_trace
    log = CallLog()
    CudaBackend().install(log)
    rt.device = 1
    fire(mod, "stream_creation", 0xABC000)
    rt.device = 0
    fire(mod, "event_wait", 0xE1, 0xABC000)
    fire(mod, "stream_synchronization", 0xABC000)
    assert log.of("on_stream_created") == [(0xABC000, 1)]
    assert log.of("on_event_wait") == [(0xE1, 0xABC000, 1)]
    assert log.of("on_stream_sync") == [(0xABC000, 1)]


def test_uninstall_makes_hooks_no_ops(gpu_trace):
    mod, rt = gpu_trace
    log = CallLog()
    b = CudaBackend()
    b.install(log)
    b.uninstall()
    for hook, reg in REGISTRIES.items():
        n = {"event_record": 2, "event_wait": 2, "device_synchronization": 0}.get(hook, 1)
        getattr(mod, reg).fire_callbacks(*range(1, n + 1))
    assert log.calls == []


def test_coexists_with_another_registered_tool(gpu_trace):
    """CSAN (or any tool) registered first keeps receiving every hook next to npusan."""
    mod, rt = gpu_trace
    theirs = []
    mod.register_callback_for_memory_allocation(lambda p: theirs.append(p))
    log = CallLog()
    CudaBackend().install(log)
    fire(mod, "memory_allocation", 0x4000)
    assert theirs == [0x4000]
    assert log.of("on_alloc") == [(0x4000, 0, 0, None)]


def test_recorder_errors_and_accessor_errors_are_swallowed(gpu_trace, caplog):
    mod, rt = gpu_trace

    class Exploding:
        def __getattr__(self, name):
            def boom(*a):
                raise RuntimeError("recorder bug")

            return boom

    b = CudaBackend()
    b.install(Exploding())
    b._hooks.get_device = lambda: 1 / 0
    with caplog.at_level("ERROR"):
        for hook, reg in REGISTRIES.items():
            n = {"event_record": 2, "event_wait": 2, "device_synchronization": 0}.get(hook, 1)
            getattr(mod, reg).fire_callbacks(*range(1, n + 1))
    assert "Exception in callback" not in caplog.text


def test_current_stream_and_device_use_the_raw_accessors(gpu_trace):
    mod, rt = gpu_trace
    b = CudaBackend()
    rt.device = 1
    rt.set_stream(1, 0x5150)
    assert b.current_device() == 1
    assert b.current_stream(1) == 0x5150
    assert b.current_stream(0) == 0
    assert b.default_streams() == {0: 0, 1: 0}
    assert b.device_count() == 2


def test_stream_key_of_cuda_stream_and_plain_torch_stream(gpu_trace, monkeypatch):
    mod, rt = gpu_trace
    b = CudaBackend()

    class CudaStreamLike:  # torch.cuda.Stream: has cuda_stream
        device_index, stream_id, device_type, cuda_stream = 1, 35, 1, 0xBEEF

    made = []

    class FakeCudaStream:
        def __init__(self, stream_id, device_index, device_type):
            made.append((stream_id, device_index, device_type))
            self.cuda_stream = 0xF00D + stream_id

    monkeypatch.setattr(torch.cuda, "Stream", FakeCudaStream)

    class TorchStreamLike:  # torch.Stream, what aten.record_stream's stream arrives as
        device_index, stream_id, device_type = 0, 19, 1

    assert b.stream_key(CudaStreamLike()) == (1, 0xBEEF)
    assert b.stream_key(TorchStreamLike()) == (0, 0xF00D + 19)
    assert b.stream_key(TorchStreamLike()) == (0, 0xF00D + 19)
    assert made == [(19, 0, 1)]  # rebuilt once, then cached


def test_device_tensor_tests():
    b = object.__new__(CudaBackend)
    assert not b.is_device_tensor(torch.zeros(2))
