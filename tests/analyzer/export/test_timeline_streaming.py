"""Timeline export at scale: written event by event with flat memory, bounded by default."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from npusan.analyzer.export.timeline import ExportLimits, export_chrome, write_chrome
from npusan.trace_format.writer import TraceWriter


def long_trace(path, steps: int, race_at: int = -1):
    """``steps`` steps of: alloc, a kernel on the default stream, wait_stream, a kernel on a
    side stream, record_stream, free. At step ``race_at`` the wait is left out (a data race)."""
    with TraceWriter(str(path), backend="cuda", header={"default_streams": {0: 0}}) as w:
        w.stream_created(5, stack=[("a.py", 1, "main")])
        for i in range(steps):
            p = 0x10000 + (i % 64) * 0x1000
            w.memory_allocated(p, 0, 4096, stack=[("a.py", 2, "main")])
            w.kernel(0, "aten::add_", writes=[p], stack=[("a.py", 3, "main")])
            if i != race_at:
                w.event_created(100)
                w.event_recorded(100, 0)
                w.event_waited(100, 5)
            w.kernel(5, "aten::mul", reads=[p], stack=[("a.py", 4, "main")])
            w.record_stream(p, 5)
            w.memory_freed(p)
    return path


def races_trace(path, kernels: int, race_at) -> str:
    """``kernels`` kernels without accesses on the default stream, except at each seq s of
    ``race_at``: s writes a buffer of its own there and s + 1 reads it on a side stream with
    no wait, a data race (of its own: each pair is called from its own function)."""
    races = set(race_at)
    with TraceWriter(str(path), backend="cuda", header={"default_streams": {0: 0}}) as w:
        w.stream_created(5, stack=[("a.py", 1, "main")])
        seq = 0
        while seq < kernels:
            seq += 1
            if seq not in races:
                w.kernel(0, "aten::add_")
                continue
            buf = 0x100000 + seq * 0x1000
            where = [("a.py", 2, "main"), ("a.py", 3, f"step{seq}")]
            w.memory_allocated(buf, 0, 4096, stack=where)
            w.kernel(0, "aten::fill_", writes=[buf], stack=where)
            w.kernel(5, "aten::sum", reads=[buf], stack=where)
            seq += 1
    return str(path)


def markers_sit_on_drawn_kernels(doc) -> list:
    """The document's finding markers, each checked to lie within the time span of the
    slice of the kernel it names (never off every kernel, at the end of the timeline)."""
    kernels = {e["args"]["seq"]: e for e in doc["traceEvents"] if e.get("cat") == "kernel"}
    markers = [e for e in doc["traceEvents"] if e.get("cat") == "finding"]
    for m in markers:
        k = kernels.get(m["args"]["seq"])
        assert k is not None, f"a marker of kernel {m['args']['seq']}, which is not drawn"
        assert k["ts"] <= m["ts"] <= k["ts"] + k["dur"] and m["tid"] == k["tid"]
    return markers


class Sink:
    """A file that keeps nothing (so only the exporter's own memory is measured)."""

    def __init__(self) -> None:
        self.chars = 0

    def write(self, s: str) -> None:
        self.chars += len(s)


def peak_bytes(path, limits: ExportLimits) -> tuple:
    sink = Sink()
    tracemalloc.start()
    try:
        stats = write_chrome(path, sink, limits)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, stats, sink.chars


def test_memory_stays_flat_as_the_trace_grows(tmp_path):
    small = long_trace(tmp_path / "small.bin", 1000)
    big = long_trace(tmp_path / "big.bin", 4000)
    write_chrome(small, Sink(), ExportLimits())  # warm up imports and caches
    p_small, s_small, c_small = peak_bytes(small, ExportLimits())
    p_big, s_big, c_big = peak_bytes(big, ExportLimits())
    assert (s_small.drawn, s_big.drawn) == (2000, 8000)  # everything exported
    assert c_big > 3.5 * c_small  # four times the output...
    assert p_big < 1.5 * p_small + (256 << 10), (p_small, p_big)  # ...not four times the memory
    assert p_big < 8 << 20


def test_written_document_equals_the_in_memory_one(tmp_path):
    path = long_trace(tmp_path / "t.bin", 50, race_at=20)
    out = tmp_path / "t.json"
    with open(out, "w") as f:
        write_chrome(path, f, ExportLimits())
    assert json.loads(out.read_text()) == export_chrome(path)


def test_window_and_cap_say_what_they_left_out(tmp_path):
    path = long_trace(tmp_path / "t.bin", 500, race_at=250)
    sink = Sink()
    stats = write_chrome(path, sink, ExportLimits(around=3))
    assert stats.kernels == 1000 and stats.findings == 1
    assert 0 < stats.drawn <= 2 * (2 * 3 + 1)
    assert "left out" in stats.describe() and "--all" in stats.describe()
    doc = export_chrome(path, max_kernels=10)
    assert doc["otherData"]["kernels_drawn"] == 10 and doc["otherData"]["kernels_left_out"] == 990
    seqs = [e["args"]["seq"] for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert seqs == list(range(1, 11))  # the first N
    # the default: a window around the findings when there are some, else the first N
    default = ExportLimits.default()
    stats = write_chrome(path, Sink(), default)
    assert stats.limits.around == 1000 and stats.drawn == 1000
    clean = long_trace(tmp_path / "clean.bin", 10)
    stats = write_chrome(clean, Sink(), ExportLimits.default())
    assert stats.limits.around is None and stats.left_out == 0
    assert default.around is None  # the caller's limits are not changed


@pytest.mark.slow
def test_a_default_export_of_a_long_trace_marks_every_finding_on_its_kernels(tmp_path):
    """600,000 kernels and 399 races spread through them: the 1000-kernel windows hold more
    than the default cap of 500,000, so they are narrowed (all alike, as wide as fits) and
    no marker is left out; the cap used to cut off the last findings' kernels and pile
    their markers up at the end (132 of the 798)."""
    step = 600_000 // 399
    path = races_trace(tmp_path / "long.bin", 600_000, [i * step + step // 2 for i in range(399)])
    out = tmp_path / "t.json"
    with open(out, "w") as f:
        stats = write_chrome(path, f, ExportLimits.default())
    doc = json.loads(out.read_text())
    assert stats.findings == 399 and stats.kernels == 600_000
    assert len(markers_sit_on_drawn_kernels(doc)) == 798
    other = doc["otherData"]
    assert other["around_findings_narrowed_from"] == 1000
    assert other["findings_left_out"] == 0 and other["markers_left_out"] == 0
    radius = other["around_findings"]  # the widest that fits: one kernel more on each side would not
    assert other["kernels_drawn"] == 399 * (2 * radius + 2) <= 500_000 < 399 * (2 * radius + 4)
