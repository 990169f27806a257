"""Untrusted input: what a hostile trace, option file or output path cannot make npusan do.

Each test is a regression test for one way a trace attached to a bug report (or a path on
a CI command line) could hurt the machine that analyzes it: escape sequences reaching the
terminal, memory growing with a header or an option file, a FIFO hanging the run, one
trace counted twice, a half-written report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import msgpack
import pytest

from npusan.analyzer.report import FORMATS
from click.testing import CliRunner

from npusan.cli import cli
from npusan.trace_format import input_files
from npusan.trace_format import records as R

from . import npusan_scenarios as S

ESCAPES = {
    "osc52": "\x1b]52;c;c2VjcmV0\x07",  # writes the clipboard
    "title": "\x1b]0;pwned\x07",
    "erase": "\x1b[2K\x1b[1A",
    "csi8": "\x9b31m",  # a one-byte CSI (C1)
    "bidi": "\u202egnp.exe",  # right-to-left override
    "newline": "x\nnpusan: no stream-synchronization problems found",
}
HOSTILE = "".join(ESCAPES.values())
FORBIDDEN = ("\x1b", "\x9b", "\u202e", "\x07")


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def assert_clean(text: str) -> None:
    for ch in FORBIDDEN:
        assert ch not in text, f"{ch!r} reached the output: {text[:2000]!r}"
    assert "\nnpusan: no stream-synchronization problems found" not in text.replace(
        "\n  ", "")  # a forged line must not start a line of its own


def hostile_race(path) -> str:
    """A data race whose every string (header, op, file, function, thread, note) is hostile."""
    with S.writer(path, host=HOSTILE, argv=["train.py", HOSTILE], writer=HOSTILE, torch=HOSTILE,
                  metadata={HOSTILE: HOSTILE, "nested": {"k": [HOSTILE]}}) as w:
        st = [(f"train{HOSTILE}.py", 3, f"main{HOSTILE}")]
        w.memory_allocated(0x1000, S.DEFAULT, 4096, stack=st)
        w.stream_created(S.SIDE, stack=st)
        w.kernel(S.DEFAULT, f"aten::fill_{HOSTILE}", writes=[0x1000], stack=st, thread=HOSTILE)
        w.kernel(S.SIDE, f"aten::sum{HOSTILE}", reads=[0x1000], stack=st)
        w.note(HOSTILE, HOSTILE)
    return str(path)


@pytest.mark.parametrize("fmt", [f.name for f in FORMATS])
def test_analyze_sanitizes_every_trace_string_in_every_format(tmp_path, fmt):
    p = hostile_race(tmp_path / f"evil{ESCAPES['osc52']}.npusan")
    r = run("analyze", p, "--format", fmt)
    assert r.exit_code == 1, r.output
    assert_clean(r.stdout + r.stderr)
    assert "\ufffd" in r.stdout or "&#xfffd;" in r.stdout.lower()
    if fmt in ("json", "sarif"):
        json.loads(r.stdout)


@pytest.mark.parametrize("args", [(), ("--json",), ("--no-color",)])
def test_info_sanitizes_header_metadata_threads(tmp_path, args):
    p = hostile_race(tmp_path / "evil.npusan")
    r = run("info", p, *args)
    assert r.exit_code == 0, r.output
    assert_clean(r.stdout + r.stderr)
    assert "\ufffd" in r.stdout or "\\ufffd" in r.stdout


def test_export_sanitizes_timeline(tmp_path):
    p = hostile_race(tmp_path / "evil.npusan")
    r = run("export", p)
    assert r.exit_code == 0, r.output
    assert_clean(r.stdout)
    doc = json.loads(r.stdout)
    assert any("\ufffd" in e["name"] for e in doc["traceEvents"])


def test_error_lines_are_sanitized_and_single(tmp_path):
    bad = tmp_path / f"x{ESCAPES['title']}\nforged.npusan"
    bad.write_bytes(b"not a trace")
    for verb in ("analyze", "info", "export"):
        r = run(verb, bad)
        assert r.exit_code == 2
        assert len(r.stderr.splitlines()) == 1, r.stderr
        assert_clean(r.stderr)


# -- header size ---------------------------------------------------------------------


def big_header_trace(path, nbytes: int) -> None:
    """A header whose metadata is ``nbytes`` of empty maps: one byte each in the file,
    about 70 bytes each once decoded (written as bytes: building it would take the memory)."""
    keys = nbytes // 1010
    one = b"\xdc" + (1000).to_bytes(2, "big") + b"\x80" * 1000  # array 16 of 1000 empty maps
    meta = b"\xdf" + keys.to_bytes(4, "big") + b"".join(msgpack.packb(f"k{i}") + one for i in range(keys))
    header = b"\x83" + msgpack.packb("format") + msgpack.packb([1, 0]) + msgpack.packb("backend") + \
        msgpack.packb("cuda") + msgpack.packb("metadata") + meta
    path.write_bytes(R.MAGIC + header + msgpack.packb([R.END, {}]))


def test_header_over_the_limit_is_refused_before_decoding(tmp_path):
    p = tmp_path / "big.npusan"
    big_header_trace(p, 8 << 20)  # 8 MiB of empty maps: ~600 MB if decoded
    for verb in (("info",), ("analyze",), ("export",)):
        mb, rc, r = _peak_rss_mb(*verb, p)
        assert rc == 2, r.stderr
        assert mb < 200, mb
        assert r.stderr.count("\n") == 2 and "header is larger than the 1024 KiB limit" in r.stderr


def test_record_over_the_limit_is_refused_while_decoding(tmp_path):
    """msgpack's unpacker resumes a half-built object across reads: the record limit must
    stop a 16 MiB record of empty arrays (~1 GB decoded) part way, on every read path."""
    p = tmp_path / "big.npusan"
    chunk = b"\xdc" + (65535).to_bytes(2, "big") + b"\x90" * 65535
    n = (16 << 20) // len(chunk)
    rec = b"\x92\x11" + b"\xdd" + n.to_bytes(4, "big") + chunk * n
    p.write_bytes(R.MAGIC + msgpack.packb({"format": [1, 0]}) + rec + msgpack.packb([R.END, {}]))
    for verb in (("analyze",), ("info",), ("export",)):
        mb, rc, r = _peak_rss_mb(*verb, p)
        assert rc == 2 and "larger than the 4 MiB limit on one record" in r.stderr, r.stderr
        assert mb < 450, (verb, mb)


def test_header_metadata_is_summarized_in_reports(tmp_path):
    p = tmp_path / "meta.npusan"
    meta = {f"key{i}": "v" * 5000 for i in range(200)}
    meta["deep"] = [[[[[["bottom"]]]]]]
    with S.writer(p, metadata=meta) as w:
        w.kernel(S.DEFAULT, "aten::fill_", writes=[0x1000])
    for args in (("info", p, "--json"), ("analyze", p, "--format", "json")):
        r = run(*args)
        assert r.exit_code == 0, r.output
        assert len(r.stdout) < 200_000
        doc = json.loads(r.stdout)
        header = doc["header"] if args[0] == "info" else doc["traces"][0]["header"]
        kept = header["metadata"]
        assert "more entries not kept" in kept["…"]
        assert len(kept) <= 65 and all(len(v) < 1100 for v in kept.values() if isinstance(v, str))
    r = run("info", p, "--no-color")
    assert r.exit_code == 0 and len(r.stdout) < 200_000


# -- option files and FIFOs ------------------------------------------------------------


@pytest.mark.parametrize("option", ["--suppress", "--baseline"])
def test_dev_zero_option_file_fails_fast_with_one_line(tmp_path, option):
    p = S.data_race(tmp_path / "t.npusan")
    start = time.monotonic()
    r = run("analyze", p, option, "/dev/zero")
    assert time.monotonic() - start < 10
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "not a regular file (a character device)" in r.stderr


@pytest.mark.parametrize("option", ["--suppress", "--baseline"])
def test_option_file_read_is_capped_for_pipes(tmp_path, option, monkeypatch):
    """A pipe has no size to check: the cap must hold for the read itself."""
    fifo = tmp_path / "opts"
    os.mkfifo(fifo)
    stop = threading.Event()

    def endless():
        with open(fifo, "wb") as f:
            try:
                while not stop.is_set():
                    f.write(b"#" * 65536)
            except BrokenPipeError:
                pass

    t = threading.Thread(target=endless, daemon=True)
    t.start()
    try:
        r = run("analyze", S.data_race(tmp_path / "t.npusan"), option, fifo)
    finally:
        stop.set()
    assert r.exit_code == 2 and "larger than" in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr


@pytest.mark.parametrize("where", ["trace", "--suppress", "--baseline"])
def test_fifo_without_writer_does_not_block(tmp_path, monkeypatch, where):
    monkeypatch.setattr(input_files, "PIPE_WAIT_S", 0.3)
    fifo = tmp_path / "nobody.npusan"
    os.mkfifo(fifo)
    trace = fifo if where == "trace" else S.data_race(tmp_path / "t.npusan")
    args = ["analyze", trace] + ([] if where == "trace" else [where, fifo])
    start = time.monotonic()
    r = run(*args)
    assert time.monotonic() - start < 5
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "delivered nothing" in r.stderr


def test_trace_from_a_pipe_with_a_writer_is_read(tmp_path):
    src = S.data_race(tmp_path / "t.npusan")
    fifo = tmp_path / "pipe.npusan"
    os.mkfifo(fifo)
    t = threading.Thread(target=lambda: open(fifo, "wb").write(src.read_bytes()), daemon=True)
    t.start()
    r = run("analyze", fifo, "--format", "json")
    t.join(5)
    assert r.exit_code == 1, r.output
    assert [f["kind"] for f in json.loads(r.stdout)["findings"]] == ["data-race"]


def test_character_device_as_trace_is_refused(tmp_path):
    r = run("info", "/dev/zero")
    assert r.exit_code == 2 and "not a regular file" in r.stderr


def test_deeply_nested_suppression_file_is_one_line(tmp_path):
    sup = tmp_path / "deep.toml"
    sup.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    r = run("analyze", S.data_race(tmp_path / "t.npusan"), "--suppress", sup)
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "too deeply" in r.stderr or "not valid TOML" in r.stderr


def test_large_baseline_parses_in_bounded_memory(tmp_path):
    """A baseline's findings keep only what matching needs, however much each holds."""
    p = S.data_race(tmp_path / "t.npusan")
    r = run("analyze", p, "--format", "json")
    finding = json.loads(r.stdout)["findings"][0]
    bulky = dict(finding, fingerprint="0" * 64, padding=[{"frame": "x" * 200} for _ in range(200)])
    n = 300
    base = {"schema_version": "1.0", "findings": [dict(bulky, fingerprint=f"{i:064x}") for i in range(n)]
            + [finding]}
    bp = tmp_path / "baseline.json"
    bp.write_text(json.dumps(base))
    size = bp.stat().st_size
    assert size > 10 << 20
    code = ("import resource, sys, json\n"
            "from npusan.analyzer.findings.baseline import load_baseline\n"
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "b = load_baseline(sys.argv[1])\n"
            "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "print(json.dumps([len(b.known), (after - before) * 1024]))\n")
    out = subprocess.run([sys.executable, "-c", code, str(bp)], capture_output=True, text=True, timeout=120)
    known, grown = json.loads(out.stdout)
    assert known == n + 1
    assert grown < 4 * size, (grown, size)  # the text and its decoded copy, not the objects
    r = run("analyze", p, "--baseline", bp)
    assert r.exit_code == 0 and "1 known finding" in r.stdout


# -- same trace twice, atomic reports ------------------------------------------------------


def test_same_trace_given_twice_is_counted_once(tmp_path, monkeypatch):
    p = S.data_race(tmp_path / "t.npusan")
    link = tmp_path / "link.npusan"
    link.symlink_to(p)
    monkeypatch.chdir(tmp_path)
    r = run("analyze", p, "t.npusan", link, "--format", "json")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert len(doc["traces"]) == 1 and doc["findings"][0]["count"] == 1
    assert r.stderr.count("is the same file as") == 2


def test_failed_report_write_leaves_no_truncated_report(tmp_path, monkeypatch):
    p = S.data_race(tmp_path / "t.npusan")
    out = tmp_path / "report.json"
    out.write_text("previous report\n")
    real_fsync = os.fsync

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    r = run("analyze", p, "--format", "json", "-o", out)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1
    assert "No space left on device" in r.stderr and "nothing was written" in r.stderr
    assert out.read_text() == "previous report\n"
    assert sorted(os.listdir(tmp_path)) == ["report.json", "t.npusan"]  # no temp file left


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_report_into_read_only_directory_is_one_line(tmp_path):
    p = S.data_race(tmp_path / "t.npusan")
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        r = run("analyze", p, "-o", d / "r.txt")
    finally:
        d.chmod(0o700)
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1
    assert os.listdir(d) == []


def test_report_written_whole_and_with_usual_permissions(tmp_path):
    p = S.data_race(tmp_path / "t.npusan")
    out = tmp_path / "r.sarif"
    r = run("analyze", p, "--format", "sarif", "-o", out)
    assert r.exit_code == 1
    json.loads(out.read_text())
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask


# -- ids ---------------------------------------------------------------------------------

BIG = 2**24 - 1


def huge_id_trace(path) -> bytes:
    """Every id the format allows at its largest: a tiny file must stay a small analysis."""
    recs = [[R.STR, BIG, "aten::add"], [R.STR, BIG - 1, "t.py"], [R.FRAME, BIG, BIG - 1, 1, BIG],
            [R.STACK, BIG, [BIG]], [R.STREAM_DEF, 0, 0, 0], [R.STREAM_DEF, 1, 0, 5], [R.THREAD, BIG, "t"],
            [R.STREAM_CREATED, 1, BIG], [R.ALLOC, BIG, 4096, 64, 0, BIG],
            [R.KERNEL, 0, BIG, BIG, ~BIG], [R.KERNEL, 1, BIG, BIG, BIG],
            [R.EVENT_CREATED, 2**64 - 1, None], [R.EVENT_RECORD, 2**64 - 1, 1, None],
            [R.FREE, BIG, BIG], [R.END, {}]]
    data = R.MAGIC + msgpack.packb({"format": [1, 0], "backend": "cuda"}) + b"".join(msgpack.packb(r) for r in recs)
    path.write_bytes(data)
    return data


def _peak_rss_mb(*args) -> tuple:
    """Run ``npusan ARGS`` in a fresh interpreter: (peak resident MiB, exit status, result)."""
    code = ("import re, sys\nfrom npusan.cli import main\nsys.argv = ['npusan'] + sys.argv[1:]\nrc = 0\n"
            "try:\n    main()\nexcept SystemExit as e:\n    rc = e.code\n"
            "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)\n"
            "print(int(hwm) >> 10, rc, file=sys.stderr)\n")
    r = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=300)
    mb, rc = r.stderr.strip().splitlines()[-1].split()
    return int(mb), int(rc), r


def test_huge_ids_in_trace_format_verbs_stay_small(tmp_path):
    p = tmp_path / "ids.npusan"
    assert len(huge_id_trace(p)) < 256
    mb, rc, r = _peak_rss_mb("info", p, "--json")
    assert rc == 0 and mb < 200, (mb, r.stderr)


@pytest.mark.parametrize("verb", [("analyze", "--format", "json"), ("export",)])
def test_huge_ids_analyze_end_to_end_stays_small(tmp_path, verb):
    p = tmp_path / "ids.npusan"
    huge_id_trace(p)
    mb, rc, r = _peak_rss_mb(verb[0], p, *verb[1:])
    assert rc in (0, 1), r.stderr
    assert mb < 200, mb


def repeated_frame_trace(path, repeats: int) -> None:
    """A race whose stack repeats one frame of 4 KiB names ``repeats`` times (about
    ``repeats`` bytes of trace; before reports bounded stacks, 20,000 repeats made
    1.5 GB of JSON report and 5.9 GB of peak memory)."""
    op, file, func = "o" * 4096, "/f/" + "a" * 4093, "g" * 4096
    recs = [[R.STR, 0, op], [R.STR, 1, file], [R.STR, 2, func], [R.FRAME, 0, 1, 3, 2],
            [R.STACK, 0, [0] * repeats], [R.STREAM_DEF, 0, 0, 0], [R.STREAM_DEF, 1, 0, 0x51],
            [R.STREAM_CREATED, 1, 0], [R.ALLOC, 0, 0x1000, 64, 0, 0],
            [R.KERNEL, 0, 0, 0, ~0], [R.KERNEL, 1, 0, 0, 0], [R.END, {}]]
    pack = lambda o: msgpack.packb(o, use_bin_type=True)  # noqa: E731
    path.write_bytes(R.MAGIC + pack({"format": [1, 0], "backend": "cuda", "default_streams": {0: 0}})
                     + b"".join(pack(r) for r in recs))


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "html", "junit", "export"])
def test_a_stack_repeating_one_frame_gives_a_bounded_report(tmp_path, fmt):
    trace = tmp_path / "t.npusan"
    repeated_frame_trace(trace, 20_000)
    out = tmp_path / "out"
    args = ["export", trace] if fmt == "export" else ["analyze", trace, "--format", fmt]
    r = run(*args, "-o", out)
    assert r.exit_code == (0 if fmt == "export" else 1), r.stderr
    assert out.stat().st_size < 200_000
    if fmt in ("text", "json", "export"):
        assert "19,999 more times" in out.read_text()


def distinct_frames_trace(path, frames: int) -> int:
    """A race whose stack holds ``frames`` distinct frames that all share one file name and
    one function name of 4,096 characters (a frame costs about 10 bytes of trace). Returns
    the trace's size."""
    file, func = "/f/" + "a" * 4093, "g" * 4096
    recs = [[R.STR, 0, "op"], [R.STR, 1, file], [R.STR, 2, func]]
    recs += [[R.FRAME, i, 1, i + 1, 2] for i in range(frames)]
    recs += [[R.STACK, 0, list(range(frames))], [R.STREAM_DEF, 0, 0, 0], [R.STREAM_DEF, 1, 0, 0x51],
             [R.STREAM_CREATED, 1, 0], [R.ALLOC, 0, 0x1000, 64, 0, 0],
             [R.KERNEL, 0, 0, 0, ~0], [R.KERNEL, 1, 0, 0, 0], [R.END, {}]]
    pack = lambda o: msgpack.packb(o, use_bin_type=True)  # noqa: E731
    data = R.MAGIC + pack({"format": [1, 0], "backend": "cuda", "default_streams": {0: 0}})
    data += b"".join(pack(r) for r in recs)
    path.write_bytes(data)
    return len(data)


def test_a_stack_of_distinct_frames_keeps_the_memory_bound(tmp_path):
    """Well within docs/security.md's bound (350 MB plus 40 times the trace) for a stack of
    2^16 distinct frames of 8 KiB of names (fingerprints once kept every frame's names, and
    reports cut every frame's names before choosing the 64 they show: 2^18 frames, 4.6 MB
    of trace, peaked at 2.2 GB)."""
    trace = tmp_path / "t.npusan"
    size = distinct_frames_trace(trace, 1 << 16)
    mb, rc, r = _peak_rss_mb("analyze", trace, "--format", "json", "-o", tmp_path / "r.json")
    assert rc == 1, r.stderr
    assert mb < 350 + 25 * size / 1e6, (mb, size)
    assert mb < 200, (mb, size)  # it measures 82 MB; keeping every frame's names took 600


def test_records_of_unknown_types_cost_no_more_than_kernels(tmp_path):
    """Records of an unknown type, skipped after one warning, are read as cheaply as kernels
    (they once cost 40 times more: 8 million 2-byte records took 21 s, and a 154 KB .zst of
    them kept analyze busy for 7 minutes before the decompression-bomb check refused it)."""
    pack = lambda o: msgpack.packb(o, use_bin_type=True)  # noqa: E731
    head = R.MAGIC + pack({"format": [1, 0], "backend": "cuda", "default_streams": {0: 0}})
    head += b"".join(pack(r) for r in [[R.STR, 0, "op"], [R.STREAM_DEF, 0, 0, 0], [R.ALLOC, 0, 0x1000, 64, 0, 0]])
    n = 2_000_000
    unknown, kernels = tmp_path / "u.npusan", tmp_path / "k.npusan"
    unknown.write_bytes(head + pack([200]) * n + pack([R.END, {}]))
    kernels.write_bytes(head + pack([R.KERNEL, 0, 0, None]) * (n // 2) + pack([R.END, {}]))

    def cpu(path) -> float:
        t = os.times()
        r = subprocess.run([sys.executable, "-m", "npusan", "analyze", str(path), "-o", str(tmp_path / "r")],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        after = os.times()
        return after.children_user + after.children_system - t.children_user - t.children_system

    # The same bytes (4 MB each); the slower one is allowed twice the other's time, plus
    # start-up, on a loaded machine.
    assert cpu(unknown) < 2 * cpu(kernels) + 1.0


def test_many_unknown_types_are_named_up_to_a_cap_everywhere(tmp_path):
    """100,000 distinct unknown types (470 KB of trace) once wrote 100,000 warning lines
    and repeated them in every report and in ``npusan info``: now 20 are named and one line
    counts the rest, on stderr, in each report format and in ``info``."""
    pack = lambda o: msgpack.packb(o, use_bin_type=True)  # noqa: E731
    trace = tmp_path / "t.npusan"
    trace.write_bytes(R.MAGIC + pack({"format": [1, 0], "backend": "cuda", "default_streams": {0: 0}})
                      + b"".join(pack([t, "x"]) for t in range(1000, 31000)) + pack([R.END, {}]))
    line = "skipped 29,980 records of 29,980 more unknown types"
    for fmt in ("text", "json", "sarif", "html"):
        r = run("analyze", trace, "--format", fmt, "-o", tmp_path / "r")
        assert r.exit_code == 0, r.stderr
        assert r.stderr.count("skipping records of unknown type") == 20 and r.stderr.count(line) == 1
        report = (tmp_path / "r").read_text()
        assert report.count(line) == 1 and "unknown type 1020 " not in report
        assert len(report) < 40_000
    r = run("info", trace)
    assert r.exit_code == 0 and "29,980 more unknown types (skipped)" in r.stdout
    assert "unknown type 1019 (skipped)" in r.stdout and "unknown type 1020 " not in r.stdout
    info = json.loads(run("info", trace, "--json").stdout)
    assert len(info["unknown_record_types"]) == 20
    assert info["unknown_record_types_not_named"] == {"types": 29_980, "records": 29_980}


def test_findings_sharing_a_huge_stack_are_cheap(tmp_path):
    """50 findings (distinct ops) whose accesses all name one stack of 2^15 repeats of a
    frame of 8 KiB of names, in 42 KB of trace: each finding once built its own 2^15
    frames and hashed 540 MB of names for its fingerprint (42 s, 900 MB peak); now the
    stack's frames are shared and a huge stack is hashed once."""
    file, func = "/f/" + "a" * 4093, "g" * 4096
    recs = [[R.STR, 0, "op"], [R.STR, 1, file], [R.STR, 2, func], [R.FRAME, 0, 1, 3, 2],
            [R.STACK, 0, [0] * (1 << 15)], [R.STREAM_DEF, 0, 0, 0], [R.STREAM_DEF, 1, 0, 0x51],
            [R.STREAM_CREATED, 1, 0]]
    for b in range(50):
        recs += [[R.STR, 10 + b, f"op{b}"], [R.ALLOC, b, 0x1000 + b * 64, 64, 0, 0],
                 [R.KERNEL, 0, 10 + b, 0, ~b], [R.KERNEL, 1, 10 + b, 0, b]]
    pack = lambda o: msgpack.packb(o, use_bin_type=True)  # noqa: E731
    trace = tmp_path / "t.npusan"
    trace.write_bytes(R.MAGIC + pack({"format": [1, 0], "backend": "cuda", "default_streams": {0: 0}})
                      + b"".join(pack(r) for r in recs + [[R.END, {}]]))
    t = os.times()
    mb, rc, r = _peak_rss_mb("analyze", trace, "--format", "json", "-o", tmp_path / "r.json")
    cpu = os.times().children_user - t.children_user
    assert rc == 1, r.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    prints = {f["fingerprint"] for f in report["findings"]}
    assert len(report["findings"]) == 50 and len(prints) == 50
    assert mb < 200 and cpu < 15, (mb, cpu)  # it measures 35 MB and 1.5 s
