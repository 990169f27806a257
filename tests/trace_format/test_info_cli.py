"""`npusan info`: content, --json, exit codes, one-line errors."""

from __future__ import annotations

import json

import msgpack
import pytest
from click.testing import CliRunner

from npusan.cli import cli
from npusan.trace_format import TraceWriter
from npusan.trace_format import records as R

from .conftest import handmade, write_small_trace


def run(*args):
    return CliRunner().invoke(cli, ["info", *map(str, args)])


@pytest.fixture
def trace(tmp_path):
    p = tmp_path / "run.npusan"
    write_small_trace(p, header={"device_count": 1, "default_streams": {0: 0}})
    return p


def test_info_text(trace):
    res = run(trace, "--no-color")
    assert res.exit_code == 0, res.output
    out = res.output
    for needle in ("format", "1.0", "cuda", "metadata.job", "unit", "ended cleanly", "kernel", "stream-created",
                   "Streams", "0xa0", "Memory blocks", "allocations", "prefetch"):
        assert needle in out, needle
    # counts by type: 2 kernels, 14 events
    assert any(line.split()[:2] == ["kernel", "2"] for line in out.splitlines())
    assert any(line.split()[:2] == ["events", "14"] for line in out.splitlines())
    assert "truncated" not in out
    # streams named as `npusan analyze` names them
    assert "stream #1 (cuda:0)" in out and "default stream (cuda:0)" in out
    default_row = next(line for line in out.splitlines() if line.lstrip().startswith("default stream (cuda:0)"))
    assert "no (a default stream)" in default_row  # never created by the program: not "first seen in use"


def test_info_json(trace):
    res = run(trace, "--json")
    assert res.exit_code == 0
    d = json.loads(res.output)
    assert d["format"] == [1, 3] and d["ended_cleanly"] is True and d["truncated"] is False
    assert d["header"]["backend"] == "cuda" and d["header"]["default_streams"] == {"0": 0}
    assert d["counts"]["kernel"] == 2 and d["events"] == 14 and d["kernels"] == 2
    streams = {(s["device"], s["handle"]): s for s in d["streams"]}
    assert streams[(0, 0)]["default"] is True and streams[(0, 0)]["created"] is False
    assert streams[(0, 0xA0)]["default"] is False and streams[(0, 0xA0)]["created"] is True
    assert streams[(0, 0)]["kernels"] == 1 and streams[(0, 0xA0)]["kernels"] == 1
    m = d["memory"]
    assert m["allocations"] == 1 and m["frees"] == 1 and m["allocated_bytes"] == 256 and m["live_at_end"] == 0
    assert m["peak_live_blocks"] == 1
    assert d["threads"] == {"0": "prefetch"}
    assert d["end_stats"]["events"] == 14


def test_info_memory_and_unallocated_blocks(tmp_path):
    p = tmp_path / "m.npusan"
    with TraceWriter(p, backend="npu", header={"default_streams": {0: 0x55}}) as w:
        w.memory_allocated(0x1000, 0x55, 100)
        w.memory_allocated(0x2000, 0x55, 50)
        w.memory_allocated(0x3000, 0x55)
        w.memory_freed(0x1000)
        w.kernel(0x55, "k", reads=[0x9000, 0xA000])
    d = json.loads(run(p, "--json").stdout)  # warnings go to stderr
    m = d["memory"]
    assert m["allocations"] == 3 and m["frees"] == 1 and m["allocated_bytes"] == 150
    assert m["unknown_size_allocations"] == 1 and m["peak_live_blocks"] == 3 and m["peak_live_bytes"] == 150
    assert m["live_at_end"] == 2 and m["unallocated_blocks"] == 2
    assert d["streams"][0]["default"] is True and d["streams"][0]["handle"] == 0x55


def test_info_truncated_trace_is_exit_0_with_warning(trace, tmp_path):
    cut = tmp_path / "cut.npusan"
    cut.write_bytes(trace.read_bytes()[:-7])
    res = run(cut, "--no-color")
    assert res.exit_code == 0
    assert "truncated" in res.output and "recording was cut" in res.output
    d = json.loads(run(cut, "--json").output)
    assert d["truncated"] is True and d["ended_cleanly"] is False and d["warnings"]


def test_info_unknown_types(tmp_path):
    p = tmp_path / "future.npusan"
    p.write_bytes(handmade({"format": [1, 7]}, [[77, 1], [77, 2], [R.END, {}]]))
    d = json.loads(run(p, "--json").stdout)  # warnings go to stderr
    assert d["unknown_record_types"] == {"77": 2} and len(d["warnings"]) == 1
    assert "unknown type 77" in run(p, "--no-color").output


def test_info_odd_header_values_do_not_crash(tmp_path):
    p = tmp_path / "odd.npusan"
    header = {"format": [1, 0], "argv": "not a list", "start_time": "yesterday", "metadata": {1: b"\xff", "[red]x": 2},
              "default_streams": [1, 2], "host": None}
    p.write_bytes(handmade(header, [[R.STREAM_DEF, 0, 0, 5], [R.STREAM_SYNC, 0, None], [R.END, None]]))
    res = run(p, "--no-color")
    assert res.exit_code == 0, res.output
    assert "[red]x" in res.output
    assert json.loads(run(p, "--json").stdout)["header"]["metadata"]["1"] == "/w=="


@pytest.mark.parametrize(
    "content, needle",
    [
        (b"", "empty"),
        (b"this is not a trace at all", "not an npusan trace"),
        (handmade({"format": [3, 0]}, []), "newer"),
        (handmade({"format": [1, 0]}, [[R.KERNEL, 0]]), "record 1"),
        (handmade({"format": [1, 0]}, []) + b"\x91\xdb\xff\xff\xff\xff", "limit"),
        (R.MAGIC + msgpack.packb([1, 0]), "not a map"),
        (handmade({"format": [1, 0]}, [[R.ALLOC, [1], 0, 0, 0, None]]), "record 1 at byte offset"),
    ],
)
def test_info_bad_input_is_exit_2_one_line(tmp_path, content, needle):
    p = tmp_path / "bad.npusan"
    p.write_bytes(content)
    res = run(p)
    assert res.exit_code == 2
    err = res.stderr
    assert err.startswith("npusan: error: ") and err.count("\n") == 1, err
    assert needle in err
    assert "Traceback" not in res.output + err
    assert res.stdout == ""


def test_info_missing_file_and_directory(tmp_path):
    for target in (tmp_path / "nope.npusan", tmp_path):
        res = run(target)
        assert res.exit_code == 2
        assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


def test_info_a_compressed_trace_cut_after_its_end_record(tmp_path):
    path = tmp_path / "t.npusan.zst"
    with TraceWriter(str(path)) as w:
        w.kernel(0, "aten::add", writes=[0x1000])
    cut = tmp_path / "cut.npusan.zst"
    cut.write_bytes(path.read_bytes()[:-2])  # inside the frame's checksum
    res = run(cut, "--no-color")
    assert res.exit_code == 0
    text = " ".join(res.output.split())  # (rich wraps long lines)
    assert "cut after its end record" in text and "checksum is missing" in text
    d = json.loads(run(cut, "--json").output)
    assert d["truncated"] is True and d["ended_cleanly"] is True and d["warnings"]


def test_info_shows_the_notes_of_a_trace_distinct_and_bounded(tmp_path):
    """A NOTE is the writer's message to whoever reads the trace ("recording stopped: disk
    full", what was recorded only coarsely): info shows each distinct one once, with how
    often it came, and keeps the first 20 distinct ones (a trace is untrusted)."""
    p = tmp_path / "notes.npusan"
    with TraceWriter(str(p), backend="cuda", header={"default_streams": {0: 0}}) as w:
        w.kernel(0, "fill", writes=[(0x1000, 16)])
        for _ in range(3):
            w.note("warning", "recording stopped: disk full")
        for i in range(30):
            w.note("info", f"coarse: region {i} [red]x[/red]")
    res = run(p, "--no-color")
    assert res.exit_code == 0, res.output
    assert "note (warning): recording stopped: disk full (3 times)" in res.output
    assert "note (info): coarse: region 18 [red]x[/red]" in res.output  # markup shown, not applied
    assert "region 19" not in res.output
    doc = json.loads(run(p, "--json").output)
    assert doc["notes"][0] == ["warning", "recording stopped: disk full", 3]
    assert len(doc["notes"]) == 20 and doc["notes"][-1] == ["info", "coarse: region 18 [red]x[/red]", 1]


def test_a_finished_read_frees_the_symbol_table_at_once(trace):
    """``info`` replays the trace as analyze does, then reads it again: the first read's
    symbol table (a trace's strings: hundreds of MB for a hostile one) must be gone before
    the second starts, freed when the reader is, not whenever the cycle collector runs."""
    import gc

    from npusan.cli.errors import refuse_like_analyze
    from npusan.trace_format.info import summarize
    from npusan.trace_format.reader import TraceReader
    from npusan.trace_format.symbols import SymbolTable

    def tables() -> int:
        return sum(1 for o in gc.get_objects() if isinstance(o, SymbolTable))

    gc.collect()
    gc.disable()
    try:
        before = tables()
        refuse_like_analyze(str(trace))  # info's first pass
        assert tables() == before
        with TraceReader(str(trace)) as reader:
            for _ in reader.records():
                pass
        del reader
        assert tables() == before
        assert summarize(str(trace)).kernels and tables() == before
    finally:
        gc.enable()


def test_info_counts_strings_without_keeping_their_texts(tmp_path):
    """``summarize`` reads with a symbol table that keeps no string text (each is one shared
    empty string), and checks every definition as a reader that keeps them does."""
    from npusan.trace_format.errors import TraceFormatError
    from npusan.trace_format.info import summarize
    from npusan.trace_format.symbols import SymbolTable

    lean, full = SymbolTable(texts=False), SymbolTable()
    for table in (lean, full):
        for rec in ([R.STR, 1, "train.py"], [R.STR, 2, "step"], [R.FRAME, 1, 1, 10, 2]):
            table.define(rec)
    assert lean.strings == {1: "", 2: ""} and full.strings == {1: "train.py", 2: "step"}
    assert lean.frames == full.frames
    for bad in ([R.STR, 1, "again"], [R.STR, 3, b"bytes"], [R.STR, "x", "s"], [R.STR, -1, "s"], [R.FRAME, 2, 1, 1, 9]):
        messages = []
        for table in (lean, full):
            with pytest.raises(TraceFormatError) as e:
                table.define(bad)
            messages.append(str(e.value))
        assert messages[0] == messages[1], bad

    p = tmp_path / "strings.npusan"
    p.write_bytes(handmade({"format": [1, 0], "backend": "cuda"},
                           [[R.STR, i, f"name {i}"] for i in range(1000)] + [[R.END, {}]]))
    assert summarize(str(p)).counts[R.RECORD_NAMES[R.STR]] == 1000
    p.write_bytes(handmade({"format": [1, 0], "backend": "cuda"}, [[R.STR, 0, b"\xff"], [R.END, {}]]))
    with pytest.raises(TraceFormatError, match="the text of a STR record is binary data"):
        summarize(str(p))
