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
