"""TraceWriter -> TraceReader round trips: every method, paths and file objects, interning."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading

import pytest

from npusan import __version__
from npusan.trace_format import FileSink, TraceReader, TraceWriter
from npusan.trace_format import records as R
from npusan.trace_format.errors import TraceFormatError

from .conftest import raw_records, write_small_trace


def read_all(source):
    r = TraceReader(source)
    recs = list(r.records())
    return r, recs


def test_every_method_round_trips_through_a_path(tmp_path):
    path = tmp_path / "t.npusan"
    write_small_trace(path)
    r, recs = read_all(str(path))
    sym = r.symbols
    names = [R.RECORD_NAMES[rec[0]] for rec in recs]
    assert names == [
        "stream-created", "allocation", "kernel", "event-created", "event-record", "event-wait",
        "kernel", "record-stream", "erase-stream", "event-synchronize", "stream-synchronize",
        "event-deleted", "free", "device-synchronize",
    ]
    assert r.ended_cleanly and not r.truncated and r.warnings == []
    assert r.end_stats["events"] == len(recs)
    assert r.end_stats["counts"]["kernel"] == 2
    assert r.events == len(recs)
    assert r.position == r.size == os.path.getsize(path)

    created, alloc, fill, ev_c, ev_r, ev_w, mul, rs, es, ev_s, st_s, ev_d, free, dev_s = recs
    s_side = created[1]
    assert sym.streams[s_side] == (0, 0xA0)
    assert sym.frames_of(created[2]) == (("train.py", 10, "<module>"), ("train.py", 42, "step"))
    bid = alloc[1]
    assert alloc[2:5] == [0x1000, 256, alloc[4]] and sym.streams[alloc[4]] == (0, 0)
    assert sym.string(fill[2]) == "aten::fill_" and fill[4:] == [~bid]
    assert ev_c[1] == ev_r[1] == ev_w[1] == ev_s[1] == ev_d[1] == 7
    assert sym.streams[ev_r[2]] == (0, 0) and ev_w[2] == s_side
    assert mul[1] == s_side and mul[3] is None
    # (0x1010, 16) is a byte range of the block; 0x1080 an interior pointer: the whole block.
    assert mul[4:] == [[bid, 0x10, 16], ~bid]
    assert rs[1:3] == [bid, s_side] and es[1:3] == [bid, s_side]
    assert st_s[1] == s_side
    assert free[1] == bid
    assert dev_s[1] is None
    assert sym.threads == {0: "prefetch"}


def test_file_object_is_left_open_and_reads_back(tmp_path):
    buf = io.BytesIO()
    write_small_trace(buf)
    assert not buf.closed
    data = buf.getvalue()
    r, recs = read_all(io.BytesIO(data))
    assert len(recs) == 14 and r.ended_cleanly
    with open(tmp_path / "f.npusan", "wb") as f:
        write_small_trace(f)
        assert not f.closed
    assert (tmp_path / "f.npusan").read_bytes()[8:] != b""
    with TraceReader(open(tmp_path / "f.npusan", "rb")) as r2:
        assert len(list(r2.records())) == 14


def test_header_fields(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    path = tmp_path / "h.npusan"
    with TraceWriter(path, backend="npu", metadata={"run": "nightly"},
                     header={"device_count": 2, "default_streams": {0: 11, 1: 22}}):
        pass
    h = TraceReader(path).header
    assert h["format"] == [R.FORMAT_MAJOR, R.FORMAT_MINOR]
    assert h["writer"] == f"npusan {__version__}"
    assert h["backend"] == "npu" and h["rank"] == 3 and h["pid"] == os.getpid()
    assert h["device_count"] == 2 and h["default_streams"] == {0: 11, 1: 22}
    assert h["metadata"] == {"run": "nightly"}
    assert isinstance(h["start_time"], float) and isinstance(h["argv"], list)
    assert set(R.HEADER_KEYS) <= set(h)


def test_writer_never_imports_torch(tmp_path):
    code = (
        "import sys\n"
        "from npusan.trace_format import TraceWriter, TraceReader\n"
        f"w = TraceWriter({str(tmp_path / 'x.npusan')!r}); w.kernel(0, 'op', reads=[1]); w.close()\n"
        f"r = TraceReader({str(tmp_path / 'x.npusan')!r}); list(r.records())\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "assert r.header['torch'] is None\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_torch_version_recorded_when_already_imported(tmp_path, monkeypatch):
    fake = type(sys)("torch")
    fake.__version__ = "9.9.9"
    monkeypatch.setitem(sys.modules, "torch", fake)
    with TraceWriter(tmp_path / "t.npusan"):
        pass
    assert TraceReader(tmp_path / "t.npusan").header["torch"] == "9.9.9"


def test_definitions_precede_first_use(small_trace):
    _, recs, _ = raw_records(small_trace)
    strings, frames, stacks, streams, blocks = set(), set(), set(), set(), set()
    for rec in recs:
        t = rec[0]
        if t == R.STR:
            strings.add(rec[1])
        elif t == R.FRAME:
            assert rec[2] in strings and rec[4] in strings
            frames.add(rec[1])
        elif t == R.STACK:
            assert all(f in frames for f in rec[2])
            stacks.add(rec[1])
        elif t == R.STREAM_DEF:
            streams.add(rec[1])
        elif t in (R.BLOCK_DEF, R.ALLOC):
            blocks.add(rec[1])
            if t == R.ALLOC:
                assert rec[4] in streams
        else:
            stack = {R.KERNEL: 3, R.ALLOC: 5, R.STREAM_CREATED: 2, R.EVENT_RECORD: 3, R.EVENT_WAIT: 3,
                     R.FREE: 2, R.RECORD_STREAM: 3, R.ERASE_STREAM: 3}.get(t)
            if stack is not None and rec[stack] is not None:
                assert rec[stack] in stacks
            if t == R.KERNEL:
                assert rec[1] in streams and rec[2] in strings
                for a in rec[4:]:
                    b = a[0] if isinstance(a, list) else a
                    assert (~b if b < 0 else b) in blocks
            if t in (R.STREAM_CREATED, R.STREAM_SYNC):
                assert rec[1] in streams
    # Interned once: the stack used twice is defined once.
    assert sum(1 for rec in recs if rec[0] == R.STACK) == 1


def test_ranges_interior_pointers_and_unknown_memory():
    buf = io.BytesIO()
    with TraceWriter(buf) as w:
        w.memory_allocated(0x1000, 0, 0x100)
        w.kernel(0, "k", reads=[0x1000, 0x10FF, (0x1000, 0x100), (0x1000, 0x40), (0x1040, 0x40)])
        w.kernel(0, "k", writes=[0x1100])  # one past the end: memory the trace never allocated
        w.kernel(0, "k", writes=[0x1100, (0x1108, 8)])
    r, recs = read_all(io.BytesIO(buf.getvalue()))
    bid = recs[0][1]
    assert recs[1][4:] == [bid, bid, bid, [bid, 0, 0x40], [bid, 0x40, 0x40]]
    other = ~recs[2][4]
    assert other != bid and r.symbols.blocks[other] == (0x1100, None)
    # A block of unknown size covers only its own base: a pointer past it is another block.
    assert recs[3][4] == ~other
    a, off, n = recs[3][5]
    assert ~a not in (bid, other) and (off, n) == (0, 8)
    assert r.symbols.blocks[~a] == (0x1108, None)


def test_block_ids_are_reused_after_free():
    buf = io.BytesIO()
    with TraceWriter(buf) as w:
        w.memory_allocated(0x1000, 0, 64)
        w.memory_allocated(0x2000, 0, 64)
        w.memory_freed(0x1000)
        w.memory_allocated(0x3000, 0, 64)  # gets the freed id
        w.memory_freed(0x9999)  # never allocated: ignored
        w.kernel(0, "k", reads=[0x3000], writes=[0x2000])
    _, recs = read_all(io.BytesIO(buf.getvalue()))
    a1, a2, f1, a3, k = recs
    assert f1[0] == R.FREE and f1[1] == a1[1]
    assert a3[1] == a1[1] != a2[1]
    assert k[4:] == [a3[1], ~a2[1]]


def test_devices_identify_streams():
    buf = io.BytesIO()
    with TraceWriter(buf) as w:
        w.kernel(0, "k", device=0)
        w.kernel(0, "k", device=1)
        w.device_synchronized(device=1)
    r, recs = read_all(io.BytesIO(buf.getvalue()))
    assert recs[0][1] != recs[1][1]
    assert {r.symbols.streams[recs[0][1]], r.symbols.streams[recs[1][1]]} == {(0, 0), (1, 0)}
    assert recs[2][1] == 1


def test_bad_arguments_raise_before_writing():
    buf = io.BytesIO()
    with TraceWriter(buf) as w:
        with pytest.raises(TypeError):
            w.kernel(0, "k", reads=[1.5])
        with pytest.raises(ValueError):
            w.kernel(0, "k", reads=[(1, 2, 3)])
        with pytest.raises(TypeError):
            w.stream_created(True)
        with pytest.raises(ValueError):
            w.memory_allocated(1 << 70, 0)
        # a negative pointer or size would make the analyzer refuse the whole trace
        for call in (lambda: w.memory_allocated(-5, 0, size=64), lambda: w.memory_allocated(0x1000, 0, size=-1),
                     lambda: w.memory_freed(-1), lambda: w.record_stream(-8, 0), lambda: w.erase_stream(-8, 0)):
            with pytest.raises(ValueError, match="negative"):
                call()
        w.kernel(0, "ok")
    r, recs = read_all(io.BytesIO(buf.getvalue()))
    assert len(recs) == 1 and r.ended_cleanly


def test_exception_in_with_block_is_noted_and_trace_ends_cleanly():
    buf = io.BytesIO()
    with pytest.raises(RuntimeError):
        with TraceWriter(buf) as w:
            w.kernel(0, "k")
            raise RuntimeError("boom")
    r, recs = read_all(io.BytesIO(buf.getvalue()))
    assert r.ended_cleanly
    assert recs[-1][0] == R.NOTE and "RuntimeError: boom" in recs[-1][2]


def test_closed_writer_refuses_records():
    w = TraceWriter(io.BytesIO())
    w.close()
    w.close()  # idempotent
    with pytest.raises(OSError):
        w.kernel(0, "k")


def test_undecodable_strings_do_not_break_recording():
    buf = io.BytesIO()
    with TraceWriter(buf) as w:
        w.kernel(0, "op\udcff", stack=[("bad\udce9.py", 1, "f")])
    r, recs = read_all(io.BytesIO(buf.getvalue()))
    assert r.symbols.string(recs[0][2]).startswith("op")


class FailingFile(io.RawIOBase):
    def __init__(self, fail_after: int, exc: Exception):
        self.data = bytearray()
        self.fail_after = fail_after
        self.exc = exc

    def writable(self):
        return True

    def write(self, b):
        if len(self.data) >= self.fail_after:
            raise self.exc
        self.data += bytes(b)
        return len(b)


@pytest.mark.parametrize("exc", [OSError(28, "No space left on device"), ValueError("I/O operation on closed file")])
def test_write_errors_surface_as_oserror_and_stop_writing(exc):
    f = FailingFile(100, exc)
    w = TraceWriter(f, flush_interval=0)  # every record is flushed
    with pytest.raises(OSError):
        for i in range(100):
            w.kernel(0, f"op{i}", reads=[0x1000 + i])
    written = bytes(f.data)
    for _ in range(3):
        with pytest.raises(OSError):
            w.kernel(0, "later")
        with pytest.raises(OSError):
            w.encoder.kernel(0, "later-fast-path")  # the recorder's path, straight to the sink
    w.close()  # no END after a failure, no exception either
    assert bytes(f.data) == written
    r = TraceReader(io.BytesIO(written))
    list(r.records())
    assert r.truncated and not r.ended_cleanly


def test_flush_policy(tmp_path):
    """A buffered output (a file object) is written in blocks: by size, by time, at flush."""
    path = tmp_path / "f.npusan"
    f = open(path, "wb")
    w = TraceWriter(f, flush_bytes=1 << 30, flush_interval=1e9)
    header_only = path.stat().st_size
    assert header_only > 8  # the header is written at once: a crash leaves a readable trace
    for i in range(50):
        w.kernel(0, "k", reads=[i + 1])
    assert path.stat().st_size == header_only
    assert w.sink.pending() > 0
    w.flush()
    assert w.sink.pending() == 0
    flushed = path.stat().st_size
    r = TraceReader(str(path))
    recs = list(r.records())
    assert sum(1 for x in recs if x[0] == R.KERNEL) == 50 and r.truncated
    w.close()
    f.close()
    assert path.stat().st_size > flushed

    g = open(tmp_path / "g.npusan", "wb")
    w2 = TraceWriter(g, flush_bytes=64, flush_interval=1e9)
    for i in range(20):
        w2.kernel(0, "k", reads=[i + 1])
    assert (tmp_path / "g.npusan").stat().st_size > header_only
    assert w2.sink.pending() < 64 + 32
    w2.close()
    g.close()

    h = open(tmp_path / "h.npusan", "wb")
    w3 = TraceWriter(h, flush_bytes=1 << 30, flush_interval=0.0)
    w3.kernel(0, "k")
    assert w3.sink.pending() == 0
    w3.close()
    h.close()


def test_a_path_is_written_through_a_mapping_every_call_committed(tmp_path):
    """A trace path on a regular file: each call is in the file when it returns (a kill
    loses nothing); the file is grown ahead (zero bytes) and cut to size at close."""
    path = tmp_path / "m.npusan"
    w = TraceWriter(path, flush_bytes=1 << 30, flush_interval=1e9)
    assert w.sink.durable
    for i in range(50):
        w.kernel(0, "k", reads=[i + 1])
    assert w.sink.pending() == 0
    r = TraceReader(str(path))  # read while the writer is open, as after a kill
    recs = list(r.records())
    assert sum(1 for x in recs if x[0] == R.KERNEL) == 50 and r.truncated
    assert path.read_bytes().endswith(b"\0" * 1024)
    w.close()
    data = path.read_bytes()
    assert not data.endswith(b"\0") and len(data) < 4096
    r = TraceReader(str(path))
    assert sum(1 for x in r.records() if x[0] == R.KERNEL) == 50 and r.ended_cleanly


def test_zero_bytes_inside_the_data_are_corrupt_not_a_cut(tmp_path):
    path = tmp_path / "z.npusan"
    with TraceWriter(path) as w:
        w.kernel(0, "k", reads=[1])
    data = path.read_bytes()
    end = data.rindex(b"\x92\x14")  # the END record [20, {...}]
    path.write_bytes(data[:end] + b"\0" + data[end:])  # a zero byte, then more records
    with pytest.raises(TraceFormatError):
        list(TraceReader(str(path)).records())


def test_concurrent_threads_produce_a_consistent_trace():
    buf = io.BytesIO()
    n_threads, per_thread = 4, 500
    with TraceWriter(buf, flush_bytes=256) as w:
        def work(t):
            for i in range(per_thread):
                w.memory_allocated(0x10000 * (t + 1) + i * 16, t, 16)
                w.kernel(t, f"op{t}", writes=[0x10000 * (t + 1) + i * 16], stack=[("w.py", t, "work")],
                         thread=f"t{t}")
                w.memory_freed(0x10000 * (t + 1) + i * 16)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    r, recs = read_all(io.BytesIO(buf.getvalue()))
    kernels = [x for x in recs if x[0] == R.KERNEL]
    assert len(kernels) == n_threads * per_thread and r.ended_cleanly
    assert sorted(r.symbols.threads.values()) == [f"t{t}" for t in range(n_threads)]


def test_file_sink_is_usable_alone(tmp_path):
    sink = FileSink(tmp_path / "s.bin", flush_bytes=1 << 20)
    sink.write_bytes(R.MAGIC)
    sink({"format": [1, 0]})
    sink([R.KERNEL, 0, 0, None])
    assert sink.records == 2
    sink.close()
    sink.close()
    for _ in range(3):  # every later record is refused, not only the next one
        with pytest.raises(OSError):
            sink([R.KERNEL, 0, 0, None])
    r = TraceReader(tmp_path / "s.bin")
    assert r.header == {"format": [1, 0]}
    assert list(r.records()) == [[R.KERNEL, 0, 0, None]] and r.truncated
    with pytest.raises(TypeError):
        FileSink(12345.0)


def test_threads_get_small_ids_whatever_the_caller_passes():
    buf = io.BytesIO()
    ident = threading.get_ident()
    with TraceWriter(buf) as w:
        w.kernel(0, "k", thread=ident)
        w.kernel(0, "k", thread=(ident + 1, "loader"))
        w.kernel(0, "k", thread="main")
        w.kernel(0, "k", thread=ident)
    r, recs = read_all(io.BytesIO(buf.getvalue()))
    assert r.symbols.threads == {0: f"thread {ident}", 1: "loader", 2: "main"}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_never_writes_into_the_parents_trace(tmp_path):
    path = tmp_path / "p.npusan"
    w = TraceWriter(path, flush_bytes=1 << 30, flush_interval=1e9)
    w.kernel(0, "before-fork")  # buffered, not yet written
    pid = os.fork()
    if pid == 0:  # child: try hard to write
        code = 0
        try:
            try:
                w.kernel(0, "child")
                w.flush()
                code = 3  # the flush should have been refused
            except OSError:
                pass
            w.close()
        except BaseException:
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    w.kernel(0, "parent")
    w.close()
    r, recs = read_all(path)
    ops = [r.symbols.string(x[2]) for x in recs if x[0] == R.KERNEL]
    assert ops == ["before-fork", "parent"] and r.ended_cleanly


class _Pipe(io.RawIOBase):
    """A pipe's view of some bytes: readable once, not seekable (``cat trace | ...``)."""

    def __init__(self, data: bytes) -> None:
        super().__init__()
        self._data = io.BytesIO(data)
        self.largest_read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        self.largest_read = max(self.largest_read, len(b))
        return self._data.readinto(b)


def _killed_trace(tail: bytes) -> bytes:
    """A valid trace without its END record, then ``tail`` (what a SIGKILL leaves, for zeros)."""
    buf = io.BytesIO()
    write_small_trace(buf)
    data = buf.getvalue()
    _, _, ends = raw_records(data)
    return data[:ends[-2]] + tail


def _killed_trace_inputs(tmp_path, tail: bytes) -> dict:
    """The killed trace as a plain file, ``.gz``, ``.zst`` and a pipe (each a TraceReader source)."""
    import gzip

    import zstandard

    data = _killed_trace(tail)
    plain, gz, zst = tmp_path / "k9.npusan", tmp_path / "k9.npusan.gz", tmp_path / "k9.npusan.zst"
    plain.write_bytes(data)
    gz.write_bytes(gzip.compress(data))
    zst.write_bytes(zstandard.ZstdCompressor().compress(data))
    return {"plain": str(plain), "gzip": str(gz), "zstd": str(zst), "pipe": io.BufferedReader(_Pipe(data))}


@pytest.mark.parametrize("mode", ["plain", "gzip", "zstd", "pipe"])
@pytest.mark.parametrize("zeros", [1, 4096, 3 << 20])  # one byte; a page; more than any read-ahead chunk
def test_a_killed_writers_zero_tail_is_a_cut_in_every_input_mode(tmp_path, mode, zeros):
    """docs/trace-format.md section 7: a 0 where a record starts, then only zeros to the
    end, is the cut of a killed mapped writer, whether the trace is read from the file, a
    compressed file or a pipe (read ahead in chunks: constant memory)."""
    source = _killed_trace_inputs(tmp_path, b"\0" * zeros)[mode]
    r = TraceReader(source)
    recs = list(r.records())
    assert r.truncated and not r.ended_cleanly
    assert sum(1 for x in recs if x[0] == R.KERNEL) == 2 and r.events == 14
    assert len(r.warnings) == 1 and "trace ends without an end record after 14 events" in r.warnings[0]
    if mode == "pipe":
        assert source.raw.largest_read <= 1 << 20


@pytest.mark.parametrize("mode", ["plain", "gzip", "zstd", "pipe"])
@pytest.mark.parametrize("at", [1, 4095, 2 << 20])  # just after the zero; at the end; past a chunk
def test_a_nonzero_byte_after_the_zeros_is_corrupt_in_every_input_mode(tmp_path, mode, at):
    tail = bytearray(max(at + 1, 4096))
    tail[at] = 1
    sources = _killed_trace_inputs(tmp_path, bytes(tail))
    data = _killed_trace(b"")
    _, recs, _ = raw_records(data)
    where = f"record {len(recs) + 1} at byte offset {len(data)}"
    with pytest.raises(TraceFormatError) as e:
        list(TraceReader(sources[mode]).records())
    assert str(e.value) == f"{where} is not a record (an integer, expected an array)"


def test_a_range_past_its_block_goes_on_into_the_next_one(tmp_path):
    """(ptr, nbytes) over two adjacent allocations is two accesses; the second block's part
    races with another stream's read there (it was cut at the first block's end)."""
    from npusan.analyzer.replay.traces import analyze_traces

    path = str(tmp_path / "t.npusan")
    p = 0x10000
    with TraceWriter(path, backend="cuda") as w:
        w.memory_allocated(p, 0, size=64)
        w.memory_allocated(p + 64, 0, size=64)
        w.kernel(0x51, "aten::fill_", writes=[(p, 128 + 16)])  # both blocks, then 16 bytes of unknown memory
        w.kernel(0x52, "aten::sum", reads=[(p + 72, 4)])
    with open(path, "rb") as f:
        kernels = [r for r in raw_records(f.read())[1] if r[0] == R.KERNEL]
    assert kernels[0][4:] == [~0, ~1, [~2, 0, 16]]
    races = analyze_traces([path]).findings
    assert [(f.kind.value, f.block.address) for f in races] == [("data-race", p + 64)]
