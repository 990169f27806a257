"""Helpers for trace-format tests: small traces written with TraceWriter, raw record views."""

from __future__ import annotations

import io

import msgpack
import pytest

from npusan.trace_format import TraceWriter
from npusan.trace_format import records as R


def write_small_trace(target, **kwargs) -> None:
    """A trace touching every writer method once or twice (two streams, one race-free step)."""
    with TraceWriter(target, backend="cuda", metadata={"job": "unit"}, **kwargs) as w:
        stack = [("train.py", 10, "<module>"), ("train.py", 42, "step")]
        w.stream_created(0xA0, device=0, stack=stack)
        w.memory_allocated(0x1000, 0, 256, stack=stack)
        w.kernel(0, "aten::fill_", writes=[0x1000], stack=stack)
        w.event_created(7)
        w.event_recorded(7, 0)
        w.event_waited(7, 0xA0)
        w.kernel(0xA0, "aten::mul", reads=[(0x1010, 16)], writes=[0x1080], thread="prefetch")
        w.record_stream(0x1000, 0xA0)
        w.erase_stream(0x1000, 0xA0)
        w.event_synchronized(7)
        w.stream_synchronized(0xA0)
        w.event_deleted(7)
        w.memory_freed(0x1000)
        w.device_synchronized()


def growing_trace(kernels: int) -> tuple:
    """``(whole, first)``: a trace's bytes, and where its first flush ended: ``kernels``
    writes on the default stream, a flush, then as many unsynchronized reads of the same
    block on a side stream (races). A reader that saw only the first part (a trace still
    being written) saw no race."""
    buf = io.BytesIO()
    with TraceWriter(buf, backend="cuda", header={"default_streams": {0: 0}}) as w:
        w.stream_created(0xA0)
        w.memory_allocated(0x1000, 0, 256)
        for _ in range(kernels):
            w.kernel(0, "aten::fill_", writes=[0x1000])
        w.flush()
        first = len(buf.getvalue())
        for _ in range(kernels):
            w.kernel(0xA0, "aten::sum", reads=[0x1000])
    return buf.getvalue(), first


@pytest.fixture
def small_trace() -> bytes:
    buf = io.BytesIO()
    write_small_trace(buf)
    return buf.getvalue()


def raw_records(data: bytes) -> tuple[dict, list, list]:
    """``(header, records, end_offsets)`` decoded with a plain msgpack Unpacker."""
    assert data[:8] == R.MAGIC
    up = msgpack.Unpacker(io.BytesIO(data[8:]), raw=False, strict_map_key=False)
    header = up.unpack()
    recs, ends = [], []
    for rec in up:
        recs.append(rec)
        ends.append(8 + up.tell())
    return header, recs, ends


def handmade(header: dict, records: list, magic: bytes = R.MAGIC) -> bytes:
    """A trace assembled by hand (for versions and records the writer never produces)."""
    out = bytearray(magic)
    out += msgpack.packb(header, use_bin_type=True)
    for rec in records:
        out += rec if isinstance(rec, (bytes, bytearray)) else msgpack.packb(rec, use_bin_type=True)
    return bytes(out)
