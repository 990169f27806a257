"""Which files a command line names, and compressed traces read as streams."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import sys

import msgpack
import pytest
import zstandard

from npusan.trace_format import TraceReader, TraceWriter
from npusan.trace_format.compression import DecompressingReader, decompressed
from npusan.trace_format.errors import TraceFormatError
from npusan.trace_format.input_files import StandardInput, trace_name
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


def test_a_dash_is_standard_input_opened_as_dev_stdin_and_named_stdin():
    """One value says both: where ``-`` is read from (``os.fspath``) and what it is called."""
    found = find_traces(["-", "-"])
    assert found.paths == [StandardInput()] and not found.problems  # named twice, read once
    stdin = found.paths[0]
    assert os.fspath(stdin) == "/dev/stdin" and str(stdin) == f"{stdin}" == "<stdin>"
    assert trace_name(stdin) == "<stdin>" and trace_name("/dev/stdin") == "/dev/stdin"
    assert trace_name(b"t.bin") == "t.bin" and trace_name(io.BytesIO()) is None
    assert pickle.loads(pickle.dumps(stdin)) == stdin  # sent to worker processes as it is


def test_a_trace_piped_to_standard_input_is_read_and_named_stdin(tmp_path, small_trace):
    import subprocess

    code = ("import sys; from npusan.trace_format import TraceReader; "
            "from npusan.trace_format.inputs import STDIN; "
            "r = TraceReader(STDIN); print(r.name, sum(1 for _ in r))")
    out = subprocess.run([sys.executable, "-c", code], input=small_trace, capture_output=True, timeout=60)
    name, records = out.stdout.decode().split()
    assert out.returncode == 0 and name == "<stdin>" and int(records) > 0


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


def test_corrupt_compressed_data_is_an_error_not_a_cut(tmp_path):
    """Damage is not a crash: a crash only cuts a compressed trace short (read up to there,
    with a warning), while a frame that fails its checksum makes the trace unusable, as a
    corrupt record does in a plain trace (exit 2 from analyze), so that CI never passes on
    a damaged trace."""
    path = tmp_path / "t.zst"
    with TraceWriter(str(path), flush_bytes=2048) as w:  # frames of about 2 KiB
        for i in range(5000):
            w.kernel(0, "aten::add", reads=[0x1000 + 64 * (i % 50)], writes=[0x9000])
    data = bytearray(path.read_bytes())
    data[-40] ^= 0xFF  # inside one of the last frames: its checksum fails
    (tmp_path / "bad.zst").write_bytes(bytes(data))
    r = TraceReader(str(tmp_path / "bad.zst"))
    with pytest.raises(TraceFormatError, match=r"zstd data is corrupt .*, after 4\d{3} events: the trace is damaged"):
        list(r.records())


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


def _racy_last_frame(path, kernels: int = 1) -> None:
    """A trace whose last frame (a flush of its own) holds a data race: a write on the
    default stream and an unsynchronized read on a side stream."""
    with TraceWriter(str(path), backend="cuda", header={"default_streams": {0: 0}}) as w:
        w.stream_created(0xA0)
        w.memory_allocated(0x1000, 0, 256)
        for _ in range(200):
            w.kernel(0, "aten::fill_", writes=[0x1000])
        w.flush()
        for i in range(kernels):  # (offsets that do not repeat: a frame of several KiB compressed)
            w.kernel(0xA0, "aten::sum", reads=[(0x1000, (i * 7919) % 251 + 1)])


@pytest.mark.parametrize("suffix, checksum_at", [(".zst", -1), (".gz", -8)])
def test_a_frame_that_fails_its_checksum_yields_no_records(tmp_path, suffix, checksum_at):
    """Damaged compressed data can decode to plausible records (deflate has no check of its
    own, zstandard checks a frame at its end): a frame's records are read only once its
    checksum verified them, so a damaged file never yields a finding that was not recorded."""
    from npusan.analyzer.replay.traces import analyze_traces

    path = tmp_path / f"t{suffix}"
    _racy_last_frame(path)
    assert len(analyze_traces([str(path)]).findings) == 1
    data = bytearray(path.read_bytes())
    data[checksum_at] ^= 0x01  # only the last frame's checksum: its content still decodes to the race
    bad = tmp_path / f"bad{suffix}"
    bad.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError, match="data is corrupt .*, after 202 events: the trace is damaged"):
        analyze_traces([str(bad)])  # (the 200 kernels and 2 other events of the verified frames)
    # a cut in the same frame (a crash while writing it) is read up to there, with a warning:
    # what it holds is what was written (the race, recorded), only shorter
    (tmp_path / f"cut{suffix}").write_bytes(path.read_bytes()[:-12])
    result = analyze_traces([str(tmp_path / f"cut{suffix}")])
    (summary,) = result.traces
    assert summary.truncated and "without an end record" in summary.warnings[0]
    assert len(result.findings) == 1


def test_a_frame_too_large_to_hold_back_that_fails_is_an_error(tmp_path, monkeypatch):
    """A frame larger than the reader holds back (other tools may write one frame for a whole
    file) is read as it is decoded; if its checksum then fails, what was read from it may be
    wrong, and the analysis cannot stand."""
    from npusan.analyzer.replay.traces import analyze_traces
    from npusan.trace_format import compression

    path = tmp_path / "t.zst"
    _racy_last_frame(path, kernels=30_000)  # several blocks of 128 KiB
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    bad = tmp_path / "bad.zst"
    bad.write_bytes(bytes(data))
    monkeypatch.setattr(compression, "HOLD_BYTES", 8)
    monkeypatch.setattr(compression._VerifiedFrames, "ZSTD_IN", 16)  # the frame is decoded in pieces
    with pytest.raises(TraceFormatError, match="cannot be trusted"):
        analyze_traces([str(bad)])


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".zst", ".gz"])
def test_frames_of_a_megabyte_and_more_read_back_exactly(tmp_path, suffix, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["pytest"])
    plain, packed = tmp_path / "t.npusan", tmp_path / f"t.npusan{suffix}"
    for target in (plain, packed):
        with TraceWriter(str(target), backend="cuda") as w:  # frames of the default 1 MiB of records
            for i in range(300_000):
                w.kernel(0, "aten::add", reads=[(0x1000 + 64 * (i % 50), 64)], writes=[0x9000])
    assert packed.stat().st_size < plain.stat().st_size // 3
    want = list(TraceReader(str(plain)).records())
    r = TraceReader(str(packed))
    assert list(r.records()) == want and r.ended_cleanly and not r.warnings


def test_damage_in_a_whole_file_frame_names_the_frame_not_the_header_alone(tmp_path, small_trace):
    """`gzip t.npusan` makes one member of the whole trace: damage anywhere in it stops the
    reader before the header can be read, and the error says it is that frame."""
    data = bytearray(gzip.compress(small_trace))
    data[-6] ^= 0x01  # the member's length field, at the very end
    (tmp_path / "t.npusan.gz").write_bytes(bytes(data))
    with pytest.raises(TraceFormatError, match="gzip data is corrupt .*, in the first compressed frame "
                       r"\(the one that holds the trace header"):
        TraceReader(str(tmp_path / "t.npusan.gz"))


def test_an_empty_array_where_a_record_belongs_is_named_so():
    buf = io.BytesIO()
    w = TraceWriter(buf, backend="cuda")
    w.kernel(0, "aten::add", writes=[0x1000])
    w.flush()  # (not closed: no END record)
    bad = io.BytesIO(buf.getvalue() + b"\x90")  # [] after the records
    with pytest.raises(TraceFormatError, match=r"is not a record \(an empty array, expected an array\)"):
        list(TraceReader(bad).records())


@pytest.mark.parametrize("engine", ["native", "python"])
@pytest.mark.parametrize("suffix, cut", [(".zst", 1), (".zst", 3), (".gz", 1), (".gz", 7)])
def test_a_cut_in_the_last_frames_checksum_is_a_cut_not_a_clean_end(tmp_path, monkeypatch, engine, suffix, cut):
    """A file cut inside the checksum of its last frame still decodes to every record, the
    end record included, but that frame's records were never verified and the file is not
    what was written: a warning and a truncated trace, not "ended cleanly"."""
    from npusan.analyzer.replay.traces import analyze_traces

    monkeypatch.setenv("NPUSAN_ENGINE", engine)
    path = tmp_path / f"t{suffix}"
    _racy_last_frame(path)
    (whole,) = analyze_traces([str(path)]).traces
    assert not whole.truncated and not whole.warnings
    (tmp_path / f"cut{suffix}").write_bytes(path.read_bytes()[:-cut])
    result = analyze_traces([str(tmp_path / f"cut{suffix}")])
    (summary,) = result.traces
    assert summary.truncated and len(result.findings) == 1
    assert summary.warnings == [
        "the compressed file ends inside its last frame, after the end record: the file was cut (a partial copy "
        "or download?) and that frame's checksum is missing, so its records were read unverified"
    ]


@pytest.mark.parametrize("engine", ["native", "python"])
@pytest.mark.parametrize("suffix, kind", [(".zst", "zstd"), (".gz", "gzip")])
def test_bytes_after_the_last_frame_are_data_after_the_end_record(tmp_path, monkeypatch, engine, suffix, kind):
    """Junk appended to a compressed trace is not valid compressed data: ignored, with the
    warning a plain trace with bytes after its end record gets, not silently."""
    from npusan.analyzer.replay.traces import analyze_traces

    monkeypatch.setenv("NPUSAN_ENGINE", engine)
    path = tmp_path / f"t{suffix}"
    _racy_last_frame(path)
    (tmp_path / f"junk{suffix}").write_bytes(path.read_bytes() + b"GARBAGEGARBAGE")
    result = analyze_traces([str(tmp_path / f"junk{suffix}")])
    (summary,) = result.traces
    assert len(result.findings) == 1 and not summary.truncated
    (warning,) = summary.warnings
    assert warning.startswith(f"the trace has data after its end record: the {kind} data is corrupt (")
    assert warning.endswith("; it was ignored")


@pytest.mark.parametrize("engine", ["native", "python"])
@pytest.mark.parametrize("own_frame", [True, False])
@pytest.mark.parametrize("end_in_zero", [True, False])
def test_a_zero_bomb_after_the_end_record_is_not_decompressed(tmp_path, monkeypatch, engine, own_frame,
                                                             end_in_zero):
    """Once END is read, only whether anything follows is asked: at most 64 KiB more of
    decompressed data are looked at, so 512 MiB of zeros in 16 KB of zstandard after a clean
    end cost nothing (they were decoded until refused as a bomb: 2.5 s, exit 2).

    ``end_in_zero``: END's last byte is a zero (its ``end_time`` float ends in one about once
    in a hundred runs). Zeros are held back until something follows them, so the whole run
    was read before END was complete: a bomb in one run of CI (now the zeros before the page
    boundary are handed out as soon as the run is known to be long)."""
    from npusan.analyzer.replay.traces import analyze_traces
    from npusan.trace_format import compression

    monkeypatch.setenv("NPUSAN_ENGINE", engine)
    decoded = []
    real_read = compression._VerifiedFrames.read

    def read(self, size=-1):
        data = real_read(self, size)
        decoded.append(self._decoded)
        return data

    monkeypatch.setattr(compression._VerifiedFrames, "read", read)
    path = tmp_path / "t.npusan"
    _racy_last_frame(path)
    c = zstandard.ZstdCompressor(write_checksum=True)
    z = c.compressobj()
    records = path.read_bytes()
    if end_in_zero:
        up = msgpack.Unpacker(strict_map_key=False)
        up.feed(records)
        starts = [0]
        for _ in up:
            starts.append(up.tell())
        end = msgpack.unpackb(records[starts[-2]:], strict_map_key=False)  # [END, {stats}]
        end[1]["end_time"] = 1796337755.0  # a double whose last bytes are zeros
        records = records[:starts[-2]] + msgpack.packb(end)
        assert records.endswith(b"\0")
    head = c.compress(records) if own_frame else z.compress(records)
    zeros = b"".join(z.compress(bytes(1 << 24)) for _ in range(32)) + z.flush()
    bomb = tmp_path / "bomb.zst"
    bomb.write_bytes(head + zeros)
    result = analyze_traces([str(bomb)])
    (summary,) = result.traces
    assert len(result.findings) == 1 and not summary.truncated
    assert summary.warnings == ["the trace has data after its end record; it was ignored"]
    assert max(decoded) < 32 << 20  # a frame's hold-back (8 MiB) and a step, not 512 MiB
