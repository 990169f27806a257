"""STREAM_LABEL (format 1.1): what a stream is for, written and read back, and reported."""

from __future__ import annotations

import io

import msgpack
import pytest

from npusan.analyzer.replay.traces import analyze_traces
from npusan.trace_format import TraceWriter
from npusan.trace_format import records as R
from npusan.trace_format.errors import TraceFormatError
from npusan.trace_format.reader import TraceReader
from npusan.trace_format.symbols import SymbolTable


def _comm_race(path) -> None:
    with TraceWriter(str(path), backend="cuda") as w:
        w.stream_created(0xC0)
        w.stream_label(0xC0, "comm stream of process group 0", role="comm")
        w.memory_allocated(0x1000, 0, 256)
        w.kernel(0xC0, "all_reduce", reads=[0x1000], writes=[0x1000])
        w.kernel(0, "aten::mul.Tensor", reads=[0x1000])


def test_label_read_back_and_named_in_reports(tmp_path):
    path = tmp_path / "t.npusan"
    _comm_race(path)
    with TraceReader(str(path)) as r:
        list(r.records())
        assert r.header["format"] == [1, R.FORMAT_MINOR]
        (sidx,) = [s for s, (_, h) in r.symbols.streams.items() if h == 0xC0]
        assert r.symbols.stream_labels == {sidx: ("comm", "comm stream of process group 0")}
    (f,) = analyze_traces([str(path)]).findings
    assert (f.previous.stream.role, f.previous.stream.label) == ("comm", "comm stream of process group 0")
    from npusan.analyzer.report.describe import fix, title

    assert "after a write on the comm stream of process group 0 (cuda:0)" in title(f, {"backend": "cuda"})
    assert "<work>.wait()" in "\n".join(fix(f, {"backend": "cuda"}))


def test_label_of_an_undefined_stream_is_corrupt():
    sym = SymbolTable()
    with pytest.raises(TraceFormatError):
        sym.define([R.STREAM_LABEL, 3, "comm", "x"])
    sym.define([R.STREAM_DEF, 3, 0, 0xC0])
    sym.define([R.STREAM_LABEL, 3, "comm", "y" * 1000])
    assert sym.stream_labels[3] == ("comm", "y" * 200)
    with pytest.raises(TraceFormatError):
        sym.define([R.STREAM_LABEL, 3, 7, "x"])


def test_a_1_0_trace_without_labels_reads_as_before(tmp_path):
    buf = io.BytesIO()
    buf.write(R.MAGIC + msgpack.packb({"format": [1, 0], "backend": "cuda"}))
    for rec in ([R.STREAM_DEF, 0, 0, 0], [R.BLOCK_DEF, 0, 0x1000, 64], [R.KERNEL, 0, None, None, 0], [R.END, {}]):
        buf.write(msgpack.packb(rec))
    path = tmp_path / "old.npusan"
    path.write_bytes(buf.getvalue())
    assert analyze_traces([str(path)]).findings == []
