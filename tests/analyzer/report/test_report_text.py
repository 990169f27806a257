"""The terminal report: compiler-error layout, folding, quoting, colors, safety."""



from dataclasses import replace

import pytest

from npusan.analyzer.report import ReportOptions, build_report, get_reporter
from npusan.analyzer.report.sources import SourceSettings
from npusan.analyzer.findings.suppressions import parse_suppressions
from tests.cli.npusan_scenarios import SOURCE, TORCH_TENSOR, make_finding, make_result

INTERNAL = [(TORCH_TENSOR, 1512, "__torch_function__"), (TORCH_TENSOR, 41, "wrapped")]


def text(findings, options=None, **kw):
    return get_reporter("text").render(build_report(make_result(findings), **kw), options or ReportOptions())


def test_layout_of_one_data_race():
    out = text([make_finding(count=2, later_seq=2, last_seq=12, extra_frames=INTERNAL)])
    lines = out.splitlines()
    assert lines[0] == ("error[data-race] (1/1): data race on a 4.0 KiB tensor allocated at train.py:17: read on "
                        "stream #1 (cuda:0) not ordered after a write on the default stream (cuda:0)")
    assert "  --> train.py:21" in lines
    assert any(l.strip().startswith("later:") and "read by aten::sum on stream #1 (cuda:0), created at train.py:18"
               in l for l in lines)
    assert any(l.strip().startswith("earlier:") and "write by aten::fill_.Scalar on default stream (cuda:0)" in l
               for l in lines)
    assert "… 2 torch frames (--full-stacks shows them)" in out
    assert TORCH_TENSOR not in out
    assert "torch.cuda.current_stream().wait_stream(torch.cuda.default_stream(0))" in out
    assert "right before line 21" in out
    assert "2 times in a.bin, kernels 2 … 12" in out
    assert "npusan: 1 finding (1 data race; 2 occurrences) in 1 trace" in out
    assert "\x1b[" not in out


def test_full_stacks_shows_internal_frames():
    out = text([make_finding(extra_frames=INTERNAL)], ReportOptions(full_stacks=True))
    assert f"{TORCH_TENSOR}:1512 in __torch_function__" in out
    assert "torch frames" not in out


def test_source_lines_are_quoted_when_the_file_exists(tmp_path, monkeypatch):
    f = make_finding(later=(str(SOURCE), 21, "data_race"))
    assert " | " not in text([f])  # outside every source root: never read
    out = text([f], ReportOptions(sources=SourceSettings((str(SOURCE.parent),))))
    assert "21 | y = x.sum()" in out
    monkeypatch.chdir(tmp_path)  # train.py (relative) does not exist here: simply not quoted
    out = text([make_finding()])
    assert " | " not in out


def test_missing_record_stream_fix_names_both_places():
    f = make_finding("missing-record-stream", later_op="free", later_type="write", later_seq=0, first_seq=2,
                     later=("train.py", 12, "seed_example"), earlier=("train.py", 11, "seed_example"),
                     earlier_op="aten::mul.Tensor", earlier_type="read")
    out = text([f])
    assert "returned to the allocator, free for reuse on default stream (cuda:0)" in out
    assert "right after line 11, while stream #1 (cuda:0) is the current stream (as at line 11) add" in out
    # no source root, so train.py is not read: placeholders that cannot compile, and a note saying why
    assert "<x>.record_stream(torch.cuda.current_stream())" in out
    assert "before the free at train.py:12" in out and "torch.cuda.default_stream(0).wait_stream(<s1>)" in out
    assert "where <s1> is stream #1 (cuda:0), created at train.py:18" in out
    assert ("(train.py was not read (no source root: no folder above the working directory has .git or "
            "pyproject.toml), so the names in this fix are not checked against it: --source-root DIR (the folder "
            "of your code) lets npusan read it)") in out
    assert "once in a.bin, after kernel 2" in out


MISSING_RS = dict(later_op="free", later_type="write", later_seq=0, first_seq=2,
                  later=("train.py", 12, "seed_example"), earlier=("train.py", 11, "seed_example"),
                  earlier_op="aten::mul.Tensor", earlier_type="read")


def fix_lines(backend, finding):
    """The fix block of the text report for one finding in a trace of ``backend``."""
    result = make_result([finding])
    result.traces[0].header = {**result.traces[0].header, "backend": backend}
    out = get_reporter("text").render(build_report(result), ReportOptions())
    lines = out.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("  fix:"))
    end = next(i for i, l in enumerate(lines) if l.startswith("  seen:"))
    return out, [l.strip() for l in lines[start:end]]


@pytest.mark.parametrize(
    "backend, mod",
    [("cuda", "torch.cuda"), ("npu", "torch.npu"), ("sim", "npusan.sim")],
)
def test_data_race_fix_uses_the_backends_stream_api(backend, mod):
    # The earlier write is on the side stream: the fix waits on it by its placeholder name.
    f = make_finding(later=("train.py", 30, "f"), earlier=("train.py", 29, "f"))
    f = replace(f, access=replace(f.access, stream=f.previous.stream), previous=replace(f.previous, stream=f.access.stream))
    out, fix = fix_lines(backend, f)
    assert f"default stream ({backend}:0)" in out and f"stream #1 ({backend}:0)" in out
    assert fix == [
        "fix:       make the read at train.py:30 wait for the write at train.py:29; right before line 30 add",
        f"{mod}.current_stream().wait_stream(<s1>)",
        f"or, with an event: after line 29 add `event = {mod}.current_stream().record_event()`, "
        f"and before line 30 add `{mod}.current_stream().wait_event(event)`",
        "(train.py was not read (no source root: no folder above the working directory has .git or "
        "pyproject.toml), so the names in this fix are not checked against it: --source-root DIR (the folder "
        "of your code) lets npusan read it)",
        f"where <s1> is stream #1 ({backend}:0), created at train.py:18",
    ]
    assert not any(f"{m}." in out for m in ("torch.cuda", "torch.npu", "npusan.sim") if m != mod)


@pytest.mark.parametrize(
    "backend, mod",
    [("cuda", "torch.cuda"), ("npu", "torch.npu"), ("sim", "npusan.sim")],
)
def test_missing_record_stream_fix_uses_the_backends_stream_api(backend, mod):
    out, fix = fix_lines(backend, make_finding("missing-record-stream", **MISSING_RS))
    assert fix == [
        f"fix:       tell the allocator about the use at train.py:11; right after line 11, while stream #1 "
        f"({backend}:0) is the current stream (as at line 11) add",
        f"<x>.record_stream({mod}.current_stream())    # <x>: the 4.0 KiB tensor allocated at train.py:17",
        f"or, before the free at train.py:12, make the allocating stream wait for the use: "
        f"`{mod}.default_stream(0).wait_stream(<s1>)`",
        "(train.py was not read (no source root: no folder above the working directory has .git or "
        "pyproject.toml), so the names in this fix are not checked against it: --source-root DIR (the folder "
        "of your code) lets npusan read it)",
        f"where <s1> is stream #1 ({backend}:0), created at train.py:18",
    ]


def test_a_default_stream_in_the_fix_is_named_by_its_api_and_needs_no_note():
    _, fix = fix_lines("npu", make_finding())  # later read on stream #1, earlier write on the default stream
    assert fix[1] == "torch.npu.current_stream().wait_stream(torch.npu.default_stream(0))"
    assert not any(line.startswith("where ") for line in fix)
    assert fix[-1].startswith("(train.py was not read (no source root: ")


def test_streams_of_other_devices_get_distinct_placeholders():
    f = make_finding(later=("train.py", 30, "f"), earlier=("train.py", 29, "f"))
    side1 = replace(f.access.stream, device=1)
    f = replace(f, access=replace(f.access, stream=replace(f.previous.stream, device=1)),
                previous=replace(f.previous, stream=side1))
    _, fix = fix_lines("cuda", f)
    assert fix[1] == "torch.cuda.current_stream().wait_stream(<s1_dev1>)"
    assert fix[-1] == "where <s1_dev1> is stream #1 (cuda:1), created at train.py:18"


def test_colors_only_when_asked():
    out = text([make_finding()], ReportOptions(color=True))
    assert "\x1b[" in out
    plain = text([make_finding()], ReportOptions(color=False))
    import re

    assert re.sub(r"\x1b\[[0-9;]*m", "", out) == plain


def test_control_characters_from_the_trace_are_neutralized():
    out = text([make_finding(later_op="aten::evil\x1b[2J\x07")])
    assert "\x1b" not in out and "\x07" not in out
    assert "aten::evil\ufffd[2J\ufffd" in out


def test_summary_of_a_clean_truncated_run_with_suppressions():
    s = parse_suppressions(b'[[suppress]]\nkind = "data-race"\nreason = "known"\n', "s.toml")
    result = make_result([make_finding(count=3)], paths=("cut.bin",), truncated=("cut.bin",))
    out = get_reporter("text").render(build_report(result, suppressions=s), ReportOptions())
    assert out.startswith("npusan: no stream-synchronization problems found in 1 trace")
    assert "suppressed: 1 finding (3 occurrences) by s.toml" in out
    assert "trace cut.bin: cuda, 1 device, torch 2.13.0, 10 events, 3 kernels, TRUNCATED" in out
    assert "recorded by npusan-tests, pid 4242, on testhost, at 2026-01-01 00:00:00 UTC, argv: train.py" in out


def test_unknown_allocation_and_missing_stacks():
    f = make_finding()
    f = replace(f, access=replace(f.access, stack=()), block=replace(f.block, stack=(), stream=None, size=None))
    out = text([f])
    assert "unknown-size tensor allocated before recording began" in out
    assert "(no stack recorded)" in out
    assert "an unknown location" in out  # the fix cannot name a line it does not know


@pytest.mark.parametrize("words, expected", [("8.0 KiB tensor", "an"), ("4.0 KiB tensor", "a"), ("11 B tensor", "an"),
                                             ("18.5 MiB tensor", "an"), ("110 B tensor", "a"), ("800 B", "an"),
                                             ("unknown-size tensor", "an"), ("1.0 KiB", "a")])
def test_the_article_is_the_one_the_size_is_read_with(words, expected):
    from npusan.analyzer.report.describe import article

    assert article(words) == expected


def test_a_bug_seen_on_two_streams_names_both():
    """Two side streams made by one line and used by one line: one entry (one fingerprint),
    whose seen line names the stream its first finding does not."""
    one = make_finding("missing-record-stream", later_seq=0, earlier_seq=2)
    two = make_finding("missing-record-stream", later_seq=0, earlier_seq=3, side_handle=0x52, side_index=2,
                       side_number=2, address=0x7F0000200000)
    out = text([one, two])
    assert "npusan: 1 finding" in out
    seen = [l for l in out.splitlines() if l.strip().startswith("seen:")]
    assert len(seen) == 1 and "also on stream #2 (cuda:0)" in seen[0]
    assert "also on" not in text([one])


@pytest.mark.parametrize("n, expected", [(512, "512 B"), (4096, "4.0 KiB"), (3 << 30, "3.0 GiB"),
                                         (4 << 40, "4.0 TiB"), ((1 << 64) - 1, "16.0 EiB")])
def test_sizes_are_written_with_the_unit_that_fits(n, expected):
    from npusan.analyzer.report.describe import human_size

    assert human_size(n) == expected
