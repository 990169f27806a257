"""The CUDA adapter against real CUDA hooks: which arguments each hook really carries.

These pin down the assumptions ``npusan.recorder.backends.cuda`` is built on (raw
``cudaEvent_t`` / ``cudaStream_t`` ints, the allocation pointer being the tensor's
``data_ptr()``, the device read from the calling thread). Skipped without CUDA.
"""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


class CallLog:
    def __init__(self) -> None:
        self.calls = []
        self.lock = threading.Lock()

    def __getattr__(self, name):
        if not name.startswith("on_"):
            raise AttributeError(name)

        def cb(*args):
            with self.lock:
                self.calls.append((name, args))

        return cb

    def of(self, name):
        return [a for n, a in self.calls if n == name]


@pytest.fixture
def hooked():
    from npusan.recorder.backends.cuda import CudaBackend

    torch.ones(1, device="cuda").sum().item()
    torch.cuda.synchronize()
    backend = CudaBackend()
    log = CallLog()
    backend.install(log)
    try:
        yield backend, log
    finally:
        backend.uninstall()


def test_available_on_a_cuda_machine():
    from npusan.recorder.backends.cuda import CudaBackend

    assert CudaBackend.available()


def test_event_stream_and_sync_hooks_carry_raw_handles(hooked):
    backend, log = hooked
    s = torch.cuda.Stream()
    ev = torch.cuda.Event()
    ev.record(s)
    torch.cuda.current_stream().wait_event(ev)
    ev.synchronize()
    s.synchronize()
    torch.cuda.synchronize()
    h = ev.cuda_event
    assert (h,) in log.of("on_event_created")
    assert (h, s.cuda_stream, 0) in log.of("on_event_record")
    assert (h, 0, 0) in log.of("on_event_wait")  # the default stream is handle 0
    assert (h,) in log.of("on_event_sync")
    assert (s.cuda_stream, 0) in log.of("on_stream_sync")
    assert (0,) in log.of("on_device_sync")
    del ev
    assert (h,) in log.of("on_event_deleted")


def test_allocation_hook_pointer_and_current_stream(hooked):
    backend, log = hooked
    s = torch.cuda.Stream()
    x = torch.empty(1 << 20, device="cuda")
    with torch.cuda.stream(s):
        y = torch.empty(1 << 20, device="cuda")
    px, py = x.data_ptr(), y.data_ptr()
    assert (px, 0, 0, None) in log.of("on_alloc")
    assert (py, s.cuda_stream, 0, None) in log.of("on_alloc")
    del x, y
    assert (px,) in log.of("on_free") and (py,) in log.of("on_free")


def test_wait_stream_is_event_create_record_wait(hooked):
    backend, log = hooked
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    (ev,) = [a[0] for a in log.of("on_event_record") if a[1:] == (0, 0)]
    assert (ev, s.cuda_stream, 0) in log.of("on_event_wait")


def test_current_stream_and_stream_key(hooked):
    backend, log = hooked
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        assert backend.current_stream(0) == s.cuda_stream
    assert backend.current_stream(0) == 0
    assert backend.current_device() == torch.cuda.current_device()
    assert backend.stream_key(s) == (0, s.cuda_stream)
    plain = torch.Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)
    assert backend.stream_key(plain) == (0, s.cuda_stream)
    assert backend.default_streams()[0] == 0
    assert backend.is_device_tensor(torch.empty(1, device="cuda"))
    assert not backend.is_device_tensor(torch.empty(1))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_second_device_default_stream_is_told_apart(hooked):
    backend, log = hooked
    with torch.cuda.device(1):
        x = torch.empty(1024, device="cuda")
        ev = torch.cuda.Event()
        ev.record()
    assert (x.data_ptr(), 0, 1, None) in log.of("on_alloc")
    assert (ev.cuda_event, 0, 1) in log.of("on_event_record")
    torch.cuda.synchronize(1)
    assert (1,) in log.of("on_device_sync")
