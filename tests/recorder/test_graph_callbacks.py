"""The graph callbacks of the recorder (RecorderCallbacks.on_graph_*): what a backend's
graph wrappers call becomes GRAPH_BEGIN / GRAPH_END / GRAPH_LAUNCH records (format 1.3),
with the caller's stack; after recording stopped they do nothing."""

import sys

import npusan
from npusan.recorder.backends.base import CALLBACK_NAMES, GRAPH_CALLBACK_NAMES, RecorderCallbacks
from npusan.trace_format import TraceReader
from npusan.trace_format import records as R


def test_graph_callbacks_are_part_of_the_protocol():
    assert set(GRAPH_CALLBACK_NAMES) <= set(CALLBACK_NAMES)
    rec = npusan.record(None, backend="sim", online="warn")
    assert isinstance(rec, RecorderCallbacks)
    for name in GRAPH_CALLBACK_NAMES:
        assert hasattr(RecorderCallbacks, name)


def test_graph_callbacks_become_graph_records(tmp_path):
    path = tmp_path / "g.npusan"
    with npusan.record(str(path), backend="sim") as rec:
        line = sys._getframe().f_lineno + 1
        rec.on_graph_begin(42, 0, 0)
        rec.on_graph_end(42)
        for _ in range(2):
            rec.on_graph_launch(42, 0, 0)
    rec.on_graph_launch(42, 0, 0)  # stopped: nothing
    reader = TraceReader(str(path))
    recs = [r for r in reader.records() if r[0] in R.GRAPH_RECORDS]
    assert [r[0] for r in recs] == [R.GRAPH_BEGIN, R.GRAPH_END, R.GRAPH_LAUNCH, R.GRAPH_LAUNCH]
    assert all(r[1] == 42 for r in recs)
    begin = recs[0]
    frames = reader.symbols.frames_of(begin[3])
    assert frames[-1][0] == __file__ and frames[-1][1] == line
    assert recs[2][2] == recs[3][2] == begin[2]  # the same stream index


class _Graph:
    """A graph class as a runtime has one: capture_begin/capture_end/replay (patched below)."""

    def __init__(self) -> None:
        self.replays = 0

    def capture_begin(self) -> None:
        pass

    def capture_end(self) -> None:
        pass

    def replay(self) -> None:
        self.replays += 1


def _patched_graph_class(rec):
    from npusan.recorder.backends.graphs import patch_graphs
    from npusan.recorder.backends.hooks import TraceHooks

    cls = type("Graph", (_Graph,), {})  # patched at most once per class: one per test
    hooks = TraceHooks(lambda: 0, rec.backend.current_stream)
    hooks.target = rec
    patch_graphs(cls, hooks)
    return cls, hooks


def test_replay_tells_the_recorder_before_and_after_the_replay():
    calls = []

    class Log:
        def on_graph_launch(self, *a):
            calls.append(("launch", g.replays))

        def on_graph_replayed(self, graph):
            calls.append(("replayed", g.replays, graph == id(g)))

    from npusan.recorder.backends.graphs import patch_graphs
    from npusan.recorder.backends.hooks import TraceHooks

    cls = type("Graph", (_Graph,), {})
    hooks = TraceHooks(lambda: 0, lambda d: 0)
    hooks.target = Log()
    patch_graphs(cls, hooks)
    g = cls()
    g.replay()
    assert calls == [("launch", 0), ("replayed", 1, True)]
    hooks.target = None
    g.replay()  # nothing recording: the graph still replays
    assert g.replays == 2 and len(calls) == 2


def test_online_raise_comes_out_of_the_racing_replay():
    """Online raise mode: a race inside a replayed graph is raised by ``replay()`` itself
    (a new-user trial got it from the next op, a ``float(y.sum())`` lines later), after
    the replay did its work; the op after it runs as usual."""
    import pytest
    import torch

    from npusan import sim
    from npusan.recorder import session

    npusan.enable(mode="raise", backend="sim")
    try:
        rec = session.current()
        cls, hooks = _patched_graph_class(rec)
        x = torch.zeros(100)
        g = cls()
        g.capture_begin()
        y = x * 2  # the graph's program reads x
        g.capture_end()
        side = sim.Stream()
        side.wait_stream(sim.current_stream())
        with sim.stream(side):
            x.add_(1)  # written on a side stream the replay's stream does not wait for
        with pytest.raises(npusan.RaceError) as ei:
            g.replay()
        assert g.replays == 1
        assert float(y.sum()) == 0.0  # the next op: nothing left to raise
    finally:
        hooks.target = None
        npusan.disable()
    assert "aten::mul" in str(ei.value) and "aten::add_" in str(ei.value)


def test_replay_without_online_mode_is_not_checked_early(tmp_path):
    """File mode: the replay's check is the offline analyzer's; replay() only records."""
    import torch

    from npusan import sim

    path = tmp_path / "g.npusan"
    with npusan.record(str(path), backend="sim") as rec:
        cls, hooks = _patched_graph_class(rec)
        x = torch.zeros(100)
        g = cls()
        g.capture_begin()
        x * 2
        g.capture_end()
        side = sim.Stream()
        side.wait_stream(sim.current_stream())
        with sim.stream(side):
            x.add_(1)
        g.replay()  # no RaceError, no engine
    hooks.target = None
    kinds = [r[0] for r in TraceReader(str(path)).records() if r[0] in R.GRAPH_RECORDS]
    assert kinds == [R.GRAPH_BEGIN, R.GRAPH_END, R.GRAPH_LAUNCH]


def test_a_capture_the_runtime_refuses_to_end_still_ends_and_is_never_launched():
    """CUDA's cudaStreamEndCapture fails on an unjoined capture ("capturing stream has
    unjoined work") but ends the capture; torch then refuses to replay the graph. The
    trace's capture ends too (else every later record would be taken for the graph's), and
    a replay that runs nothing writes no launch; the error reaches the program unchanged."""
    import pytest

    from npusan.recorder.backends.graphs import patch_graphs
    from npusan.recorder.backends.hooks import TraceHooks

    class Graph:
        refuse = True

        def capture_begin(self):
            pass

        def capture_end(self):
            if self.refuse:
                raise RuntimeError("CUDA error: capturing stream has unjoined work")

        def replay(self):
            if self.refuse:
                raise RuntimeError("Called CUDAGraph::replay without a preceding successful capture.")

    class Target:
        def __init__(self):
            self.calls = []

        def on_graph_begin(self, g, handle, dev):
            self.calls.append("begin")

        def on_graph_end(self, g):
            self.calls.append("end")

        def on_graph_launch(self, g, handle, dev):
            self.calls.append("launch")

    hooks = TraceHooks(lambda: 0, lambda dev: 0)
    hooks.target = t = Target()
    patch_graphs(Graph, hooks)
    g = Graph()
    g.capture_begin()
    with pytest.raises(RuntimeError, match="unjoined work"):
        g.capture_end()
    with pytest.raises(RuntimeError, match="successful capture"):
        g.replay()
    assert t.calls == ["begin", "end"]
    with pytest.raises(RuntimeError, match="unjoined work"):
        Graph().capture_end()  # no capture began: no end either
    assert t.calls == ["begin", "end"]
    g.refuse = False  # captured again, and ended: its replays are launches again
    g.capture_begin()
    g.capture_end()
    g.replay()
    assert t.calls == ["begin", "end", "begin", "end", "launch"]
