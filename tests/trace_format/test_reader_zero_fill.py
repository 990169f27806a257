"""Zero bytes at the end of the data: a crashed machine's lost pages, or a killed writer's
unwritten space.

When a machine goes down, pages of a mapped trace that never reached the disk read back
as zeros, and the first may begin inside a record. A zero is a valid msgpack integer, so
the record completed by them decodes: a kernel record cut after its stack field became
``[KERNEL, stream, op, stack, 0]``, a read of all of block 0 that never happened, and a
false data race. The reader ends such data at the page boundary (docs/trace-format.md,
section 7): the record is unfinished there, and left out. A killed writer's committed
records all stand, even one whose last byte is a zero.
"""

from __future__ import annotations

import gzip
import io

import msgpack
import pytest
import zstandard

from npusan.analyzer.replay.traces import analyze_trace
from npusan.trace_format import TraceReader, TraceWriter
from npusan.trace_format import records as R
from npusan.trace_format.errors import TraceFormatError
from npusan.trace_format.record_source import RecordSource
from npusan.trace_format.redact import redact

from .conftest import raw_records
from .test_roundtrip import _Pipe

#: What a killed mapped writer leaves after its last byte: at least its reserve.
RESERVE = bytes(16 << 10)


def _two_streams_trace(pad: int = 0, size: int = 368) -> bytes:
    """Stream 0 writes block 0; then stream 5 reads ``size`` bytes of its own block 1 (no
    race). ``pad``: characters of header metadata that move the records along."""
    buf = io.BytesIO()
    with TraceWriter(buf, backend="cuda", header={"default_streams": {0: 0}, "pad": "x" * pad}) as w:
        w.stream_created(5)
        w.memory_allocated(0x1000, 0, 4096)  # block 0
        w.memory_allocated(0x9000, 5, 4096)  # block 1
        w.kernel(0, "writer", writes=[0x1000])
        w.kernel(5, "reader", reads=[(0x9000 + 300, size)])
    return buf.getvalue()


def _last_kernel(data: bytes) -> int:
    _, recs, ends = raw_records(data)
    k = max(i for i, r in enumerate(recs) if r[0] == R.KERNEL)
    return ends[k - 1]


def _lost_page_trace() -> tuple[bytes, int]:
    """The trace with everything from the page boundary just after the last kernel record's
    stack field on lost (zeros, to 16 KiB past it), and where that record starts."""
    for pad in range(4096):
        data = _two_streams_trace(pad)
        start = _last_kernel(data)
        if start + 5 == 4096:
            assert data[start + 4] == 0xC0  # [array header, 17, stream, op, nil] ...
            return data[:4096] + RESERVE, start
    raise AssertionError("no padding puts the record on the page boundary")


def _inputs(data: bytes) -> dict:
    return {
        "plain": lambda: io.BytesIO(data),
        "gzip": lambda: io.BufferedReader(_Pipe(gzip.decompress(gzip.compress(data)))),
        "zstd": lambda: _zstd(data),
        "pipe": lambda: io.BufferedReader(_Pipe(data)),
    }


def _zstd(data: bytes):
    from npusan.trace_format.compression import DecompressingReader

    return DecompressingReader(io.BytesIO(zstandard.ZstdCompressor().compress(data)), "zstd")


@pytest.fixture(params=["native", "python"])
def engine(request, monkeypatch):
    monkeypatch.setenv("NPUSAN_ENGINE", request.param)
    return request.param


@pytest.mark.parametrize("mode", ["plain", "gzip", "zstd", "pipe"])
def test_a_record_cut_by_a_lost_page_is_left_out(engine, mode):
    data, start = _lost_page_trace()
    assert analyze_trace(io.BytesIO(data[:4096]))[0] == []  # the cut alone: an unfinished record
    findings, summary = analyze_trace(_inputs(data)[mode]())
    assert findings == [], "the zeros of the lost page were read as an access"
    assert summary.truncated and summary.kernels == 1
    (warning,) = summary.warnings
    assert "trace ends without an end record after" in warning and "was left out" in warning
    if mode == "plain":
        assert f"the record at byte offset {start} runs into the zero bytes that fill the file from " \
               "byte offset 4096 on" in warning


def test_the_same_record_cut_elsewhere_is_read_as_it_decodes(engine):
    """Off a page boundary, the zeros a record runs into may be its own bytes (a writer
    killed after committing it): it is read, here as a read of block 0 by stream 5."""
    data = _two_streams_trace()
    start = _last_kernel(data)
    assert (start + 5) % 4096
    findings, summary = analyze_trace(io.BytesIO(data[: start + 5] + RESERVE))
    assert [f.kind for f in findings] == ["data-race"] and summary.kernels == 2


@pytest.mark.parametrize("mode", ["plain", "pipe"])
@pytest.mark.parametrize("size", [256, 4096])  # sizes whose encoding ends in a zero byte
def test_a_killed_writers_last_record_stands_though_it_ends_in_a_zero(engine, tmp_path, mode, size):
    """docs/trace-format.md section 7: a killed mapped writer loses nothing it committed.
    The file as a SIGKILL leaves it: the records, then zeros to the end of its space."""
    path = tmp_path / "t.npusan"
    w = TraceWriter(str(path), backend="cuda", header={"default_streams": {0: 0}})
    w.stream_created(5)
    w.memory_allocated(0x1000, 0, 8192)
    w.kernel(0, "writer", writes=[0x1000])
    w.kernel(5, "reader", reads=[(0x1000, size)])  # the race, in the last record
    killed = path.read_bytes()
    w.close()
    assert killed.endswith(bytes(16 << 10)) and msgpack.packb(size)[-1] == 0
    findings, summary = analyze_trace(_inputs(killed)[mode]())
    assert [f.kind for f in findings] == ["data-race"]
    assert summary.truncated and summary.kernels == 2 and "was left out" not in summary.warnings[0]


def test_the_same_cut_without_zeros_reads_the_same(engine):
    data, start = _lost_page_trace()
    findings, summary = analyze_trace(io.BytesIO(data[:4096]))
    assert findings == [] and summary.truncated and summary.kernels == 1
    assert "was left out" not in summary.warnings[0]  # an ordinary cut record


def test_a_short_run_of_zeros_at_the_end_is_data(engine):
    """Fewer zeros past the page boundary than :attr:`ZERO_RUN` are read as data."""
    data, start = _lost_page_trace()
    findings, summary = analyze_trace(io.BytesIO(data[:4096] + b"\0"))
    assert [f.kind for f in findings] == ["data-race"] and summary.kernels == 2


def test_zeros_followed_by_data_are_handed_out_in_bounded_pieces():
    """A long zero run inside the data is held as a count, and handed out in reads of the
    size asked for, never as one huge object."""
    data = b"\x01" + bytes(5 << 20) + b"\x02" + bytes(20000)
    source = RecordSource(b"", io.BytesIO(data))
    source.raw = True
    sizes, out = [], bytearray()
    while True:
        piece = source.read(1 << 16)
        if not piece:
            break
        sizes.append(len(piece))
        out += piece
    boundary = -(-((5 << 20) + 2) // 4096) * 4096
    assert bytes(out) == data[:boundary]  # the run at the end held back from the page boundary on
    assert max(sizes) <= 1 << 16 and source.end_zeros == len(data) - boundary


def _end_with_zeros(tail: bytes, pad: int = 0) -> bytes:
    """A whole trace whose END record's last bytes are zeros (its statistics end in 0.0),
    then ``tail``. ``pad``: characters of header metadata that move the records along."""
    buf = io.BytesIO()
    w = TraceWriter(buf, backend="cuda", header={"pad": "x" * pad})
    w.kernel(0, "k", writes=[0x1000])
    w.close(end={"end_time": 0.0})
    data = buf.getvalue()
    _, recs, _ = raw_records(data)
    assert recs[-1][0] == R.END and data.endswith(msgpack.packb(0.0)) and data.endswith(bytes(8))
    return data + tail


@pytest.mark.parametrize("mode", ["plain", "gzip", "zstd", "pipe"])
@pytest.mark.parametrize("tail", [b"", RESERVE])
def test_an_end_record_that_ends_in_zeros_still_ends_the_trace(engine, mode, tail):
    findings, summary = analyze_trace(_inputs(_end_with_zeros(tail))[mode]())
    assert findings == [] and not summary.truncated and summary.kernels == 1
    if tail:
        assert summary.warnings == ["the trace has data after its end record; it was ignored"]
    else:
        assert summary.warnings == []


def _read_and_redact(tmp_path, data: bytes) -> TraceReader:
    """The reader that read ``data`` from a file; its redacted copy must end cleanly too."""
    src, out = tmp_path / "t.npusan", tmp_path / "r.npusan"
    src.write_bytes(data)
    r = TraceReader(str(src))
    list(r.records())
    with open(out, "wb") as f:
        redact(str(src), f)
    copy = TraceReader(str(out))
    list(copy.records())
    assert copy.ended_cleanly and not copy.truncated
    return r


def test_an_end_record_that_ends_in_zeros_is_read_and_copied_by_redact(tmp_path):
    r = _read_and_redact(tmp_path, _end_with_zeros(RESERVE))
    assert r.ended_cleanly and not r.truncated


def _end_across_a_page_boundary() -> bytes:
    """A whole trace whose END record's last eight bytes, zeros, straddle file offset 4096,
    then a killed writer's zeros: the page boundary falls inside the END record."""
    for pad in range(4096):
        data = _end_with_zeros(b"", pad)
        if len(data) == 4096 + 4:
            return data + RESERVE
    raise AssertionError("no padding puts the end record on the page boundary")


@pytest.mark.parametrize("mode", ["plain", "pipe"])
def test_an_end_record_across_the_page_boundary_still_ends_the_trace(engine, mode, tmp_path):
    data = _end_across_a_page_boundary()
    findings, summary = analyze_trace(_inputs(data)[mode]())
    assert findings == [] and not summary.truncated and summary.kernels == 1
    assert summary.warnings == ["the trace has data after its end record; it was ignored"]
    r = _read_and_redact(tmp_path, data)
    assert r.ended_cleanly and r.end_record is not None and r.end_record[0] == R.END  # read from the held zeros


def test_a_malformed_record_completed_by_zeros_is_still_corrupt():
    """Zeros that complete a record no valid trace has keep the error such a record always
    gave (the trace is corrupt, whatever the zeros were)."""
    data = b"NPUSANv\x01" + msgpack.packb({"format": [1, 0]}) + b"\x92\x11" + RESERVE
    with pytest.raises(TraceFormatError, match="has 2 fields, fewer than the 4 it needs"):
        list(TraceReader(io.BytesIO(data)).records())
