"""End to end through the NPU adapter: real PyTorch ops, stand-in torch_npu streams.

The stand-in ``torch_npu`` cannot make NPU tensors, so CPU tensors play them: the backend
under test is :class:`NpuBackend` with only two things changed -- CPU tensors count as
device tensors, and their storages are handed out through the stand-in allocator, which
fires ``NPUMemoryAllocationCallbacks`` / ``NPUMemoryDeallocationCallbacks`` the way
NPUCachingAllocator does. Everything else -- hook registration, stream ids read without
draining, event/stream hooks, native record_stream/erase_stream -- is the adapter's own
code path into the real recorder, then the trace is analyzed.
"""

from __future__ import annotations

import threading
import weakref

import pytest
import torch

import npusan
from npusan.analyzer.replay.traces import analyze_traces
from npusan.recorder.backends import npu as npu_mod
from npusan.recorder.backends.npu import NpuBackend
from npusan.trace_format import records as R
from npusan.trace_format.reader import TraceReader

from .fake_torch_npu.loader import fake_torch_npu  # noqa: F401  (fixture)

MISSING = "missing-record-stream"
DATA_RACE = "data-race"


class CpuAsNpu(NpuBackend):
    """NpuBackend whose "device memory" is CPU storages allocated through the stand-in."""

    observes_outputs = True

    def __init__(self) -> None:
        super().__init__()
        self._live = {}

    def is_device_tensor(self, t) -> bool:
        return t.is_cpu

    def tensor_device(self, t) -> int:
        return 0

    def observe_output(self, t) -> None:
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if not ptr:
            return
        ref = self._live.get(ptr)
        if ref is not None and ref() is st:
            return
        fake, live = self._npu._fake, self._live

        def freed(r, ptr=ptr):
            if live.get(ptr) is r:
                del live[ptr]
                fake.free(ptr)

        live[ptr] = weakref.ref(st, freed)
        fake.alloc(ptr=ptr)

    def uninstall(self) -> None:
        super().uninstall()
        self._live.clear()  # no late frees from storages that outlive the recording


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(npu_mod, "_warned", set())


def record(tmp_path, prog, backend=None):
    path = tmp_path / "npu.npusan"
    backend = backend or CpuAsNpu()
    with npusan.record(str(path), backend=backend):
        prog()
    assert backend._npu._fake.state.drains == 0, "a queue-draining stream accessor was used"
    return path, analyze_traces([str(path)])


def kinds(result):
    return {f.kind.value for f in result.findings}


def trace_records(path, rtype):
    with TraceReader(str(path)) as r:
        return [rec for rec in r.records() if rec[0] == rtype]


def seed_example(npu, *, fix=None):
    """The seed's worked example on NPU streams; ``fix`` is called with (x, s1) before the free."""
    rt = npu.npu

    def prog():
        x = torch.empty(4096)
        x.fill_(1.0)  # kernel on the default stream (seq 1)
        s1 = rt.Stream()
        s1.wait_stream(rt.current_stream())
        with rt.stream(s1):
            y = x + 1  # x used on stream1
        if fix is not None:
            fix(x, s1)
        del x  # freed; default never waited for stream1
        nxt = torch.empty(1 << 20)  # the default stream's next allocation: it could get x's block
        rt.synchronize()
        del y, nxt

    return prog


def test_seed_worked_example_reports_missing_record_stream(tmp_path, fake_torch_npu):
    path, result = record(tmp_path, seed_example(fake_torch_npu))
    assert kinds(result) == {MISSING}
    (f,) = result.findings
    raw = fake_torch_npu._fake.state.raw
    assert f.previous.stream.handle != raw[(0, 0)]  # the use was on stream1 ...
    assert f.access.stream.handle == raw[(0, 0)]  # ... the free on the default stream
    with TraceReader(str(path)) as r:
        assert r.header["backend"] == "npu"


def test_native_record_stream_hook_is_honoured(tmp_path, fake_torch_npu):
    fake = fake_torch_npu._fake

    def fix(x, s1):
        fake.record_stream(x.untyped_storage().data_ptr(), s1)

    path, result = record(tmp_path, seed_example(fake_torch_npu, fix=fix))
    assert result.findings == []
    assert len(trace_records(path, R.RECORD_STREAM)) == 1


def test_erase_stream_hook_undoes_record_stream(tmp_path, fake_torch_npu):
    fake = fake_torch_npu._fake

    def fix(x, s1):
        ptr = x.untyped_storage().data_ptr()
        fake.record_stream(ptr, s1)
        fake.erase_stream(ptr, s1)  # HCCL work done with the stream: the allocator forgets it

    path, result = record(tmp_path, seed_example(fake_torch_npu, fix=fix))
    assert kinds(result) == {MISSING}
    assert len(trace_records(path, R.ERASE_STREAM)) == 1


def test_record_stream_seen_by_both_paths_is_not_double_counted(tmp_path, fake_torch_npu):
    """``x.record_stream(s)`` reaches the dispatch mode AND fires the native hook.

    The dispatch mode leaves ``aten.record_stream`` to the native hook on NPU
    (``native_record_stream``), so the trace holds exactly one record, and a later
    erase_stream still removes the stream.
    """
    import npusan.sim  # noqa: F401  (registers a CPU kernel for aten::record_stream)

    fake = fake_torch_npu._fake

    def fix(x, s1):
        ptr = x.untyped_storage().data_ptr()
        x.record_stream(torch.Stream(stream_id=s1.stream_id, device_index=0, device_type=0))
        fake.record_stream(ptr, s1)

    path, result = record(tmp_path, seed_example(fake_torch_npu, fix=fix))
    assert result.findings == []
    recs = trace_records(path, R.RECORD_STREAM)
    assert len(recs) == 1

    def fix_then_erase(x, s1):
        fix(x, s1)
        fake.erase_stream(x.untyped_storage().data_ptr(), s1)

    _, result = record(tmp_path, seed_example(fake_torch_npu, fix=fix_then_erase))
    assert kinds(result) == {MISSING}


def test_dispatch_mode_leaves_record_stream_to_the_native_hook(tmp_path, fake_torch_npu):
    """The aten op alone (the stand-in's CPU kernel fires no hook) is not recorded on NPU."""
    import npusan.sim  # noqa: F401  (registers a CPU kernel for aten::record_stream)

    def fix(x, s1):
        x.record_stream(torch.Stream(stream_id=s1.stream_id, device_index=0, device_type=0))

    path, result = record(tmp_path, seed_example(fake_torch_npu, fix=fix))
    assert trace_records(path, R.RECORD_STREAM) == []
    assert kinds(result) == {MISSING}  # what the native hook did not report is not assumed


def test_creation_stream_waiting_for_usage_needs_no_record_stream(tmp_path, fake_torch_npu):
    rt = fake_torch_npu.npu

    def fix(x, s1):
        rt.current_stream().wait_stream(s1)

    _, result = record(tmp_path, seed_example(fake_torch_npu, fix=fix))
    assert result.findings == []


def test_double_event_deletion_changes_nothing(tmp_path, fake_torch_npu):
    rt = fake_torch_npu.npu
    rt.Event.double_delete = True
    try:
        path, result = record(tmp_path, seed_example(fake_torch_npu))
    finally:
        rt.Event.double_delete = False
    assert kinds(result) == {MISSING}
    created = trace_records(path, R.EVENT_CREATED)
    deleted = trace_records(path, R.EVENT_DELETED)
    assert len(created) == 1 and [d[1] for d in deleted] == [created[0][1]]


def test_data_race_between_worker_threads_on_two_streams(tmp_path, fake_torch_npu):
    rt = fake_torch_npu.npu

    def prog():
        x = torch.zeros(4096)
        rt.synchronize()
        streams = [rt.Stream(), rt.Stream()]

        def worker(s):
            with rt.stream(s):
                x.add_(1.0)

        threads = [threading.Thread(target=worker, args=(s,)) for s in streams]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rt.synchronize()

    _, result = record(tmp_path, prog)
    assert kinds(result) == {DATA_RACE}
    (f,) = result.findings
    assert f.access.stream.handle != f.previous.stream.handle


def test_hooks_fired_from_a_runtime_worker_thread(tmp_path, fake_torch_npu):
    """The event record/wait of a wait_stream reported from a task-queue worker thread."""
    rt = fake_torch_npu.npu

    def prog():
        x = torch.empty(4096)
        x.fill_(1.0)
        s1 = rt.Stream()
        t = threading.Thread(target=lambda: s1.wait_stream(rt.default_stream()))
        t.start()
        t.join()
        with rt.stream(s1):
            y = x * 2  # ordered after the fill by the wait fired from the worker thread
        rt.current_stream().wait_stream(s1)
        del x
        rt.synchronize()
        del y

    _, result = record(tmp_path, prog)
    assert result.findings == []


def test_coexists_with_torch_npu_sanitizer(tmp_path, monkeypatch):
    from .fake_torch_npu import loader

    monkeypatch.setenv("TORCH_NPU_SANITIZER", "1")
    monkeypatch.delenv("ASCEND_OPP_DEBUG_PATH", raising=False)
    npu = loader.load()
    try:
        from torch_npu.npu import _sanitizer

        with pytest.warns(RuntimeWarning, match="TORCH_NPU_SANITIZER"):
            _, result = record(tmp_path, seed_example(npu))
        assert kinds(result) == {MISSING}
        seen = {name for name, _ in _sanitizer.npu_sanitizer.event_handler.seen}
        assert {"memory_allocation", "memory_deallocation", "event_record", "event_wait"} <= seen
        assert npu._fake.state.activate_calls == [0]
    finally:
        loader.unload()


@pytest.mark.parametrize("what", ["event", "stream"])
def test_a_query_answering_true_is_the_synchronize_false_records_nothing(tmp_path, fake_torch_npu, monkeypatch, what):
    """torch_npu fires no hook for ``query()``: the adapter wraps it; True orders the host
    after the work (the free after it is safe), False records nothing."""
    rt = fake_torch_npu.npu

    def fix(x, s1):
        if what == "event":
            assert s1.record_event().query() is answer
        else:
            assert s1.query() is answer

    for answer, expected in ((True, set()), (False, {MISSING})):
        monkeypatch.setattr(rt.Event, "query_answer", answer)
        path, result = record(tmp_path, seed_example(fake_torch_npu, fix=fix))
        assert kinds(result) == expected
        syncs = trace_records(path, R.EVENT_SYNC if what == "event" else R.STREAM_SYNC)
        assert len(syncs) == (1 if answer else 0)
