"""analyze_traces: files in, findings and summaries out."""

from __future__ import annotations

import pytest

from npusan.analyzer.findings.model import Kind
from npusan.analyzer.replay.traces import analyze_traces
from npusan.trace_format import TraceWriter
from npusan.trace_format import records as R
from npusan.trace_format.errors import TraceFormatError

X = 0x1000


def write_buggy(path, kernels: int = 0):
    """One data race and one missing record_stream, then ``kernels`` clean kernels."""
    with TraceWriter(str(path), header={"default_streams": {0: 0}}) as w:
        w.stream_created(0)
        w.stream_created(5)
        w.memory_allocated(X, 0, size=256)
        w.kernel(0, "aten::fill_", writes=[X], stack=[("train.py", 10, "step")])
        w.kernel(5, "aten::add", reads=[X], stack=[("train.py", 11, "step")])
        w.memory_freed(X)
        w.memory_allocated(0x9000, 0, size=64)
        for _ in range(kernels):
            w.kernel(0, "aten::mul_", reads=[0x9000], writes=[0x9000])


def test_findings_and_summary_from_a_file(tmp_path):
    path = tmp_path / "t.npusan"
    write_buggy(path, kernels=10)
    res = analyze_traces([path])
    assert [f.kind for f in res.findings] == [Kind.DATA_RACE, Kind.MISSING_RECORD_STREAM]
    race = res.findings[0]
    assert [str(fr) for fr in race.access.stack] == ["train.py:11 in step"]
    assert race.previous.stream.is_default and race.block.size == 256
    (s,) = res.traces
    assert s.path == str(path) and s.kernels == 12 and not s.truncated and s.warnings == []
    assert s.events == 2 + 2 + 1 + 12  # stream creations, allocations, the free, kernels


def test_each_trace_is_replayed_on_its_own(tmp_path):
    paths = [tmp_path / "a.npusan", tmp_path / "b.npusan"]
    for p in paths:
        write_buggy(p)
    res = analyze_traces(paths)
    assert [f.trace for f in res.findings] == [0, 0, 1, 1]
    assert all(f.traces == [f.trace] and f.access.stream.trace == f.trace for f in res.findings)
    assert all(f.count == 1 for f in res.findings)


def test_truncated_trace_keeps_findings_before_the_cut(tmp_path):
    path = tmp_path / "t.npusan"
    write_buggy(path, kernels=100)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 7])
    res = analyze_traces([path])
    assert {f.kind for f in res.findings} == {Kind.DATA_RACE, Kind.MISSING_RECORD_STREAM}
    assert res.traces[0].truncated and res.traces[0].warnings


def test_progress_is_reported_in_bytes(tmp_path):
    path = tmp_path / "t.npusan"
    write_buggy(path, kernels=200_000)
    calls = []
    analyze_traces([path], progress=lambda trace, done, total: calls.append((trace, done, total)))
    assert len(calls) >= 4
    assert calls[-1][1] == calls[-1][2] == path.stat().st_size
    assert [c[1] for c in calls] == sorted(c[1] for c in calls)
    two = []
    analyze_traces([path], progress=lambda done, total: two.append(done))
    assert len(two) == len(calls)


def test_malformed_record_names_the_file_and_the_record(tmp_path):
    path = tmp_path / "bad.npusan"
    with TraceWriter(str(path)) as w:
        w.memory_allocated(X, 0, size=64)
        w.sink([R.KERNEL, 99, 0, None, 0])  # a kernel on a stream index never defined
    with pytest.raises(TraceFormatError, match=r"bad\.npusan.*record \d+.*stream index 99"):
        analyze_traces([path])


def test_check_leaks_is_passed_through(tmp_path):
    path = tmp_path / "t.npusan"
    with TraceWriter(str(path)) as w:
        w.memory_allocated(X, 0, size=64)
        w.kernel(0, "aten::fill_", writes=[X])
        w.event_created(1)
        w.event_recorded(1, 0)
        w.event_waited(1, 5)
        w.kernel(5, "aten::sum", reads=[X])
    assert analyze_traces([path]).findings == []
    (f,) = analyze_traces([path], check_leaks=True).findings
    assert f.kind is Kind.MISSING_RECORD_STREAM


def test_not_a_trace_is_a_trace_format_error(tmp_path):
    path = tmp_path / "x.npusan"
    path.write_bytes(b"hello world")
    with pytest.raises(TraceFormatError, match="x.npusan"):
        analyze_traces([path])
