"""Which files a command line names, and compressed traces read as streams."""

from __future__ import annotations

import gzip
import io
import os
import sys

import zstandard

from npusan.trace_format import TraceReader, TraceWriter
from npusan.trace_format.compression import DecompressingReader, decompressed
from npusan.trace_format.inputs import find_traces, is_trace_file

from .conftest import write_small_trace


def test_directories_globs_and_explicit_files(tmp_path, small_trace):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "r0").write_bytes(small_trace)
    (tmp_path / "a" / "r1.zst").write_bytes(zstandard.ZstdCompressor().compress(small_trace))
    (tmp_path / "a" / "r2.gz").write_bytes(gzip.compress(small_trace))
    (tmp_path / "a" / "readme.txt").write_text("no")
    (tmp_path / "a" / "empty").write_bytes(b"")
    os.mkfifo(tmp_path / "a" / "fifo")  # never opened: listing must not block
    found = find_traces([str(tmp_path / "a"), str(tmp_path / "a" / "readme.txt"), str(tmp_path / "a" / "r2.gz")])
    names = [os.path.relpath(p, tmp_path) for p in found.paths]
    assert names == ["a/b/r0", "a/r1.zst", "a/r2.gz", "a/readme.txt"]  # named files taken as they are, once
    assert not found.problems
    found = find_traces([str(tmp_path / "nothing"), str(tmp_path / "x*"), str(tmp_path / "a" / "b" / "r*")])
    assert [p for p, _ in found.problems] == [str(tmp_path / "x*")]
    assert [os.path.basename(p) for p in found.paths] == ["nothing", "r0"]  # a missing file is reported when read
    (tmp_path / "none").mkdir()
    assert find_traces([str(tmp_path / "none")]).problems[0][1].startswith("no npusan traces")
    assert not is_trace_file(str(tmp_path / "a" / "fifo"))


def test_written_compressed_traces_are_frames_per_flush(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["pytest"])  # the header records argv: keep its frame small
    for name in ("t.npusan.zst", "t.npusan.gz"):
        path = tmp_path / name
        write_small_trace(str(path), flush_bytes=1)  # one frame per record
        data = path.read_bytes()
        r = TraceReader(str(path))
        recs = list(r.records())
        assert r.ended_cleanly and len(recs) == 14
        # Cut anywhere: every complete frame before the cut still reads.
        counts = []
        for cut in range(len(data) // 3, len(data), max(1, len(data) // 20)):
            (tmp_path / "cut").write_bytes(data[:cut])
            r = TraceReader(str(tmp_path / "cut"))
            counts.append(len(list(r.records())))
            assert r.truncated
        assert counts == sorted(counts) and counts[-1] >= 12


def test_corrupt_compressed_data_is_a_warning_after_what_came_before(tmp_path):
    path = tmp_path / "t.zst"
    with TraceWriter(str(path), flush_bytes=2048) as w:  # frames of about 2 KiB
        for i in range(5000):
            w.kernel(0, "aten::add", reads=[0x1000 + 64 * (i % 50)], writes=[0x9000])
    data = bytearray(path.read_bytes())
    data[-40] ^= 0xFF  # inside one of the last frames: its checksum fails
    (tmp_path / "bad.zst").write_bytes(bytes(data))
    r = TraceReader(str(tmp_path / "bad.zst"))
    recs = list(r.records())
    assert r.truncated and 4000 < len(recs) < 5000
    assert "corrupt" in r.warnings[-1] and "analyzed" in r.warnings[-1]


def test_file_objects_are_sniffed_too(small_trace):
    gz = decompressed(io.BytesIO(gzip.compress(small_trace)))
    assert isinstance(gz, DecompressingReader)
    assert len(list(TraceReader(gz).records())) == 14
    plain = io.BytesIO(small_trace)
    assert decompressed(plain) is plain


def test_third_party_writers_can_skip_source_text(tmp_path):
    with TraceWriter(str(tmp_path / "t"), source_text=False) as w:
        w.kernel(0, "k", stack=[(__file__, 1, "f")])
    r = TraceReader(str(tmp_path / "t"))
    list(r.records())
    assert r.symbols.frame_sources == {}
    with TraceWriter(str(tmp_path / "u")) as w:
        w.kernel(0, "k", stack=[(__file__, 1, "f")])
    r = TraceReader(str(tmp_path / "u"))
    list(r.records())
    assert list(r.symbols.frame_sources.values())[0][0] == '"""Which files a command line names, and compressed traces read as streams."""'
