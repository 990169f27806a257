"""A free without record_stream is judged when its block could first be handed out.

The caching allocator gives a freed block only to a later allocation on the block's own
stream, so a free whose unrecorded use by another stream is not yet ordered before that
stream is pending: a missing record_stream only if, at the stream's next allocation (or at
the end of the trace), the stream has still not waited for the use (docs/semantics.md).
Every test runs against both engines, fed record by record (as online mode feeds them).
"""

from __future__ import annotations

import pytest

from npusan.analyzer.findings.model import Kind
from npusan.analyzer.replay import native, online

from ..engine_prog import Prog

pytestmark = pytest.mark.usefixtures("engine")

DEFAULT, SIDE, OTHER = 0, 0x51, 0x52
X, Y, Z, NEXT = 0x7000, 0x8000, 0x9000, 0xA000


def start(on_finding=None, check_leaks: bool = False) -> Prog:
    """The seed's worked example up to the free: x on the default stream, written there,
    read on stream1 after stream1.wait_stream(default)."""
    p = Prog(header={"default_streams": {0: DEFAULT}}, on_finding=on_finding, check_leaks=check_leaks)
    p.stream_created(DEFAULT)
    p.stream_created(SIDE)
    p.memory_allocated(X, DEFAULT, size=512)
    p.write(DEFAULT, X, op="aten::randn")
    p.wait_stream(SIDE, DEFAULT, event=1)
    p.read(SIDE, X, op="aten::add", stack="use")
    return p


def test_seed_example_then_an_allocation_on_the_free_stream_is_reported_at_that_allocation():
    seen = []
    p = start(on_finding=seen.append)
    p.memory_freed(X, stack=p.enc.stack([("prog.py", 9, "free")]))
    assert seen == []  # pending: nothing could reuse the block yet
    p.memory_allocated(NEXT, DEFAULT, size=512)
    assert [f.kind for f in seen] == [Kind.MISSING_RECORD_STREAM]
    (f,) = p.findings()
    # reported as at the free: the free's stack and the use's, the freed block
    assert f.access.op == "free" and [fr.function for fr in f.access.stack] == ["free"]
    assert f.previous.op == "aten::add" and f.previous.stream.handle == SIDE
    assert [fr.function for fr in f.previous.stack] == ["use"]
    assert f.block.address == X and f.block.size == 512 and f.block.stream.handle == DEFAULT
    assert f.first_seq == f.last_seq == 2 and f.count == 1


def test_seed_example_ending_at_the_free_is_reported_at_the_end_of_the_trace():
    p = start()
    p.memory_freed(X)
    assert [f.kind for f in p.findings()] == [Kind.MISSING_RECORD_STREAM]


def test_fsdp2_shape_is_clean():
    """FSDP2: the reduce-scatter output, allocated on the reduce-scatter stream and read by
    the optimizer on the default stream, freed by zero_grad() without record_stream; the
    next step's reduce-scatter stream waits for the default stream before it allocates."""
    p = Prog(header={"default_streams": {0: DEFAULT}})
    p.stream_created(DEFAULT)
    p.stream_created(SIDE)
    for step in range(3):
        grad = X + step * 0x1000
        p.wait_stream(SIDE, DEFAULT, event=10 + step)  # reduce_scatter_stream.wait_stream(current)
        p.memory_allocated(grad, SIDE, size=512)
        p.write(SIDE, grad, op="reduce_scatter_tensor")
        p.wait_stream(DEFAULT, SIDE, event=20 + step)  # the default stream waits for the reduce-scatter
        p.read(DEFAULT, grad, op="aten::addcmul_")  # the optimizer
        p.memory_freed(grad)  # zero_grad(): no record_stream
    p.device_synchronized()  # the program ends with a synchronize (or a loss.item())
    assert p.findings() == []


def test_the_last_step_of_fsdp2_without_a_synchronize_is_judged_at_the_end():
    p = Prog(header={"default_streams": {0: DEFAULT}})
    p.stream_created(DEFAULT)
    p.stream_created(SIDE)
    for step in range(3):
        grad = X + step * 0x1000
        p.wait_stream(SIDE, DEFAULT, event=10 + step)
        p.memory_allocated(grad, SIDE, size=512)
        p.write(SIDE, grad, op="reduce_scatter_tensor")
        p.wait_stream(DEFAULT, SIDE, event=20 + step)
        p.read(DEFAULT, grad, op="aten::addcmul_")
        p.memory_freed(grad)
    (f,) = p.findings()  # the last free only: the earlier ones were waited for
    assert f.kind is Kind.MISSING_RECORD_STREAM and f.count == 1 and f.addresses == [X + 0x2000]


def test_a_wait_after_the_free_and_before_the_next_allocation_is_clean():
    p = start()
    p.memory_freed(X)
    p.wait_stream(DEFAULT, SIDE, event=2)
    p.memory_allocated(NEXT, DEFAULT, size=512)
    p.write(DEFAULT, NEXT)
    assert p.findings() == []


@pytest.mark.parametrize("sync", ["device", "stream", "event"])
def test_a_host_synchronization_after_the_free_is_clean(sync):
    p = start()
    p.memory_freed(X)
    if sync == "device":
        p.device_synchronized()
    elif sync == "stream":
        p.stream_synchronized(SIDE)
    else:
        p.event_created(5)
        p.event_recorded(5, SIDE)
        p.event_synchronized(5)
    p.memory_allocated(NEXT, DEFAULT, size=512)
    assert p.findings() == []


def test_an_allocation_on_another_stream_leaves_the_free_pending():
    seen = []
    p = start(on_finding=seen.append)
    p.memory_freed(X)
    p.stream_created(OTHER)
    p.memory_allocated(NEXT, OTHER, size=512)  # another stream's pool: cannot get x's block
    p.memory_allocated(NEXT + 0x1000, SIDE, size=512)
    assert seen == []
    p.wait_stream(DEFAULT, SIDE, event=2)  # still pending: the wait counts
    p.memory_allocated(NEXT + 0x2000, DEFAULT, size=512)
    assert p.findings() == []


def test_an_allocation_on_the_same_handle_of_another_device_leaves_the_free_pending():
    seen = []
    p = start(on_finding=seen.append)
    p.memory_freed(X)
    p.memory_allocated(NEXT, DEFAULT, size=512, device=1)  # device 1's default stream
    assert seen == []
    p.memory_allocated(NEXT + 0x1000, DEFAULT, size=512)
    assert [f.kind for f in seen] == [Kind.MISSING_RECORD_STREAM]


def test_several_pending_frees_are_each_judged_at_the_next_allocation():
    p = Prog(header={"default_streams": {0: DEFAULT}})
    for s in (DEFAULT, SIDE, OTHER):
        p.stream_created(s)
    for ptr in (X, Y, Z):
        p.memory_allocated(ptr, DEFAULT, size=512)
        p.write(DEFAULT, ptr)
    p.wait_stream(SIDE, DEFAULT, event=1)
    p.wait_stream(OTHER, DEFAULT, event=2)
    p.read(SIDE, X, op="aten::mul", stack="side")
    p.read(OTHER, Y, op="aten::div", stack="other")
    p.read(SIDE, Z, op="aten::mul", stack="side")
    p.record_stream(Z, SIDE)
    for ptr in (X, Y, Z):
        p.memory_freed(ptr)
    p.wait_stream(DEFAULT, SIDE, event=3)  # the default stream waits for SIDE only
    p.memory_allocated(NEXT, DEFAULT, size=512)
    (f,) = p.findings()
    assert f.previous.op == "aten::div" and f.previous.stream.handle == OTHER and f.block.address == Y


def test_a_record_stream_use_is_clean_as_before():
    p = start()
    p.record_stream(X, SIDE)
    p.memory_freed(X)
    p.memory_allocated(NEXT, DEFAULT, size=512)
    assert p.findings() == []


def test_the_reuse_race_is_still_found_when_the_block_is_handed_out_unsynchronized():
    p = start()
    p.memory_freed(X)
    p.memory_allocated(X, DEFAULT, size=512)  # the same block, handed out at once
    p.write(DEFAULT, X, op="aten::zero_")
    assert p.kinds() == ["missing-record-stream", "reuse-race"]


def test_the_end_of_the_trace_judges_against_what_the_stream_waited_for_by_then():
    p = start()
    p.memory_freed(X)
    p.wait_stream(DEFAULT, SIDE, event=2)
    assert p.findings() == []
    p = start(check_leaks=True)
    p.memory_freed(X)
    p.wait_stream(DEFAULT, SIDE, event=2)
    assert p.findings() == []  # --check-leaks: the same judgment (it checks blocks never freed)


def test_finish_twice_judges_once():
    p = start()
    p.memory_freed(X)
    first = p.findings()
    again = p.findings()
    assert len(first) == len(again) == 1 and again[0].count == 1


def test_online_mode_reports_a_pending_free_at_the_allocation_and_at_the_end(engine, monkeypatch):
    """online.make_engine, as the recorder's online mode makes it: a finding reaches
    on_finding when the pending free is judged, not at the free."""
    monkeypatch.setenv("NPUSAN_ENGINE", "native" if engine is native.NativeEngine else "python")
    seen = []
    p = Prog(header={"default_streams": {0: DEFAULT}})
    eng = online.make_engine(p.engine.header, seen.append)
    assert type(eng) is engine
    feed = p.records

    def run():
        for rec in feed[done[0]:]:
            eng.feed(rec)
        eng.flush()
        done[0] = len(feed)

    done = [0]
    p.stream_created(DEFAULT)
    p.stream_created(SIDE)
    p.memory_allocated(X, DEFAULT, size=512)
    p.memory_allocated(Y, DEFAULT, size=512)
    p.write(DEFAULT, X, Y)
    p.wait_stream(SIDE, DEFAULT, event=1)
    p.read(SIDE, X, op="aten::add")
    p.read(SIDE, Y, op="aten::sub")
    p.memory_freed(X)
    run()
    assert seen == []
    p.memory_allocated(NEXT, DEFAULT, size=512)
    run()
    assert [f.previous.op for f in seen] == ["aten::add"]
    p.memory_freed(Y)
    run()
    assert len(seen) == 1
    eng.finish()  # the end of the recording judges what is still pending
    assert [f.previous.op for f in seen] == ["aten::add", "aten::sub"]
