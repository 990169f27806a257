"""Timeline export at scale: written event by event with flat memory, bounded by default."""

from __future__ import annotations

import json
import tracemalloc

from npusan.analyzer.timeline import ExportLimits, export_chrome, write_chrome
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
