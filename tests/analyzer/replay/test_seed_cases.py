"""The seed spec's worked example, its correct patterns and its section 9 boundary cases."""

from __future__ import annotations

import pytest

from npusan.analyzer.findings.model import Kind

from ..engine_prog import Prog

pytestmark = pytest.mark.usefixtures("engine")

DEFAULT, STREAM1 = 0, 0x51
X = 0x7000


def start(check_leaks: bool = False) -> Prog:
    """x = torch.randn(100, device=...) on the default stream; stream1 = Stream()."""
    p = Prog(check_leaks=check_leaks, header={"default_streams": {0: DEFAULT}})
    p.stream_created(DEFAULT)
    p.memory_allocated(X, DEFAULT, size=512)
    p.write(DEFAULT, X, op="aten::randn")
    p.stream_created(STREAM1)
    return p


def test_worked_example_reports_missing_record_stream():
    # Section 4 steps 1-6: allocate, kernel (seq 1), new stream, wait_stream(default),
    # use on stream1, free on the default stream.
    p = start()
    p.wait_stream(STREAM1, DEFAULT, event=1)
    p.read(STREAM1, X, op="aten::add")
    p.memory_freed(X)
    (f,) = p.findings()
    assert f.kind is Kind.MISSING_RECORD_STREAM
    assert f.access.op == "free" and f.access.type == "write"
    assert f.access.stream.handle == DEFAULT and f.access.stream.is_default
    assert f.previous.op == "aten::add" and f.previous.stream.handle == STREAM1
    assert f.previous.seq == 2
    assert f.block.address == X and f.block.size == 512 and f.block.stream.handle == DEFAULT
    assert f.addresses == [X]


def test_method1_wait_stream_reports_nothing():
    p = start()
    p.wait_stream(STREAM1, DEFAULT, event=1)
    p.read(STREAM1, X, op="aten::add")
    assert p.findings() == []


def test_method2_wait_event_reports_nothing():
    p = start()
    p.event_created(3)
    p.event_recorded(3, DEFAULT)
    p.event_waited(3, STREAM1)
    p.read(STREAM1, X, op="aten::add")
    assert p.findings() == []


def test_method3_device_synchronize_reports_nothing():
    p = start()
    p.device_synchronized()
    p.read(STREAM1, X, op="aten::add")
    assert p.findings() == []


def test_without_synchronization_the_use_is_a_data_race():
    p = start()
    p.read(STREAM1, X, op="aten::add")
    assert p.kinds() == ["data-race"]


def test_5_2_a_record_stream_reports_nothing():
    p = start()
    p.wait_stream(STREAM1, DEFAULT, event=1)
    p.read(STREAM1, X, op="aten::add")
    p.record_stream(X, STREAM1)
    p.memory_freed(X)
    assert p.findings() == []


def test_5_2_b_creation_waits_usage_reports_nothing():
    p = start()
    p.wait_stream(STREAM1, DEFAULT, event=1)
    p.read(STREAM1, X, op="aten::add")
    p.wait_stream(DEFAULT, STREAM1, event=2)  # creation waits usage
    p.memory_freed(X)
    assert p.findings() == []


def test_5_2_device_synchronize_before_free_reports_nothing():
    p = start()
    p.wait_stream(STREAM1, DEFAULT, event=1)
    p.read(STREAM1, X, op="aten::add")
    p.device_synchronized()
    p.memory_freed(X)
    assert p.findings() == []


def test_usage_waiting_creation_does_not_make_the_free_safe():
    # "usage.wait(creation)" fixes the race but not the free (seed 5.2's distinction).
    p = start()
    p.wait_stream(STREAM1, DEFAULT, event=1)
    p.read(STREAM1, X, op="aten::add")
    p.wait_stream(STREAM1, DEFAULT, event=2)
    p.memory_freed(X)
    assert p.kinds() == ["missing-record-stream"]


def test_section6_fully_correct_program_reports_nothing():
    for fix in ("record_stream", "wait"):
        p = start(check_leaks=True)
        p.wait_stream(STREAM1, DEFAULT, event=1)  # problem 1: the data race
        if fix == "record_stream":
            p.record_stream(X, STREAM1)  # problem 2, method A
        p.kernel(STREAM1, "aten::add", reads=[X], writes=[0x9000])
        if fix == "wait":
            p.wait_stream(DEFAULT, STREAM1, event=2)  # problem 2, method B
        p.memory_freed(X)
        assert p.findings() == [], fix


def test_section9_creation_stream_created_after_usage_stream():
    # The creation stream inherits {usage_stream: 0} from the host: 0 is not a sync.
    p = Prog()
    p.stream_created(STREAM1)  # usage stream first
    p.stream_created(DEFAULT)  # creation stream later: inherits {STREAM1: 0}
    p.memory_allocated(X, DEFAULT, size=64)
    p.write(DEFAULT, X)
    p.wait_stream(STREAM1, DEFAULT, event=1)
    p.read(STREAM1, X)
    p.memory_freed(X)
    (f,) = p.findings()
    assert f.kind is Kind.MISSING_RECORD_STREAM and f.previous.seq == 2


def test_section9_two_uses_with_the_wait_in_between():
    p = start()
    p.wait_stream(STREAM1, DEFAULT, event=1)
    for _ in range(3):
        p.write(STREAM1, 0x9000)  # unrelated work to move seq on
    p.read(STREAM1, X, op="aten::first_use")  # seq 5
    p.wait_stream(DEFAULT, STREAM1, event=2)  # default has seen STREAM1 up to 5
    p.write(STREAM1, 0x9000)
    p.write(STREAM1, 0x9000)
    p.read(STREAM1, X, op="aten::second_use")  # seq 8
    p.memory_freed(X)
    (f,) = p.findings()
    assert f.kind is Kind.MISSING_RECORD_STREAM
    assert f.previous.op == "aten::second_use" and f.previous.seq == 8
