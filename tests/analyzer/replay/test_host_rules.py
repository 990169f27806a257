"""The host as a party of the ordering (format 1.2, docs/semantics.md "The host"): a host
access is a kernel on the host stream, checked with the host's state, and every later
operation is ordered after it. Both engines (the ``engine`` fixture)."""

from __future__ import annotations

import pytest

from npusan.analyzer.findings.model import Kind
from npusan.trace_format import records as R

from ..engine_prog import Prog

pytestmark = pytest.mark.usefixtures("engine")

PINNED = 0x9000
DEV = 0x1000
COPY = 0x11


def _copy_in(p: Prog, event: int) -> None:
    """A non_blocking host-to-device copy from the pinned buffer on the copy stream, and an
    event recorded after it."""
    p.kernel(COPY, "aten::copy_", reads=[PINNED], writes=[DEV])
    p.event_created(event)
    p.event_recorded(event, COPY)


def _program(sync: str) -> Prog:
    p = Prog()
    p.stream_created(0)
    p.stream_created(COPY)
    p.memory_allocated(DEV, COPY, size=256)
    p.host_access("aten::copy_", writes=[(PINNED, 256)])  # step 1 fills the buffer
    _copy_in(p, 7)
    if sync == "event":
        p.event_synchronized(7)
    elif sync == "stream":
        p.stream_synchronized(COPY)
    elif sync == "device":
        p.device_synchronized()
    elif sync == "wait":  # a stream waiting for the copy does not order the host
        p.event_waited(7, 0)
    p.host_access("aten::copy_", writes=[(PINNED, 256)], stack=p.stack([("step.py", 41, "step")]))
    return p


def test_rewriting_a_pinned_buffer_while_its_copy_may_run_is_a_race():
    races = _program("none").races()
    assert len(races) == 1
    f = races[0]
    assert (f.access.op, f.access.type, f.access.stream.device) == ("aten::copy_", "write", R.HOST_DEVICE)
    assert (f.previous.op, f.previous.type) == ("aten::copy_", "read")
    assert f.access.stack[-1].lineno == 41


@pytest.mark.parametrize("sync", ["event", "stream", "device"])
def test_a_host_synchronization_orders_the_rewrite(sync):
    assert _program(sync).races() == []


def test_a_stream_wait_does_not_order_the_host():
    assert len(_program("wait").races()) == 1


def test_a_device_access_after_a_host_access_is_ordered_by_program_order():
    p = Prog()
    p.stream_created(COPY)
    p.host_access("numpy", writes=[PINNED])
    p.stream_created(0x22)  # a stream created later learns it from the host as well
    p.kernel(COPY, "aten::copy_", reads=[PINNED])
    p.kernel(0x22, "aten::copy_", reads=[PINNED])
    assert p.findings() == []


def test_reading_a_non_blocking_device_to_host_copy_needs_a_synchronize():
    for sync, expected in ((False, 1), (True, 0)):
        p = Prog()
        p.stream_created(0)
        p.kernel(0, "aten::copy_", writes=[PINNED])  # pinned.copy_(dev, non_blocking=True)
        if sync:
            p.stream_synchronized(0)
        p.host_access("aten::_local_scalar_dense", reads=[(PINNED, 4)])
        races = p.races()
        assert len(races) == expected
        if races:
            assert races[0].access.type == "read" and races[0].previous.type == "write"


def test_host_accesses_never_race_with_each_other_and_leave_record_stream_alone():
    p = Prog(check_leaks=True)
    p.stream_created(0)
    p.host_access("numpy", writes=[PINNED])
    p.host_access("numpy", reads=[PINNED])
    p.host_access("numpy", writes=[PINNED])
    p.memory_freed(PINNED)
    assert [f.kind for f in p.findings()] == []


def test_a_device_write_after_a_racing_host_read_is_not_reported_against_it():
    p = Prog()
    p.stream_created(0)
    p.kernel(0, "aten::copy_", writes=[PINNED])
    p.host_access("numpy", reads=[PINNED])  # the race
    p.kernel(0, "aten::copy_", writes=[PINNED])  # issued after the host read: ordered
    assert [f.kind for f in p.findings()] == [Kind.DATA_RACE]
