"""Captured graphs past the analyzer's caps (graphs.py): the records left out are replayed
as a summary (whole-block accesses per stream), so a race in them is still reported, by
both engines alike; past the summaries' own cap the report says the launches were not
fully checked."""

from __future__ import annotations

import io
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from npusan.analyzer.replay import graphs as G
from npusan.analyzer.replay import native
from npusan.analyzer.replay import traces as replay
from npusan.trace_format import TraceWriter

from .differential import check
from .test_native_differential import FUZZ, _graph_op, write_program

pytestmark = pytest.mark.skipif(not native.available(), reason=f"compiled core not built ({native.IMPORT_ERROR})")

S0, SIDE, OTHER = 0xA0, 0xB0, 0xC0
A, B, C = 0x100000, 0x200000, 0x300000


def _program(join: bool = True) -> bytes:
    """A graph captured on S0 that writes A, then forks to SIDE (which writes B) and, with
    ``join``, joins back; launched on the default stream, after which OTHER reads B having
    waited for the default stream only: ordered with ``join``, a race without."""
    buf = io.BytesIO()
    with TraceWriter(buf, backend="cuda", header={"default_streams": {0: 0}}) as w:
        for s in (S0, SIDE, OTHER):
            w.stream_created(s)
        for p in (A, B, C):
            w.memory_allocated(p, 0, size=256, stack=[("p.py", 1, "alloc")])
        w.graph_begin(7, S0, stack=[("p.py", 10, "capture")])
        w.kernel(S0, "aten::fill_", writes=[A], stack=[("p.py", 11, "fill")])
        w.event_recorded(1, S0)
        w.event_waited(1, SIDE)
        w.kernel(SIDE, "aten::mul", reads=[A], writes=[B], stack=[("p.py", 12, "side")])
        w.kernel(SIDE, "aten::add", reads=[C], writes=[C], stack=[("p.py", 13, "side2")])
        if join:
            w.event_recorded(2, SIDE)
            w.event_waited(2, S0)
        w.graph_end(7)
        for _ in range(2):
            w.graph_launch(7, 0, stack=[("p.py", 20, "replay")])
            w.event_recorded(3, 0)
            w.event_waited(3, OTHER)
            w.kernel(OTHER, "aten::sum", reads=[B], stack=[("p.py", 21, "read")])
            w.event_recorded(4, OTHER)  # the next launch comes after the read
            w.event_waited(4, 0)
    return buf.getvalue()


def _analyze(data: bytes) -> tuple:
    found, summary = replay.analyze_trace(io.BytesIO(data))
    return sorted((f.kind.value, f.access.op, f.previous.op) for f in found), summary.warnings


def test_uncapped_reference():
    assert _analyze(_program(join=True))[0] == []
    races, warnings = _analyze(_program(join=False))
    assert ("data-race", "aten::sum", "aten::mul") in races
    assert not any("graph" in w for w in warnings)


@pytest.mark.parametrize("cap", [{"MAX_GRAPH_RECORDS": 1}, {"MAX_GRAPH_RECORDS": 3}, {"MAX_GRAPHS": 0}])
def test_a_race_in_records_past_the_cap_is_still_reported(cap):
    with mock.patch.multiple(G, **cap):
        check(_program(join=False))  # both engines agree
        races, warnings = _analyze(_program(join=False))
    assert ("data-race", "aten::sum", "aten::mul") in races, races
    assert any("replayed coarsely" in w for w in warnings), warnings


def test_past_the_cap_a_joined_capture_may_be_reported_never_hidden():
    """The summary leaves the join out: a race may be reported that the program orders
    (the warning says so); the stored part stays exact."""
    with mock.patch.multiple(G, MAX_GRAPH_RECORDS=1):
        check(_program(join=True))
        races, warnings = _analyze(_program(join=True))
    # every race reported has a summarized kernel on one side (the fork and join are left out)
    assert races and all({"aten::mul", "aten::add"} & {r[1], r[2]} for r in races), races
    assert any("ordered by the events left out" in w for w in warnings)


def test_past_the_summary_cap_the_report_says_launches_were_not_checked():
    with mock.patch.multiple(G, MAX_GRAPH_RECORDS=1, MAX_SUMMARY_ENTRIES=1):
        check(_program(join=False))
        _, warnings = _analyze(_program(join=False))
    text = " ".join(warnings)
    assert "2 launches of 1 graphs were NOT fully checked" in text, warnings


@FUZZ
@given(st.lists(st.sampled_from([0, 1, 2, 4]), min_size=3, max_size=3), st.data())
def test_same_findings_with_small_caps(caps, data):
    """The differential fuzz of graph programs, with every cap small: the summaries are
    replayed alike by both engines."""
    ops = data.draw(st.lists(_graph_op, max_size=60))
    with mock.patch.multiple(G, MAX_GRAPH_RECORDS=caps[0], MAX_GRAPHS=caps[1], MAX_SUMMARY_ENTRIES=caps[2] * 2):
        ref = check(write_program(ops))
    assert ref[0] == "ok"
