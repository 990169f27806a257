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
