"""A kernel a graph launch replayed is reported with that launch (graphs.py, LaunchSite):
its stack is the captured line, which ran nothing, so the report needs the line and the
stream of the ``g.replay()`` that ran it. Both engines name the same launch."""

from __future__ import annotations

import io

from npusan.analyzer.replay import graphs as G
from npusan.trace_format import TraceWriter

from .differential import check, paths, replay_path

S0, COPY = 0xA0, 0xC0
X, Y = 0x100000, 0x200000


def _program() -> bytes:
    """A graph captured on S0 reads X and writes Y; launched on the default stream at two
    lines while COPY writes X unordered (p.py:20), the second launch after a wait (clean)."""
    buf = io.BytesIO()
    with TraceWriter(buf, backend="cuda", header={"default_streams": {0: 0}}) as w:
        for s in (S0, COPY):
            w.stream_created(s)
        for p in (X, Y):
            w.memory_allocated(p, 0, size=256, stack=[("p.py", 1, "alloc")])
        w.graph_begin(7, S0, stack=[("p.py", 10, "capture")])
        w.kernel(S0, "aten::mm", reads=[X], writes=[Y], stack=[("p.py", 11, "model")])
        w.graph_end(7)
        w.kernel(COPY, "aten::copy_", writes=[X], stack=[("p.py", 19, "stage")])
        w.graph_launch(7, 0, stack=[("p.py", 20, "step")])  # races the copy
        w.kernel(0, "aten::sum", reads=[Y], stack=[("p.py", 21, "step")])  # the program's own kernel
        w.event_recorded(1, COPY)
        w.event_waited(1, 0)
        w.graph_launch(7, 0, stack=[("p.py", 30, "step")])  # ordered after the copy
    return buf.getvalue()


def _frames(stack) -> list:
    return [(fr.filename, fr.lineno) for fr in stack]


def test_a_replayed_access_names_its_launch_in_both_engines():
    check(_program())  # every engine path agrees, the launch sites included (differential._side)
    for path in paths():
        _, found = replay_path(_program(), path)
        (f,) = [f for f in found if f.kind.value == "data-race"]
        assert (f.access.op, f.previous.op) == ("aten::mm", "aten::copy_")
        assert _frames(f.access.stack) == [("p.py", 11)]  # the captured op's line, as before
        r = f.access.replay
        assert r is not None and _frames(r.stack) == [("p.py", 20)] and _frames(r.captured) == [("p.py", 10)]
        assert r.stream.handle == 0 and r.stream.is_default
        assert f.previous.replay is None  # the copy ran where the program issued it


def test_launch_sites_cover_exactly_the_launched_kernels():
    gs = G.Graphs()
    assert gs.begin(1, 5, 42) is None
    gs.capture(["k"])  # (what is stored does not matter here)
    assert gs.end(1) is None
    g = gs.find(1)
    gs.launch_begins(g, 9, 43, 10)  # after kernel 10
    gs.launch_ends(12)  # replayed kernels 11 and 12
    gs.launch_begins(g, 9, 44, 20)
    gs.launch_ends(20)  # replayed none: no site
    assert gs.site(10) is None and gs.site(13) is None and gs.site(21) is None
    assert gs.site(11) == gs.site(12) == G.LaunchSite(9, 43, 42)
    gs.launch_begins(g, 9, 45, 30)  # open (online: a finding is built while the launch replays)
    assert gs.site(31) == G.LaunchSite(9, 45, 42)


def test_a_launch_inside_a_capture_is_no_launch_site():
    gs = G.Graphs()
    gs.begin(1, 5, None)
    gs.end(1)
    g = gs.find(1)
    gs.begin(2, 5, None)  # a capture is open: launching g captures its program into graph 2
    gs.launch_begins(g, 5, 43, 0)
    gs.launch_ends(3)
    assert gs.site(1) is None
