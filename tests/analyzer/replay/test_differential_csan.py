"""Differential test: npusan's engine and CSAN's EventHandler agree on which kernels race.

Random event programs (streams, events, synchronizations, allocations, frees, kernels on
whole blocks) are fed to both. CSAN pre-creates stream 0, so every program starts by
creating stream 0 in npusan too. Stack capture in CSAN is replaced by an empty summary
(it is irrelevant to the verdict and slow).
"""

from __future__ import annotations

import traceback

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npusan.analyzer.findings.model import Kind

from ..engine_prog import Prog

pytestmark = pytest.mark.usefixtures("engine")

sanitizer = pytest.importorskip("torch.cuda._sanitizer")

STREAMS = [0, 0x11, 0x22, 0x33]
EVENTS = [1, 2, 3]
PTRS = [0x1000, 0x2000, 0x3000, 0x4000]

stream = st.sampled_from(STREAMS)
event = st.sampled_from(EVENTS)
ptr = st.sampled_from(PTRS)


@st.composite
def kernel(draw):
    blocks = draw(st.lists(ptr, min_size=1, max_size=3, unique=True))
    nw = draw(st.integers(0, len(blocks)))
    return ("kernel", draw(stream), blocks[nw:], blocks[:nw])


op = st.one_of(
    kernel(),
    kernel(),
    kernel(),
    st.tuples(st.just("stream_created"), stream),
    st.tuples(st.just("event_created"), event),
    st.tuples(st.just("event_deleted"), event),
    st.tuples(st.just("event_recorded"), event, stream),
    st.tuples(st.just("event_recorded"), event, stream),
    st.tuples(st.just("event_waited"), event, stream),
    st.tuples(st.just("event_waited"), event, stream),
    st.tuples(st.just("event_synchronized"), event),
    st.tuples(st.just("stream_synchronized"), stream),
    st.tuples(st.just("device_synchronized")),
    st.tuples(st.just("memory_allocated"), ptr, stream),
    st.tuples(st.just("memory_freed"), ptr),
)


def run_csan(program) -> set:
    h = sanitizer.EventHandler()
    races = set()
    for item in program:
        name, args = item[0], item[1:]
        if name == "kernel":
            s, reads, writes = args
            aliases = {p: [] for p in PTRS}
            errors = h._handle_kernel_launch(s, set(reads), set(writes), set(writes), "op", aliases)
            for e in errors:
                races.add((e.current_access.seq_num, e.data_ptr))
        elif name == "stream_created":
            h._handle_stream_creation(args[0])
        elif name == "event_created":
            h._handle_event_creation(args[0])
        elif name == "event_deleted":
            h._handle_event_deletion(args[0])
        elif name == "event_recorded":
            h._handle_event_record(args[0], args[1])
        elif name == "event_waited":
            h._handle_event_wait(args[0], args[1])
        elif name == "event_synchronized":
            h._handle_event_synchronization(args[0])
        elif name == "stream_synchronized":
            h._handle_stream_synchronization(args[0])
        elif name == "device_synchronized":
            h._handle_device_synchronization()
        elif name == "memory_allocated":
            h._handle_memory_allocation(args[0])
        elif name == "memory_freed":
            h._handle_memory_deallocation(args[0])
    return races


def run_npusan(program) -> set:
    p = Prog()
    p.stream_created(0)  # CSAN's default stream exists from the start
    for item in program:
        name, args = item[0], item[1:]
        if name == "kernel":
            s, reads, writes = args
            p.kernel(s, "op", reads=reads, writes=writes)
        elif name == "memory_allocated":
            p.memory_allocated(args[0], args[1], size=256)
        else:
            getattr(p, name)(*args)
    return {(seq, addr) for f in p.findings() if f.kind is Kind.DATA_RACE for seq, _, addr, *_ in f.occurrences}


@pytest.fixture(autouse=True)
def no_stack_capture(monkeypatch):
    monkeypatch.setattr(sanitizer.traceback.StackSummary, "extract", classmethod(lambda cls, *a, **k: traceback.StackSummary()))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(op, min_size=5, max_size=80))
def test_same_racing_kernels_as_csan(program):
    assert run_npusan(program) == run_csan(program)


def test_the_generator_produces_races_and_clean_programs():
    # Guard against a vacuous differential test: a fixed program with known races.
    program = [
        ("kernel", 0, [], [0x1000]),
        ("kernel", 0x11, [0x1000], []),
        ("event_created", 1),
        ("event_recorded", 1, 0x11),
        ("event_waited", 1, 0),
        ("kernel", 0, [], [0x1000]),
        ("kernel", 0x22, [], [0x1000]),
    ]
    assert run_csan(program) == run_npusan(program) == {(2, 0x1000), (4, 0x1000)}
