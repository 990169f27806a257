"""`info`, `analyze`, `export` and `redact` on the same odd trace: the same refusal or warning.

``npusan info`` reads fields leniently (it only counts); it used to describe traces whose
records ``npusan analyze`` refuses. ``npusan export`` used to say nothing about a cut trace
or data after the end record. ``npusan redact`` kept stream labels' free text and did not
use a source root named in the header, and copied records analyze refuses (exit 0, and a
"redacted" trace nobody could analyze).
"""

from __future__ import annotations

import json

import msgpack
import pytest
from click.testing import CliRunner

from npusan.cli import cli
from npusan.trace_format import TraceReader
from npusan.trace_format import records as R

from . import npusan_scenarios as S

HEADER = {"format": [1, 1], "writer": "hand", "backend": "cuda", "default_streams": {0: 0}}
#: A race on block 0 between stream 0 and stream 1, written by hand.
GOOD = [[R.STR, 0, "aten::fill_"], [R.STREAM_DEF, 0, 0, 0], [R.STREAM_DEF, 1, 0, 0x51],
        [R.ALLOC, 0, 4096, 64, 0, None], [R.KERNEL, 0, 0, None, ~0], [R.KERNEL, 1, 0, None, 0]]


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def trace(tmp_path, records, *, end=True, name="t.npusan"):
    data = bytearray(R.MAGIC + msgpack.packb(HEADER, use_bin_type=True))
    for rec in records + ([[R.END, {}]] if end else []):
        data += rec if isinstance(rec, bytes) else msgpack.packb(rec, use_bin_type=True)
    p = tmp_path / name
    p.write_bytes(bytes(data))
    return p


def error_line(r) -> str:
    lines = [line for line in r.stderr.splitlines() if line.startswith("npusan: error:")]
    assert len(lines) == 1, r.stderr
    return lines[0]


BAD = {
    "undefined stream": [R.KERNEL, 7, 0, None, 0],
    "float access": [R.KERNEL, 1, 0, None, 1.5],
    "list as block id": [R.FREE, [1], None],
    "map as stream index": [R.STREAM_SYNC, {}, None],
    "map as stack id": [R.KERNEL, 0, 0, {"a": 1}, ~0],
    "string as stack id": [R.EVENT_RECORD, 1, 0, "s"],
    "string event": [R.EVENT_RECORD, "e", 0, None],
    "string pointer": [R.ALLOC, 1, "p", 16, 0, None],
    "string device": [R.DEVICE_SYNC, "dev", None],
    "access out of its block": [R.KERNEL, 0, 0, None, [0, 60, 100]],
    "string in an access range": [R.KERNEL, 0, 0, None, [0, "0", 16]],
    "VIEWS entry not a list": [[R.VIEWS, "x"], [R.KERNEL, 0, 0, None, [0, 0, 16]]],
    "VIEWS entry with a float": [[R.VIEWS, [0, 0, 16, 4, 2.5, 8]], [R.KERNEL, 0, 0, None, [0, 0, 16]]],
    "VIEWS entry refining no access": [[R.VIEWS, [0, 0, 16, 4, 2, 12]], [R.KERNEL, 0, 0, None, 0]],
}


def bad(name: str) -> list:
    return BAD[name] if isinstance(BAD[name][0], list) else [BAD[name]]


@pytest.mark.parametrize("name", sorted(BAD))
def test_info_refuses_what_analyze_refuses_with_the_same_line(tmp_path, name):
    p = trace(tmp_path, GOOD + bad(name))
    a = run("analyze", p)
    i = run("info", p)
    ij = run("info", "--json", p)
    if a.exit_code == 2:
        assert i.exit_code == 2 and ij.exit_code == 2, i.output
        assert error_line(i) == error_line(a) == error_line(ij)
    else:  # analyze reads it: so does info
        assert a.exit_code in (0, 1) and i.exit_code == 0 and ij.exit_code == 0, (a.output, i.output)


@pytest.mark.parametrize("name", sorted(BAD))
def test_redact_refuses_what_analyze_refuses_with_the_same_line(tmp_path, name):
    """redact used to copy such records as they were: exit 0 and a "redacted" trace that
    analyze then refused. It replays the trace as analyze does first, and writes nothing."""
    p = trace(tmp_path, GOOD + bad(name))
    out = tmp_path / "public.npusan"
    a = run("analyze", p)
    r = run("redact", p, "-o", out)
    if a.exit_code == 2:
        assert r.exit_code == 2, r.output
        assert r.stderr.splitlines() == [error_line(a)]
        assert not out.exists() and sorted(q.name for q in tmp_path.iterdir()) == ["t.npusan"]
    else:  # analyze reads it: redact copies it, and the copy reads the same
        assert a.exit_code in (0, 1) and r.exit_code == 0, (a.output, r.output)
        assert run("analyze", out).exit_code == a.exit_code


def test_redact_of_an_analyzable_trace_is_analyzable(tmp_path):
    p = trace(tmp_path, GOOD + [[R.VIEWS, [0, 0, 16, 4, 2, 12]], [R.KERNEL, 1, 0, None, [0, 0, 16]]])
    out = tmp_path / "public.npusan"
    assert run("redact", p, "-o", out).exit_code == 0
    assert run("analyze", out).exit_code == run("analyze", p).exit_code == 1
    assert run("info", out).exit_code == 0


def test_info_and_analyze_agree_over_many_traces_at_once(tmp_path):
    good = trace(tmp_path, GOOD, name="good.npusan")
    broken = trace(tmp_path, GOOD + bad("undefined stream"), name="bad.npusan")
    i = run("info", "--json", good, broken)
    a = run("analyze", broken)
    assert i.exit_code == 2
    assert error_line(i) == error_line(a)
    assert [d["path"] for d in json.loads(i.stdout)] == [str(good)]


def test_export_warns_about_a_cut_trace_as_analyze_does(tmp_path):
    p = trace(tmp_path, GOOD, end=False)
    a = run("analyze", p)
    e = run("export", p, "-o", tmp_path / "t.json")
    assert e.exit_code == 0, e.output
    warned = [line for line in a.stderr.splitlines() if "warning" in line and "cut" in line]
    assert warned and all(line in e.stderr for line in warned), (a.stderr, e.stderr)


def test_export_warns_about_data_after_the_end_record(tmp_path):
    p = trace(tmp_path, GOOD + [[R.END, {}], [R.KERNEL, 0, 0, None, 0]], end=False)
    e = run("export", p, "-o", tmp_path / "t.json")
    assert e.exit_code == 0, e.output
    assert "npusan: warning:" in e.stderr and "data after its end record" in e.stderr


def test_export_warns_about_a_cut_inside_a_record(tmp_path):
    p = trace(tmp_path, GOOD + [msgpack.packb([R.KERNEL, 0, 0, None, 0])[:-2]], end=False)
    e = run("export", p, "-o", tmp_path / "t.json")
    assert e.exit_code == 0, e.output
    assert "npusan: warning:" in e.stderr and "the recording was cut" in e.stderr


def test_redact_replaces_stream_labels_but_keeps_npusans_own(tmp_path):
    recs = GOOD + [[R.STREAM_LABEL, 0, "comm", "comm stream of process group 3"],
                   [R.STREAM_LABEL, 1, "comm", "nccl ring of alice@secret-host:/home/alice"],
                   [R.STREAM_DEF, 2, 0, 0x99], [R.STREAM_LABEL, 2, "io\x1b[2K", "prefetch for alice"]]
    p = trace(tmp_path, recs)
    out = tmp_path / "public.npusan"
    r = run("redact", p, "-o", out)
    assert r.exit_code == 0, r.output
    assert "2 stream labels replaced" in r.stderr
    with TraceReader(str(out)) as reader:
        for _ in reader.records():
            pass
        labels = reader.symbols.stream_labels
    assert labels == {0: ("comm", "comm stream of process group 3"), 1: ("comm", "comm stream"),
                      2: ("other", "other stream")}
    assert b"alice" not in out.read_bytes() and b"secret" not in out.read_bytes()
    assert run("analyze", out).exit_code == run("analyze", p).exit_code == 1


def test_redact_uses_the_source_root_the_header_names(tmp_path):
    HEADER["source_root"] = "/home/alice/proj"
    try:
        recs = [[R.STR, 1, "/home/alice/proj/pkg/train.py"], [R.STR, 2, "main"],
                [R.STR, 3, "/home/alice/other/tool.py"], [R.FRAME, 0, 1, 3, 2], [R.FRAME, 1, 3, 4, 2],
                [R.STACK, 0, [0, 1]]] + GOOD
        p = trace(tmp_path, recs)
    finally:
        del HEADER["source_root"]
    out = tmp_path / "public.npusan"
    r = run("redact", p, "-o", out)
    assert r.exit_code == 0, r.output
    assert "source root: /home/alice/proj" in r.stderr
    with TraceReader(str(out)) as reader:
        for _ in reader.records():
            pass
        strings = reader.symbols.strings
        assert "source_root" not in reader.header
    assert strings[1] == "/source-root/pkg/train.py" and strings[3] == "/redacted/tool.py"
    # --source-root still wins over the header
    r = run("redact", p, "-o", out, "--force", "--source-root", "/home/alice")
    assert "source root: /home/alice" in r.stderr and "/home/alice/proj" not in r.stderr


def _fifo_fed(tmp_path, data: bytes, name: str):
    """A FIFO and a thread that writes ``data`` into it once (``<(cat trace)``)."""
    import os
    import threading

    path = tmp_path / name
    os.mkfifo(path)

    def feed():
        with open(path, "wb") as f:
            f.write(data)

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    return path, t


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_info_names_an_unreadable_input_as_analyze_does(tmp_path, monkeypatch, json_flag):
    """A device, a FIFO nobody writes to, a missing file: info's line is analyze's
    (``<name>: cannot read the trace: ...``), for one input and for several."""
    import os

    from npusan.trace_format import input_files

    monkeypatch.setattr(input_files, "PIPE_WAIT_S", 0.2)
    silent = tmp_path / "silent.fifo"
    os.mkfifo(silent)
    good = trace(tmp_path, GOOD, name="good.npusan")
    for path in ("/dev/zero", str(silent), str(tmp_path / "missing.npusan")):
        a = error_line(run("analyze", path))
        assert a.startswith(f"npusan: error: {path}: cannot read the trace: "), a
        i = run("info", *json_flag, path)
        assert i.exit_code == 2 and error_line(i) == a
        many = run("info", *json_flag, path, good)
        assert many.exit_code == 2 and error_line(many) == a


def test_info_names_a_piped_trace_with_a_bad_record_as_analyze_does(tmp_path):
    """``npusan info <(cat bad.npusan)``: the reader's error, after the name, as analyze says it."""
    data = trace(tmp_path, GOOD + [[R.STREAM_SYNC, 0, None], b"\x05"]).read_bytes()
    lines = {}
    for verb in ("analyze", "info"):
        path, writer = _fifo_fed(tmp_path, data, f"{verb}.fifo")
        r = run(verb, path)
        writer.join(5)
        assert r.exit_code == 2
        lines[verb] = error_line(r)
    assert lines["analyze"] == lines["info"].replace("info.fifo", "analyze.fifo")
    assert lines["info"].startswith(f"npusan: error: {tmp_path / 'info.fifo'}: record 8 at byte offset ")
