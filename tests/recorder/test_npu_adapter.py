"""The NPU adapter driven through the stand-in torch_npu: hook wiring, stream ids, quirks."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import warnings

import pytest

from npusan.recorder.backends import npu as npu_mod
from npusan.recorder.backends.base import CALLBACK_NAMES, RecorderCallbacks
from npusan.recorder.backends.npu import NpuBackend

from .fake_torch_npu.loader import fake_torch_npu  # noqa: F401  (fixture)


class CallLog:
    """A RecorderCallbacks that logs every call as (name, args)."""

    def __init__(self) -> None:
        self.calls = []
        self._lock = threading.Lock()

    def __getattr__(self, name):
        if name not in CALLBACK_NAMES:
            raise AttributeError(name)

        def cb(*args):
            with self._lock:
                self.calls.append((name, args))

        return cb

    def of(self, name):
        return [a for n, a in self.calls if n == name]


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(npu_mod, "_warned", set())


@pytest.fixture
def installed(fake_torch_npu):
    backend = NpuBackend()
    log = CallLog()
    backend.install(log)
    yield fake_torch_npu, backend, log
    backend.uninstall()
    assert fake_torch_npu._fake.state.drains == 0, "a queue-draining accessor was called"


def test_module_import_does_not_import_torch_npu():
    """Even with torch_npu importable, importing the adapter (or the backends) leaves it alone."""
    from .fake_torch_npu import loader

    code = (
        "import sys, importlib.util; assert importlib.util.find_spec('torch_npu');"
        "import npusan.recorder.backends.npu, npusan.recorder.backends;"
        "assert 'torch_npu' not in sys.modules, 'imported torch_npu'"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(loader.ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_available_only_with_torch_npu(fake_torch_npu):
    assert NpuBackend.available()
    fake_torch_npu._fake.state.device_count = 0
    assert not NpuBackend.available()


def test_not_available_without_torch_npu():
    assert "torch_npu" not in sys.modules
    assert NpuBackend.available() is False


def test_install_registers_every_hook_with_a_name_and_activates_stream_mode(fake_torch_npu):
    trace = fake_torch_npu.utils._npu_trace
    NpuBackend().install(CallLog())
    assert fake_torch_npu._fake.state.activate_calls == [0]
    for hook in npu_mod.HOOK_NAMES:
        reg = getattr(trace, "NPU" + "".join(w.capitalize() for w in hook.split("_")) + "Callbacks")
        assert len(reg.callback_list) == 1, hook
        cb, cb_name = reg.callback_list[0]
        assert callable(cb) and isinstance(cb_name, str) and cb_name


def test_second_install_reuses_registered_hooks_and_retargets(fake_torch_npu):
    trace = fake_torch_npu.utils._npu_trace
    first, second = CallLog(), CallLog()
    b1 = NpuBackend()
    b1.install(first)
    b1.uninstall()
    b2 = NpuBackend()
    b2.install(second)
    assert len(trace.NPUMemoryAllocationCallbacks.callback_list) == 1
    fake_torch_npu._fake.alloc(ptr=0x5000)
    assert first.calls == []
    assert second.of("on_alloc") == [(0x5000, 0xA000_0000, 0, None)]


def test_uninstalled_hooks_do_nothing(installed):
    npu, backend, log = installed
    backend.uninstall()
    npu._fake.alloc()
    npu.npu.Stream()
    npu.npu.synchronize()
    assert log.calls == []


def test_hooks_forward_with_raw_handles_and_devices(installed):
    npu, backend, log = installed
    fake, rt = npu._fake, npu.npu
    default_raw = fake.state.raw[(0, 0)]
    assert default_raw != 0  # aclrtStream of the default stream is a real pointer

    s1 = rt.Stream()
    s1_raw = fake.state.raw[(0, s1.stream_id)]
    assert log.of("on_stream_created") == [(s1_raw, 0)]

    ptr = fake.alloc(256)
    assert log.of("on_alloc") == [(ptr, default_raw, 0, None)]
    with rt.stream(s1):
        p2 = fake.alloc(256)
    assert log.of("on_alloc")[1] == (p2, s1_raw, 0, None)

    s1.wait_stream(rt.default_stream())
    (ev,) = log.of("on_event_created")
    ev = ev[0]
    assert log.of("on_event_record") == [(ev, default_raw, 0)]
    assert log.of("on_event_wait") == [(ev, s1_raw, 0)]
    assert log.of("on_event_deleted") == [(ev,)]

    fake.record_stream(ptr, s1)
    fake.erase_stream(ptr, s1)
    assert log.of("on_record_stream") == [(ptr, s1_raw, 0)]
    assert log.of("on_erase_stream") == [(ptr, s1_raw, 0)]

    e2 = rt.Event()
    e2.record(s1)
    e2.synchronize()
    assert log.of("on_event_sync") == [(e2.handle,)]
    s1.synchronize()
    assert log.of("on_stream_sync") == [(s1_raw, 0)]
    rt.synchronize()
    assert log.of("on_device_sync") == [(0,)]
    fake.free(ptr)
    assert log.of("on_free") == [(ptr,)]


def test_streams_on_second_device_carry_that_device(installed):
    npu, backend, log = installed
    fake, rt = npu._fake, npu.npu
    s = rt.Stream(device=1)
    raw = fake.state.raw[(1, s.stream_id)]
    assert log.of("on_stream_created") == [(raw, 1)]
    # A later hook about that stream fired while device 0 is current still says device 1.
    fake.fire("NPUStreamSynchronizationCallbacks", raw)
    assert log.of("on_stream_sync") == [(raw, 1)]
    rt.set_device(1)
    p = fake.alloc()
    assert log.of("on_alloc") == [(p, fake.state.raw[(1, 0)], 1, None)]


def test_double_event_deletion_is_reported_once(installed):
    npu, backend, log = installed
    rt = npu.npu
    rt.Event.double_delete = True
    try:
        s1 = rt.Stream()
        for _ in range(3):
            s1.wait_stream(rt.default_stream())
    finally:
        rt.Event.double_delete = False
    created = [a[0] for a in log.of("on_event_created")]
    deleted = [a[0] for a in log.of("on_event_deleted")]
    assert len(created) == 3 and deleted == created
    assert backend.duplicate_event_deletions == 3


def test_reused_event_id_is_deleted_again(installed):
    npu, backend, log = installed
    fake = npu._fake
    fake.fire("NPUEventCreationCallbacks", 0x77)
    fake.fire("NPUEventDeletionCallbacks", 0x77)
    fake.fire("NPUEventCreationCallbacks", 0x77)  # the runtime handed the id out again
    fake.fire("NPUEventDeletionCallbacks", 0x77)
    assert log.of("on_event_deleted") == [(0x77,), (0x77,)]


def test_callbacks_from_worker_threads(installed):
    npu, backend, log = installed
    fake, rt = npu._fake, npu.npu
    s1 = rt.Stream()
    s1_raw = fake.state.raw[(0, s1.stream_id)]
    ptrs = []
    errors = []

    def worker(i):
        try:
            for _ in range(50):
                with rt.stream(s1):
                    ptrs.append(fake.alloc(64))
                e = rt.Event()
                e.record(s1)
                e.wait(rt.default_stream())
                e.destroy()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    allocs = log.of("on_alloc")
    assert len(allocs) == 200
    # Each worker's current stream is its own: every block was handed out on s1.
    assert {a[1] for a in allocs} == {s1_raw}
    assert len(log.of("on_event_record")) == 200
    assert len(log.of("on_event_deleted")) == 200


def test_current_stream_never_drains(installed):
    npu, backend, log = installed
    rt = npu.npu
    s1 = rt.Stream()
    with rt.stream(s1):
        assert backend.current_stream(0) == npu._fake.state.raw[(0, s1.stream_id)]
    assert backend.current_stream(0) == npu._fake.state.raw[(0, 0)]
    assert backend.current_device() == 0


def test_stream_key_reads_handles_without_draining(installed):
    npu, backend, log = installed
    fake, rt = npu._fake, npu.npu
    s1 = rt.Stream()
    s2 = rt.Stream(device=1)
    assert backend.stream_key(s1) == (0, fake.state.raw[(0, s1.stream_id)])
    assert backend.stream_key(s2) == (1, fake.state.raw[(1, s2.stream_id)])
    # Reading another stream's handle left the current device and streams untouched.
    assert fake.state.device == 0
    assert fake.state.current_id(0) == 0 and fake.state.current_id(1) == 0
    with rt.stream(s1):
        assert backend.stream_key(rt.default_stream()) == (0, fake.state.raw[(0, 0)])
        assert fake.state.current_id(0) == s1.stream_id


def test_stream_key_accepts_plain_torch_stream_shape(installed):
    """aten.record_stream hands the dispatch mode a torch.Stream: id, device index, type."""
    npu, backend, log = installed

    class TorchStream:
        def __init__(self, stream_id, device_index, device_type):
            self.stream_id, self.device_index, self.device_type = stream_id, device_index, device_type

    s1 = npu.npu.Stream()
    assert backend.stream_key(TorchStream(s1.stream_id, 0, 20)) == (0, npu._fake.state.raw[(0, s1.stream_id)])


def test_default_streams_current_device_only(installed):
    npu, backend, log = installed
    assert backend.default_streams() == {0: npu._fake.state.raw[(0, 0)]}
    assert backend.device_count() == 2


def test_is_device_tensor():
    import torch

    class NpuTensorLike:
        is_cpu = False
        is_meta = False

    b = object.__new__(NpuBackend)
    assert b.is_device_tensor(NpuTensorLike())
    assert not b.is_device_tensor(torch.zeros(1))
    assert not b.is_device_tensor(torch.zeros(1, device="meta"))


def test_backend_satisfies_recorder_protocol_names():
    assert isinstance(CallLog(), RecorderCallbacks)
    assert set(CALLBACK_NAMES) >= {"on_record_stream", "on_erase_stream"}
    assert NpuBackend.native_record_stream is True


def test_recorder_errors_never_reach_the_runtime(installed, caplog):
    npu, backend, log = installed

    class Exploding:
        def __getattr__(self, name):
            def boom(*a):
                raise RuntimeError("recorder bug")

            return boom

    backend.install(Exploding())
    with caplog.at_level("ERROR"):
        npu._fake.alloc()
        npu.npu.Stream().wait_stream(npu.npu.default_stream())
    assert "Exception in callback" not in caplog.text


def test_coexists_with_torch_npu_sanitizer_stream_mode(monkeypatch):
    from .fake_torch_npu import loader

    monkeypatch.setenv("TORCH_NPU_SANITIZER", "1")
    monkeypatch.delenv("ASCEND_OPP_DEBUG_PATH", raising=False)
    npu = loader.load()
    try:
        from torch_npu.npu import (
            _sanitizer,  # enabled by torch_npu's import, as the real one
        )

        assert _sanitizer.npu_sanitizer.enabled
        theirs = _sanitizer.npu_sanitizer.event_handler
        trace = npu.utils._npu_trace
        their_cbs = list(trace.NPUMemoryAllocationCallbacks.callback_list)
        assert npu._fake.state.activate_calls == [0]

        backend, log = NpuBackend(), CallLog()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            NpuBackend().install(CallLog())
            backend.install(log)  # a second install (new recorder) does not warn again
        assert sum("TORCH_NPU_SANITIZER" in str(x.message) for x in w) == 1
        assert backend.coexisting_with == "TORCH_NPU_SANITIZER"
        # We never re-activated the trace and never removed or reordered their callbacks.
        assert npu._fake.state.activate_calls == [0]
        assert trace.NPUMemoryAllocationCallbacks.callback_list[: len(their_cbs)] == their_cbs

        s1 = npu.npu.Stream()
        p = npu._fake.alloc()
        npu._fake.record_stream(p, s1)
        assert [n for n, _ in theirs.seen] == ["stream_creation", "memory_allocation", "record_stream"]
        assert len(log.of("on_stream_created")) == 1
        assert len(log.of("on_alloc")) == 1
        assert len(log.of("on_record_stream")) == 1
        assert npu._fake.state.drains == 0
    finally:
        loader.unload()


def test_torch_npu_sanitizer_in_kernel_mode_warns_that_stream_hooks_are_dead(monkeypatch, tmp_path):
    from .fake_torch_npu import loader

    monkeypatch.setenv("TORCH_NPU_SANITIZER", "1")
    monkeypatch.setenv("ASCEND_OPP_DEBUG_PATH", str(tmp_path))
    npu = loader.load()
    try:
        from torch_npu.npu import (
            _sanitizer,  # enabled by torch_npu's import, as the real one
        )

        assert _sanitizer.npu_sanitizer.enabled
        backend, log = NpuBackend(), CallLog()
        with pytest.warns(RuntimeWarning, match="kernel mode"):
            backend.install(log)
        npu._fake.alloc()
        assert log.calls == []  # kernel mode: the runtime never fires stream hooks
        assert npu._fake.state.activate_calls == [1]
    finally:
        loader.unload()


def test_old_torch_npu_without_record_stream_hooks_still_installs(fake_torch_npu, monkeypatch):
    trace = fake_torch_npu.utils._npu_trace
    monkeypatch.delattr(trace, "register_callback_for_npu_record_stream")
    monkeypatch.delattr(trace, "register_callback_for_npu_erase_stream")
    log = CallLog()
    with pytest.warns(RuntimeWarning, match="record_stream, erase_stream"):
        NpuBackend().install(log)
    p = fake_torch_npu._fake.alloc()
    assert log.of("on_alloc")[0][0] == p


def test_npu_graph_capture_and_replay_reach_the_graph_callbacks(fake_torch_npu):
    """NPUGraph's capture_begin/capture_end/replay are wrapped: the recorder hears of each
    (graph id, current stream), and the graph still does what it did."""
    log = CallLog()
    b = NpuBackend()
    b.install(log)
    npu = fake_torch_npu.npu
    g = npu.NPUGraph()
    side = npu.Stream()
    with npu.stream(side):
        g.capture_begin()
        g.capture_end()
    raw = b.stream_key(side)[1]
    g.replay()
    g.replay()
    assert g.state == "captured" and g.replays == 2
    assert log.of("on_graph_begin") == [(id(g), raw, 0)]
    assert log.of("on_graph_end") == [(id(g),)]
    default = b.current_stream(0)
    assert log.of("on_graph_launch") == [(id(g), default, 0)] * 2
    b.uninstall()
    g.replay()  # uninstalled: the wrapper forwards to nothing
    assert len(log.of("on_graph_launch")) == 2 and g.replays == 3
